"""Each trial in a process of its own (qualify.procs.trials), on the CPU: which workers
start, which codes let the next trial start, the preflight shared through a file, and a record
whose trials came from separate processes judged by the two-level interval."""

from __future__ import annotations

import subprocess

import pytest
from fleet_worker import ProcessWorker, one_trial_on_fake_device
from plans import make_repo, plan_copy

from qualify.errors import most_severe
from qualify.procs.runner import GRACE_S, Primed, spawn_primed
from qualify.procs.runner import run_in_turn as run_each_in_a_process
from qualify.procs.trials import trial_command
from qualify.run.isolation import CaseOutcome, PreflightShared


class Scripted:
    """A worker whose wait() returns a set code (or raises what it is given, once)."""

    def __init__(self, code, raises=None):
        self.code, self.raises, self.waits, self.terminated = code, list(raises or []), [], False

    def wait(self, timeout=None):
        self.waits.append(timeout)
        if self.raises:
            raise self.raises.pop(0)
        return self.code

    def terminate(self):
        self.terminated = True


def test_one_worker_per_wanted_trial_while_each_keeps_its_trial():
    started = []
    codes = run_each_in_a_process(3, lambda n: started.append(n) or Scripted(0))
    assert started == [0, 1, 2] and codes == [0, 0, 0]


@pytest.mark.parametrize("code", [130, 70, 6, 5, 4, 3, 2, 1, 7])
def test_a_worker_that_did_not_keep_its_trial_ends_the_run(code):
    started = []
    codes = run_each_in_a_process(3, lambda n: started.append(n) or Scripted(code if n == 1 else 0))
    assert started == [0, 1] and codes == [0, code]


def test_an_interrupted_parent_gives_the_worker_its_grace_then_ends_as_interrupted():
    patient = Scripted(130, raises=[KeyboardInterrupt()])
    assert run_each_in_a_process(2, lambda n: patient) == [130]
    assert patient.waits == [None, 15.0] and not patient.terminated  # 15 s to keep its trial
    stuck = Scripted(130, raises=[KeyboardInterrupt(), subprocess.TimeoutExpired("qualify", GRACE_S)])
    assert run_each_in_a_process(2, lambda n: stuck) == [130]
    assert stuck.terminated  # asked to stop (SIGTERM), then waited for


@pytest.mark.parametrize(
    "codes, expected",
    [
        ([0, 0], None),
        ([0, 130], 130),
        ([0, 5], 5),
        ([0, 6], 6),
        ([0, 99], 70),
        ([0, -9], 130),  # killed by a signal: its trial is closed as interrupted, and so is the run
        ([], None),
    ],
)
def test_the_code_that_reaches_the_caller_over_the_verdict(codes, expected):
    assert most_severe(codes) == expected


def test_a_trial_process_is_started_from_the_invocation_file_not_the_command_line(tmp_path):
    import sys

    cmd = trial_command(tmp_path / "invocation.pickle")
    assert cmd == [sys.executable, "-m", "qualify", "trial-process", str(tmp_path / "invocation.pickle")]


def test_the_first_trials_preflight_is_reused_by_the_later_processes(tmp_path):
    calls = []

    def preflight(side, cases):
        calls.append(side)
        return [CaseOutcome(case=c, side=side, status="fault" if c == "N=8" else "ok", message="m") for c in cases]

    first = PreflightShared(preflight, tmp_path)
    ran = first("base", ["N=4", "N=8"])
    assert not first.reused and calls == ["base"]
    later = PreflightShared(lambda side, cases: pytest.fail("the preflight ran again"), tmp_path)
    assert later("base", ["N=4", "N=8"]) == ran and later.reused
    fresh = PreflightShared(preflight, tmp_path / "elsewhere")  # another invocation: its own preflight
    (tmp_path / "elsewhere").mkdir()
    fresh("base", ["N=4", "N=8"])
    assert calls == ["base", "base"] and not fresh.reused


def small_plan():
    p = plan_copy()
    p["schedule"] = {"warmup": 1, "samples_per_block": 2, "blocks": 4, "trials": 4, "cache": "cold"}
    p["budget"] = {"max_trials": 4, "max_samples": 16, "max_wall_seconds": 60}
    p["acceptance"]["sanitizer"] = []
    return p


@pytest.mark.slow
def test_trials_from_separate_processes_are_judged_with_the_spread_between_them(tmp_path):
    from qualify.commands.pipeline import rederive
    from qualify.plan.load import load_plan
    from qualify.results.store import Record

    plan = make_repo(tmp_path, small_plan(), freeze=True)
    record = tmp_path / "records" / "tiny"
    workdir = tmp_path / "work"
    workdir.mkdir()
    slower = [0.0, 3.0, -3.0, 6.0]  # what each process fixes moves the candidate by this much
    codes = run_each_in_a_process(
        4, lambda n: ProcessWorker(one_trial_on_fake_device, str(plan), str(record), str(workdir), n, slower[n])
    )
    assert codes == [0, 0, 0, 0]
    trials = Record(record).trials()
    assert [t.status for t in trials] == ["complete"] * 4
    assert not (record / "results.json").exists()  # the trial processes render nothing
    results = rederive(Record(record), load_plan(plan))
    [(device, cases)] = results.pooled.items()
    for cid, pooled in cases.items():
        assert pooled.trials == 4 and pooled.between_pct is not None and pooled.between_pct > 1.0
        own = [c.stats for t in trials for c in t.cases if c.case == cid]
        # the processes' spread widens the interval beyond any one process's own
        assert pooled.ci_high - pooled.ci_low > max(s.ci_high - s.ci_low for s in own)


def test_without_a_workdir_the_preflight_runs_once_per_invocation_and_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    calls = []
    shared = PreflightShared(lambda side, cases: calls.append(side) or [], None)
    assert shared("base", ["N=4"]) == [] and not shared.reused
    assert shared("base", ["N=4"]) == [] and shared.reused
    assert calls == ["base"] and list(tmp_path.iterdir()) == []


def test_both_arms_asked_at_once_are_both_kept_in_the_shared_file(tmp_path):
    import json
    import threading
    import time

    def slow(side, cases):
        time.sleep(0.05)
        return [CaseOutcome(case=c, side=side, status="ok") for c in cases]

    shared = PreflightShared(slow, tmp_path)
    threads = [threading.Thread(target=shared, args=(side, ["N=4"])) for side in ("base", "candidate")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kept = json.loads((tmp_path / "preflight.json").read_text())
    assert sorted(json.loads(k)[0] for k in kept) == ["base", "candidate"]
    later = PreflightShared(lambda side, cases: pytest.fail("ran again"), tmp_path)
    assert [o.side for o in later("candidate", ["N=4"])] == ["candidate"] and later.reused


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b"{not json", "not JSON"),
        (b'{"k": [{"case": "N=4", "side": "base"}]}', "not a list of preflight outcomes"),
        (b'{"k": [{"case": "N=4", "side": "base", "status": "exploded"}]}', "not a list of preflight outcomes"),
        (b'{"k": [{"case": 4, "side": "base", "status": "ok", "extra": 1}]}', "not a list of preflight outcomes"),
        (b"[1, 2]", "not a list of preflight outcomes"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_a_damaged_shared_preflight_file_is_one_error_naming_it(tmp_path, content, fragment):
    """The file trial processes share is an input like any other: damaged, it is refused with exit 2
    and its name, not an internal error (exit 70) in every trial process."""
    from qualify.errors import ExitCode, PlanError
    from qualify.run.isolation import PREFLIGHT_FILE

    (tmp_path / PREFLIGHT_FILE).write_bytes(content)
    with pytest.raises(PlanError) as exc:
        PreflightShared(lambda side, cases: [], tmp_path)
    assert exc.value.exit_code == ExitCode.BAD_INPUT and fragment in exc.value.message
    assert str(tmp_path / PREFLIGHT_FILE) in str(exc.value.file)


def test_a_shared_preflight_file_linked_elsewhere_is_refused(tmp_path):
    from qualify.errors import PlanError
    from qualify.run.isolation import PREFLIGHT_FILE

    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / PREFLIGHT_FILE).symlink_to(outside)
    with pytest.raises(PlanError, match="outside"):
        PreflightShared(lambda side, cases: [], tmp_path / "work")


class Recorder:
    """Workers that log when they start, get their turn, are waited for, cancelled or stopped."""

    def __init__(self, codes):
        self.codes, self.log = codes, []

    def start(self, n):
        self.log.append(("start", n))
        recorder = self

        class Turned:
            def go(self):
                recorder.log.append(("go", n))

            def cancel(self):
                recorder.log.append(("cancel", n))

            def wait(self, timeout=None):
                recorder.log.append(("wait", n))
                return recorder.codes[n]

            def terminate(self):
                recorder.log.append(("terminate", n))

        worker = Turned()
        worker.__class__ = type("PrimedStandIn", (Primed,), dict(vars(Turned)))
        return worker


def test_ahead_the_next_worker_starts_before_the_running_one_is_waited_for():
    rec = Recorder([0, 0, 0])
    assert run_each_in_a_process(3, rec.start, ahead=True) == [0, 0, 0]
    assert rec.log == [
        ("start", 0), ("go", 0), ("start", 1), ("wait", 0),
        ("go", 1), ("start", 2), ("wait", 1),
        ("go", 2), ("wait", 2),
    ]  # fmt: skip


def test_ahead_a_worker_whose_turn_never_comes_is_cancelled_not_run():
    rec = Recorder([0, 5, 0])
    assert run_each_in_a_process(3, rec.start, ahead=True) == [0, 5]
    assert ("go", 2) not in rec.log and rec.log[-1] == ("cancel", 2)


def test_ahead_an_interrupted_parent_cancels_the_waiting_worker_too():
    rec = Recorder([0, 0])
    original = rec.start

    def start(n):
        worker = original(n)
        if n == 0:
            type(worker).wait = lambda self, timeout=None: (_ for _ in ()).throw(KeyboardInterrupt())
        return worker

    with pytest.raises(KeyboardInterrupt):
        run_each_in_a_process(2, start, ahead=True)
    assert rec.log[-1] == ("cancel", 1) and ("go", 1) not in rec.log


CHILD = """
import sys
from pathlib import Path
turn = sys.stdin.buffer.readline()
if turn.startswith(b"go"):
    Path(sys.argv[1]).write_text("ran")
"""


@pytest.mark.parametrize("given_turn", [True, False])
def test_a_primed_process_runs_only_when_given_its_turn(tmp_path, given_turn):
    import sys

    marker = tmp_path / "ran"
    worker = spawn_primed([sys.executable, "-c", CHILD, str(marker)])
    if given_turn:
        worker.go()
        assert worker.wait(timeout=30) == 0
    else:
        worker.cancel()
        assert worker.wait(timeout=30) == 0
    assert marker.exists() == given_turn


def test_the_trial_command_asks_a_primed_process_to_wait(tmp_path):
    import sys

    path = tmp_path / "invocation.pickle"
    assert trial_command(path, primed=True) == [sys.executable, "-m", "qualify", "trial-process", str(path), "--primed"]


@pytest.mark.parametrize("stdin, ran", [("go\n", True), ("", False)])
def test_a_primed_trial_process_runs_its_trial_only_on_go(monkeypatch, stdin, ran):
    from types import SimpleNamespace

    from click.testing import CliRunner

    import qualify.procs.invocation as invocation
    import qualify.procs.trials as trials
    from qualify.cli import cli

    calls = []
    monkeypatch.setattr(invocation, "read", lambda path: "resolved")
    monkeypatch.setattr(trials, "prime", lambda: calls.append("prime"))
    monkeypatch.setattr(trials, "one_trial", lambda r, p: calls.append(r) or SimpleNamespace(trials=[]))
    result = CliRunner().invoke(cli, ["trial-process", "inv", "--primed"], input=stdin)
    assert result.exit_code == 0, result.output
    assert calls == (["prime", "resolved"] if ran else ["prime"])


def test_a_primed_process_that_ignores_its_cancel_is_stopped_and_reaped(monkeypatch):
    import sys

    import qualify.procs.runner as runner

    monkeypatch.setattr(runner, "GRACE_S", 0.5)
    worker = spawn_primed([sys.executable, "-c", "import time; time.sleep(60)"])
    worker.cancel()
    assert worker._process.returncode is not None and worker._process.returncode < 0  # SIGTERM, reaped


def test_a_run_starts_each_trial_process_primed_and_keeps_what_it_did_frozen(monkeypatch, tmp_path):
    import dataclasses

    from qualify.procs import trials

    started = []
    monkeypatch.setattr(trials, "spawn_primed", lambda cmd, keep_fds=(): started.append((cmd, keep_fds)) or "w")
    assert trials.start_trial(tmp_path / "invocation.json", (7,)) == "w"
    assert started == [(trials.trial_command(tmp_path / "invocation.json", primed=True), (7,))]
    assert started[0][0][-1] == "--primed"  # it waits for its turn: run_in_turn starts it ahead
    done = trials.Executed(loaded=None, folder=tmp_path, outcome=None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        done.folder = tmp_path / "elsewhere"


def test_the_renderer_warms_while_the_trial_processes_run_and_before_the_record_is_derived(monkeypatch, tmp_path):
    """The parent's head start: begun before the first trial process ends, finished before the
    record is re-derived (rendering never races its own imports)."""
    import threading
    import time
    from types import SimpleNamespace

    from qualify.procs import trials

    began, finished, order = threading.Event(), threading.Event(), []

    def warm():
        began.set()
        time.sleep(0.3)  # still warming when the trials end: the re-derivation must wait for it
        order.append("warm")
        finished.set()

    def in_turn(wanted, start, ahead):
        assert began.wait(10), "the renderer was not warming while the trials ran"
        order.append("trials")
        return [0]

    def rederive(record, loaded):
        assert finished.is_set()
        order.append("rederive")

    monkeypatch.setattr(trials, "warm_renderer", warm)
    monkeypatch.setattr(trials, "run_in_turn", in_turn)
    monkeypatch.setattr(trials, "rederive", rederive)
    monkeypatch.setattr(trials, "remaining_trials", lambda *a: (1, None))
    monkeypatch.setattr(trials.invocation, "write", lambda resolved, folder: folder / "invocation.json")
    resolved = SimpleNamespace(
        folder=tmp_path / "record", device=lambda: (0, "GPU-x"), loaded=None, trials=None, added=None
    )
    monkeypatch.setattr(trials, "replace", lambda r, **kw: r)
    executed = trials.run_on_device(resolved, start=lambda path, held: None)
    assert order == ["trials", "warm", "rederive"] and executed.codes == (0,)


def test_a_renderer_that_cannot_warm_leaves_the_run_to_report_it_where_it_renders(monkeypatch):
    from qualify.procs import trials

    def broken():
        raise ImportError("no matplotlib")

    trials._quietly(broken)  # no exception: the re-derivation imports it again and reports it
    with pytest.raises(KeyboardInterrupt):
        trials._quietly(lambda: (_ for _ in ()).throw(KeyboardInterrupt()))


def test_warming_the_plots_loads_matplotlib_and_draws_nothing(tmp_path, monkeypatch):
    import subprocess
    import sys

    code = (
        "import sys; from qualify.render import plots; plots.warm(); "
        "print(all(m in sys.modules for m in ('matplotlib.figure', 'matplotlib.backends.backend_svg', "
        "'matplotlib.font_manager')))"
    )
    monkeypatch.chdir(tmp_path)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True" and list(tmp_path.iterdir()) == []


def test_an_added_trial_runs_once_and_only_after_the_planned_ones(tmp_path):
    from types import SimpleNamespace

    from qualify.commands.pipeline import remaining_trials
    from qualify.plan.load import load_plan

    loaded = load_plan(make_repo(tmp_path, small_plan(), freeze=True))  # 4 planned

    def record(*statuses):
        device = SimpleNamespace(uuid="GPU-1")
        trials = [SimpleNamespace(status=s, provenance=SimpleNamespace(device=device)) for s in statuses]
        return SimpleNamespace(trials=lambda: trials)

    assert remaining_trials(loaded, record("complete"), "GPU-1", None) == (3, None)
    wanted, why = remaining_trials(loaded, record("complete", "complete", "complete", "failed"), "GPU-1", None, True)
    assert wanted == 0 and why == "a trial is added only after the 4 planned ones are complete"
    assert remaining_trials(loaded, record(*["complete"] * 4), "GPU-1", None, True) == (1, None)
    assert remaining_trials(loaded, record(*["complete"] * 4), "GPU-1", None) == (
        0,
        "the 4 planned trials on this device are complete",
    )
