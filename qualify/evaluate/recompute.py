"""Derive every statistic of a trial from its raw samples.

The run stage calls this to fill a trial's timing summaries and paired statistics; `qualify
report --check` calls it again on the committed samples and refuses any difference. One function,
so what is checked is exactly what was produced.
"""

from __future__ import annotations

import numpy as np

from qualify.evaluate.summarize import floor_ns, has_series, pair_stats, timing_summary
from qualify.results.model import CaseTrial, Trial


def derived_fields(arrays: dict[str, np.ndarray], cid: str, iterations: int) -> dict:
    """A case's timing summaries, paired statistics and A/A control, from the raw samples alone."""
    floor = floor_ns(arrays)
    timing = {side: timing_summary(arrays, cid, side, floor, iterations) for side in ("base", "candidate")}
    stats = pair_stats(arrays, cid, "base", "candidate", floor, iterations)
    aa = None
    if has_series(arrays, cid, "aa_a") and has_series(arrays, cid, "aa_b"):
        aa = pair_stats(arrays, cid, "aa_a", "aa_b", floor, iterations)
    return {"timing": timing, "stats": stats, "aa": aa}


def recompute_case(case: CaseTrial, arrays: dict[str, np.ndarray], iterations: int) -> CaseTrial:
    return case.model_copy(update=derived_fields(arrays, case.case, iterations))


def recompute_trial(trial: Trial, arrays: dict[str, np.ndarray], iterations: int) -> Trial:
    cases = [recompute_case(c, arrays, iterations) for c in trial.cases]
    timer = dict(trial.timer)
    timer["floor_ns"] = floor_ns(arrays)
    return trial.model_copy(update={"cases": cases, "timer": timer})
