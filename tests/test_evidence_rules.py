"""Rules of `report --check`'s evidence, each on a committed record with one fact changed.

Each test starts from what a committed record holds (its plan, lock, trials and raw samples), on
which the rule finds nothing, changes one fact the way a forger or a stray build would, and asserts
the problem `report --check` then names.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from qualify.plan.load import load_plan
from qualify.record import evidence
from qualify.record.check import load_samples
from qualify.results.model import Failure
from qualify.results.store import Record

RECORDS = Path(__file__).resolve().parents[1] / "records"
LIBRARY_RECORD = RECORDS / "attention-wide-entry"  # both arms are shared libraries
FROZEN = {
    "base": "kernels/attention/build/libattention_base.so",
    "candidate": "kernels/attention/build/libattention_cand.so",
}


@pytest.fixture(scope="module")
def library_record():
    """The library record's plan with each arm naming the library file its lock froze (as a plan
    that gives `library` does): the sha256 of each trial's build is then checked against the lock."""
    plan = load_plan(LIBRARY_RECORD / "plan.json").plan
    arms = plan.arms.model_copy(
        update={side: plan.arm(side).model_copy(update={"library": path}) for side, path in FROZEN.items()}
    )
    trials = Record(LIBRARY_RECORD).trials()
    lock = {"files": {FROZEN[side]: info.sha256 for side, info in trials[0].libraries.items()}}
    return plan.model_copy(update={"arms": arms}), trials, lock


def _with_build(trial, side: str, sha256: str):
    libraries = dict(trial.libraries)
    libraries[side] = libraries[side].model_copy(update={"sha256": sha256})
    return trial.model_copy(update={"libraries": libraries})


def test_builds_the_lock_froze_are_no_problem(library_record):
    plan, trials, lock = library_record
    assert evidence.library_problems(trials, plan, lock) == []


def test_a_library_build_the_lock_never_froze_is_named(library_record):
    plan, trials, lock = library_record
    stray = "ab" * 32
    problems = [
        str(p) for p in evidence.library_problems([_with_build(t, "candidate", stray) for t in trials], plan, lock)
    ]
    assert problems == [
        f"trials/trial-{t.index}.json: libraries.candidate: sha256 {evidence.short_digest(stray)} is not "
        "a build the lock froze"
        for t in trials
    ]


def test_an_unfrozen_build_is_named_even_when_the_plan_gives_no_library_file(library_record):
    """Without `library` in the plan the build is given to `qualify compare`: nothing to freeze."""
    _, trials, lock = library_record
    plan = load_plan(LIBRARY_RECORD / "plan.json").plan
    assert evidence.library_problems([_with_build(t, "base", "cd" * 32) for t in trials], plan, lock) == []


@pytest.fixture(scope="module")
def vecload():
    plan = load_plan(RECORDS / "vecload" / "plan.json").plan
    trial = Record(RECORDS / "vecload").trials()[0]
    arrays = load_samples(RECORDS / "vecload" / trial.samples_file)
    return plan, trial, arrays


def test_the_committed_samples_contradict_nothing(vecload):
    plan, trial, arrays = vecload
    assert evidence.trial_fact_problems(trial, plan, arrays) == []


@pytest.mark.parametrize("beyond", [0, 1])
def test_a_block_index_beyond_the_plans_schedule_is_named(vecload, beyond):
    plan, trial, arrays = vecload
    name = next(n for n in sorted(arrays) if n.endswith("/block"))
    forged = dict(arrays)
    forged[name] = arrays[name].copy()
    forged[name][-1] = plan.schedule.blocks + beyond  # blocks are numbered 0 .. blocks - 1
    problems = evidence.trial_fact_problems(trial, plan, forged)
    assert (
        f"{name}: block {plan.schedule.blocks + beyond}, the plan's schedule.blocks is {plan.schedule.blocks}"
        in problems
    )


def test_the_last_planned_block_is_no_problem(vecload):
    plan, trial, arrays = vecload
    name = next(n for n in sorted(arrays) if n.endswith("/block"))
    assert int(arrays[name].max()) == plan.schedule.blocks - 1
    assert np.all(arrays[name] >= 0)


# -- the ledger against the trial files -----------------------------------------------------------


@pytest.fixture(scope="module")
def ledger():
    folder = RECORDS / "vecload"
    record = Record(folder)
    lock = json.loads((folder / "plan.lock.json").read_text(encoding="utf-8"))
    return record.ledger(), record.trials(), load_plan(folder / "plan.json").plan, lock


def _ledger_lines(events, trials, plan, lock) -> list[str]:
    return [str(p) for p in evidence.ledger_problems(events, trials, plan, lock)]


def test_the_committed_ledger_agrees_with_its_trials(ledger):
    assert _ledger_lines(*ledger) == []


def test_trials_started_out_of_order_are_named(ledger):
    events, trials, plan, lock = ledger
    swapped = [events[2], events[3], events[0], events[1]]
    assert (
        "ledger.jsonl: trials start in the order [2, 1]; qualify numbers them 1, 2, 3… as they start"
        in _ledger_lines(swapped, trials, plan, lock)
    )


def test_a_trial_started_or_ended_twice_or_ended_unstarted_is_named(ledger):
    events, trials, plan, lock = ledger
    assert "ledger.jsonl: event 3 starts trial 1 a second time" in _ledger_lines(
        [events[0], events[1], events[0], *events[2:]], trials, plan, lock
    )
    assert "ledger.jsonl: event 3 ends trial 1 a second time" in _ledger_lines(
        [events[0], events[1], events[1], *events[2:]], trials, plan, lock
    )
    assert "ledger.jsonl: event 1 ends trial 1, which has not started" in _ledger_lines(
        [events[1], events[0], *events[2:]], trials, plan, lock
    )


def test_an_event_qualify_never_writes_is_named(ledger):
    events, trials, plan, lock = ledger
    assert "ledger.jsonl: event 3 is 'trial_paused'; a ledger holds trial_started and trial_ended" in _ledger_lines(
        [*events[:2], {"event": "trial_paused", "trial": 2}, *events[2:]], trials, plan, lock
    )


def test_a_trial_left_open_before_the_next_started_is_named_but_an_open_last_trial_is_not(ledger):
    events, trials, plan, lock = ledger
    assert (
        "ledger.jsonl: trial 1 never ended, yet a later trial started: qualify ends a trial before it starts another"
    ) in _ledger_lines([events[0], *events[2:]], trials, plan, lock)
    assert not [line for line in _ledger_lines(events[:3], trials[:1], plan, lock) if "never ended" in line]


def test_a_trial_file_the_ledger_ended_normally_is_missing(ledger):
    events, trials, plan, lock = ledger
    assert "trials/trial-2.json: missing; the ledger.jsonl ended trial 2 'complete'" in _ledger_lines(
        events, trials[:1], plan, lock
    )


def test_a_trial_status_the_ledger_contradicts_is_named(ledger):
    events, trials, plan, lock = ledger
    failed = trials[1].model_copy(update={"status": "failed"})
    assert "trials/trial-2.json: status 'failed', the ledger.jsonl ended it 'complete'" in _ledger_lines(
        events, [trials[0], failed], plan, lock
    )


def test_a_trial_run_on_another_device_than_the_ledger_says_is_named(ledger):
    events, trials, plan, lock = ledger
    moved = [
        dict(e, device_uuid="GPU-other") if e["event"] == "trial_started" and e["trial"] == 2 else e for e in events
    ]
    lines = _ledger_lines(moved, trials, plan, lock)
    assert (
        f"trials/trial-2.json: ran on {trials[1].provenance.device.uuid} by its file, on GPU-other by the ledger.jsonl"
        in lines
    )


def test_more_complete_trials_than_the_schedule_runs_are_named(ledger):
    events, trials, plan, lock = ledger
    third = trials[1].model_copy(
        update={"index": 3, "started_at": "2026-12-01T23:59:00.000+00:00", "samples_sha256": "0" * 64}
    )
    extra = [*events, {**events[2], "trial": 3}, {**events[3], "trial": 3}]
    uuid = trials[0].provenance.device.uuid
    assert (
        f"trials: 3 complete trials on {uuid}; the plan's schedule.trials is {plan.schedule.trials} "
        "and qualify runs no more unless it says why (a trial's `added`)"
    ) in _ledger_lines(extra, [*trials, third], plan, lock)


def test_a_trial_the_gate_added_after_the_planned_ones_is_no_problem(ledger):
    events, trials, plan, lock = ledger
    third = trials[1].model_copy(
        update={
            "index": 3,
            "started_at": "2026-12-01T23:59:00.000+00:00",
            "samples_sha256": "0" * 64,
            "added": "added by qualify gate: N=1 resolves 3.00%",
        }
    )
    extra = [*events, {**events[2], "trial": 3}, {**events[3], "trial": 3}]
    lines = _ledger_lines(extra, [*trials, third], plan, lock)
    assert not [line for line in lines if "schedule.trials" in line or "added beyond" in line], lines


def test_a_trial_added_before_the_planned_ones_were_complete_is_named(ledger):
    events, trials, plan, lock = ledger
    early = trials[1].model_copy(update={"added": "added by qualify gate: N=1 resolves 3.00%"})
    uuid = trials[0].provenance.device.uuid
    lines = _ledger_lines(events, [trials[0], early], plan, lock)
    assert (
        f"trials/trial-2.json: added beyond the plan's trials after only 1 of its {plan.schedule.trials} "
        f"planned trials were complete on {uuid}"
    ) in lines


def test_a_trial_file_copied_under_another_index_is_named(ledger):
    events, trials, plan, lock = ledger
    copy = trials[0].model_copy(update={"index": 2})
    lines = _ledger_lines(events, [trials[0], copy], plan, lock)
    assert "trials/trial-2.json: same device and start time as trial 1: a copy, not a trial" in lines
    assert "trials/trial-2.json: same raw samples as trial 1: a copy, not a trial" in lines


# -- one trial's facts against its plan and its raw samples ---------------------------------------


def test_cases_the_samples_time_but_the_trial_leaves_out_or_lists_without_samples_are_named(vecload):
    plan, trial, arrays = vecload
    dropped = trial.cases[1].case
    short = trial.model_copy(update={"cases": [c for c in trial.cases if c.case != dropped]})
    assert f"its raw samples time {dropped}, which the trial leaves out" in evidence.trial_fact_problems(
        short, plan, arrays
    )
    untimed = {k: v for k, v in arrays.items() if not k.startswith(dropped + "/")}
    assert f"lists {dropped}, which its raw samples do not time" in evidence.trial_fact_problems(trial, plan, untimed)


def test_a_timer_setting_other_than_the_plans_is_named(vecload):
    plan, trial, arrays = vecload
    edited = trial.model_copy(update={"timer": {**trial.timer, "cache": "warm"}})
    assert "timer.cache is 'warm', the plan's is 'cold'" in evidence.trial_fact_problems(edited, plan, arrays)


@pytest.mark.parametrize(
    "status, kind, line",
    [
        ("complete", "timeout", "status 'complete' despite a timeout failure, which ends a trial as failed"),
        ("failed", None, "status 'failed' with no failure recorded"),
    ],
)
def test_a_status_its_failures_contradict_is_named(vecload, status, kind, line):
    plan, trial, arrays = vecload
    failures = [] if kind is None else [Failure(kind=kind, message="m")]
    edited = trial.model_copy(update={"status": status, "failures": failures})
    assert line in evidence.trial_fact_problems(edited, plan, arrays)


def _with_parity(trial, **changes):
    cases = list(trial.cases)
    cases[0] = cases[0].model_copy(update={"parity": [cases[0].parity[0].model_copy(update=changes)]})
    return trial.model_copy(update={"cases": cases})


def test_parity_that_contradicts_itself_is_named(vecload):
    plan, trial, arrays = vecload
    p = trial.cases[0].parity[0]
    edited = _with_parity(trial, differing_elements=5)  # "equal", yet five elements differ
    assert (
        f"{trial.cases[0].case}: parity of {p.buffer} contradicts itself (equal True, 5 of {p.elements} "
        "differ, first at None)"
    ) in evidence.trial_fact_problems(edited, plan, arrays)
    noisy = _with_parity(trial, max_ulp=3)  # "equal", with an error
    assert any("contradicts itself" in line for line in evidence.trial_fact_problems(noisy, plan, arrays))


@pytest.mark.parametrize(
    "changes, line",
    [
        (
            {"caught": False},
            "negative control flip_last_x_bit at N=1048576: 1 elements differ, which fails a bytes "
            "gate, yet it is not 'caught'",
        ),
        (
            {"differing_elements": 0},
            "negative control flip_last_x_bit at N=1048576 is 'caught' with no element differing",
        ),
    ],
)
def test_a_negative_control_its_own_counts_contradict_is_named(vecload, changes, line):
    plan, trial, arrays = vecload
    controls = [trial.controls[0].model_copy(update=changes), *trial.controls[1:]]
    assert line in evidence.trial_fact_problems(trial.model_copy(update={"controls": controls}), plan, arrays)


def test_a_sanitizer_run_the_plan_does_not_ask_for_is_named(vecload):
    plan, trial, arrays = vecload
    extra = trial.sanitizer[0].model_copy(update={"tool": "synccheck"})
    edited = trial.model_copy(update={"sanitizer": [*trial.sanitizer, extra]})
    assert f"synccheck at {extra.case} is not a sanitizer check of the plan" in evidence.trial_fact_problems(
        edited, plan, arrays
    )


def _with_code(trial, **changes):
    return trial.model_copy(update={"code": trial.code.model_copy(update=changes)})


def test_a_free_aa_is_consistent_in_itself_but_vecloads_plan_and_trace_refute_it(vecload):
    """The free A/A fact agrees with itself; what refutes it here is the plan (axpy<1> against
    axpy<4>, VEC 1 against 4) and the trace (two kernels), as tests/test_code_facts.py shows."""
    plan, trial, arrays = vecload
    same = {"base": "a" * 64, "candidate": "a" * 64}
    free = _with_code(trial, status="identical", digests=same, launches_match=True, free_aa=True, differences=[])
    problems = evidence.trial_fact_problems(free, plan, arrays)
    assert "code.launches_match is True, but the plan launches the arms differently in case N=1048576" in problems
    assert "code.launches_match is True, but the kernel trace saw the arms launch different kernels" in problems
    # a record compared per launched kernel also holds each forged digest to the launches it lists
    assert all(p.startswith("code.") for p in problems), problems
    claimed = _with_code(trial, status="identical", digests=same, launches_match=False, free_aa=True, differences=[])
    assert any(
        line.startswith("code.free_aa is True, but the code is identical and its launches_match is False")
        for line in evidence.trial_fact_problems(claimed, plan, arrays)
    )


def test_a_code_status_its_digests_contradict_is_named(vecload):
    plan, trial, arrays = vecload
    edited = _with_code(trial, status="identical")  # the digests still differ
    assert any(
        line.startswith("code.status is 'identical', but its digests") and line.endswith("differ")
        for line in evidence.trial_fact_problems(edited, plan, arrays)
    )


def test_a_case_is_timed_only_where_both_arms_have_samples():
    import numpy as np

    from qualify.record.evidence import timed_cases
    from qualify.results.samples import key

    arrays = {
        key("N=1", "base", "ns"): np.array([5.0, 6.0]),
        key("N=1", "candidate", "ns"): np.array([4.0]),
        key("N=2", "base", "ns"): np.array([5.0]),  # the candidate never ran: interrupted between arms
        key("N=2", "candidate", "ns"): np.empty(0),
        key("N=3", "base", "ns"): np.array([5.0]),  # no candidate series at all
    }
    assert timed_cases(arrays) == {"N=1"}
