"""SIGINT and SIGTERM during a run: the trial is kept as interrupted, the ledger stays consistent,
the exit code is 130, and the next run follows the budget rules."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from plans import make_repo
from test_engine import small_plan

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent(
    """
    import sys, time
    sys.path[:0] = [{tests!r}]
    import fakes
    from qualify.cli import terminate_as_interrupt
    from qualify.errors import ExitCode
    from qualify.commands.pipeline import exit_code, load_frozen, run_plan
    from qualify.run.fake import FakeDevice, FakeTelemetry

    def slow(memory, args, kernel):
        time.sleep(0.002)
        fakes.axpy(memory, args, kernel)

    terminate_as_interrupt()
    outcome = run_plan(load_frozen({plan!r}), {record!r}, lambda: FakeDevice({{"axpy": slow}}),
                       lambda uuid: FakeTelemetry())
    interrupted = any(t.status == "interrupted" for t in outcome.trials)
    print("STATUSES", [t.status for t in outcome.trials], flush=True)
    sys.exit(exit_code(outcome.results, interrupted))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_mid_run_keeps_the_trial(tmp_path, signum):
    from qualify.cli import main

    plan = small_plan()
    plan["schedule"].update(samples_per_block=20, blocks=20)
    plan["budget"].update(max_samples=800)
    path = make_repo(tmp_path, plan)
    with pytest.raises(SystemExit):
        main(["plan", "freeze", str(path)])
    record = tmp_path / "record"
    script = SCRIPT.format(tests=str(ROOT / "tests"), plan=str(path), record=str(record))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    ledger = record / "ledger.jsonl"
    # the run's own events, not a deadline: however long a loaded machine takes to start Python,
    # the signal goes after the trial started (the run exiting first fails the test, with its output)
    while not (ledger.exists() and "trial_started" in ledger.read_text()):
        if proc.poll() is not None:
            pytest.fail(f"the run ended before its first trial started: {proc.communicate()}")
        time.sleep(0.05)
    time.sleep(1.0)  # into the first trial's samples: 800 of at least 2 ms each take longer than this
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=900)  # a hang guard only: the interrupted run still writes its record
    assert proc.returncode == 130, (out, err)
    assert "STATUSES ['interrupted']" in out
    events = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [(e["event"], e.get("status")) for e in events] == [("trial_started", None), ("trial_ended", "interrupted")]
    from qualify.results.samples import load

    arrays = load(record / "trials" / "trial-1.npz")
    assert arrays["N=1024/base/ns"].size > 0  # every sample taken before the signal is kept
    results = json.loads((record / "results.json").read_text())
    assert results["verdict"]["status"] == "incomplete"
    # the next run follows the budget: the interrupted trial counts (max_trials 3)
    from test_engine import fake

    from qualify.commands.pipeline import load_frozen, run_plan
    from qualify.run.fake import FakeTelemetry

    again = run_plan(load_frozen(path), record, lambda: fake(), lambda u: FakeTelemetry())
    assert [t.index for t in again.trials] == [2, 3]
    assert again.results.verdict.status == "incomplete"  # one interrupted trial stays on the record
