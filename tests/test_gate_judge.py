"""The gate's judgement of one case (qualify.evaluate.gate), at its boundaries."""

from __future__ import annotations

import pytest

from qualify.errors import ExitCode
from qualify.evaluate.gate import bytes_finding, classify, outcome
from qualify.plan.model import GatePolicy, GateRule
from qualify.results.gate import GateArm, GateCase, GateProtocol
from qualify.results.model import BufferParity, Failure, PooledStats

RULE = GateRule(max_regression_pct=1.0, detect_pct=2.0)


def stats(ratio, lo, hi, mde=0.5) -> PooledStats:
    return PooledStats(
        ratio=ratio,
        ci_low=lo,
        ci_high=hi,
        delta_pct=(ratio - 1) * 100,
        case_class="cant_tell",
        reason="r",
        trials=2,
        df=10.0,
        within_pct=0.1,
        between_pct=0.0,
        mde_pct=mde,
    )


@pytest.mark.parametrize(
    "ratio, lo, hi, expected",
    [
        (1.02, 1.015, 1.025, "slower"),  # above 1 and beyond the tolerated 1 %
        (1.009, 1.005, 1.013, "unchanged"),  # above 1 but within tolerance, inside ±2 %
        (1.011, 0.999, 1.023, "cant_tell"),  # straddles 1 and leaves +2 %
        (1.0101, 1.0001, 1.0199, "slower"),
        (1.0099, 1.0001, 1.0199, "unchanged"),  # change not beyond the 1 % tolerated
        (1.00995, 1.0001, 1.0199, "unchanged"),
        (0.98, 0.975, 0.985, "faster"),
        (0.995, 0.98, 1.0, "unchanged"),  # the edge of ±2 % counts as inside
        (0.995, 0.9799, 1.0, "cant_tell"),
        (1.0, 0.99, 1.0201, "cant_tell"),
        (1.0, 0.999, 1.001, "unchanged"),
    ],
)
def test_classes_at_their_boundaries(ratio, lo, hi, expected):
    assert classify(stats(ratio, lo, hi), RULE)[0] == expected


def test_slower_needs_the_whole_interval_above_one():
    assert classify(stats(1.03, 1.0, 1.06), RULE)[0] == "cant_tell"
    assert classify(stats(1.03, 1.0001, 1.06), RULE)[0] == "slower"


def test_faster_needs_the_whole_interval_below_one():
    assert classify(stats(0.97, 0.94, 1.0), RULE)[0] == "cant_tell"
    assert classify(stats(0.97, 0.94, 0.9999), RULE)[0] == "faster"


def test_underpowered_when_the_mde_exceeds_what_the_gate_must_see():
    assert classify(stats(1.0, 0.999, 1.001, mde=2.0), RULE)[2] is False
    assert classify(stats(1.0, 0.999, 1.001, mde=2.01), RULE)[2] is True
    assert classify(stats(1.0, 0.999, 1.001, mde=None), RULE)[2] is True


def test_no_stats_or_no_interval_cannot_tell():
    assert classify(None, RULE)[0] == "cant_tell"
    assert classify(stats(1.0, None, None), RULE)[0] == "cant_tell"


def test_the_first_rule_that_selects_a_case_applies():
    policy = GatePolicy(
        max_regression_pct=3.0,
        cases=[GateRule(cases=["N=1"], max_regression_pct=0.0), GateRule(where="N >= 1", detect_pct=5.0)],
    )
    from qualify.evaluate.tolerance_gate import selects

    pick = lambda cid, n: policy.rule_for(lambda r: selects(r, cid, {"N": n}))  # noqa: E731
    assert pick("N=1", 1).max_regression_pct == 0.0
    assert pick("N=2", 2).detect_pct == 5.0 and pick("N=2", 2).max_regression_pct == 0.5
    assert pick("N=0", 0).max_regression_pct == 3.0


class _T:
    def __init__(self, parity, failures=()):
        self.cases = [type("C", (), {"case": "N=1", "parity": parity})()]
        self.failures = list(failures)


def _parity(equal, differing=0):
    return BufferParity(
        buffer="out",
        equal=equal,
        elements=8,
        differing_elements=differing,
        first_difference=None,
        max_ulp=None,
        max_abs=None,
        max_rel=None,
    )


def test_bytes_findings():
    assert bytes_finding([_T([_parity(True)])], "N=1")[0] == "identical"
    assert bytes_finding([_T([_parity(True)]), _T([_parity(False, 3)])], "N=1")[0] == "within_tolerance"
    failed = _T([_parity(False, 3)], [Failure(kind="fidelity", case="N=1", message="out misses")])
    assert bytes_finding([failed], "N=1") == ("beyond_tolerance", "out misses")
    other = _T([_parity(True)], [Failure(kind="fidelity", case="N=2", message="elsewhere")])
    assert bytes_finding([other], "N=1")[0] == "identical"
    assert bytes_finding([], "N=1")[0] == "not_compared"


def _case(cls="unchanged", bytes_="identical") -> GateCase:
    return GateCase(
        case="N=1",
        gate_class=cls,
        reason="",
        ratio=None,
        ci_low=None,
        ci_high=None,
        delta_pct=None,
        mde_pct=None,
        max_regression_pct=0.5,
        detect_pct=2,
        underpowered=False,
        bytes=bytes_,
        bytes_detail="",
        trials=0,
    )


def _protocol(*cases, error=None, status="gated") -> GateProtocol:
    arm = GateArm(
        side="base",
        code="differs",
        code_detail="",
        timed=True,
        record=None,
        device=None,
        error=error,
        cases=list(cases),
    )
    return GateProtocol(name="p", plan="p", reasons=[], status=status, arms=[arm])


def test_outcomes():
    assert outcome([_protocol(_case(), _case("faster"), _case("identical_code"))])[:2] == ("pass", ExitCode.QUALIFIED)
    assert outcome([_protocol(_case("slower"))])[:2] == ("fail", ExitCode.NOT_QUALIFIED)
    assert outcome([_protocol(_case("slower"), _case(bytes_="beyond_tolerance"))])[2].endswith(
        "2 case(s): 1 slower, 1 with outputs beyond the bound"
    )
    assert outcome([_protocol(_case("cant_tell"), _case(), error="x")])[2].endswith("1 can't tell, 1 not gated")
    assert outcome([_protocol(_case(bytes_="beyond_tolerance"))])[:2] == ("fail", ExitCode.NOT_QUALIFIED)
    assert outcome([_protocol(_case(bytes_="within_tolerance"))])[0] == "pass"
    assert outcome([_protocol(_case("cant_tell"))])[:2] == ("incomplete", ExitCode.INCOMPLETE)
    assert outcome([_protocol(_case(), error="no GPU")])[0] == "incomplete"
    assert outcome([_protocol(status="error")])[0] == "incomplete"
    assert outcome([_protocol(_case("slower"), error="x")])[0] == "fail"
    assert outcome([])[:2] == ("pass", ExitCode.QUALIFIED)


def test_a_derived_plan_rebases_each_arm_kinds_paths_to_its_tree():
    from pathlib import Path

    import test_python_arms
    from plans import PLAN

    from qualify.commands.gate_plans import derive
    from qualify.plan.model import Plan

    rev_dir, now_dir = Path("/t/rev/protocols/p"), Path("/t/now/protocols/p")
    cuda = Plan.model_validate(
        {**PLAN, "arms": {**PLAN["arms"], "base": {**PLAN["arms"]["base"], "include_dirs": ["inc"]}}}
    )
    data = derive(cuda, cuda, rev_dir, now_dir, "base", "abc")
    assert data["arms"]["base"]["source"] == "../../../rev/kernels/k.cu"
    assert data["arms"]["base"]["include_dirs"] == ["../../../rev/protocols/p/inc"]
    assert data["arms"]["candidate"]["source"] == "../../kernels/k.cu"
    assert data["acceptance"]["gates"] == [] and data["controls"]["negative"] == []
    assert "fidelity" not in data["stop"]["fail_fast"]
    py = Plan.model_validate(test_python_arms.python_plan())
    data = derive(py, py, rev_dir, now_dir, "base", "abc")
    assert data["arms"]["base"]["callable"] == "../../../rev/kernels/py/axpy.py:axpy"
    assert data["arms"]["candidate"]["callable"] == "../../kernels/py/axpy.py:axpy"


def test_a_case_gets_the_rule_that_selects_it_by_id_or_by_its_values():
    from plans import PLAN

    from qualify.evaluate.gate import rule_for
    from qualify.plan.model import Plan
    from qualify.plan.resolve import ResolvedCase

    plan = Plan.model_validate(
        {
            **PLAN,
            "gate": {
                "detect_pct": 4.0,
                "cases": [{"cases": ["N=1024"], "detect_pct": 1.0}, {"where": "N > 2000", "detect_pct": 3.0}],
            },
        }
    )
    case = lambda cid, n: ResolvedCase(index=0, id=cid, values={"N": n}, arms={})  # noqa: E731
    assert rule_for(plan, case("N=1024", 1024)).detect_pct == 1.0
    assert rule_for(plan, case("N=4096", 4096)).detect_pct == 3.0
    assert rule_for(plan, case("N=7", 7)).detect_pct == 4.0


def _trial(uuid: str, status: str = "complete"):
    from types import SimpleNamespace

    device = SimpleNamespace(name="NVIDIA H200", uuid=uuid)
    return SimpleNamespace(status=status, provenance=SimpleNamespace(device=device), cases=[], failures=[])


def test_one_machine_is_read_and_two_are_refused():
    from types import SimpleNamespace

    from qualify.evaluate.gate import one_machine

    a, b = "GPU-aaaaaaaaaaaa-0", "GPU-bbbbbbbbbbbb-0"
    assert one_machine(SimpleNamespace(trials=[_trial(a), _trial(a)])) == "NVIDIA H200 (GPU-aaaaaaaa)"
    assert one_machine(SimpleNamespace(trials=[_trial(a), _trial(b, "failed")])) == "NVIDIA H200 (GPU-aaaaaaaa)"
    assert one_machine(SimpleNamespace(trials=[])) is None
    with pytest.raises(ValueError, match="2 machines"):
        one_machine(SimpleNamespace(trials=[_trial(a), _trial(b)]))


def test_judge_timed_reads_the_machines_pooled_case_and_counts_its_trials():
    from types import SimpleNamespace

    from plans import PLAN

    from qualify.evaluate.gate import judge_identical, judge_timed
    from qualify.plan.model import Plan
    from qualify.plan.resolve import ResolvedCase

    plan = Plan.model_validate(PLAN)
    cases = [ResolvedCase(index=i, id=f"N={n}", values={"N": n}, arms={}) for i, n in enumerate((1024, 4096))]
    trial = _trial("GPU-aaaaaaaaaaaa-0")
    trial.cases = [SimpleNamespace(case="N=1024", parity=[_parity(True)])]
    results = SimpleNamespace(
        trials=[trial, _trial("GPU-aaaaaaaaaaaa-0", "failed")],
        pooled={"NVIDIA H200 (GPU-aaaaaaaa)": {"N=1024": stats(1.05, 1.04, 1.06)}},
    )
    machine, judged = judge_timed(plan, cases, results)
    assert machine == "NVIDIA H200 (GPU-aaaaaaaa)"
    assert [(c.case, c.gate_class, c.trials, c.bytes) for c in judged] == [
        ("N=1024", "slower", 1, "identical"),
        ("N=4096", "cant_tell", 0, "not_compared"),
    ]
    assert judged[0].ratio == 1.05 and judged[1].ratio is None
    same = judge_identical(plan, cases, "identical machine code on sm_90")
    assert [c.gate_class for c in same] == ["identical_code"] * 2 and same[
        0
    ].reason == "identical machine code on sm_90"


def _blind(case="N=1", mde=3.0, trials=2, underpowered=True) -> GateCase:
    return _case("cant_tell").model_copy(
        update={"case": case, "mde_pct": mde, "trials": trials, "underpowered": underpowered}
    )


def test_more_trials_only_while_a_timed_case_is_underpowered_and_the_budget_has_room():
    from types import SimpleNamespace

    from plans import PLAN

    from qualify.evaluate.gate import more_trials
    from qualify.plan.model import Plan

    plan = Plan.model_validate({**PLAN, "budget": {**PLAN["budget"], "max_trials": 4}})  # 2 planned
    two = SimpleNamespace(trials=[_trial("GPU-a"), _trial("GPU-a")])
    why = more_trials(plan, two, [_blind("N=1", 3.0), _blind("N=2", None)])
    assert why == (
        "added by qualify gate: after 2 trial(s), N=1 resolves 3.00%, not the 2% the gate must see (and 1 more case(s))"
    )
    assert "N=2 no interval" in more_trials(plan, two, [_blind("N=2", None)])
    # every case resolves what the gate must see; an identical-code case was never timed
    assert more_trials(plan, two, [_blind(mde=1.0, underpowered=False), _blind(trials=0)]) is None
    # the budget: 4 trials on the device already
    assert more_trials(plan, SimpleNamespace(trials=[_trial("GPU-a")] * 4), [_blind()]) is None
    assert more_trials(plan, SimpleNamespace(trials=[_trial("GPU-a")] * 3), [_blind()]) is not None
    # a failed or interrupted trial is reported, never papered over by another
    failed = SimpleNamespace(trials=[_trial("GPU-a"), _trial("GPU-a", "failed")])
    assert more_trials(plan, failed, [_blind()]) is None
    # before the planned trials are done, and with none at all
    assert more_trials(plan, SimpleNamespace(trials=[_trial("GPU-a")]), [_blind()]) is None
    assert more_trials(plan, SimpleNamespace(trials=[]), [_blind()]) is None
