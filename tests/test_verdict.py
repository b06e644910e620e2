"""Gates against what a case can resolve: pass, miss, or can't tell with the MDE in the reason."""

from __future__ import annotations

import fakes
import pytest
from plans import make_repo, plan_copy

from qualify.evaluate.verdict import gate_limit, gate_results, judge_gate, verdict
from qualify.plan.load import load_plan
from qualify.plan.model import SpeedGate
from qualify.run.engine import RunOptions, TrialRunner
from qualify.run.fake import FakeDevice, FakeTelemetry

SPEEDUP = SpeedGate(name="g", min_speedup_pct=5.0)
REGRESSION = SpeedGate(name="r", max_regression_pct=2.0)


def test_gate_limit_is_the_tighter_bound():
    assert gate_limit(SPEEDUP) == pytest.approx(0.95)
    assert gate_limit(REGRESSION) == pytest.approx(1.02)
    assert gate_limit(SpeedGate(name="b", min_speedup_pct=1.0, max_regression_pct=3.0)) == pytest.approx(0.99)


@pytest.mark.parametrize(
    "gate, ratio, lo, hi, mde, outcome",
    [
        (SPEEDUP, 0.90, 0.89, 0.91, 1.0, "pass"),  # the interval decides
        (SPEEDUP, 0.90, 0.89, 0.91, 40.0, "pass"),  # ... whatever the case's noise
        (SPEEDUP, 0.98, 0.97, 0.99, 1.0, "miss"),  # the interval excludes a 5 % speed-up
        (SPEEDUP, 0.98, 0.97, 0.99, 40.0, "miss"),
        (SPEEDUP, 0.94, 0.90, 0.98, 8.0, "cant_tell"),  # straddles, and the case resolves only 8 %
        (SPEEDUP, 0.94, 0.93, 0.955, 2.0, "miss"),  # straddles, but 5 % was resolvable: not shown
        (SPEEDUP, 0.94, None, None, None, "cant_tell"),  # one block: no interval, no MDE
        (REGRESSION, 1.015, 1.01, 1.019, 1.0, "pass"),
        (REGRESSION, 1.03, 1.021, 1.04, 1.0, "miss"),
        (REGRESSION, 1.00, 0.97, 1.03, 3.5, "cant_tell"),  # a point estimate inside is not enough
        (REGRESSION, 1.00, 0.97, 1.03, 1.5, "miss"),
        # without an interval the point estimate decides once the margin is resolvable
        (REGRESSION, 1.01, None, None, 1.0, "pass"),
        (REGRESSION, 1.03, None, None, 1.0, "miss"),
        (REGRESSION, 1.01, None, None, 2.5, "cant_tell"),
    ],
)
def test_judge_gate(gate, ratio, lo, hi, mde, outcome):
    result, change, bound = judge_gate(gate, ratio, lo, hi, mde)
    assert result == outcome
    assert change == pytest.approx((ratio - 1) * 100)  # change in time per launch: negative is faster
    assert bound in ("change <= -5%", "change <= +2%")


# ---------------------------------------------------------------------------------------------
# through the engine on the fake device


def _plan(gates, every_trial=True):
    plan = plan_copy()
    plan["schedule"] = {"warmup": 1, "samples_per_block": 3, "blocks": 6, "trials": 1, "cache": "cold"}
    plan["budget"] = {"max_trials": 1, "max_samples": 36, "max_wall_seconds": 60}
    plan["acceptance"]["sanitizer"] = []
    plan["acceptance"]["gates"] = [dict(g, every_trial=every_trial) for g in gates]
    return plan


def _trial(tmp_path, plan, cand_ns, noise):
    loaded = load_plan(make_repo(tmp_path, plan, freeze=True))
    device = FakeDevice({"axpy": fakes.axpy}, durations={"base": 10_000.0, "candidate": cand_ns}, noise=noise)
    return loaded.plan, TrialRunner(loaded, device, FakeTelemetry(), RunOptions(record_dir=tmp_path / "rec")).run()


def test_a_gate_finer_than_the_noise_is_cant_tell_with_the_mde(tmp_path):
    plan, trial = _trial(tmp_path, _plan([{"name": "one_pct", "min_speedup_pct": 1.0}]), 9_950.0, noise=0.08)
    assert all(c.stats.mde_pct > 1.0 for c in trial.cases)
    v = verdict(plan, [trial])
    assert v.status == "incomplete" and v.gates == []
    lines = [r for r in v.reasons if r.startswith("gate one_pct can't tell")]
    assert len(lines) == 2  # both cases
    mde = trial.cases[0].stats.mde_pct
    assert f"the smallest change this case can detect is {mde:.2f}%, above the gate's 1%" in lines[0]


def test_a_clear_result_is_judged_even_on_a_noisy_case(tmp_path):
    plan, trial = _trial(tmp_path, _plan([{"name": "one_pct", "min_speedup_pct": 1.0}]), 5_000.0, noise=0.08)
    v = verdict(plan, [trial])
    assert [g.passed for g in v.gates] == [True, True] and v.status == "qualified"


def test_a_resolvable_gate_that_is_missed_is_not_qualified(tmp_path):
    plan, trial = _trial(tmp_path, _plan([{"name": "five_pct", "min_speedup_pct": 5.0}]), 9_800.0, noise=0.002)
    v = verdict(plan, [trial])
    assert v.status == "not_qualified"
    assert [g.passed for g in gate_results(plan, [trial])] == [False, False]
    assert any(r.startswith("gate five_pct missed at N=1024") for r in v.reasons)


def test_a_gate_over_trials_uses_the_pooled_mde(tmp_path):
    gates = [{"name": "no_regression", "max_regression_pct": 0.5}]
    plan, trial = _trial(tmp_path, _plan(gates, every_trial=False), 10_000.0, noise=0.08)
    v = verdict(plan, [trial])
    assert v.gates == [] and any("(pooled over 1 trial (1 process))" in r and "can't tell" in r for r in v.reasons)


def test_aa_control_is_judged_by_the_same_rule(tmp_path):
    """A noisy A/A is "can't tell" (allowed), never "same" without the data for it."""
    plan, trial = _trial(tmp_path, _plan([{"name": "big", "min_speedup_pct": 10.0}]), 5_000.0, noise=0.08)
    for c in trial.cases:
        assert c.aa.case_class == "cant_tell" and "smallest change" in c.aa.reason
        assert c.aa.mde_pct is not None and c.aa.blocks == 6
    assert verdict(plan, [trial]).status == "qualified"


def test_a_gate_over_a_case_no_trial_measured_is_skipped_not_a_crash(tmp_path):
    """A device whose trials never reached a gate's case has nothing to judge there (a median of
    no trials would raise)."""
    from qualify.evaluate.verdict import judge_gates

    plan, trial = _trial(
        tmp_path, _plan([{"name": "median", "min_speedup_pct": 1.0}], every_trial=False), 5_000.0, noise=0.002
    )
    trial = trial.model_copy(update={"cases": trial.cases[:1]})  # the second case never measured
    judged, undecided = judge_gates(plan, [trial])
    assert [g.case for g in judged] == [trial.cases[0].case] and undecided == []


def test_an_undecided_gate_names_the_trial_or_the_trials_it_pooled():
    from qualify.evaluate.verdict import _undecided

    gate = SpeedGate(name="g", min_speedup_pct=5.0)
    assert "(trial 3)" in _undecided(gate, "N=1", "H200", 3, 1.0, 9.0, 0.9, 1.1, trials=4)
    assert "(pooled over 4 trials (4 processes))" in _undecided(
        gate, "N=1", "H200", None, 1.0, 9.0, None, None, trials=4
    )
