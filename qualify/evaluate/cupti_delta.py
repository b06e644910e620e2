"""CUPTI's change against the event samples' change, like with like (trace version 2).

The traced calls run as the timed samples do — ABBA/BAAB blocks with the cold flush, poisoned
outputs, the case's placements and flush slots (qualify.plan.schedule.trace_plan) — so their change
is taken the way the samples' is: per traced block the log of the candidate's median over the
base's, Student's t over the blocks, or over the placements where blocks share one
(qualify.evaluate.stats.case_stats). Per kernel for the kernels table; for the call as a whole
(CUPTI's span, first kernel's start to last kernel's end, which is what an event window holds)
against the events.

The two timers must differ in one known way: an event window also holds the launch overhead, the
time between the start event and the first kernel (and after the last), which a CUPTI span does
not. It adds the same `overhead` to both arms, which pulls the events' change toward 0 by
|CUPTI change| x overhead / (base span + overhead). The overhead is measured, not assumed: the
median of (events - floor - span) over the trial's traced null calls (CUPTI's own cost per traced
launch included, so it is an upper bound for an untraced window's). Beyond that, FIXED_PCT points
cover the timers' own differences: CUPTI read +1.1 to +3.3 % above ncu from 8 us to 366 us on
the H200, events within +-1 % (/work/shared/gpu/README.md), and two arms of one case sit close
together on that curve. Intervals further apart than the sum are a disagreement, a reason in the
verdict.

Trace version 3 keeps all of it in the trial file as evidence and says none of it. On the H200,
ncu sided with the event samples at every vecload size where the two disagreed (issue 32: CUPTI
read vecload's 4 Mi change as -18.7 % against the samples' -11.9 % and ncu's -12.7 %), and the
cause in the traced calls was not found; a comparison that fires on every case of a correct
record is no evidence, so it is neither a reason in the verdict nor a Δ a reader sees until a
fix is shown on the GPU. Records made under versions 1 and 2 keep their rules, so that `report
--check` derives their verdicts and READMEs as they were written.
"""

from __future__ import annotations

import math

import numpy as np

from qualify.evaluate.inventory import inventory, keyed
from qualify.evaluate.kernels import attribute, match_keys
from qualify.evaluate.second_timer import sample_disagreement_text, sample_timer, span_ns
from qualify.evaluate.stats import case_stats
from qualify.plan.model import Side
from qualify.results.model import (
    CaseKernels,
    CaseStats,
    CaseTrial,
    DeviceLimits,
    KernelDelta,
    KernelTrace,
    TimerDelta,
    TimingSummary,
    TracedCall,
    Trial,
)

# the version a trial now records (qualify.run.stages.trace); see the module's text
TRACE_VERSION = 3
FIXED_PCT = 1.0
ALLOWANCE_TEXT = (
    f"|CUPTI change| × launch overhead / (base span + launch overhead) + {FIXED_PCT:g} point "
    "(the timers' own difference)"
)


def _paired(base: list[tuple[TracedCall, float]], cand: list[tuple[TracedCall, float]]) -> CaseStats:
    """CaseStats of the candidate's values against the base's, paired per traced block, the
    placements as units where blocks share one (a case with one placement records none in its
    samples, whose blocks are then the units: so are the traced blocks)."""

    def arrays(rows: list[tuple[TracedCall, float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (
            np.asarray([v for _, v in rows], dtype=np.float64),
            np.asarray([c.block for c, _ in rows]),
            np.asarray([c.placement for c, _ in rows]),
        )

    b_ns, b_block, b_place = arrays(base)
    c_ns, c_block, _ = arrays(cand)
    if len(set(b_place.tolist())) < 2:  # one placement: the blocks are the units, as for the samples
        return case_stats(b_ns, b_block, c_ns, c_block)
    return case_stats(b_ns, b_block, c_ns, c_block, placement=b_place, placement_block=b_block)


def kernel_deltas(trace: dict[Side, list[TracedCall]], names: dict[str, str]) -> list[KernelDelta]:
    """Per kernel both arms launch (matched as the attribution matches them): its CUPTI change."""
    durations: dict[str, dict[tuple[str, int], list[tuple[TracedCall, float]]]] = {}
    for side, calls in trace.items():
        per = durations.setdefault(side, {})
        for call in calls:
            for k, act in keyed(call, names):
                per.setdefault(k, []).append((call, float(act.end_ns - act.start_ns)))
    base, cand = durations.get("base", {}), durations.get("candidate", {})
    b_keys, c_keys = list(base), list(cand)
    out = []
    for i, j in sorted(match_keys(b_keys, c_keys).items()):
        b, c = b_keys[i], c_keys[j]
        out.append(
            KernelDelta(
                name=b[0],
                occurrence=b[1],
                candidate_name=None if c[0] == b[0] else c[0],
                stats=_paired(base[b], cand[c]),
            )
        )
    return out


def call_delta(trace: dict[Side, list[TracedCall]]) -> CaseStats:
    """The call's CUPTI change: spans paired per traced block."""
    return _paired(
        [(c, span_ns(c)) for c in trace.get("base", [])], [(c, span_ns(c)) for c in trace.get("candidate", [])]
    )


def allowance_pct(cupti: CaseStats, base_span_ns: float, overhead_ns: float) -> float:
    """Points by which the two changes may differ beyond their intervals (see the module's text)."""
    overhead = max(overhead_ns, 0.0)
    pull = abs(cupti.delta_pct) * overhead / (base_span_ns + overhead) if base_span_ns + overhead > 0 else 0.0
    return pull + FIXED_PCT


def interval_gap_pct(a: CaseStats, b: CaseStats) -> float | None:
    """How far apart two ratio intervals lie, in points of change (0 when they overlap); None
    without both intervals. Measured in log space, where the intervals are symmetric."""
    if None in (a.ci_low, a.ci_high, b.ci_low, b.ci_high):
        return None
    assert a.ci_low is not None and a.ci_high is not None and b.ci_low is not None and b.ci_high is not None
    gap = max(math.log(b.ci_low) - math.log(a.ci_high), math.log(a.ci_low) - math.log(b.ci_high), 0.0)
    return math.expm1(gap) * 100.0


def timer_delta(trace: dict[Side, list[TracedCall]], events: CaseStats, overhead_ns: float) -> TimerDelta:
    cupti = call_delta(trace)
    spans = [span_ns(c) for c in trace.get("base", [])]
    base_span = float(np.median(spans)) if spans else 0.0
    allowance = allowance_pct(cupti, base_span, overhead_ns)
    gap = interval_gap_pct(cupti, events)
    return TimerDelta(
        cupti=cupti,
        events=events,
        overhead_ns=overhead_ns,
        allowance_pct=allowance,
        gap_pct=gap,
        agree=None if gap is None else gap <= allowance,
    )


def disagreement_text(where: str, d: TimerDelta) -> str:
    def change(s: CaseStats) -> str:
        assert s.ci_low is not None and s.ci_high is not None
        return f"{s.delta_pct:+.2f} % [{(s.ci_low - 1) * 100:+.2f}, {(s.ci_high - 1) * 100:+.2f}]"

    return (
        f"the two timers disagree at {where}: CUPTI {change(d.cupti)} against events {change(d.events)}, "
        f"intervals {d.gap_pct:.2f} points apart, allowance {d.allowance_pct:.2f} points "
        f"(launch overhead {d.overhead_ns / 1e3:.2f} µs)"
    )


def traced_like_samples(
    trace: dict[Side, list[TracedCall]],
    names: dict[str, str],
    limits: DeviceLimits | None,
    overhead_ns: float,
    samples: tuple[dict[str, TimingSummary], CaseStats] | None,
) -> CaseKernels:
    """Trace version 2: the inventory and attribution as in version 1, each kernel's CUPTI change
    with its interval, and, given the case's timing summaries and statistics (`samples`), the
    call's CUPTI change against the event samples' and each arm's CUPTI spans against its timed
    samples (qualify.evaluate.second_timer). Without them (windows of several launches against
    traced calls of one) only CUPTI's side is derived."""
    rows = {side: inventory(calls, names, limits) for side, calls in trace.items()}
    attribution = attribute(rows["base"], rows["candidate"]) if {"base", "candidate"} <= rows.keys() else []
    if samples is None:
        return CaseKernels(inventory=rows, attribution=attribution, deltas=kernel_deltas(trace, names))
    timing, events = samples
    return CaseKernels(
        inventory=rows,
        attribution=attribution,
        deltas=kernel_deltas(trace, names),
        timer_delta=timer_delta(trace, events, overhead_ns),
        sample_timers={side: sample_timer(timing[side].median_ns, calls, overhead_ns) for side, calls in trace.items()},
    )


def cupti_change_stated(kernel_trace: KernelTrace | None) -> bool:
    """Whether a trial's CUPTI changes are judged and printed: only under trace versions 1 and 2
    (records made before version 3, derived as they were written)."""
    return kernel_trace is None or kernel_trace.version < 3


def traced_disagreements(case: CaseTrial, kernel_trace: KernelTrace | None) -> list[str]:
    """Trace version 2's reasons for a case: where CUPTI and the event samples disagree (none
    under version 3, which keeps the comparison as evidence only)."""
    k = case.kernels
    if k is None or not cupti_change_stated(kernel_trace):
        return []
    out = []
    if k.timer_delta is not None and k.timer_delta.agree is False:
        out.append(disagreement_text(case.case, k.timer_delta))
    for side, t in (k.sample_timers or {}).items():
        if not t.agree:
            out.append(sample_disagreement_text(case.case, side, t))
    return out


def draw_problems(trial: Trial) -> list[str]:
    """Trace version 2: each case's traced calls against the shape of a trace plan: the arm a call
    ran is the one its block's order puts at its position (A: base), the calls of one block share
    its order, placement and flush slot, and those lie within the case's placements and the
    trial's flush slots. (The draws themselves follow the trial's index, which a merge renumbers.)"""
    kt = trial.kernel_trace
    if kt is None or kt.version == 1:
        return []
    out = []
    for case in trial.cases:
        used = (case.placements or {}).get("used", 1)
        blocks: dict[int, set[tuple[str, int, int | None]]] = {}
        for side, traced in (case.trace or {}).items():
            for n, c in enumerate(traced, 1):
                where = f"cases {case.case}: the {side} arm's traced call {n}"
                if None in (c.block, c.position, c.order, c.placement, c.flush_slot):
                    out.append(f"{where} lacks its draw (block, position, order, placement, flush slot)")
                    continue
                assert (
                    c.block is not None and c.order is not None and c.position is not None and c.placement is not None
                )
                letter = "A" if side == "base" else "B"
                if not 0 <= c.position < 4 or c.order[c.position] != letter:
                    out.append(f"{where} ran at position {c.position} of a {c.order} block, where the other arm runs")
                if not 0 <= c.placement < used or not 0 <= (c.flush_slot or 0) < (kt.flush_slots or 1):
                    out.append(
                        f"{where} names placement {c.placement} and flush slot {c.flush_slot}: the case has "
                        f"{used} placements, the trial {kt.flush_slots or 1} flush slots"
                    )
                blocks.setdefault(c.block, set()).add((c.order, c.placement, c.flush_slot))
        out.extend(
            f"cases {case.case}: traced block {b} ran on more than one order, placement or flush slot"
            for b, drawn in sorted(blocks.items())
            if len(drawn) > 1
        )
    return out
