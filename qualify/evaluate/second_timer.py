"""The second timer: each traced call's event window against the CUPTI kernel records of that call.

Two clocks that share no code measure the same call: the CUDA event pair around it (less the
trial's measured empty-pair floor) and CUPTI's span from the first kernel's start to the last
kernel's end. They must agree within ABS_NS + REL x span. The bound comes from the timer facts
measured on the H200 (/work/shared/gpu/README.md): with the floor subtracted, event-timed medians
came within ±1 % of ncu from 7.7 µs to 366 µs; CUPTI records came within +1.1 % to +3.3 % of ncu
from 7.9 µs up, and 0.64 µs below it at 3.9 µs. So 3 % covers the relative spread of longer calls
and 1 µs the fixed offsets of short ones (CUPTI's start/end stamps and the event pair's own
jitter); a fault of either timer — a stuck clock, work outside the stream, a floor that no longer
holds — moves a call well beyond it. A disagreement is a reason in the verdict, never a silent
number.

Tracing has a cost of its own inside the event window: with CUPTI's kernel activity on, each
launch carries CUPTI's bookkeeping, which the untraced floor does not hold (on the H200 a 4.7 µs
kernel's traced window, less the floor, read 1.4 µs above its CUPTI span, while untraced samples of
it read 0.9 µs above). That offset is measured, not assumed: each trial traces a few calls of
qualify's one-thread kernel, queued like every traced call, and the median of their
(events − floor − span) is subtracted too. A timer fault still moves a call by more than the
bound; a traced window's fixed cost no longer does.

That is trace version 1 (`agreement`): a traced call against itself, which cannot see traced
calls taken otherwise than the samples. Trace version 2 traces the calls the way the samples are taken and holds
CUPTI to the samples themselves (`sample_timer`): per arm, the median CUPTI span of its traced
calls against the median timed sample less the floor (per launch). The event window also holds
the launch overhead a span does not (about 1 µs on the H200: a fifth of a 5 µs kernel), so the
gap events − CUPTI must lie in [−(1 µs + 3 %), overhead + 1 µs + 3 %] of the span, the overhead
being the null calls' traced offset (CUPTI's cost included: an upper bound for an untraced
window's). The record states the gap and the overhead, so where the timers differ it says by how
much and why.
"""

from __future__ import annotations

import statistics

from qualify.results.model import SampleTimer, TimerAgreement, TracedCall

ABS_NS = 1000.0
REL = 0.03
BOUND_TEXT = "|events − floor − traced offset − CUPTI span| ≤ 1 µs + 3 % of the span"


def allowance(span_ns: float) -> float:
    return ABS_NS + REL * span_ns


def span_ns(call: TracedCall) -> float:
    """CUPTI's span of a call: its first kernel's start to its last kernel's end (0 without one)."""
    if not call.kernels:
        return 0.0
    return float(max(k.end_ns for k in call.kernels) - min(k.start_ns for k in call.kernels))


def traced_offset(null_calls: list[TracedCall], floor_ns: float) -> float:
    """Median of (events − floor − span) over the null calls; 0 when none were traced."""
    offsets = sorted(c.event_ns - floor_ns - span_ns(c) for c in null_calls if c.kernels)
    if not offsets:
        return 0.0
    mid = len(offsets) // 2
    return offsets[mid] if len(offsets) % 2 else (offsets[mid - 1] + offsets[mid]) / 2


def agreement(calls: list[TracedCall], floor_ns: float, offset_ns: float = 0.0) -> TimerAgreement:
    events, spans, sums = [], [], []
    for call in calls:
        events.append(call.event_ns - floor_ns)
        spans.append(span_ns(call))
        sums.append(float(sum(k.end_ns - k.start_ns for k in call.kernels)))
    # how far outside its bound each call is (negative: inside); the worst is reported
    excess = [abs(e - offset_ns - s) - allowance(s) for e, s in zip(events, spans)]
    worst = max(range(len(excess)), key=lambda i: excess[i]) if excess else None
    return TimerAgreement(
        calls=len(calls),
        bound=BOUND_TEXT,
        event_ns=events,
        offset_ns=offset_ns,
        cupti_span_ns=spans,
        cupti_sum_ns=sums,
        worst_call=worst,
        agree=all(x <= 0 for x in excess),
    )


def disagreement_text(where: str, side: str, timers: TimerAgreement) -> str:
    i = timers.worst_call
    assert i is not None
    return (
        f"timers disagree at {where} ({side}, traced call {i + 1}): events {timers.event_ns[i] / 1e3:.2f} µs "
        f"less a traced offset of {timers.offset_ns / 1e3:.2f} µs, CUPTI {timers.cupti_span_ns[i] / 1e3:.2f} µs "
        f"(bound {timers.bound})"
    )


SAMPLE_BOUND_TEXT = (
    "−(1 µs + 3 % of the span) ≤ median sample − floor − median CUPTI span ≤ launch overhead + 1 µs + 3 % of the span"
)


def sample_timer(events_median_ns: float, calls: list[TracedCall], overhead_ns: float) -> SampleTimer:
    """One arm's median CUPTI span against its timed samples' median (floor-corrected, per launch)."""
    spans = [span_ns(c) for c in calls]
    cupti = float(statistics.median(spans)) if spans else 0.0
    allow = allowance(cupti)
    gap = events_median_ns - cupti
    low, high = -allow, max(overhead_ns, 0.0) + allow
    return SampleTimer(
        events_median_ns=events_median_ns,
        cupti_median_ns=cupti,
        overhead_ns=overhead_ns,
        gap_ns=gap,
        low_ns=low,
        high_ns=high,
        agree=low <= gap <= high,
    )


def sample_disagreement_text(where: str, side: str, t: SampleTimer) -> str:
    return (
        f"timers disagree at {where} ({side}): the timed samples' median less the floor is "
        f"{t.events_median_ns / 1e3:.3f} µs, the traced calls' median CUPTI span {t.cupti_median_ns / 1e3:.3f} µs: "
        f"a gap of {t.gap_ns / 1e3:+.3f} µs outside [{t.low_ns / 1e3:+.3f}, {t.high_ns / 1e3:+.3f}] µs "
        f"(launch overhead {t.overhead_ns / 1e3:.3f} µs)"
    )
