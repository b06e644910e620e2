"""Derive every statistic of a trial from its raw samples.

The run stage calls this to fill a trial's timing summaries and paired statistics; `qualify
report --check` calls it again on the committed samples and refuses any difference. One function,
so what is checked is exactly what was produced.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qualify.evaluate.cupti_delta import traced_like_samples
from qualify.evaluate.kernels import case_kernels
from qualify.evaluate.placements import placement_deltas
from qualify.evaluate.second_timer import traced_offset
from qualify.evaluate.summarize import floor_ns, has_series, pair_stats, timing_summary
from qualify.plan.model import ARM_SIDES, Side
from qualify.results.model import CaseStats, CaseTrial, KernelTrace, TracedCall, Trial


def derived_fields(arrays: dict[str, np.ndarray], cid: str, iterations: int) -> dict[str, Any]:
    """A case's timing summaries, paired statistics and A/A control, from the raw samples alone."""
    floor = floor_ns(arrays)
    timing = {side: timing_summary(arrays, cid, side, floor, iterations) for side in ARM_SIDES}
    stats = pair_stats(arrays, cid, "base", "candidate", floor, iterations)
    aa = None
    if has_series(arrays, cid, "aa_a") and has_series(arrays, cid, "aa_b"):
        aa = pair_stats(arrays, cid, "aa_a", "aa_b", floor, iterations)
    spread = placement_deltas(arrays, cid, floor, iterations)
    return {
        "timing": timing,
        "stats": stats,
        "aa": aa,
        "placement_spread_pct": [p.delta_pct for p in spread] if len(spread) > 1 else None,
    }


def kernel_fields(
    trace: dict[Side, list[TracedCall]] | None,
    kernel_trace: KernelTrace | None,
    floor: float,
    samples: dict[str, Any] | None = None,
    case: str = "",
    iterations: int = 1,
) -> dict[str, Any]:
    """A case's kernel inventory, attribution and timer agreement, from its raw trace alone (the
    names as the trial's demangler gave them, the device limits the trial read).

    Trace version 2 compares CUPTI with the timed samples: `samples` is the case's `derived_fields`
    (timing and stats) then. Version 1 (records made before it) keeps its own derivation."""
    if not trace:
        return {"kernels": None}
    names = kernel_trace.names if kernel_trace is not None else {}
    limits = kernel_trace.limits if kernel_trace is not None else None
    offset = traced_offset(kernel_trace.null_calls, floor) if kernel_trace is not None else 0.0
    if kernel_trace is None or kernel_trace.version == 1:
        return {"kernels": case_kernels(trace, names, limits, floor, offset)}
    if samples is None:
        raise ValueError(f"{case}: trace version 2 is derived with the case's timed samples")
    # a traced call is one launch: against windows of several, CUPTI is not compared with the samples
    compared = (samples["timing"], samples["stats"]) if iterations == 1 else None
    return {"kernels": traced_like_samples(trace, names, limits, offset, compared)}


def recompute_case(
    case: CaseTrial, arrays: dict[str, np.ndarray], iterations: int, kernel_trace: KernelTrace | None = None
) -> CaseTrial:
    update = derived_fields(arrays, case.case, iterations)
    if case.trace is not None or case.kernels is not None:  # trials made before tracing keep their shape
        update.update(kernel_fields(case.trace, kernel_trace, floor_ns(arrays), update, case.case, iterations))
    return case.model_copy(update=update)


def recompute_trial(trial: Trial, arrays: dict[str, np.ndarray], iterations: int) -> Trial:
    cases = [recompute_case(c, arrays, iterations, trial.kernel_trace) for c in trial.cases]
    timer = dict(trial.timer)
    timer["floor_ns"] = floor_ns(arrays)
    return trial.model_copy(update={"cases": cases, "timer": timer})


# CaseStats fields that trials made before them lack (None where they would hold a value)
LATER_STATS_FIELDS = ("log_mean", "log_sd")


def _predating(fresh: CaseStats | None, recorded: CaseStats | None) -> CaseStats | None:
    if fresh is None or recorded is None or recorded.log_mean is not None:
        return fresh
    return fresh.model_copy(update=dict.fromkeys(LATER_STATS_FIELDS))


def in_recorded_shape(fresh: Trial, recorded: Trial) -> Trial:
    """The recomputed trial as a trial made before the log moments were recorded holds it.

    A recorded case without `log_mean` is compared without it; what the pooled statistics then
    use instead (its ratio, interval and blocks) is compared in full.
    """
    kept = {c.case: c for c in recorded.cases}
    cases = []
    for case in fresh.cases:
        old = kept.get(case.case)
        if old is not None:
            stats, aa = _predating(case.stats, old.stats), _predating(case.aa, old.aa)
            case = case.model_copy(update={"stats": stats, "aa": aa})
        cases.append(case)
    return fresh.model_copy(update={"cases": cases})
