"""Raw samples of one trial: arrays keyed '<case>/<series>/<field>', stored as compressed .npz.

series: 'base' and 'candidate' (the ABBA arms), 'aa_a' and 'aa_b' (the A/A control: base twice).
fields: 'ns' (event-window durations, float64 ns), 'block' (ABBA block index), 'sm_mhz',
'throttle' (NVML clock-event reasons, 0 = none), 'temp_c', 'warmup_ns' (excluded runs).
The trial-wide 'floor_ns' holds the empty-window samples the floor is derived from.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from qualify.io import atomic_write_bytes

SERIES = ("base", "candidate", "aa_a", "aa_b")
FIELDS = ("ns", "block", "sm_mhz", "throttle", "temp_c", "warmup_ns")
# Throttle reasons that slow the SM (NVML clocks-event bits): SW power cap, HW slowdown,
# SW thermal, HW thermal, power brake. Idle (0x1) and application clocks (0x2) are not throttling.
THROTTLE_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def key(case: str, series: str, field: str) -> str:
    return f"{case}/{series}/{field}"


class TrialSamples:
    """Append-only per-series sample lists, frozen into arrays for storage and statistics."""

    def __init__(self) -> None:
        self._lists: dict[str, list] = {}

    def add(self, case: str, series: str, *, ns: float, block: int, sm_mhz: float, throttle: int, temp_c: float) -> None:
        for field, value in (("ns", ns), ("block", block), ("sm_mhz", sm_mhz), ("throttle", throttle), ("temp_c", temp_c)):
            self._lists.setdefault(key(case, series, field), []).append(value)

    def add_warmup(self, case: str, series: str, ns: float) -> None:
        self._lists.setdefault(key(case, series, "warmup_ns"), []).append(ns)

    def add_floor(self, ns: float) -> None:
        self._lists.setdefault("floor_ns", []).append(ns)

    def arrays(self) -> dict[str, np.ndarray]:
        dtypes = {"block": np.int32, "throttle": np.uint64}
        return {
            k: np.asarray(v, dtype=dtypes.get(k.rsplit("/", 1)[-1], np.float64))
            for k, v in sorted(self._lists.items())
        }


def save(path: Path, arrays: dict[str, np.ndarray]) -> bytes:
    """Write the arrays atomically; returns the bytes written (for their sha256)."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    data = buf.getvalue()
    atomic_write_bytes(path, data)
    return data


def load(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}
