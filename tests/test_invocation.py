"""`run` and `compare` resolve their invocation once (qualify.procs.invocation): the trial processes
read it instead of the command line, so one trial loads the plan, binds and checks the libraries
once, and opens the device once (the parent only identifies it). Counted through the whole CLI,
parent and trial process alike, with the trial process run in this process."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from collections import Counter

import pytest
from test_compare import build, frozen_plan

import qualify.commands.pipeline as pipeline
import qualify.plan.load as plan_load
import qualify.run.device as device_module
import qualify.run.isolation as isolation
import qualify.run.telemetry as telemetry
from qualify.cli import main
from qualify.errors import VERDICTS, DeviceError, ToolError
from qualify.procs import invocation
from qualify.results.store import Record
from qualify.run.fake import FAKE_INFO, FakeDevice, FakeTelemetry
from qualify.run.isolation import CaseOutcome

REAL_POPEN = subprocess.Popen


class InProcess:
    """A `python -m qualify …` child run here, by the CLI's own entry point, to its exit code.
    A primed trial process (`--primed`) runs only when its parent gives it its turn (`Primed.go`
    writes "go" to its stdin and closes it); cancelled, it never runs and exits 0, as the real one."""

    def __init__(self, args: list[str], ran: list[list[str]]):
        self.args, self.ran, self.returncode = args, ran, 0
        if "--primed" in args:
            self.stdin = _Turn(self)
        else:
            self.stdin = None
            self._run()

    def _run(self) -> None:
        args = [a for a in self.args if a != "--primed"]
        self.ran.append(args)
        try:
            main(args)
            self.returncode = 0
        except SystemExit as exc:
            self.returncode = exc.code if isinstance(exc.code, int) else 1

    def wait(self, timeout=None) -> int:
        return self.returncode

    def terminate(self) -> None:
        pass


class _Turn:
    """The primed child's stdin: what the parent writes decides, on close, whether it runs."""

    def __init__(self, child: InProcess):
        self.child, self.sent, self.closed = child, b"", False

    def write(self, data: bytes) -> None:
        self.sent += data

    def close(self) -> None:
        self.closed = True
        if self.sent.startswith(b"go"):
            self.child._run()


def children_in_process(monkeypatch) -> list[list[str]]:
    """Every `python -m qualify …` child runs in this process (so a monkeypatch reaches it); any
    other command (the ABI check's child, a C compiler) is a real process. Returns the arguments
    of the children that ran (a primed child cancelled before its turn never does)."""
    children: list[list[str]] = []

    def popen(cmd, *args, **kwargs):
        if list(cmd[1:3]) == ["-m", "qualify"]:
            return InProcess(list(cmd[3:]), children)
        return REAL_POPEN(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", popen)
    return children


def counted(monkeypatch, counts: Counter, module, name: str, what: str) -> None:
    real = getattr(module, name)

    def wrapper(*args, **kwargs):
        counts[what] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)


@pytest.fixture
def gpu_free(monkeypatch):
    """The device floor on the CPU: a fake device, no NVML, no preflight workers; every `python -m
    qualify` child runs in this process. Returns what was counted."""
    counts: Counter = Counter()

    def open_device(ordinal: int = 0):
        counts["device opened"] += 1
        return FakeDevice({})

    def identify(ordinal: int) -> str:
        counts["device identified"] += 1
        return FAKE_INFO.uuid

    children = children_in_process(monkeypatch)
    monkeypatch.setattr(device_module, "CudaDevice", open_device)
    monkeypatch.setattr(device_module, "device_uuid", identify, raising=False)
    monkeypatch.setattr(telemetry, "Telemetry", lambda uuid: FakeTelemetry())
    monkeypatch.setattr(isolation, "preflight", lambda plan, side, cases, *a, **k: [])
    counted(monkeypatch, counts, plan_load, "read_plan_json", "plan loaded")
    counted(monkeypatch, counts, pipeline, "bind_libraries", "libraries bound")
    counted(monkeypatch, counts, pipeline, "check_libraries", "libraries checked")
    return counts, children


def test_one_trial_of_compare_resolves_each_thing_once(tmp_path, gpu_free):
    """Before the invocation: plan loaded 2, libraries bound 3 and checked 2, device opened 2."""
    counts, children = gpu_free
    base, cand = build(tmp_path, "v1"), build(tmp_path, "v2")
    plan = frozen_plan(tmp_path, trials=1)
    counts.clear()
    with pytest.raises(SystemExit) as done:
        main(["compare", str(base), str(cand), "--plan", str(plan), "--record", str(tmp_path / "rec")])
    assert int(done.value.code) in VERDICTS  # the record's verdict: no process ended badly
    assert [t.status for t in Record(tmp_path / "rec").trials()] == ["complete"]
    assert len(children) == 1 and children[0][0] == "trial-process"  # the one trial, in its own process
    assert counts == {
        "plan loaded": 1,
        "libraries bound": 1,
        "libraries checked": 1,
        "device identified": 1,  # the parent: which GPU, no context
        "device opened": 1,  # the trial process
    }


def test_each_further_trial_opens_the_device_and_nothing_else(tmp_path, gpu_free):
    counts, children = gpu_free
    base, cand = build(tmp_path, "v1"), build(tmp_path, "v2")
    plan = frozen_plan(tmp_path, trials=2)
    counts.clear()
    with pytest.raises(SystemExit) as done:
        main(["compare", str(base), str(cand), "--plan", str(plan), "--record", str(tmp_path / "rec")])
    assert int(done.value.code) in VERDICTS
    assert [c[0] for c in children] == ["trial-process"] * 2
    assert counts["device opened"] == 2 and counts["plan loaded"] == 1 and counts["libraries bound"] == 1


def test_a_trial_process_runs_the_libraries_its_parent_bound(tmp_path, gpu_free, monkeypatch):
    """The trial records the builds the parent bound, and the command line the user typed (not
    the one its parent started it with)."""
    _, children = gpu_free
    base, cand = build(tmp_path, "v1"), build(tmp_path, "v2")
    plan = frozen_plan(tmp_path, trials=1)
    typed = ["compare", str(base), str(cand), "--plan", str(plan), "--record", str(tmp_path / "rec")]
    monkeypatch.setattr(sys, "argv", ["qualify", *typed])
    with pytest.raises(SystemExit):
        main(typed)
    (trial,) = Record(tmp_path / "rec").trials()
    assert trial.libraries["base"].path == str(base) and trial.libraries["candidate"].path == str(cand)
    assert trial.provenance.command[1:] == typed and children[0][0] == "trial-process"


def test_the_invocation_file_holds_only_an_invocation(tmp_path):
    """More hostile files in tests/test_invocation_file.py."""
    bad = tmp_path / invocation.FILE
    bad.write_text(json.dumps({"plan": "p.json"}))
    with pytest.raises(ToolError, match="not a version-1 invocation"):
        invocation.read(bad)
    bad.write_bytes(pickle.dumps({"plan": "p.json"}))  # the format before: never unpickled
    with pytest.raises(ToolError, match="cannot read the invocation"):
        invocation.read(bad)
    bad.write_text('{"invocation_version": 1, "plan"')
    with pytest.raises(ToolError, match="not an invocation: invalid JSON"):
        invocation.read(bad)
    with pytest.raises(ToolError, match="cannot read the invocation"):
        invocation.read(tmp_path / "missing.json")


def test_an_invocation_in_a_folder_others_can_write_to_is_refused(tmp_path, gpu_free):
    plan = frozen_plan(tmp_path, trials=1)
    folder = tmp_path / "shared"
    folder.mkdir()
    path = invocation.write(invocation.resolve(plan, None, False, None, None, []), folder)
    folder.chmod(0o777)
    with pytest.raises(ToolError, match="not a folder only this user can write to"):
        invocation.read(path)
    folder.chmod(0o700)
    link = folder / "link.json"
    link.symlink_to(path)
    with pytest.raises(ToolError, match="not a file of this user's"):
        invocation.read(link)
    assert invocation.read(path).loaded.digest  # the same file, private: read


def test_an_invocation_is_written_once_into_its_folder(tmp_path, gpu_free):
    plan = frozen_plan(tmp_path, trials=1)
    resolved = invocation.resolve(plan, None, False, None, None, ["run", str(plan)])
    path = invocation.write(resolved, tmp_path)
    assert invocation.read(path) == resolved
    with pytest.raises(FileExistsError):  # never over a file already there
        invocation.write(resolved, tmp_path)


def test_a_trial_process_on_another_gpu_than_its_parent_identified_is_refused(tmp_path, gpu_free):
    plan = frozen_plan(tmp_path, trials=1)
    resolved = invocation.resolve(plan, None, False, None, None, ["run", str(plan)]).on_device(0)
    resolved.check_device(FAKE_INFO.uuid)
    with pytest.raises(DeviceError, match="in this trial process"):
        resolved.check_device("GPU-00000000-0000-0000-0000-000000000001")


def test_the_preflight_of_a_trial_process_loads_the_side_its_parent_bound(tmp_path, gpu_free, monkeypatch):
    """Which .so a side uses is `LoadedPlan.library`: the preflight worker is given the bound build."""
    asked = []

    def preflight(plan, side, cases, ordinal, library=None):
        asked.append((side, library))
        return [CaseOutcome(c, side, "ok") for c in cases]

    monkeypatch.setattr(isolation, "preflight", preflight)
    base, cand = build(tmp_path, "v1"), build(tmp_path, "v2")
    plan = frozen_plan(tmp_path, trials=1)
    with pytest.raises(SystemExit):
        main(["compare", str(base), str(cand), "--plan", str(plan), "--record", str(tmp_path / "rec")])
    assert sorted(asked) == [("base", base), ("candidate", cand)]


def test_the_trial_command_names_this_interpreter():
    from qualify.procs.trials import trial_command

    assert trial_command("x")[:4] == [sys.executable, "-m", "qualify", "trial-process"]


def _quiet_progress(total):
    import contextlib

    return contextlib.nullcontext(lambda n, what: None)


def test_one_trial_refuses_another_gpu_and_lets_its_context_go(tmp_path, gpu_free, monkeypatch):
    """The trial process's own device against the one its parent identified: refused before any
    trial, and the context it opened is closed (not left retained by a process that ends)."""
    from qualify.procs import trials

    closed = []

    class Elsewhere(FakeDevice):
        def close(self):
            closed.append(True)
            super().close()

    other = FAKE_INFO.model_copy(update={"uuid": "GPU-00000000-0000-0000-0000-000000000001"})
    monkeypatch.setattr(device_module, "CudaDevice", lambda ordinal=0: Elsewhere({}, info=other))
    monkeypatch.setattr(trials, "run_plan", lambda *a, **k: pytest.fail("a trial ran on the wrong GPU"))
    plan = frozen_plan(tmp_path, trials=1)
    resolved = invocation.resolve(plan, None, False, None, None, ["run", str(plan)]).on_device(0)
    with pytest.raises(DeviceError, match="in this trial process"):
        trials.one_trial(resolved, _quiet_progress)
    assert closed == [True]


def test_one_trial_hands_the_sanitizer_and_the_preflight_their_arguments_in_order(tmp_path, gpu_free, monkeypatch):
    import qualify.run.sanitizer as sanitizer
    from qualify.commands.pipeline import RunOutcome
    from qualify.procs import trials

    given = {}
    monkeypatch.setattr(trials, "run_plan", lambda *a, **k: given.update(k) or RunOutcome([], None))
    checks, workers = [], []
    monkeypatch.setattr(sanitizer, "run_check", lambda *a, **k: checks.append((a, k)))
    monkeypatch.setattr(isolation, "preflight", lambda *a, **k: workers.append((a, k)))
    plan = frozen_plan(tmp_path, trials=1)
    resolved = invocation.resolve(plan, None, False, None, None, ["run", str(plan)]).on_device(0)
    trials.one_trial(resolved, _quiet_progress)
    given["sanitize"]("memcheck", "N=1", "candidate", 30.0)
    given["preflight"]("base", ["N=1"])
    path = resolved.loaded.path
    assert checks == [(("memcheck", path, "N=1", "candidate", 30.0, 0), {"library": resolved.library("candidate")})]
    assert workers == [((path, "base", ["N=1"], 0), {"library": resolved.library("base")})]
    assert given["trials"] == 1 and given["render"] is False and given["bound"] is True


def test_the_trial_processes_hold_the_records_ownership_and_the_run_says_what_they_did(tmp_path, gpu_free, monkeypatch):
    """run_on_device: each trial process inherits the descriptor that owns the device's trials
    in the record, and the outcome names the folder, the new trials and the re-derived results."""
    from qualify.procs import trials
    from qualify.procs.runner import Primed

    plan = frozen_plan(tmp_path, trials=2)
    resolved = invocation.resolve(plan, tmp_path / "rec", False, None, None, ["run", str(plan)]).on_device(0)
    kept = []

    def start(path, keep_fds):
        kept.append(keep_fds)
        return Primed(subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE))

    closed = []
    real_close = Record.close_dead_trials
    monkeypatch.setattr(Record, "close_dead_trials", lambda self: closed.append(1) or real_close(self))
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "ledger.jsonl").write_text("")  # a ledger there: a dead trial process's open trial is closed
    executed = trials.run_on_device(resolved, start)
    assert closed == [1]
    assert len(kept) == 2 and all(len(fds) == 1 and isinstance(fds[0], int) for fds in kept)
    assert executed.folder == tmp_path / "rec" and executed.codes == (0, 0)
    assert executed.outcome.trials == [] and executed.outcome.results is None  # the stand-ins kept no trial
