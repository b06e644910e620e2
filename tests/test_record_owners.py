"""One owner per device per record (issue 25 item 9), on the fake device.

A run owns its device's trials in a record (`Record.owned`: an flock on `.owner-<uuid>`, the
file naming the device, pid and host); a second run on that device into that record is refused
naming the owner; a run that dies leaves its trial open, and whoever finds no live owner for
that device closes it as interrupted (the fleet parent at once); `report --check` accepts that,
and an open trial where a crash cannot leave one is still refused.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import select
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path

import pytest
from fleet_worker import ProcessWorker, run_on_fake_device
from plans import make_repo, plan_copy

from qualify.errors import ExitCode
from qualify.procs.fleet import combined_exit_code, run_devices
from qualify.record.assemble import write_record
from qualify.record.check import check_record
from qualify.results.store import DeviceBusy, Record

FAKE_UUID = "GPU-00000001-0000-0000-0000-000000000000"  # fleet_worker's device 1


def small_plan():
    p = plan_copy()
    p["schedule"] = {"warmup": 1, "samples_per_block": 2, "blocks": 2, "trials": 2, "cache": "cold"}
    p["budget"] = {"max_trials": 2, "max_samples": 8, "max_wall_seconds": 60}
    p["acceptance"]["sanitizer"] = []
    return p


def hold_ownership(record: str, uuid: str, conn: Connection) -> None:
    """Another process that owns `uuid` in `record`: it says so on `conn` once it owns it, and holds
    it until the test sends anything or closes its end (EOF)."""
    with Record(Path(record)).owned(uuid):
        conn.send("owned")
        try:
            conn.recv()
        except EOFError:
            pass


@contextmanager
def owned_elsewhere(record: Path, uuid: str) -> Iterator[ProcessWorker]:
    """A spawned process owning `uuid` in `record` for the `with` block. Readiness is an event, not a
    deadline: the test waits for the owner's message or its exit, whichever comes first, however
    long a loaded machine takes to start a Python process (a fixed 60 s wait failed under load)."""
    here, there = multiprocessing.get_context("spawn").Pipe()
    owner = ProcessWorker(hold_ownership, str(record), uuid, there)
    there.close()  # the child holds its own copy: EOF on `here` now means the owner is gone
    try:
        multiprocessing.connection.wait([here, owner.process.sentinel])
        try:
            said = here.recv() if here.poll() else None
        except EOFError:
            said = None
        if said != "owned":
            pytest.fail(f"the owner process exited ({owner.wait()}) before owning {uuid}", pytrace=False)
        yield owner
    finally:
        here.close()  # releases the owner
        owner.wait()


def killed_mid_trial(plan_path: str, record: str, ordinal: int) -> None:
    """A fleet worker whose process is killed (SIGKILL) during its first trial's timing."""
    import fakes

    from qualify.commands.pipeline import run_plan
    from qualify.plan.load import load_plan
    from qualify.run.fake import FAKE_INFO, FakeDevice, FakeTelemetry

    class Dies(FakeDevice):
        def time_samples(self, *args, **kwargs):
            os.kill(os.getpid(), signal.SIGKILL)

    info = FAKE_INFO.model_copy(
        update={"ordinal": ordinal, "uuid": f"GPU-0000000{ordinal}-0000-0000-0000-000000000000"}
    )
    device = Dies({"axpy": fakes.axpy}, durations={"base": 300_000.0, "candidate": 270_000.0}, info=info)
    run_plan(load_plan(plan_path), Path(record), lambda: device, lambda uuid: FakeTelemetry())


def test_a_second_run_on_the_device_is_refused_naming_the_owner(tmp_path):
    plan = make_repo(tmp_path, small_plan(), freeze=True)
    record = tmp_path / "records" / "shared"
    with owned_elsewhere(record, FAKE_UUID) as owner:
        with pytest.raises(DeviceBusy) as info:
            run_on_fake_device(str(plan), str(record), 1)
        line = info.value.one_line()
        assert f"pid {owner.process.pid} on {socket.gethostname()}" in line and FAKE_UUID in line
        assert info.value.exit_code == ExitCode.DEVICE and "\n" not in line
        assert not Record(record).trials_in_ledger()  # refused before any trial started
    run_on_fake_device(str(plan), str(record), 1)  # the owner gone, the device is free again
    assert [t.status for t in Record(record).trials_in_ledger()] == ["complete", "complete"]


@pytest.mark.slow
def test_a_worker_killed_mid_trial_leaves_an_interrupted_trial_the_check_accepts(tmp_path):
    plan = make_repo(tmp_path, small_plan(), freeze=True)
    record = tmp_path / "records" / "shared"

    def start(n: int):
        target = killed_mid_trial if n == 1 else run_on_fake_device
        return ProcessWorker(target, str(plan), str(record), n)

    outcomes = run_devices([0, 1], start)
    assert [(o.ordinal, o.exit_code) for o in outcomes] == [(0, 0), (1, -signal.SIGKILL)]
    assert combined_exit_code(outcomes, verdict_code=0) == ExitCode.INTERRUPTED  # not 70
    rec = Record(record)
    open_trials = [t.index for t in rec.trials_in_ledger() if t.status is None]
    assert len(open_trials) == 1
    assert rec.close_dead_trials() == open_trials  # what the fleet parent does once its workers end
    by_device = {t.device_uuid: t.status for t in rec.trials_in_ledger() if t.device_uuid == FAKE_UUID}
    assert by_device == {FAKE_UUID: "interrupted"}
    with rec.locked():
        write_record(rec, *_plan_and_lock(record))
    assert check_record(record) == []


def test_an_owned_open_trial_is_never_closed_by_another_process(tmp_path):
    record = tmp_path / "rec"
    rec = Record(record)
    rec.append({"event": "trial_started", "trial": 1, "device_uuid": FAKE_UUID, "digest": "d"})
    with owned_elsewhere(record, FAKE_UUID):
        assert rec.close_dead_trials() == []  # the trial is live: its owner runs
    assert rec.close_dead_trials() == [1]


def test_an_open_trial_a_crash_cannot_leave_is_still_refused(tmp_path):
    """Per device, only the last trial may be open; another device's later trials do not excuse it."""
    from qualify.record.evidence import _sequence

    def start(i, uuid):
        return {"event": "trial_started", "trial": i, "device_uuid": uuid, "digest": "d"}

    def end(i):
        return {"event": "trial_ended", "trial": i, "status": "complete"}

    other_device_went_on = [start(1, "GPU-A"), start(2, "GPU-B"), end(2), start(3, "GPU-B"), end(3)]
    assert _sequence(other_device_went_on)[2] == []
    same_device_went_on = [start(1, "GPU-A"), start(2, "GPU-A"), end(2)]
    assert [p.text for p in _sequence(same_device_went_on)[2]] == [
        "ledger.jsonl: trial 1 never ended, yet a later trial started: qualify ends a trial before it starts another"
    ]


def _plan_and_lock(record: Path):
    from qualify.record.assemble import read_record_plan

    return read_record_plan(record)


CLAIM = """
import sys
from pathlib import Path
from qualify.results.store import DeviceBusy, Record
try:
    with Record(Path(sys.argv[1])).owned(sys.argv[2]):
        print("owned")
except DeviceBusy as exc:
    print(exc.one_line())
"""


def test_the_owners_trial_processes_run_under_its_ownership_and_no_one_else(tmp_path):
    """`qualify run` owns the device and starts one process per trial: each runs under its
    parent's ownership. A process the owner did not start (here: one started by that child) is
    refused."""
    import subprocess
    import sys

    record = tmp_path / "rec"
    child = [sys.executable, "-c", CLAIM, str(record), FAKE_UUID]
    with Record(record).owned(FAKE_UUID):
        assert subprocess.run(child, capture_output=True, text=True, timeout=600).stdout.strip() == "owned"
        nested = f"import subprocess, sys; print(subprocess.run({child!r}, capture_output=True, text=True).stdout)"
        out = subprocess.run([sys.executable, "-c", nested], capture_output=True, text=True, timeout=600).stdout
        assert f"pid {os.getpid()} on {socket.gethostname()}" in out and "one run per device per record" in out


KILLED_OWNER = """
import os, subprocess, sys
from pathlib import Path
from qualify.results.store import Record
with Record(Path(sys.argv[1])).owned(sys.argv[2]) as fd:
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    child = subprocess.Popen(sleeper, pass_fds=(fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(child.pid, flush=True)
    os._exit(9)  # the owner dies as SIGKILL kills it: nothing released, its trial process lives on
"""


def test_a_trial_process_that_outlives_its_killed_owner_keeps_the_device_owned(tmp_path):
    import subprocess
    import sys

    record = tmp_path / "rec"
    Record(record).append({"event": "trial_started", "trial": 1, "device_uuid": FAKE_UUID, "digest": "d"})
    done = subprocess.run(
        [sys.executable, "-c", KILLED_OWNER, str(record), FAKE_UUID], capture_output=True, text=True, timeout=600
    )
    orphan = int(done.stdout.split()[0])
    gone = os.pidfd_open(orphan)  # readable once the orphan has exited and its descriptors are closed
    try:
        assert Record(record).has_live_owner(FAKE_UUID)
        assert Record(record).close_dead_trials() == []  # its trial may still be written
    finally:
        os.kill(orphan, signal.SIGKILL)
        select.select([gone], [], [])  # an event, not a deadline: a loaded machine only delays it
        os.close(gone)
    assert not Record(record).has_live_owner(FAKE_UUID)
    assert Record(record).close_dead_trials() == [1]
