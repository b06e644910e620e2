"""The machine term (qualify.evaluate.machines): records from several machines of one GPU model
state the spread between machines beside the within-machine interval, and the verdict over machines
uses it."""

from __future__ import annotations

import json
import math

import fakes
import pytest
from plans import make_repo
from test_engine import small_plan

from qualify.cli import main
from qualify.commands.pipeline import load_frozen, run_plan
from qualify.evaluate.machines import machine_term
from qualify.results.model import PooledStats
from qualify.run.fake import FakeDevice, FakeTelemetry


def pooled(delta_pct: float, half_pct: float, df: float = 10.0) -> PooledStats:
    ratio = 1 + delta_pct / 100
    return PooledStats(
        ratio=ratio,
        ci_low=ratio * math.exp(-half_pct / 100),
        ci_high=ratio * math.exp(half_pct / 100),
        delta_pct=delta_pct,
        case_class="faster",
        reason="r",
        trials=2,
        df=df,
        within_pct=0.1,
        between_pct=0.0,
        mde_pct=0.3,
    )


def test_machines_that_agree_add_no_between_part():
    term = machine_term({"a": pooled(-2.0, 0.4), "b": pooled(-2.0, 0.4)})
    assert term is not None and term.between_pct == 0.0
    assert term.machines == 2 and term.delta_pct == pytest.approx(-2.0)


def test_machines_that_disagree_widen_the_interval_beyond_each_machines():
    # issue 34's vecload 1 Mi: −1.90 % [−2.30, −1.50] on one H200, −2.86 % and −2.93 % on two others
    per = {"a": pooled(-1.90, 0.4), "b": pooled(-2.86, 0.5), "c": pooled(-2.93, 0.5)}
    term = machine_term(per)
    assert term is not None and term.between_pct > 0.3
    width = math.log(term.ci_high) - math.log(term.ci_low)
    assert all(width > math.log(s.ci_high) - math.log(s.ci_low) for s in per.values())
    assert term.ci_low < min(s.ci_low for s in per.values()) and term.ci_high > max(s.ci_high for s in per.values())
    assert term.per_machine_delta_pct == {"a": -1.90, "b": -2.86, "c": -2.93}


def test_one_machine_or_a_machine_without_an_interval_has_no_term():
    assert machine_term({"a": pooled(-2.0, 0.4)}) is None
    bare = pooled(-2.0, 0.4).model_copy(update={"ci_low": None, "ci_high": None, "df": None})
    assert machine_term({"a": pooled(-2.0, 0.4), "b": bare}) is None


def _plan():
    plan = small_plan()
    plan["acceptance"]["gates"] = [{"name": "faster", "min_speedup_pct": 1.0, "every_trial": False}]
    plan["budget"]["max_trials"] = 4
    return plan


def _two_machines(tmp_path, cand_ns=(8_000.0, 9_850.0)):
    path = make_repo(tmp_path, _plan())
    with pytest.raises(SystemExit):
        main(["plan", "freeze", str(path)])
    loaded = load_frozen(path)
    record = tmp_path / "records" / "tiny"
    outcome = None
    for n, cand in enumerate(cand_ns):
        device = FakeDevice({"axpy": fakes.axpy}, durations={"base": 10_000.0, "candidate": cand}, seed=n)
        device.info = device.info.model_copy(
            update={"uuid": f"GPU-{n}{n}{n}{n}{n}{n}{n}{n}-0000-0000-0000-000000000000"}
        )
        outcome = run_plan(loaded, record, lambda d=device: d, lambda u: FakeTelemetry())
    return outcome.results, record


def test_a_two_machine_record_states_the_term_and_the_verdict_uses_it(tmp_path, capsys):
    results, record = _two_machines(tmp_path)
    [model] = results.machines
    assert model == "NVIDIA H200 (fake) over 2 machines"
    term = results.machines[model]["N=4096"]
    assert term.machines == 2 and term.between_pct > 1.0
    # each machine alone passes the gate; over machines the spread leaves it undecided
    per_device = [g for g in results.verdict.gates if "over" not in g.device]
    assert per_device and all(g.passed for g in per_device)
    assert results.verdict.status == "incomplete"
    assert any("over 2 machines" in r and "can't tell" in r for r in results.verdict.reasons), results.verdict.reasons
    on_disk = json.loads((record / "results.json").read_text())
    assert on_disk["machines"][model]["N=4096"]["between_pct"] == pytest.approx(term.between_pct)
    with pytest.raises(SystemExit) as exc:
        main(["report", "--check", str(record)])
    assert exc.value.code in (0, 7), capsys.readouterr().err


def test_machines_that_agree_pass_over_machines_too(tmp_path):
    results, _ = _two_machines(tmp_path, cand_ns=(8_000.0, 8_000.0))
    over = [g for g in results.verdict.gates if "over 2 machines" in g.device]
    assert over and all(g.passed for g in over)
    assert results.verdict.status == "qualified", results.verdict.reasons


def test_a_one_machine_record_has_no_machines_field(tmp_path):
    results, record = _two_machines(tmp_path, cand_ns=(8_000.0,))
    assert results.machines == {}
    assert "machines" not in json.loads((record / "results.json").read_text())


def test_the_readme_states_the_spread_between_machines_beside_each_machine(tmp_path):
    results, record = _two_machines(tmp_path)
    readme = (record / "README.md").read_text()
    assert "## Results on NVIDIA H200 (fake) over 2 machines" in readme
    term = results.machines["NVIDIA H200 (fake) over 2 machines"]["N=4096"]
    row = next(line for line in readme.splitlines() if line.startswith("| N=4096 | 2 |") and "GPU-" in line)
    assert f"{term.between_pct:.2f} %" in row and f"{term.within_pct:.2f} %" in row
