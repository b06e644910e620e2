"""The record's store: the append-only ledger survives a crash mid-append, and trials are never
overwritten.

A crash is simulated by making the append's fsync raise or by leaving on disk what a process killed
mid-append leaves: a line without its end.
"""

from __future__ import annotations

import json

import pytest
from test_io import Crash, crash, leftovers
from test_record import H200, add_trial, new_record

from qualify.errors import ExitCode, FrozenInputChanged, PlanError
from qualify.results.store import Record

# ---------------------------------------------------------------------------------------------
# the ledger


def test_each_append_is_exactly_one_line(tmp_path):
    record = Record(tmp_path / "rec")
    record.append({"event": "trial_started", "trial": 1, "note": 'two\nlines and a "quote"'})
    record.append({"event": "trial_ended", "trial": 1, "status": "complete"})
    raw = record.ledger_path.read_bytes()
    assert raw.count(b"\n") == 2 and raw.endswith(b"\n")
    assert [e["event"] for e in record.ledger()] == ["trial_started", "trial_ended"]
    assert record.ledger()[0]["note"] == 'two\nlines and a "quote"'


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
    monkeypatch.setattr("qualify.results.store.os.fsync", crash)
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
    assert leftovers(path.parent) == []
