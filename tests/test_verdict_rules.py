"""The verdict's rules one at a time, each on the committed vecload record with one fact changed.

records/vecload is qualified as recorded; every test here changes one thing a trial could have
reported and asserts the verdict a user would then read: the status and the reason naming it.
The speed gates are set aside where a rule about the timer is tested, so that a missed gate
(which a free A/A misses by construction) cannot hide the status the rule alone gives.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from qualify.evaluate.verdict import gate_limit, judge_gate, verdict
from qualify.plan.load import load_plan
from qualify.plan.model import SpeedGate
from qualify.results.model import Failure, TimerAgreement, Trial
from qualify.results.store import Record

RECORD = Path(__file__).resolve().parents[1] / "records" / "vecload"


@pytest.fixture(scope="module")
def recorded():
    return load_plan(RECORD / "plan.json").plan, Record(RECORD).trials()


def _without_gates(plan):
    return plan.model_copy(update={"acceptance": plan.acceptance.model_copy(update={"gates": []})})


def _with_case(trial: Trial, index: int, **changes) -> Trial:
    cases = list(trial.cases)
    cases[index] = cases[index].model_copy(update=changes)
    return trial.model_copy(update={"cases": cases})


def test_the_record_as_committed_is_qualified_with_and_without_its_gates(recorded):
    plan, trials = recorded
    assert verdict(plan, trials).status == "qualified"
    assert verdict(_without_gates(plan), trials).status == "qualified"


def test_timed_launches_whose_outputs_differ_from_the_checked_ones_are_not_qualified(recorded):
    plan, trials = recorded
    changed = [_with_case(trials[0], 2, timed_outputs_match=False), *trials[1:]]
    v = verdict(plan, changed)
    assert v.status == "not_qualified"
    case = trials[0].cases[2].case
    assert f"trial {trials[0].index}, {case}: outputs of timed launches differ from the checked outputs" in v.reasons


def test_a_complete_trial_missing_a_planned_case_is_incomplete_naming_the_case(recorded):
    plan, trials = recorded
    dropped = trials[0].cases[1].case
    short = trials[0].model_copy(update={"cases": [c for c in trials[0].cases if c.case != dropped]})
    v = verdict(_without_gates(plan), [short, *trials[1:]])
    assert v.status == "incomplete"
    assert f"trial {trials[0].index} lacks cases {dropped}" in v.reasons


@pytest.mark.parametrize("case_class", ["faster", "slower"])
def test_a_free_aa_that_measures_a_difference_is_incomplete(recorded, case_class):
    """Identical machine code and launches cannot be faster or slower: if the timer says so, it
    does not resolve the case, in either direction."""
    plan, trials = recorded
    trial = trials[0]
    free = trial.model_copy(update={"code": trial.code.model_copy(update={"free_aa": True})})
    stats = free.cases[0].stats.model_copy(update={"case_class": case_class})
    v = verdict(_without_gates(plan), [_with_case(free, 0, stats=stats), *trials[1:]])
    assert v.status == "incomplete"
    assert any(
        r.startswith(
            f"trial {trial.index}, {trial.cases[0].case}: identical machine code and launches measured {case_class}"
        )
        for r in v.reasons
    ), v.reasons


def _aa(stats, pct: float, sd: float = 0.002, case_class: str = "same"):
    """An A/A control's statistics: block log-ratios with mean log(1 + pct/100) and SD `sd`."""
    import math

    mean = math.log1p(pct / 100.0)
    half = 2.1 * sd / math.sqrt(stats.blocks)
    return stats.model_copy(
        update={
            "log_mean": mean,
            "log_sd": sd,
            "ratio": math.exp(mean),
            "ci_low": math.exp(mean - half),
            "ci_high": math.exp(mean + half),
            "delta_pct": pct,
            "case_class": case_class,
        }
    )


@pytest.mark.parametrize("pct, case_class", [(-1.5, "faster"), (1.5, "slower")])
def test_an_aa_control_faster_or_slower_pooled_over_the_trials_makes_the_verdict_incomplete(recorded, pct, case_class):
    """The base timed against itself must come out unchanged, judged as the change is (pooled over
    the device's processes): a difference in either direction means the timer does not resolve
    the case, whatever the candidate measured."""
    plan, trials = recorded
    case = trials[1].cases[3]
    both = [_with_case(t, 3, aa=_aa(t.cases[3].stats, pct, case_class=case_class)) for t in trials[:2]]
    v = verdict(plan, both)
    assert v.status == "incomplete"
    device = f"{trials[1].provenance.device.name} ({trials[1].provenance.device.uuid[:12]})"
    [line] = [r for r in v.reasons if "A/A control came out" in r]
    assert line.startswith(f"{case.case} on ") and f"A/A control came out {case_class} ({pct:+.2f}%" in line
    assert line.endswith("pooled over 2 trials (2 processes)): the timer does not resolve this case"), line
    assert device.split(" (")[0] in line


def test_one_process_whose_own_aa_strays_is_a_note_when_the_pooled_aa_holds(recorded):
    """vecload on an H200: one trial's A/A at 16 Mi read −0.55 % (its interval below 1), the
    other's −0.19 %; pooled over the two processes the A/A holds, and the verdict says both."""
    plan, trials = recorded
    case = trials[1].cases[3]
    strayed = _with_case(trials[1], 3, aa=_aa(case.stats, -0.55, sd=0.004, case_class="faster"))
    held = _with_case(trials[0], 3, aa=_aa(trials[0].cases[3].stats, 0.30, sd=0.004))
    v = verdict(plan, [held, strayed])
    assert v.status == "qualified", v.reasons
    assert (
        f"trial {trials[1].index}, {case.case}: this process's own A/A control read faster (-0.55%); "
        "the A/A is judged pooled over the device's trials, as the change is"
    ) in v.reasons


def test_a_device_with_one_trial_judges_the_aa_of_that_trial(recorded):
    plan, trials = recorded
    case = trials[0].cases[3]
    one = _with_case(trials[0], 3, aa=_aa(case.stats, 1.5, case_class="slower"))
    v = verdict(plan, [one])
    assert any(
        r.startswith(f"{case.case} on ")
        and "A/A control came out slower (+1.50%, pooled over 1 trial (1 process))" in r
        for r in v.reasons
    ), v.reasons


@pytest.mark.parametrize("case_class", ["same", "cant_tell"])
def test_an_aa_control_that_finds_no_difference_leaves_the_verdict_qualified(recorded, case_class):
    plan, trials = recorded
    aa = trials[1].cases[3].stats.model_copy(update={"case_class": case_class})
    assert verdict(plan, [trials[0], _with_case(trials[1], 3, aa=aa)]).status == "qualified"


@pytest.mark.parametrize(
    "gate", [SpeedGate(name="g", min_speedup_pct=5.0), SpeedGate(name="r", max_regression_pct=2.0)]
)
def test_an_interval_that_reaches_the_gates_bound_from_inside_passes(gate):
    """The bound is the largest ratio the gate accepts: an interval whose top is the bound passes."""
    limit = gate_limit(gate)
    assert judge_gate(gate, limit - 0.01, limit - 0.02, limit, 50.0)[0] == "pass"


@pytest.mark.parametrize(
    "gate", [SpeedGate(name="g", min_speedup_pct=5.0), SpeedGate(name="r", max_regression_pct=2.0)]
)
def test_an_interval_that_starts_at_the_bound_is_not_a_miss_by_the_interval_alone(gate):
    """Its bottom is a ratio the gate accepts: the case's resolution decides, not the interval."""
    limit = gate_limit(gate)
    assert judge_gate(gate, limit + 0.01, limit, limit + 0.02, 50.0)[0] == "cant_tell"
    assert judge_gate(gate, limit + 0.01, limit, limit + 0.02, 0.1)[0] == "miss"


@pytest.mark.parametrize(
    "gate", [SpeedGate(name="g", min_speedup_pct=5.0), SpeedGate(name="r", max_regression_pct=2.0)]
)
def test_a_case_that_resolves_exactly_the_gates_margin_is_decided(gate):
    """The margin is resolvable when the MDE is no larger than it: the point estimate decides."""
    limit = gate_limit(gate)
    margin = abs(limit - 1.0) * 100.0
    assert judge_gate(gate, limit, None, None, margin)[0] == "pass"
    assert judge_gate(gate, limit + 0.001, None, None, margin)[0] == "miss"
    assert judge_gate(gate, limit, None, None, margin * 1.001)[0] == "cant_tell"


def _as_trial(trial: Trial, index: int, mde_pct: float) -> Trial:
    cases = [c.model_copy(update={"stats": c.stats.model_copy(update={"mde_pct": mde_pct})}) for c in trial.cases]
    return trial.model_copy(update={"index": index, "cases": cases})


def test_the_median_of_trials_judges_by_the_median_mde_not_the_mean(recorded):
    """One noisy trial among three must not make a resolvable gate undecidable: the median of
    the trials' MDEs (0.5 %) is under the regression gate's 2 %, their mean (7 %) is not."""
    plan, trials = recorded
    gates = [g.model_copy(update={"every_trial": False}) for g in plan.acceptance.gates if g.name == "no_regression"]
    median_plan = plan.model_copy(update={"acceptance": plan.acceptance.model_copy(update={"gates": gates})})
    three = [_as_trial(trials[0], 1, 0.5), _as_trial(trials[1], 2, 0.5), _as_trial(trials[1], 3, 20.0)]
    v = verdict(median_plan, three)
    assert not [r for r in v.reasons if "can't tell" in r], v.reasons
    assert {g.trial for g in v.gates} == {None} and all(g.passed for g in v.gates) and v.gates


@pytest.mark.parametrize(
    "kind, status",
    [
        ("fidelity", "not_qualified"),
        ("fault", "not_qualified"),
        ("timeout", "not_qualified"),
        ("budget", "incomplete"),
        ("error", "incomplete"),
    ],
)
def test_a_recorded_failure_fails_the_candidate_or_leaves_the_evidence_short_by_its_kind(recorded, kind, status):
    """A wrong output, a fault or a hang is the candidate's failure; a budget stop or a harness
    error only leaves the evidence short."""
    plan, trials = recorded
    failure = Failure(kind=kind, case=trials[0].cases[0].case, side="candidate", message="what happened")
    v = verdict(plan, [trials[0].model_copy(update={"failures": [failure]}), *trials[1:]])
    assert v.status == status
    assert f"trial {trials[0].index}: {kind} at {trials[0].cases[0].case}, candidate: what happened" in v.reasons


@pytest.mark.parametrize("side", ["base", "candidate"])
def test_an_arm_that_is_not_deterministic_is_not_qualified(recorded, side):
    plan, trials = recorded
    case = trials[0].cases[0]
    v = verdict(plan, [_with_case(trials[0], 0, deterministic={**case.deterministic, side: False}), *trials[1:]])
    assert v.status == "not_qualified"
    assert (
        f"trial {trials[0].index}, {case.case}: {side} is not deterministic (two runs gave different bytes)"
        in v.reasons
    )


def test_outputs_that_differ_name_each_differing_buffer_and_its_count(recorded):
    plan, trials = recorded
    case = trials[0].cases[0]
    parity = [
        case.parity[0].model_copy(
            update={
                "equal": False,
                "differing_elements": 3,
                "first_difference": 7,
                "max_ulp": 1,
                "max_abs": 1e-7,
                "max_rel": 1e-7,
            }
        )
    ]
    v = verdict(plan, [_with_case(trials[0], 0, parity=parity), *trials[1:]])
    assert v.status == "not_qualified"
    elements = case.parity[0].elements
    assert (
        f"trial {trials[0].index}, {case.case}: outputs differ from base "
        f"({case.parity[0].buffer}: 3 of {elements} elements differ)"
    ) in v.reasons


def test_timers_that_disagree_leave_the_verdict_incomplete(recorded):
    # trace version 1's second timer (a traced call's window against its own span) decides:
    # records traced that way re-derive as they were
    plan, trials = recorded
    case = trials[0].cases[1]
    disagreeing = TimerAgreement(
        calls=1, bound="b", event_ns=[9000.0], cupti_span_ns=[5000.0], cupti_sum_ns=[5000.0], worst_call=0, agree=False
    )
    kernels = case.kernels.model_copy(update={"timers": {"candidate": disagreeing}})
    v = verdict(plan, [_with_case(trials[0], 1, kernels=kernels), *trials[1:]])
    assert v.status == "incomplete"
    assert any(r.startswith(f"trial {trials[0].index}: timers disagree at {case.case} (candidate") for r in v.reasons)


def test_trace_version_2_disagreements_are_said_and_decide_nothing(recorded):
    """A record traced under version 2 keeps the rule it was written with (its disagreements said,
    deciding nothing); from version 3 the same disagreement is no reason at all. The committed
    record is version 3, so version 2 is planted on a copy."""
    plan, committed = recorded
    assert committed[0].kernel_trace.version >= 3, "the committed record is traced under version 3"
    case = committed[0].cases[1]
    assert case.kernels.sample_timers, "the committed record is traced like the samples"
    timers = {
        **case.kernels.sample_timers,
        "candidate": case.kernels.sample_timers["candidate"].model_copy(update={"agree": False}),
    }
    kernels = case.kernels.model_copy(update={"sample_timers": timers})
    for version in (2, 3):
        trials = [
            t.model_copy(update={"kernel_trace": t.kernel_trace.model_copy(update={"version": version})})
            for t in committed
        ]
        before = verdict(plan, trials)
        v = verdict(plan, [_with_case(trials[0], 1, kernels=kernels), *trials[1:]])
        assert v.status == before.status
        said = [
            r for r in v.reasons if r.startswith(f"trial {trials[0].index}: timers disagree at {case.case} (candidate")
        ]
        if version == 2:
            assert said and len(v.reasons) == len(before.reasons) + int(case.kernels.sample_timers["candidate"].agree)
        else:
            assert not said and v.reasons == before.reasons


def test_a_sanitizer_run_that_is_not_clean_is_not_qualified(recorded):
    plan, trials = recorded
    runs = list(trials[0].sanitizer)
    runs[0] = runs[0].model_copy(update={"status": "findings", "errors": 2})
    v = verdict(plan, [trials[0].model_copy(update={"sanitizer": runs}), *trials[1:]])
    assert v.status == "not_qualified"
    r = runs[0]
    assert any(
        line.startswith(f"{r.tool} at {r.case} ({r.side}) on ") and line.endswith(": findings, 2 errors")
        for line in v.reasons
    ), v.reasons


def test_a_planned_sanitizer_check_that_no_trial_ran_is_incomplete(recorded):
    plan, trials = recorded
    dropped = trials[0].sanitizer[0]
    stripped = [
        t.model_copy(
            update={
                "sanitizer": [
                    r for r in t.sanitizer if (r.tool, r.case, r.side) != (dropped.tool, dropped.case, dropped.side)
                ]
            }
        )
        for t in trials
    ]
    v = verdict(plan, stripped)
    assert v.status == "incomplete"
    assert any(r.startswith(f"{dropped.tool} at {dropped.case} ({dropped.side}) not run on ") for r in v.reasons)


def test_a_gate_the_case_cannot_resolve_names_the_interval_it_straddles(recorded):
    plan, trials = recorded
    # the first case's interval set to [0.9599, 0.9700], which straddles the 3.5 % gate's bound
    # 0.965; made to resolve no change under 10 %, the case cannot tell
    s = trials[0].cases[0].stats.model_copy(update={"ratio": 0.965, "ci_low": 0.9599, "ci_high": 0.97, "mde_pct": 10.0})
    case = trials[0].cases[0].case
    fine = SpeedGate(name="fine", cases=[case], min_speedup_pct=3.5)
    fine_plan = plan.model_copy(update={"acceptance": plan.acceptance.model_copy(update={"gates": [fine]})})
    v = verdict(fine_plan, [_with_case(trials[0], 0, stats=s), *trials[1:]])
    assert s.ci_low < gate_limit(fine) < s.ci_high
    device = trials[0].provenance.device
    assert (
        f"gate fine can't tell at {case} on {device.name} ({device.uuid[:12]}) (trial {trials[0].index}): "
        f"needs change <= -3.5%, measured change {(s.ratio - 1) * 100:+.2f}%, "
        f"95% CI [{(s.ci_low - 1) * 100:+.2f}%, {(s.ci_high - 1) * 100:+.2f}%]; the smallest change this case can detect is 10.00%, "
        "above the gate's 3.5%"
    ) in v.reasons


def test_a_trial_on_a_device_the_plan_does_not_list_leaves_the_verdict_incomplete(recorded):
    """An exploratory trial (`--exploratory`, a device outside the plan's) is evidence, never a
    qualification: the verdict says which trial and why, and is no longer "qualified"."""
    plan, trials = recorded
    first = trials[0]
    unplanned = first.model_copy(update={"provenance": first.provenance.model_copy(update={"planned": False})})
    v = verdict(plan, [unplanned, *trials[1:]])
    assert v.status == "incomplete"
    label = f"{first.provenance.device.name} ({first.provenance.device.uuid[:12]})"
    assert f"trial {first.index} ran on {label}, a device the plan does not list" in v.reasons
    assert not any("does not list" in r for r in verdict(plan, trials).reasons)


def test_a_failed_trials_stray_aa_is_neither_judged_nor_noted(recorded):
    """A trial that did not complete is not evidence of the timer either way: its A/A reading is
    neither pooled nor noted (the trial's own status is the reason)."""
    plan, trials = recorded
    case = trials[1].cases[3]
    failed = _with_case(trials[1], 3, aa=_aa(case.stats, -2.0, case_class="faster")).model_copy(
        update={"status": "failed"}
    )
    v = verdict(plan, [trials[0], failed])
    assert not [r for r in v.reasons if "A/A" in r], v.reasons
    assert f"trial {trials[1].index} on " in " ".join(v.reasons)
