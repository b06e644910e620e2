"""compute-sanitizer output parsing and the gate's rules (CPU: recorded outputs, no tool run)."""

from __future__ import annotations

import pytest

from qualify.errors import ToolError
from qualify.evaluate import sanitizer_output
from qualify.run import sanitizer

CLEAN = """========= COMPUTE-SANITIZER
{"event": "done", "case": "T=640"}
========= LEAK SUMMARY: 0 bytes leaked in 0 allocations
========= ERROR SUMMARY: 0 errors
"""
OOB = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at oob_write(float *, int)+0x70 in planted.cu:7
=========     by thread (255,0,0) in block (3,0,0)
=========     Address 0x7f0000001000 is out of bounds
{"event": "done", "case": "T=640"}
========= ERROR SUMMARY: 1 error
"""
RACE = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at race(int *)+0x50 in planted.cu:12
=========     and Read access at race(int *)+0x90 in planted.cu:13 [4 hazards]
{"event": "done", "case": "T=640"}
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
NO_SUMMARY = "Traceback (most recent call last):\n  ImportError: qualify\n"


@pytest.mark.parametrize(
    "tool, rc, output, status, errors",
    [
        ("memcheck", 0, CLEAN, "clean", 0),
        ("memcheck", sanitizer_output.FINDINGS_EXIT, OOB, "findings", 1),
        ("racecheck", sanitizer_output.FINDINGS_EXIT, RACE, "findings", 1),
        ("memcheck", 0, OOB, "findings", 1),  # errors counted even if the exit code were lost
        ("memcheck", 1, NO_SUMMARY, "error", None),  # a crashed worker is not a clean bill
        ("memcheck", 0, '{"event": "done"}\n', "error", None),  # no summary line: not clean
        ("memcheck", None, "", "timeout", None),
        ("memcheck", 3, '{"event": "fault", "code": 700}\n========= ERROR SUMMARY: 0 errors', "fault", 0),
        ("memcheck", sanitizer_output.FINDINGS_EXIT, OOB + '{"event": "fault", "code": 719}\n', "findings", 1),
    ],
    ids=["clean", "oob", "race", "oob-rc0", "crash", "no-summary", "timeout", "fault", "oob-aborts-kernel"],
)
def test_parse(tool, rc, output, status, errors):
    r = sanitizer_output.parse(tool, "T=640", "base", rc, output, 1.5)
    assert r.status == status
    assert r.errors == errors
    if status == "findings":
        assert r.excerpt and ("Invalid" in r.excerpt[0] or "Race" in r.excerpt[0])
        assert any("SUMMARY" in s for s in r.summary)


def test_missing_sanitizer_is_a_tool_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(sanitizer.Path, "is_file", lambda self: False)
    with pytest.raises(ToolError) as exc:
        sanitizer.find_sanitizer()
    assert exc.value.exit_code == 6


def test_command_runs_the_worker_under_the_tool(tmp_path):
    cmd = sanitizer.command("racecheck", tmp_path / "plan.json", "T=640", "candidate", 0, "/cs")
    assert cmd[:3] == ["/cs", "--tool", "racecheck"]
    assert cmd[cmd.index("--error-exitcode") + 1] == str(sanitizer_output.FINDINGS_EXIT)
    assert cmd[-8:] == [
        "qualify.run.worker",
        str(tmp_path / "plan.json"),
        "--case",
        "T=640",
        "--side",
        "candidate",
        "--device",
        "0",
    ]


def test_engine_runs_declared_checks_once_per_device(tmp_path):
    from test_engine import fake, frozen, small_plan

    from qualify.run.engine import RunOptions, TrialRunner
    from qualify.run.fake import FakeTelemetry

    plan = small_plan()
    plan["acceptance"]["sanitizer"] = [
        {"tool": "memcheck", "cases": ["N=1024", "N=4096"]},
        {"tool": "racecheck", "cases": ["N=1024"]},
    ]
    loaded = frozen(tmp_path, plan)
    calls = []

    def sanitize(tool, case, side, timeout):
        calls.append((tool, case, side))
        out = OOB if (tool, case, side) == ("memcheck", "N=4096", "candidate") else CLEAN
        return sanitizer_output.parse(tool, case, side, 0, out, 0.1)

    opts = RunOptions(record_dir=tmp_path / "record", sanitize=sanitize)
    first = TrialRunner(loaded, fake(), FakeTelemetry(), opts).run()
    second = TrialRunner(loaded, fake(), FakeTelemetry(), opts).run()
    assert len(calls) == 6 and calls[0] == ("memcheck", "N=1024", "base")
    assert [r.status for r in first.sanitizer].count("findings") == 1
    assert second.sanitizer == []  # already checked on this device

    from qualify.evaluate.verdict import verdict

    v = verdict(loaded.plan, [first, second])
    assert v.status == "not_qualified"
    assert any("memcheck at N=4096 (candidate)" in r for r in v.reasons)


# --- when the checks run: beside the preflight and the build, done before anything is timed -------


def _sanitized_plan(tmp_path, **stop):
    from test_engine import frozen, small_plan

    plan = small_plan()
    plan["acceptance"]["sanitizer"] = [{"tool": "memcheck", "cases": ["N=1024", "N=4096"]}]
    if stop:
        plan["stop"] = {**plan.get("stop", {}), **stop}
    return frozen(tmp_path, plan)


def test_every_check_ends_before_the_first_timed_sample_and_overlaps_the_preflight(tmp_path):
    import threading

    from test_engine import fake

    from qualify.run.engine import RunOptions, TrialRunner
    from qualify.run.fake import FakeTelemetry

    loaded = _sanitized_plan(tmp_path)
    device = fake()
    running = threading.Event()
    seen = []

    def sanitize(tool, case, side, timeout):
        running.set()
        seen.append(sum(1 for c in device.calls if c[0] == "sample"))
        return sanitizer_output.parse(tool, case, side, 0, CLEAN, 0.1)

    def preflight(side, ids):
        # the preflight does not end until a check has started: checks that waited for it never would
        assert running.wait(10), "no sanitizer check started while the preflight ran"
        return []

    opts = RunOptions(record_dir=tmp_path / "record", sanitize=sanitize, preflight=preflight)
    trial = TrialRunner(loaded, device, FakeTelemetry(), opts).run()
    assert trial.status == "complete", trial.failures
    assert len(trial.sanitizer) == 4 and {r.status for r in trial.sanitizer} == {"clean"}
    assert seen == [0, 0, 0, 0]  # no sample had been timed when any check ran
    assert any(c[0] == "sample" for c in device.calls)


def test_a_missing_sanitizer_keeps_the_timed_trial_then_exits_6(tmp_path):
    from test_engine import fake

    from qualify.results.store import Record
    from qualify.run.engine import RunOptions, TrialRunner
    from qualify.run.fake import FakeTelemetry

    loaded = _sanitized_plan(tmp_path)

    def sanitize(tool, case, side, timeout):
        raise ToolError("compute-sanitizer not found")

    opts = RunOptions(record_dir=tmp_path / "record", sanitize=sanitize)
    with pytest.raises(ToolError) as exc:
        TrialRunner(loaded, fake(), FakeTelemetry(), opts).run()
    assert exc.value.exit_code == 6
    (kept,) = Record(tmp_path / "record").trials()
    assert kept.status == "complete" and {c.case for c in kept.cases} == {"N=1024", "N=4096"}
    assert all(c.timing for c in kept.cases)  # the samples were taken before the tool was reported


def test_fail_fast_starts_no_check_after_a_finding(tmp_path, monkeypatch):
    from test_engine import fake

    import qualify.run.stages.sanitize as stage
    from qualify.run.engine import RunOptions, TrialRunner
    from qualify.run.fake import FakeTelemetry

    monkeypatch.setattr(stage, "SANITIZER_WORKERS", 1)  # one at a time: the order is the plan's
    loaded = _sanitized_plan(tmp_path, fail_fast=["fidelity", "fault", "sanitizer"])
    calls = []

    def sanitize(tool, case, side, timeout):
        calls.append((case, side))
        out = OOB if len(calls) == 1 else CLEAN
        return sanitizer_output.parse(tool, case, side, 0, out, 0.1)

    opts = RunOptions(record_dir=tmp_path / "record", sanitize=sanitize)
    trial = TrialRunner(loaded, fake(), FakeTelemetry(), opts).run()
    assert [r.status for r in trial.sanitizer][:1] == ["findings"]
    assert calls == [("N=1024", "base")]  # the checks queued behind the finding never started
