"""Durability of what qualify writes: atomic files, the append-only ledger, trials never overwritten.

A crash is simulated by making one step of a write raise (the rename, the write itself, the
fsync) or by leaving on disk what a process killed mid-append leaves: a line without its end.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from qualify import io as qio
from qualify.errors import ExitCode, FrozenInputChanged, PlanError
from qualify.results.store import Record
from test_record import H200, add_trial, new_record


class Crash(Exception):
    """Stands for the process dying at this point."""


def _crash(*args, **kwargs):
    raise Crash


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()


# ---------------------------------------------------------------------------------------------
# atomic_write_bytes


@pytest.mark.parametrize("step", ["replace", "fsync", "write", "fchmod"])
def test_a_crash_mid_write_keeps_the_previous_file_whole(tmp_path, monkeypatch, step):
    path = tmp_path / "results.json"
    qio.atomic_write_bytes(path, b'{"old": true}\n')
    fds = _open_fds()
    if step == "write":
        real_fdopen = os.fdopen

        def fdopen(fd, mode="r", *a, **kw):
            f = real_fdopen(fd, mode, *a, **kw)

            class Half:
                def __getattr__(self, name):
                    return getattr(f, name)

                def __enter__(self):
                    return self

                def __exit__(self, *exc):
                    return f.__exit__(*exc)

                def write(self, data):
                    f.write(data[: len(data) // 2])  # half the bytes reach the temp file, then death
                    raise Crash

            return Half()

        monkeypatch.setattr(qio.os, "fdopen", fdopen)
    else:
        monkeypatch.setattr(qio.os, step, _crash)
    with pytest.raises(Crash):
        qio.atomic_write_bytes(path, b'{"new": true, "padding": "' + b"x" * 100_000 + b'"}\n')
    monkeypatch.undo()
    assert path.read_bytes() == b'{"old": true}\n'
    assert _leftovers(tmp_path) == []
    assert _open_fds() == fds  # the temporary file's descriptor was closed too


def test_a_crash_before_the_first_write_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(qio.os, "replace", _crash)
    with pytest.raises(Crash):
        qio.atomic_write_text(tmp_path / "README.md", "# record\n")
    assert list(tmp_path.iterdir()) == []


def test_the_rename_is_synced_through_its_folder(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        real_fsync(fd)

    monkeypatch.setattr(qio.os, "fsync", fsync)
    qio.atomic_write_bytes(tmp_path / "trial-1.json", b"{}")
    assert synced == [False, True]  # the data, then the folder that holds the new name


def test_written_files_follow_the_umask_not_mkstemps_0600(tmp_path):
    old = os.umask(0o022)
    try:
        qio.atomic_write_bytes(tmp_path / "shared.json", b"{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "shared.json").stat().st_mode) == 0o644


# ---------------------------------------------------------------------------------------------
# the ledger


def test_each_append_is_exactly_one_line(tmp_path):
    record = Record(tmp_path / "rec")
    record.append({"event": "trial_started", "trial": 1, "note": "two\nlines and a \"quote\""})
    record.append({"event": "trial_ended", "trial": 1, "status": "complete"})
    raw = record.ledger_path.read_bytes()
    assert raw.count(b"\n") == 2 and raw.endswith(b"\n")
    assert [e["event"] for e in record.ledger()] == ["trial_started", "trial_ended"]
    assert record.ledger()[0]["note"] == "two\nlines and a \"quote\""


def test_a_line_cut_short_by_a_crash_is_refused_naming_the_file_and_line(tmp_path):
    record = Record(tmp_path / "rec")
    record.append({"event": "trial_started", "trial": 1})
    record.append({"event": "trial_ended", "trial": 1, "status": "complete"})
    full = json.dumps({"event": "trial_started", "trial": 2, "device_uuid": "GPU-1"}) + "\n"
    with open(record.ledger_path, "a", encoding="utf-8") as f:
        f.write(full[: len(full) // 2])  # the process died inside write()
    with pytest.raises(PlanError) as info:
        record.ledger()
    assert info.value.file == str(record.ledger_path)
    assert "line 3 " in info.value.message
    assert info.value.exit_code == ExitCode.BAD_INPUT
    # and what reads the ledger to plan the next trial refuses it too, rather than count wrong
    with pytest.raises(PlanError):
        record.next_trial_index()


def test_no_event_is_glued_onto_a_line_cut_short(tmp_path):
    record = Record(tmp_path / "rec")
    record.append({"event": "trial_started", "trial": 1})
    with open(record.ledger_path, "a", encoding="utf-8") as f:
        f.write('{"event": "trial_ended", "tr')
    before = record.ledger_path.read_bytes()
    with pytest.raises(PlanError) as info:
        record.append({"event": "trial_ended", "trial": 1, "status": "interrupted"})
    assert info.value.file == str(record.ledger_path)
    assert record.ledger_path.read_bytes() == before


def test_a_failed_append_does_not_claim_success(tmp_path, monkeypatch):
    record = Record(tmp_path / "rec")
    record.append({"event": "trial_started", "trial": 1})
    monkeypatch.setattr("qualify.results.store.os.fsync", _crash)
    with pytest.raises(Crash):
        record.append({"event": "trial_ended", "trial": 1, "status": "complete"})


def test_a_dangling_trial_is_closed_as_interrupted_not_dropped(tmp_path):
    record = Record(tmp_path / "rec")
    record.append({"event": "trial_started", "trial": 1, "device_uuid": "GPU-1", "digest": "d"})
    assert record.close_dangling() == [1]
    assert [(t.index, t.status) for t in record.trials_in_ledger()] == [(1, "interrupted")]
    assert record.close_dangling() == []


# ---------------------------------------------------------------------------------------------
# trials are never overwritten


def test_write_trial_refuses_to_overwrite_with_exit_3(tmp_path):
    record, plan, lock = new_record(tmp_path / "rec")
    trial = add_trial(record, lock, H200, 1)
    path = record.trial_path(trial.index)
    before = path.read_bytes()
    forged = trial.model_copy(update={"status": "failed"})
    with pytest.raises(FrozenInputChanged) as info:
        record.write_trial(forged)
    assert info.value.exit_code == ExitCode.FROZEN == 3
    assert info.value.file == str(path)
    assert path.read_bytes() == before
    assert _leftovers(path.parent) == []
