"""A reason that fires on nearly every case of a correct record is a defect, not evidence.

Issue 32: every one of a fresh vecload record's 14 reasons said "the two timers disagree", above
a ✅. A reviewer learns to skip a warning that is always there, and then misses the one that
counts. So no committed record that qualified may carry a reason of one kind at half or more of
its (trial, case) pairs. The kind of a reason is its text with the trial, the case and every
number taken out, so "trial 1: … at N=4194304: CUPTI -20.21 % …" and "trial 2: … at N=1048576:
CUPTI -9.83 % …" are one kind.

Records that did not qualify are left out: a candidate slower at every size misses its gate at
every case, and says so rightly. Records made under trace version 2 or earlier (before CUPTI's
comparison stopped being said, qualify.evaluate.cupti_delta) are derived under their own rules by
`report --check`; their retired CUPTI notes are the one kind exempt here, and only in them.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORDS = sorted(p.parent for p in ROOT.glob("records/*/results.json"))
SHARE = 0.5  # of a qualified record's (trial, case) pairs: a kind this common cries wolf
RETIRED = ("the two timers disagree at", "timers disagree at")  # trace version 2's CUPTI notes


def kind(reason: str, cases: list[str]) -> str:
    text = re.sub(r"^trial \d+[:,] ", "", reason)
    for case in sorted(cases, key=len, reverse=True):
        text = text.replace(case, "<case>")
    return re.sub(r"[-+]?\d+(?:[.,]\d+)*", "#", text)


def crying_wolf(results: dict) -> list[str]:
    """The reason kinds of a qualified record that fire at SHARE or more of its (trial, case) pairs."""
    if results["verdict"]["status"] != "qualified":
        return []
    pairs = {(t["index"], c["case"]) for t in results["trials"] if t["status"] == "complete" for c in t["cases"]}
    cases = sorted({c for _, c in pairs})
    old = all((t.get("kernel_trace") or {}).get("version", 1) <= 2 for t in results["trials"])
    fired: dict[str, set] = defaultdict(set)
    for reason in results["verdict"]["reasons"]:
        if old and reason.split(": ", 1)[-1].startswith(RETIRED):
            continue
        trial = re.match(r"trial (\d+)[:,] ", reason)  # "trial 1: …" and "trial 3, COLS=4096: …" name one trial
        at = [c for c in cases if c in reason]
        where = {(int(trial.group(1)), c) for c in at} if trial else {p for p in pairs if p[1] in at}
        fired[kind(reason, cases)] |= where & pairs
    return [
        f"{k!r} at {len(w)} of {len(pairs)} cases" for k, w in fired.items() if pairs and len(w) >= SHARE * len(pairs)
    ]


@pytest.mark.parametrize("record", RECORDS, ids=[p.name for p in RECORDS])
def test_no_committed_record_cries_wolf(record):
    results = json.loads((record / "results.json").read_text())
    assert crying_wolf(results) == []


def _results(reasons: list[str], status: str = "qualified", version: int = 3) -> dict:
    cases = ["N=1048576", "N=4194304", "N=16777216", "N=67108864"]
    trials = [
        {"index": i, "status": "complete", "kernel_trace": {"version": version}, "cases": [{"case": c} for c in cases]}
        for i in (1, 2)
    ]
    return {"verdict": {"status": status, "reasons": reasons}, "trials": trials}


def _timers(trial: int, case: str, pct: float) -> str:
    return f"trial {trial}: the two timers disagree at {case}: CUPTI {pct:+.2f} % against events -11.90 %"


def test_the_guard_finds_a_reason_kind_at_every_case_of_a_qualified_record():
    cases = ["N=1048576", "N=4194304", "N=16777216", "N=67108864"]
    every = [_timers(t, c, -20.0 - n) for t in (1, 2) for n, c in enumerate(cases)]
    (found,) = crying_wolf(_results(every))
    assert "at 8 of 8 cases" in found and "<case>" in found and "#" in found


def test_the_guard_finds_a_kind_at_half_the_cases_and_passes_a_rarer_one():
    half = [_timers(1, c, -20.0) for c in ("N=1048576", "N=4194304", "N=16777216", "N=67108864")]
    assert crying_wolf(_results(half)) == [
        "'the two timers disagree at <case>: CUPTI # % against events # %' at 4 of 8 cases"
    ]
    assert crying_wolf(_results(half[:3])) == []


def test_a_reason_without_a_trial_counts_at_that_case_in_every_trial():
    reasons = [f"gate g missed at {c} on dev (pooled over 2 trials)" for c in ("N=1048576", "N=4194304")]
    assert len(crying_wolf(_results(reasons))) == 1  # two cases x two trials: half the pairs


def test_a_reason_naming_one_trial_and_its_case_counts_at_that_pair_alone():
    """ "trial 2, N=4194304: …" (the verdict's wording for one process at one case) is one pair,
    not that case in every trial: two of them are 2 of 8, never half."""
    notes = [
        f"trial {t}, {c}: this process's own A/A control read slower (+0.84%)"
        for t, c in ((1, "N=1048576"), (2, "N=4194304"))
    ]
    assert crying_wolf(_results(notes)) == []
    every = [
        f"trial {t}, {c}: this process's own A/A control read slower (+0.84%)"
        for t in (1, 2)
        for c in ("N=1048576", "N=4194304", "N=16777216", "N=67108864")
    ]
    assert crying_wolf(_results(every)) == [
        '"<case>: this process\'s own A/A control read slower (#%)" at 8 of 8 cases'
    ]


def test_records_that_did_not_qualify_may_say_one_thing_everywhere():
    every = [_timers(t, c, -20.0) for t in (1, 2) for c in ("N=1048576", "N=4194304", "N=16777216", "N=67108864")]
    assert crying_wolf(_results(every, status="not_qualified")) == []


def test_only_records_made_before_trace_version_3_are_exempt_and_only_from_the_retired_notes():
    cases = ("N=1048576", "N=4194304", "N=16777216", "N=67108864")
    every = [_timers(t, c, -20.0) for t in (1, 2) for c in cases]
    assert crying_wolf(_results(every, version=2)) == []
    assert crying_wolf(_results(every, version=3)) != []
    other = [f"trial {t}: sanitizer slow at {c}" for t in (1, 2) for c in cases]
    assert crying_wolf(_results(other, version=2)) != []
