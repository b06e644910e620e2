"""The second timer: CUPTI's kernel spans against the CUDA events, at both sides of the bound."""

from __future__ import annotations

import pytest

from qualify.evaluate.second_timer import agreement, allowance
from qualify.results.model import KernelActivity, TracedCall


def traced(event_ns: float, spans: list[tuple[int, int]]) -> TracedCall:
    ks = [
        KernelActivity(
            name="k",
            grid=(1, 1, 1),
            block=(32, 1, 1),
            registers_per_thread=8,
            static_shared_bytes=0,
            dynamic_shared_bytes=0,
            local_bytes_per_thread=0,
            start_ns=s,
            end_ns=e,
            correlation_id=i,
            stream_id=1,
        )
        for i, (s, e) in enumerate(spans)
    ]
    return TracedCall(event_ns=event_ns, kernels=ks)


@pytest.mark.parametrize("sign", [1, -1])
def test_timer_agreement_at_both_sides_of_the_bound(sign):
    floor, spans = 1_300.0, [(0, 30_000), (31_000, 50_000)]  # span 50 µs, kernel sum 49 µs
    edge = allowance(50_000)
    inside = agreement([traced(floor + 50_000 + sign * edge, spans)], floor)
    outside = agreement([traced(floor + 50_000 + sign * (edge + 1), spans)], floor)
    assert inside.agree and not outside.agree
    assert outside.cupti_span_ns == [50_000.0] and outside.cupti_sum_ns == [49_000.0]
    assert outside.event_ns == [50_000 + sign * (edge + 1)]


def test_the_bound_is_the_one_the_record_states():
    # 1 µs + 3 % of the span, as docs/kernels.md and the record's text say
    assert (allowance(0), allowance(100_000)) == (1_000, 4_000)
    assert (
        agreement([traced(0, [])], 0).bound == "|events − floor − traced offset − CUPTI span| ≤ 1 µs + 3 % of the span"
    )


def test_the_worst_call_is_the_one_named():
    t = agreement(
        [
            traced(1_000 + 10_000, [(0, 10_000)]),
            traced(1_000 + 19_000, [(0, 10_000)]),
            traced(1_000 + 10_500, [(0, 10_000)]),
        ],
        1_000.0,
    )
    assert not t.agree and t.worst_call == 1


def test_a_call_without_kernels_agrees_only_if_its_window_is_empty():
    empty = agreement([traced(1_300.0 + 500, [])], 1_300.0)
    assert empty.agree and empty.cupti_span_ns == [0.0] and empty.cupti_sum_ns == [0.0]
    assert not agreement([traced(1_300.0 + 5_000, [])], 1_300.0).agree
    none = agreement([], 1_300.0)
    assert (none.calls, none.worst_call, none.agree) == (0, None, True)


def test_the_disagreement_reason_names_the_call_and_both_timers():
    from qualify.evaluate.second_timer import disagreement_text

    t = agreement([traced(1_000 + 10_000, [(0, 10_000)]), traced(1_000 + 25_500, [(0, 10_000)])], 1_000.0)
    assert disagreement_text("T=4096", "candidate", t) == (
        "timers disagree at T=4096 (candidate, traced call 2): events 25.50 µs less a traced offset of 0.00 µs, "
        "CUPTI 10.00 µs (bound |events − floor − traced offset − CUPTI span| ≤ 1 µs + 3 % of the span)"
    )


def test_the_traced_offset_is_the_median_of_the_null_calls_and_is_subtracted():
    from qualify.evaluate.second_timer import traced_offset

    floor = 1_000.0
    nulls = [traced(floor + 600 + extra, [(0, 600)]) for extra in (1_300, 1_500, 1_400, 9_000)]
    assert traced_offset(nulls, floor) == 1_450.0  # median of four: a stray call does not move it
    assert traced_offset(nulls[:3], floor) == 1_400.0
    assert traced_offset([traced(floor + 5_000, [])], floor) == 0.0  # a null call CUPTI missed says nothing
    assert traced_offset([], floor) == 0.0
    # a 4.7 µs kernel whose traced window reads 1.4 µs over its span, as on the H200
    call = traced(floor + 4_700 + 1_400, [(0, 4_700)])
    assert not agreement([call], floor).agree
    t = agreement([call], floor, offset_ns=1_400.0)
    assert t.agree and t.offset_ns == 1_400.0 and t.event_ns == [6_100.0]
    # the offset does not excuse a timer fault beyond the bound
    assert not agreement([traced(floor + 4_700 + 1_400 + allowance(4_700) + 1, [(0, 4_700)])], floor, 1_400.0).agree
