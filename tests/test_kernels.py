"""Kernel attribution between the arms: the wording, the band's edges, and how kernels are matched."""

from __future__ import annotations

import pytest

from qualify.evaluate.kernels import SAME_NS, SAME_PCT, attribute, case_kernels, change_text, label
from qualify.results.model import KernelActivity, KernelRow, TracedCall
from qualify.run.fake import FAKE_LIMITS


def row(name: str, ns: float, occurrence: int = 0) -> KernelRow:
    return KernelRow(
        name=name,
        occurrence=occurrence,
        grid=(1, 1, 1),
        block=(128, 1, 1),
        registers=32,
        static_shared_bytes=0,
        dynamic_shared_bytes=0,
        local_bytes=0,
        blocks_per_sm=16,
        warps_per_sm=64,
        limiter="warps",
        calls=5,
        median_ns=ns,
    )


def traced(event_ns: float, span_ns: int) -> TracedCall:
    """One traced call: its event window and the one kernel CUPTI saw in it."""
    kernel = KernelActivity(
        name="k",
        grid=(4, 1, 1),
        block=(64, 1, 1),
        registers_per_thread=32,
        static_shared_bytes=0,
        dynamic_shared_bytes=0,
        local_bytes_per_thread=0,
        start_ns=0,
        end_ns=span_ns,
        correlation_id=1,
        stream_id=1,
    )
    return TracedCall(event_ns=event_ns, kernels=[kernel])


def test_attribution_wording():
    changes = attribute(
        [row("flash<128>", 100_000), row("prep", 10_000), row("gone", 500)],
        [row("prep", 10_100), row("flash<128>", 112_100), row("tail", 900)],
    )
    text = {label(c): change_text(c) for c in changes}
    assert text == {"flash<128>": "+12.1 %", "prep": "same", "gone": "only in base", "tail": "only in candidate"}
    assert [c.name for c in changes] == ["flash<128>", "prep", "gone", "tail"]  # base's order, then new ones


@pytest.mark.parametrize(
    "base, cand, outcome",
    [
        (100_000, 100_000 * (1 + SAME_PCT / 100), "same"),  # at the relative edge
        (100_000, 100_000 * (1 + SAME_PCT / 100) + 1, "slower"),
        (100_000, 100_000 * (1 - SAME_PCT / 100), "same"),
        (100_000, 100_000 * (1 - SAME_PCT / 100) - 1, "faster"),
        (2_000, 2_000 + SAME_NS, "same"),  # +15 %, but within the absolute band
        (2_000, 2_000 + SAME_NS + 1, "slower"),
        (2_000, 2_000 - SAME_NS - 1, "faster"),
    ],
)
def test_attribution_band_edges(base, cand, outcome):
    (change,) = attribute([row("k", base)], [row("k", cand)])
    assert change.outcome == outcome
    if outcome != "same":
        assert change_text(change) == f"{(cand - base) / base * 100:+.1f} %"


def test_duplicates_match_by_launch_order_and_templates_by_name():
    changes = attribute(
        [row("prep", 1_000), row("prep", 5_000, 1), row("fwd<64>", 50_000)],
        [row("prep", 1_000), row("prep", 8_000, 1), row("fwd<128>", 40_000)],
    )
    assert [(label(c), change_text(c)) for c in changes] == [
        ("prep", "same"),
        ("prep #2", "+60.0 %"),
        ("fwd<64> → fwd<128>", "-20.0 %"),
    ]


def test_exact_names_are_matched_before_templates():
    changes = attribute([row("k<1>", 1_000), row("k<2>", 9_000)], [row("k<2>", 9_000), row("k<1>", 1_000)])
    assert [(label(c), c.outcome) for c in changes] == [("k<1>", "same"), ("k<2>", "same")]
    changes = attribute([row("k<1>", 1_000)], [row("k<1>", 1_000), row("k<2>", 5_000)])
    assert [(label(c), change_text(c)) for c in changes] == [("k<1>", "same"), ("k<2>", "only in candidate")]


def test_a_kernel_of_zero_duration_in_base_changes_by_nanoseconds_only():
    (tiny,) = attribute([row("k", 0)], [row("k", SAME_NS)])
    (grown,) = attribute([row("k", 0)], [row("k", SAME_NS + 1)])
    assert (tiny.outcome, tiny.change_pct) == ("same", None)
    assert (grown.outcome, grown.change_pct, change_text(grown)) == ("slower", None, "slower")


def test_a_case_traced_on_one_arm_keeps_its_inventory_and_attributes_nothing():
    """A trace that holds one arm (a hand-edited record, a tracer that failed on the other) still
    gives that arm's kernels and timers; there is nothing to attribute a change to."""
    call = traced(1_000 + 10_000, 10_000)
    kernels = case_kernels({"base": [call]}, {}, FAKE_LIMITS, 1_000.0)
    assert kernels.attribution == []
    assert [(r.name, r.median_ns) for r in kernels.inventory["base"]] == [("k", 10_000.0)]
    assert set(kernels.inventory) == set(kernels.timers) == {"base"} and kernels.timers["base"].agree


def test_the_band_is_the_one_the_record_states():
    from qualify.evaluate.kernels import BAND_TEXT

    assert BAND_TEXT == "same: within ±2 % or ±0.3 µs of base"


# --- traced_launches_match: the trace as witness that the arms launch alike ----------------------


@pytest.fixture
def same_code_trial(tmp_path):
    """A fake-device trial whose arms launch the same kernel the same way (traced both sides)."""
    from test_code_identity import SAME_AS_BASE, plan_for, trial_of

    _, trial = trial_of(tmp_path, plan_for(SAME_AS_BASE))
    return trial


def _with(case, **update):
    return case.model_copy(update=update)


def test_matching_traces_match_and_no_cases_or_a_missing_side_is_no_evidence(same_code_trial):
    from qualify.evaluate.kernels import traced_launches_match

    cases = same_code_trial.cases
    assert cases and all(c.trace for c in cases)
    assert traced_launches_match(cases) is True
    assert traced_launches_match([]) is None
    one_side = _with(cases[0], trace={"base": cases[0].trace["base"]})
    assert traced_launches_match([one_side, *cases[1:]]) is None
    empty_side = _with(cases[0], trace={"base": cases[0].trace["base"], "candidate": []})
    assert traced_launches_match([*cases[1:], empty_side]) is None
    assert traced_launches_match([_with(cases[0], trace=None)]) is None


def test_outputs_that_differ_or_launches_that_differ_do_not_match(same_code_trial):
    from qualify.evaluate.kernels import traced_launches_match

    case = same_code_trial.cases[0]
    unequal = [p.model_copy(update={"equal": False}) for p in case.parity]
    assert traced_launches_match([_with(case, parity=unequal)]) is False

    def regrid(call, x):
        return call.model_copy(update={"kernels": [k.model_copy(update={"grid": (x, 1, 1)}) for k in call.kernels]})

    base = case.trace["base"]
    other = {"base": base, "candidate": [regrid(c, 7) for c in case.trace["candidate"]]}
    assert traced_launches_match([_with(case, trace=other)]) is False
    # one arm's own calls disagreeing among themselves is no match either, even if both arms agree
    wobbly = [regrid(c, 7 + i) for i, c in enumerate(base)]
    assert len(base) > 1
    assert traced_launches_match([_with(case, trace={"base": wobbly, "candidate": wobbly})]) is False


def test_a_base_kernel_of_one_nanosecond_still_has_a_relative_change():
    (change,) = attribute([row("k", 1)], [row("k", 1 + SAME_NS + 1)])
    assert change.outcome == "slower" and change.change_pct == pytest.approx((SAME_NS + 1) * 100.0)


def test_a_template_match_is_used_once_and_exact_names_pair_in_the_arms_own_order():
    # two base instantiations, one candidate instantiation: only the first pairs with it
    changes = attribute([row("k<1>", 1_000), row("k<2>", 2_000)], [row("k<3>", 1_000)])
    assert [(label(c), change_text(c)) for c in changes] == [("k<1> → k<3>", "same"), ("k<2>", "only in base")]
    # base launches one more kernel than the candidate: the shared one pairs by name
    changes = attribute([row("prep", 1_000), row("fwd", 9_000)], [row("fwd", 9_000)])
    assert [(label(c), change_text(c)) for c in changes] == [("prep", "only in base"), ("fwd", "same")]


def test_each_arms_timers_are_judged_with_the_cases_floor_and_offset():
    from qualify.evaluate.second_timer import agreement

    trace = {"base": [traced(13_000, 10_000), traced(12_500, 10_000)], "candidate": [traced(9_000, 8_000)]}
    kernels = case_kernels(trace, {}, FAKE_LIMITS, 1_000.0, 1_500.0)
    assert kernels.timers == {side: agreement(calls, 1_000.0, 1_500.0) for side, calls in trace.items()}
    assert kernels.timers["base"] != agreement(trace["base"], 1_500.0, 1_000.0)  # the two are not interchangeable
    plain = case_kernels(trace, {}, FAKE_LIMITS, 1_000.0)
    assert plain.timers["base"] == agreement(trace["base"], 1_000.0, 0.0)
    assert plain.timers["base"] != agreement(trace["base"], 1_000.0, 1.0)  # no offset unless one is given
