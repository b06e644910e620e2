"""Raw samples of one trial: arrays keyed '<case>/<series>/<field>', stored as compressed .npz.

series: 'base' and 'candidate' (the ABBA arms), 'aa_a' and 'aa_b' (the A/A control: base twice).
fields: 'ns' (event-window durations, float64 ns), 'block' (ABBA block index), 'sm_mhz',
'throttle' (NVML clock-event reasons, 0 = none), 'temp_c', 'warmup_ns' (excluded runs), and
'placement' (int32: which of the case's buffer placements the sample ran on; a series without
it ran on one placement, number 0) and 'half' (int32: the sample's half of its block, 0-3, where
the block's order was drawn; a series without it ran ABBA on even blocks and BAAB on odd ones).
The trial-wide 'floor_ns' holds the empty-window samples the floor is derived from.
"""

from __future__ import annotations

import ast
import io
import math
import zipfile
import zlib
from pathlib import Path

import numpy as np

from qualify.io import MAX_NPZ_BYTES, atomic_write_bytes, open_limited

SERIES = ("base", "candidate", "aa_a", "aa_b")
FIELDS = ("ns", "block", "sm_mhz", "throttle", "temp_c", "warmup_ns", "placement", "half")
# Throttle reasons that slow the SM (NVML clocks-event bits): SW power cap, HW slowdown,
# SW thermal, HW thermal, power brake. Idle (0x1) and application clocks (0x2) are not throttling.
THROTTLE_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
MAX_SAMPLES_BYTES = 1 << 30


def key(case: str, series: str, field: str) -> str:
    return f"{case}/{series}/{field}"


class TrialSamples:
    """Append-only per-series sample lists, frozen into arrays for storage and statistics."""

    def __init__(self) -> None:
        self._lists: dict[str, list[float | int]] = {}
        self._case_keys: dict[str, list[str]] = {}  # case -> its keys in _lists ("" -> the trial-wide ones)

    def _list(self, name: str) -> list[float | int]:
        if name not in self._lists:
            self._lists[name] = []
            self._case_keys.setdefault(name.rsplit("/", 2)[0] if "/" in name else "", []).append(name)
        return self._lists[name]

    def add(
        self,
        case: str,
        series: str,
        *,
        ns: float,
        block: int,
        sm_mhz: float,
        throttle: int,
        temp_c: float,
        placement: int | None = None,
        half: int | None = None,
    ) -> None:
        """One timed sample. `placement` and `half` are each recorded for every sample of a series
        or for none (a series without them ran on one placement, in the fixed alternation)."""
        optional = {"placement": placement, "half": half}
        for field, value in optional.items():
            kept = key(case, series, field) in self._lists
            if (value is not None) != kept and key(case, series, "ns") in self._lists:
                raise ValueError(f"{case}/{series}: {field} given for some samples and not for others")
        for field, sample in (
            ("ns", ns),
            ("block", block),
            ("sm_mhz", sm_mhz),
            ("throttle", throttle),
            ("temp_c", temp_c),
        ):
            self._list(key(case, series, field)).append(sample)
        for field, value in optional.items():
            if value is not None:
                self._list(key(case, series, field)).append(value)

    def add_warmup(self, case: str, series: str, ns: float) -> None:
        self._list(key(case, series, "warmup_ns")).append(ns)

    def add_floor(self, ns: float) -> None:
        self._list("floor_ns").append(ns)

    def arrays(self, case: str | None = None) -> dict[str, np.ndarray]:
        """Every array; with `case`, that case's and the trial-wide ones (floor_ns) alone: what the
        stop rule reads after each block, without converting every other case's lists again (which
        made a trial quadratic in its cases)."""
        dtypes = {"block": np.int32, "throttle": np.uint64, "placement": np.int32, "half": np.int32}
        items: list[tuple[str, list[float | int]]] = list(self._lists.items())
        if case is not None:
            keys = self._case_keys.get(case, []) + self._case_keys.get("", [])
            items = [(k, self._lists[k]) for k in keys]
        return {k: np.asarray(v, dtype=dtypes.get(k.rsplit("/", 1)[-1], np.float64)) for k, v in sorted(items)}


def save(path: Path, arrays: dict[str, np.ndarray], *, root: Path | None = None) -> bytes:
    """Write the arrays atomically (with `root`, the record: never through a link); returns the
    bytes written (for their sha256)."""
    buf = io.BytesIO()
    # numpy's stub lets **kwds fill `allow_pickle: bool` too, so a dict of arrays reads as a bool
    np.savez_compressed(buf, **arrays)  # type: ignore[arg-type]
    data = buf.getvalue()
    atomic_write_bytes(path, data, root=root)
    return data


def load(path: Path, *, root: Path | None = None) -> dict[str, np.ndarray]:
    """Read a samples file written by any numpy version.

    The .npy members are parsed here rather than by np.load: numpy 2.5 pads headers with NUL
    bytes that numpy 2.4 refuses, and a record must stay readable wherever it is checked.
    Only plain (non-object, C-order) arrays are accepted; nothing is unpickled. The file is read
    through qualify.io's checks (a regular file of at most MAX_NPZ_BYTES; with `root`, a link
    stays inside it) and streamed by zipfile, never read whole; a file that is not a zip archive,
    or a damaged one, is a ValueError naming what is wrong.
    """
    out = {}
    with open_limited(path, MAX_NPZ_BYTES, root=root) as f:
        try:
            with zipfile.ZipFile(f) as archive:
                members = [info for info in archive.infolist() if info.filename.endswith(".npy")]
                total = sum(info.file_size for info in members)
                if total > MAX_SAMPLES_BYTES:  # a few MB in any real record; refuse a zip bomb unread
                    raise ValueError(f"{total:,} bytes of samples once expanded (limit {MAX_SAMPLES_BYTES:,})")
                for info in members:
                    out[info.filename[: -len(".npy")]] = _parse_npy(archive.read(info), info.filename)
        except zipfile.BadZipFile as exc:
            raise ValueError(f"not a readable .npz (zip) archive: {exc}") from None
        except (EOFError, NotImplementedError, zlib.error) as exc:
            raise ValueError(f"a damaged .npz archive: {exc}") from None
    return out


def _parse_npy(data: bytes, name: str) -> np.ndarray:
    # Every length is checked before it is used: a member cut short must be refused as
    # unreadable, never reach an IndexError or a read past the end.
    if len(data) < 10 or data[:6] != b"\x93NUMPY":
        raise ValueError(f"{name}: not an .npy array")
    major = data[6]
    if major == 1:
        size, start = int.from_bytes(data[8:10], "little"), 10
    elif major in (2, 3) and len(data) >= 12:
        size, start = int.from_bytes(data[8:12], "little"), 12
    else:
        raise ValueError(f"{name}: unsupported .npy version {major}")
    if start + size > len(data):
        raise ValueError(f"{name}: .npy header cut short")
    header = data[start : start + size].decode("latin1").replace("\x00", " ").strip()
    try:
        meta = ast.literal_eval(header)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        raise ValueError(f"{name}: unreadable .npy header {header[:80]!r}") from None
    if (
        not isinstance(meta, dict)
        or meta.get("fortran_order")
        or not isinstance(meta.get("shape"), tuple)
        or not all(type(n) is int and 0 <= n < 2**40 for n in meta["shape"])
    ):
        raise ValueError(f"{name}: unsupported .npy header {header[:80]!r}")
    try:
        dtype = np.dtype(meta["descr"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{name}: unknown dtype {meta.get('descr')!r}") from None
    if dtype.hasobject:
        raise ValueError(f"{name}: object arrays are refused")
    count = math.prod(meta["shape"])  # Python integers: a product of huge dimensions cannot wrap
    payload = len(data) - start - size
    if count * dtype.itemsize != payload:
        raise ValueError(f"{name}: {payload:,} bytes of data, its header announces {count:,} x {dtype.itemsize}")
    array: np.ndarray = np.frombuffer(data, dtype=dtype, count=count, offset=start + size).reshape(meta["shape"]).copy()
    return array


# What each field of a series must be for the statistics to mean anything: timings and telemetry
# are real numbers, blocks and throttle reasons integers. numpy would happily take the median of
# strings or booleans; the check refuses them first, naming the series.
_REAL = "f"
_INTEGER = "iu"
FIELD_KINDS = {
    "ns": _REAL,
    "block": _INTEGER,
    "sm_mhz": _REAL + _INTEGER,
    "throttle": _INTEGER,
    "temp_c": _REAL + _INTEGER,
    "warmup_ns": _REAL,
    "placement": _INTEGER,
    "half": _INTEGER,
}
PER_SAMPLE = ("ns", "block", "sm_mhz", "throttle", "temp_c")  # one entry per timed sample
OPTIONAL_PER_SAMPLE = ("placement", "half")  # one entry per timed sample where present


def series_problems(arrays: dict[str, np.ndarray]) -> list[str]:
    """Why these arrays cannot be the raw samples of a trial: 'KEY: what is wrong' per problem.

    Names are '<case>/<series>/<field>' or 'floor_ns'; every array is one-dimensional and of its
    field's kind; timings are finite and not negative; a timed series holds at least one sample
    and every per-sample field of it as many entries as 'ns'.
    """
    problems = []
    lengths: dict[tuple[str, str], dict[str, int]] = {}
    refused: set[tuple[str, str, str]] = set()  # reported once, not again as "missing"
    for name, arr in sorted(arrays.items()):
        if name == "floor_ns":
            field = "floor_ns"
        else:
            parts = name.rsplit("/", 2)
            if len(parts) != 3 or parts[1] not in SERIES or parts[2] not in FIELDS or not parts[0]:
                problems.append(
                    f"{name}: not a series qualify records ('<case>/<series>/<field>', "
                    f"series {', '.join(SERIES)}; fields {', '.join(FIELDS)})"
                )
                continue
            field = parts[2]
        problem = _array_problem(field, arr)
        if problem:
            problems.append(f"{name}: {problem}")
            if name != "floor_ns":
                refused.add((parts[0], parts[1], field))
        elif field in PER_SAMPLE + OPTIONAL_PER_SAMPLE:
            lengths.setdefault((parts[0], parts[1]), {})[field] = arr.size
    for (case, series), found in sorted(lengths.items()):
        where = f"{case}/{series}"
        if (case, series, "ns") in refused:
            continue
        if "ns" not in found:
            problems.append(f"{where}/ns: missing, while {', '.join(sorted(found))} are present")
            continue
        if found["ns"] == 0:
            problems.append(f"{where}/ns: empty: a timed series holds at least one sample")
            continue
        for field in PER_SAMPLE[1:]:
            if found.get(field) != found["ns"] and (case, series, field) not in refused:
                have = "missing" if field not in found else f"{found[field]:,} entries"
                problems.append(f"{where}/{field}: {have}, its ns has {found['ns']:,}")
        for field in OPTIONAL_PER_SAMPLE:
            if field in found and found[field] != found["ns"]:
                problems.append(f"{where}/{field}: {found[field]:,} entries, its ns has {found['ns']:,}")
    return problems


def _array_problem(field: str, arr: np.ndarray) -> str | None:
    kinds = FIELD_KINDS.get(field, _REAL)
    if arr.ndim != 1:
        return f"{arr.ndim}-dimensional, expected one dimension"
    if arr.dtype.kind not in kinds:
        want = "real numbers" if kinds == _REAL else "integers" if kinds == _INTEGER else "numbers"
        return f"dtype {arr.dtype.str}, expected {want}"
    if field in ("ns", "warmup_ns", "floor_ns") and not np.all(np.isfinite(arr) & (arr >= 0)):
        return "holds a negative or non-finite duration"
    if field in ("block", "throttle", "placement") and arr.size and arr.min() < 0:
        return "holds a negative value"
    if field == "half" and arr.size and (arr.min() < 0 or arr.max() > 3):
        return "holds a half outside 0-3"
    return None
