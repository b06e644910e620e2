"""The verdict's rules one at a time, each on the committed vecload record with one fact changed.

records/vecload is qualified as recorded; every test here changes one thing a trial could have
reported and asserts the verdict a user would then read: the status and the reason naming it.
The speed gates are set aside where a rule about the timer is tested, so that a missed gate
(which a free A/A misses by construction) cannot hide the status the rule alone gives.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from qualify.evaluate.verdict import verdict
from qualify.plan.load import load_plan
from qualify.results.model import Trial
from qualify.results.store import Record

RECORD = Path(__file__).resolve().parents[1] / "records" / "vecload"


@pytest.fixture(scope="module")
def recorded():
    return load_plan(RECORD / "plan.json").plan, Record(RECORD).trials()


def _without_gates(plan):
    return plan.model_copy(update={"acceptance": plan.acceptance.model_copy(update={"gates": []})})


def _with_case(trial: Trial, index: int, **changes) -> Trial:
    cases = list(trial.cases)
    cases[index] = cases[index].model_copy(update=changes)
    return trial.model_copy(update={"cases": cases})


def test_the_record_as_committed_is_qualified_with_and_without_its_gates(recorded):
    plan, trials = recorded
    assert verdict(plan, trials).status == "qualified"
    assert verdict(_without_gates(plan), trials).status == "qualified"


def test_timed_launches_whose_outputs_differ_from_the_checked_ones_are_not_qualified(recorded):
    plan, trials = recorded
    changed = [_with_case(trials[0], 2, timed_outputs_match=False), *trials[1:]]
    v = verdict(plan, changed)
    assert v.status == "not_qualified"
    case = trials[0].cases[2].case
    assert f"trial {trials[0].index}, {case}: outputs of timed launches differ from the checked outputs" in v.reasons


def test_a_complete_trial_missing_a_planned_case_is_incomplete_naming_the_case(recorded):
    plan, trials = recorded
    dropped = trials[0].cases[1].case
    short = trials[0].model_copy(update={"cases": [c for c in trials[0].cases if c.case != dropped]})
    v = verdict(_without_gates(plan), [short, *trials[1:]])
    assert v.status == "incomplete"
    assert f"trial {trials[0].index} lacks cases {dropped}" in v.reasons


@pytest.mark.parametrize("case_class", ["faster", "slower"])
def test_a_free_aa_that_measures_a_difference_is_incomplete(recorded, case_class):
    """Identical machine code and launches cannot be faster or slower: if the timer says so, it
    does not resolve the case, in either direction."""
    plan, trials = recorded
    trial = trials[0]
    free = trial.model_copy(update={"code": trial.code.model_copy(update={"free_aa": True})})
    stats = free.cases[0].stats.model_copy(update={"case_class": case_class})
    v = verdict(_without_gates(plan), [_with_case(free, 0, stats=stats), *trials[1:]])
    assert v.status == "incomplete"
    assert any(r.startswith(f"trial {trial.index}, {trial.cases[0].case}: identical machine code and launches "
                            f"measured {case_class}") for r in v.reasons), v.reasons


@pytest.mark.parametrize("case_class", ["faster", "slower"])
def test_an_aa_control_that_comes_out_faster_or_slower_makes_the_verdict_incomplete(recorded, case_class):
    """The base timed against itself must come out unchanged; a difference in either direction
    means the timer does not resolve the case, whatever the candidate measured."""
    plan, trials = recorded
    case = trials[1].cases[3]
    aa = case.stats.model_copy(update={"case_class": case_class, "delta_pct": 1.5})
    v = verdict(plan, [trials[0], _with_case(trials[1], 3, aa=aa)])
    assert v.status == "incomplete"
    assert (f"trial {trials[1].index}, {case.case}: A/A control came out {case_class} (+1.50%): "
            "the timer does not resolve this case") in v.reasons


@pytest.mark.parametrize("case_class", ["same", "cant_tell"])
def test_an_aa_control_that_finds_no_difference_leaves_the_verdict_qualified(recorded, case_class):
    plan, trials = recorded
    aa = trials[1].cases[3].stats.model_copy(update={"case_class": case_class})
    assert verdict(plan, [trials[0], _with_case(trials[1], 3, aa=aa)]).status == "qualified"
