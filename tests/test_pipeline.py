"""`qualify run`'s pipeline end to end on the fake device: plan → trials → record → report --check."""

from __future__ import annotations

import json

import fakes
import pytest
from plans import make_repo
from test_engine import small_plan

from qualify.cli import main
from qualify.commands.pipeline import exit_code, load_frozen, run_plan
from qualify.errors import ExitCode, FrozenInputChanged
from qualify.run.fake import FakeDevice, FakeTelemetry


def _run(tmp_path, plan, trials=None, kernel=fakes.axpy, cand_ns=8_000.0):
    path = make_repo(tmp_path, plan)
    with pytest.raises(SystemExit):
        main(["plan", "freeze", str(path)])
    loaded = load_frozen(path)
    device = FakeDevice({"axpy": kernel}, durations={"base": 10_000.0, "candidate": cand_ns})
    record = tmp_path / "records" / "tiny"
    return run_plan(loaded, record, lambda: device, lambda uuid: FakeTelemetry(), trials=trials), record


def report(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["report", *argv])
    return exc.value.code, capsys.readouterr()


def test_qualified_record_checks_and_re_renders(tmp_path, capsys):
    outcome, record = _run(tmp_path, small_plan())
    assert [t.status for t in outcome.trials] == ["complete", "complete"]
    assert outcome.results.verdict.status == "qualified", outcome.results.verdict.reasons
    assert exit_code(outcome.results) == ExitCode.QUALIFIED
    readme = (record / "README.md").read_text()
    assert "Verdict: QUALIFIED" in "\n".join(readme.splitlines()[:4])
    code, out = report(["--check", str(record)], capsys)
    assert code == 0, out.err
    code, _ = report([str(record)], capsys)
    assert code == 0


def test_planned_trials_complete_means_no_extra_run(tmp_path):
    outcome, record = _run(tmp_path, small_plan())
    path = tmp_path / "protocols" / "tiny" / "plan.json"
    again = run_plan(load_frozen(path), record, lambda: FakeDevice({"axpy": fakes.axpy}), lambda uuid: FakeTelemetry())
    assert again.trials == [] and "complete" in again.skipped


def test_slower_candidate_is_not_qualified_with_the_missed_gate_first(tmp_path):
    outcome, record = _run(tmp_path, small_plan(), cand_ns=11_000.0)
    v = outcome.results.verdict
    assert v.status == "not_qualified"
    assert exit_code(outcome.results) == ExitCode.NOT_QUALIFIED
    assert v.reasons[0].startswith("gate faster missed at N=4096")
    readme = (record / "README.md").read_text()
    assert readme.index("gate faster missed") < readme.index("## ")  # the verdict comes first


def test_one_trial_of_two_is_incomplete(tmp_path):
    outcome, _ = _run(tmp_path, small_plan(), trials=1)
    assert outcome.results.verdict.status == "incomplete"
    assert exit_code(outcome.results) == ExitCode.INCOMPLETE


def test_edited_readme_fails_the_check(tmp_path, capsys):
    _, record = _run(tmp_path, small_plan())
    readme = record / "README.md"
    text = readme.read_text()
    import re

    edited = re.sub(r"(\d+\.\d+) µs", lambda m: f"{float(m.group(1)) * 0.9:.3f} µs", text, count=1)
    assert edited != text
    readme.write_text(edited)
    code, out = report(["--check", str(record)], capsys)
    assert code == 2
    assert "README.md" in out.err


def test_unfrozen_plan_is_refused(tmp_path, capsys):
    path = make_repo(tmp_path, small_plan())
    with pytest.raises(FrozenInputChanged, match="not frozen"):
        load_frozen(path)
    with pytest.raises(SystemExit) as exc:
        main(["run", str(path)])
    assert exc.value.code == 3


def test_run_without_a_gpu_exits_5(tmp_path, capsys):
    path = make_repo(tmp_path, small_plan())
    with pytest.raises(SystemExit):
        main(["plan", "freeze", str(path)])
    with pytest.raises(SystemExit) as exc:
        main(["run", str(path), "--record", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert exc.value.code == 5, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "r" / "ledger.jsonl").exists()  # nothing half-written


def test_a_build_error_mid_run_still_updates_the_record_then_is_reported(tmp_path):
    from qualify.errors import BuildError
    from qualify.run.fake import FakeDevice, FakeTelemetry

    class BuildFails(FakeDevice):
        def load_kernel(self, label, compiled, dynamic_shared_bytes):
            raise BuildError("module rejected by the driver")

    path = make_repo(tmp_path, small_plan())
    with pytest.raises(SystemExit):
        main(["plan", "freeze", str(path)])
    record = tmp_path / "records" / "tiny"
    with pytest.raises(BuildError):
        run_plan(load_frozen(path), record, lambda: BuildFails({"axpy": fakes.axpy}), lambda u: FakeTelemetry())
    results = json.loads((record / "results.json").read_text())
    assert [t["status"] for t in results["trials"]] == ["failed"]
    assert results["verdict"]["status"] == "incomplete"
    assert (record / "README.md").exists()


def test_a_refused_device_leaves_no_record(tmp_path):
    from qualify.errors import DeviceError
    from qualify.run.fake import FakeDevice, FakeTelemetry

    path = make_repo(tmp_path, small_plan())
    with pytest.raises(SystemExit):
        main(["plan", "freeze", str(path)])
    l40 = FakeDevice({"axpy": fakes.axpy})
    l40.info = l40.info.model_copy(update={"name": "NVIDIA L40S", "compute_capability": "8.9", "arch": "sm_89"})
    with pytest.raises(DeviceError):
        run_plan(load_frozen(path), tmp_path / "records" / "tiny", lambda: l40, lambda u: FakeTelemetry())
    assert not (tmp_path / "records" / "tiny").exists()
