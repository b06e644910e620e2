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
from qualify.results.store import Record

RECORDS = Path(__file__).resolve().parents[1] / "records"
LIBRARY_RECORD = RECORDS / "attention-wide-entry"  # both arms are shared libraries
FROZEN = {"base": "kernels/attention/build/libattention_base.so",
          "candidate": "kernels/attention/build/libattention_cand.so"}


@pytest.fixture(scope="module")
def library_record():
    """The library record's plan with each arm naming the library file its lock froze (as a plan
    that gives `library` does): the sha256 of each trial's build is then checked against the lock."""
    plan = load_plan(LIBRARY_RECORD / "plan.json").plan
    arms = plan.arms.model_copy(update={side: plan.arm(side).model_copy(update={"library": path})
                                        for side, path in FROZEN.items()})
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
    problems = [str(p) for p in evidence.library_problems([_with_build(t, "candidate", stray) for t in trials], plan, lock)]
    assert problems == [f"trials/trial-{t.index}.json: libraries.candidate: sha256 {evidence._short(stray)} is not "
                        "a build the lock froze" for t in trials]


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
    assert f"{name}: block {plan.schedule.blocks + beyond}, the plan's schedule.blocks is {plan.schedule.blocks}" \
        in problems


def test_the_last_planned_block_is_no_problem(vecload):
    plan, trial, arrays = vecload
    name = next(n for n in sorted(arrays) if n.endswith("/block"))
    assert int(arrays[name].max()) == plan.schedule.blocks - 1
    assert np.all(arrays[name] >= 0)
