"""Fault isolation: preflight workers and how the engine goes on without the faulting case."""

from __future__ import annotations

from pathlib import Path

import fakes

from qualify.run.isolation import CaseOutcome, preflight, worker_command


def scripted(runs):
    """A fake worker runner replaying (events, killed) per call, recording the commands."""
    calls = []

    def run(cmd, startup_timeout, case_timeout):
        calls.append((cmd, startup_timeout, case_timeout))
        events, killed = runs.pop(0)
        return events, killed, "stderr tail"

    return run, calls


def done(case):
    return [{"event": "start", "case": case}, {"event": "done", "case": case}]


def test_all_cases_pass_in_one_worker():
    run, calls = scripted([(done("T=1") + done("T=2"), False)])
    out = preflight(Path("p.json"), "base", ["T=1", "T=2"], run_worker=run)
    assert [o.status for o in out] == ["ok", "ok"] and len(calls) == 1


def test_fault_is_recorded_and_the_next_cases_get_a_fresh_worker():
    run, calls = scripted(
        [
            (
                done("T=1")
                + [
                    {"event": "start", "case": "T=2"},
                    {"event": "fault", "case": "T=2", "code": 700, "message": "illegal address"},
                ],
                False,
            ),
            (done("T=3"), False),
        ]
    )
    out = preflight(Path("p.json"), "candidate", ["T=1", "T=2", "T=3"], run_worker=run)
    assert [(o.case, o.status) for o in out] == [("T=1", "ok"), ("T=2", "fault"), ("T=3", "ok")]
    assert "illegal address" in out[1].message
    assert calls[1][0][-2:] == ["--case", "T=3"]  # the restart covers only what is left


def test_hang_is_a_timeout():
    run, calls = scripted([([{"event": "start", "case": "T=1"}], True), (done("T=2"), False)])
    out = preflight(Path("p.json"), "base", ["T=1", "T=2"], case_timeout=5, run_worker=run)
    assert [(o.case, o.status) for o in out] == [("T=1", "timeout"), ("T=2", "ok")]
    assert calls[0][2] == 5


def test_a_build_error_applies_to_every_case():
    run, _ = scripted([([{"event": "error", "case": None, "message": "NVRTC could not compile"}], False)])
    out = preflight(Path("p.json"), "base", ["T=1", "T=2"], run_worker=run)
    assert [o.status for o in out] == ["error", "error"]


def test_worker_command():
    cmd = worker_command(Path("/x/plan.json"), "base", ["T=1", "T=2"], 1)
    assert cmd[1:4] == ["-m", "qualify.run.worker", "/x/plan.json"]
    assert cmd[-4:] == ["--case", "T=1", "--case", "T=2"]


def test_engine_skips_the_faulting_case_and_keeps_going(tmp_path):
    from test_engine import fake, frozen

    from qualify.evaluate.verdict import verdict
    from qualify.run.engine import RunOptions, TrialRunner
    from qualify.run.fake import FakeTelemetry

    loaded = frozen(tmp_path)

    def pre(side, cases):
        return [CaseOutcome(c, side, "fault" if (side, c) == ("candidate", "N=1024") else "ok", "trap") for c in cases]

    opts = RunOptions(record_dir=tmp_path / "record", preflight=pre)
    trial = TrialRunner(loaded, fake(fakes.axpy), FakeTelemetry(), opts).run()
    assert trial.status == "failed"
    assert [c.case for c in trial.cases] == ["N=4096"]  # the other case was still measured
    assert trial.failures[0].kind == "fault" and trial.failures[0].side == "candidate"
    assert verdict(loaded.plan, [trial]).status == "not_qualified"


def test_real_worker_process_hang_is_killed(tmp_path):
    """_run_worker with a stand-in child: one case starts and never ends."""
    import sys

    from qualify.run.isolation import _run_worker

    script = tmp_path / "child.py"
    script.write_text(
        "import json, time\nprint(json.dumps({'event': 'start', 'case': 'T=1'}), flush=True)\ntime.sleep(60)\n"
    )
    t0 = __import__("time").monotonic()
    events, killed, _ = _run_worker([sys.executable, str(script)], startup_timeout=20, case_timeout=1.0)
    assert killed and events == [{"event": "start", "case": "T=1"}]
    assert __import__("time").monotonic() - t0 < 15


def test_library_arms_pass_their_build_to_the_worker():
    cmd = worker_command(Path("/x/plan.json"), "candidate", ["T=1"], 0, library=Path("/b/libcand.so"))
    assert cmd[cmd.index("--library") + 1] == "/b/libcand.so"
    from qualify.run.sanitizer import command

    cmd = command("memcheck", Path("/x/plan.json"), "T=1", "base", 0, "/cs", library=Path("/b/libbase.so"))
    assert cmd[-2:] == ["--library", "/b/libbase.so"] and cmd.index("qualify.run.worker") < cmd.index("--library")
