"""The engine's golden steps on their own: a vacuous gate and a misdeclared control are problems
that say which output did what (tests written from the survivors of mutating golden_stage.py)."""

from __future__ import annotations

from test_engine_golden import frozen_golden_repo

from qualify.results.tolerance import ControlOutcome
from qualify.run.golden_stage import control_problem, judge, open_golden


def _judge(tmp_path, fidelity_update: dict, change=None):
    loaded = frozen_golden_repo(tmp_path)
    fid = loaded.plan.acceptance.fidelity.model_copy(update=fidelity_update)
    plan = loaded.plan.model_copy(update={"acceptance": loaded.plan.acceptance.model_copy(update={"fidelity": fid})})
    golden = open_golden(loaded)
    case = loaded.cases[0]
    out = golden.expected(case.id, "out").copy()
    if change is not None:
        change(out.view("<f4"))
    outputs = {"base": {"out": golden.expected(case.id, "out")}, "candidate": {"out": out}}
    return case, judge(plan, golden, case, outputs, {"out": "f32"})


def test_a_gate_too_loose_to_catch_any_perturbation_is_a_problem(tmp_path):
    case, (tolerance, problems) = _judge(tmp_path, {"atol": 1e30})
    assert [r.vacuous for r in tolerance.calibration] == [True]
    assert problems == ["out: the gate caught no perturbation up to 64 quanta: it is vacuous here"]


def test_a_gate_that_catches_its_perturbations_and_a_matching_candidate_raise_nothing(tmp_path):
    case, (tolerance, problems) = _judge(tmp_path, {})
    assert problems == [] and not tolerance.calibration[0].vacuous
    assert [c.output for c in tolerance.counts["base"]] == ["out"]


def test_without_calibration_only_the_counts_are_judged(tmp_path):
    def bump(values):
        values[3] += 1.0

    case, (tolerance, problems) = _judge(tmp_path, {"calibration": None}, bump)
    assert tolerance.calibration == []
    assert len(problems) == 1 and problems[0].startswith(f"out: 1 of {case.values['N']} differ from the golden")
    assert problems[0].endswith("at index 3")


def test_a_control_not_as_declared_names_every_output_that_misbehaved():
    outcome = ControlOutcome(
        control="zero_gate",
        case="S=8",
        expected={"out": "fail", "weights": "pass", "lse": "pass"},
        passed={"out": True, "weights": False, "lse": True},
        worst_bound_fraction={"out": 0.25, "weights": None, "lse": 0.0},
        as_declared=False,
    )
    assert control_problem(outcome) == (
        "negative control zero_gate is not as declared: out declared fail but passed (worst bound fraction 0.25); "
        "weights declared pass but failed (worst bound fraction infinite)"
    )


def test_a_control_as_declared_is_no_problem():
    outcome = ControlOutcome(
        control="c",
        case="S=8",
        expected={"out": "fail"},
        passed={"out": False},
        worst_bound_fraction={"out": 3.0},
        as_declared=True,
    )
    assert control_problem(outcome) is None


def test_a_plan_without_a_golden_opens_none(tmp_path):
    from plans import make_repo, plan_copy

    from qualify.plan.load import load_plan

    assert open_golden(load_plan(make_repo(tmp_path, plan_copy()))) is None
