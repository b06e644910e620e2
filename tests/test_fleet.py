"""Every GPU of a host at once, on the CPU: parallel workers (processes) sharing one record,
one device failing, and how their exit codes combine."""

from __future__ import annotations

import pytest
from fleet_worker import ProcessWorker, run_on_fake_device
from plans import make_repo, plan_copy

from qualify.errors import ExitCode, UsageError
from qualify.procs.fleet import DeviceOutcome, combined_exit_code, parse_devices, run_devices
from qualify.record.check import check_record
from qualify.results.store import Record


def small_plan():
    p = plan_copy()
    p["schedule"] = {"warmup": 1, "samples_per_block": 2, "blocks": 2, "trials": 2, "cache": "cold"}
    p["budget"] = {"max_trials": 2, "max_samples": 8, "max_wall_seconds": 60}
    p["acceptance"]["sanitizer"] = []
    return p


@pytest.mark.parametrize("text, count, expected", [("all", 3, [0, 1, 2]), ("0,2", 3, [0, 2]), (" 1 ", 2, [1])])
def test_device_lists(text, count, expected):
    assert parse_devices(text, count) == expected


@pytest.mark.parametrize(
    "text, count, message",
    [
        ("all", 0, "no CUDA device"),
        ("0,3", 3, "device 3 requested, 3 present"),
        ("1,1", 2, "given twice"),
        ("x", 2, "not a device ordinal"),
        ("", 2, "not a device ordinal"),
        ("-1", 2, "not a device ordinal"),
    ],
)
def test_device_lists_refused(text, count, message):
    with pytest.raises(UsageError, match=message) as info:
        parse_devices(text, count)
    assert info.value.field == "--devices"


@pytest.mark.slow
def test_three_workers_share_one_record_without_races(tmp_path):
    plan = make_repo(tmp_path, small_plan(), freeze=True)
    record = tmp_path / "records" / "shared"
    outcomes = run_devices([0, 1, 2], lambda n: ProcessWorker(run_on_fake_device, str(plan), str(record), n))
    assert [o.exit_code for o in outcomes] == [0, 0, 0]
    trials = Record(record).trials_in_ledger()
    assert sorted(t.index for t in trials) == list(range(1, 7))  # every index once
    by_device = {}
    for t in trials:
        by_device.setdefault(t.device_uuid, []).append(t.status)
    assert len(by_device) == 3 and all(s == ["complete", "complete"] for s in by_device.values())
    assert check_record(record) == []  # the ledger, trial files and budget agree: no race left a mark
    assert len({t.provenance.device.uuid for t in Record(record).trials()}) == 3


@pytest.mark.slow
def test_a_failing_device_is_its_own_and_the_others_go_on(tmp_path):
    plan = make_repo(tmp_path, small_plan(), freeze=True)
    record = tmp_path / "records" / "shared"
    outcomes = run_devices([0, 1], lambda n: ProcessWorker(run_on_fake_device, str(plan), str(record), n, n == 1))
    assert [(o.ordinal, o.exit_code) for o in outcomes] == [(0, 0), (1, 5)]
    assert {t.status for t in Record(record).trials_in_ledger()} == {"complete"}
    assert combined_exit_code(outcomes, verdict_code=0) == ExitCode.DEVICE


@pytest.mark.parametrize(
    "codes, verdict, expected",
    [
        ([0, 0], 0, 0),
        ([0, 1], 1, 1),
        ([0, 5], 0, 5),
        ([6, 5], 1, 5),
        ([130, 70], 0, 130),
        ([7, 0], 7, 7),
        ([0, 99], 0, 70),
        ([2, 3], 1, 3),
        ([0], None, 7),
    ],
)
def test_the_most_severe_worker_code_wins_over_the_verdict(codes, verdict, expected):
    outcomes = [DeviceOutcome(n, c) for n, c in enumerate(codes)]
    assert combined_exit_code(outcomes, verdict) == expected
