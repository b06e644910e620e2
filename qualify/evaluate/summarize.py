"""From a trial's raw samples to its per-case timing summaries and paired statistics."""

from __future__ import annotations

import numpy as np

from qualify.evaluate.stats import case_stats, per_launch_ns, summarize
from qualify.results.model import CaseStats, TimingSummary
from qualify.results.samples import THROTTLE_MASK, key


def floor_ns(arrays: dict[str, np.ndarray]) -> float:
    """The empty event-window floor: median of the empty samples measured in the trial."""
    floor = arrays.get("floor_ns")
    return float(np.median(floor)) if floor is not None and floor.size else 0.0


def series_ns(arrays: dict[str, np.ndarray], case: str, series: str, floor: float, iterations: int) -> np.ndarray:
    return per_launch_ns(arrays[key(case, series, "ns")], floor, iterations)


def timing_summary(
    arrays: dict[str, np.ndarray], case: str, series: str, floor: float, iterations: int
) -> TimingSummary:
    warm = arrays.get(key(case, series, "warmup_ns"))
    return summarize(
        series_ns(arrays, case, series, floor, iterations),
        warmup=0 if warm is None else int(warm.size),
        sm_mhz=arrays[key(case, series, "sm_mhz")],
        throttled=(arrays[key(case, series, "throttle")] & THROTTLE_MASK) != 0,
    )


def pair_stats(arrays: dict[str, np.ndarray], case: str, a: str, b: str, floor: float, iterations: int) -> CaseStats:
    return case_stats(
        series_ns(arrays, case, a, floor, iterations),
        arrays[key(case, a, "block")],
        series_ns(arrays, case, b, floor, iterations),
        arrays[key(case, b, "block")],
        placement=arrays.get(key(case, a, "placement")),
        placement_block=arrays[key(case, a, "block")],
    )


def has_series(arrays: dict[str, np.ndarray], case: str, series: str) -> bool:
    return key(case, series, "ns") in arrays and arrays[key(case, series, "ns")].size > 0
