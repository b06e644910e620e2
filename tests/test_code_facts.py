"""The machine-code fact of a trial is re-derived from the plan and the evidence (issue 25 item 4).

`code.free_aa` turns every gate into a ratio of exactly 1, so whatever it rests on must follow
from what `report --check` can see: the plan's two arms (their resolved launches), the trial's
own kernel trace and the device the trial ran on. Each test tampers with a copy of the committed
vecload record *consistently* — the trial files, the ledger's hashes of them and the derived
files all rewritten as qualify would write them — so that only the re-derivation can object.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from qualify.cli import main
from qualify.plan.digest import sha256_file
from qualify.record.check import check_record, rebuild_record

ROOT = Path(__file__).resolve().parents[1]


def tampered(tmp_path: Path, edit) -> Path:
    """A copy of records/vecload whose trial files' `code` went through `edit`, the ledger's
    hashes and the derived files made to agree with them."""
    folder = tmp_path / "vecload"
    shutil.copytree(ROOT / "records" / "vecload", folder)
    for path in sorted((folder / "trials").glob("trial-*.json")):
        trial = json.loads(path.read_text(encoding="utf-8"))
        edit(trial)
        path.write_text(json.dumps(trial, indent=1) + "\n", encoding="utf-8")
    ledger = folder / "ledger.jsonl"
    events = [json.loads(line) for line in ledger.read_text(encoding="utf-8").splitlines()]
    for event in events:
        if event["event"] == "trial_ended":
            event["trial_sha256"] = sha256_file(folder / "trials" / f"trial-{event['trial']}.json")
    ledger.write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in events), encoding="utf-8")
    return folder


def identical_code(trial: dict) -> None:
    """What a forger writes to make the trial a free A/A: identical code, matching launches."""
    code = trial["code"]
    code.update(
        status="identical",
        digests={"base": code["digests"]["base"], "candidate": code["digests"]["base"]},
        differences=[],
        launches_match=True,
        free_aa=True,
    )


def test_the_untouched_copy_checks_out(tmp_path):
    """The tampering helper alone changes nothing --check can see: the failures below are the edits'."""
    folder = tampered(tmp_path, lambda trial: None)
    assert check_record(folder) == []


def test_launches_match_is_refused_where_the_plan_launches_the_arms_differently(tmp_path):
    folder = tampered(tmp_path, identical_code)
    rebuild_record(folder)  # results.json and README as `qualify report` writes them for the forgery
    problems = check_record(folder)
    assert any("launches_match is True" in p and "plan" in p for p in problems), problems


def test_launches_match_is_refused_where_the_trace_shows_other_kernels(tmp_path):
    """Even where the plan's launches agreed, the trial's trace names the kernels each arm ran."""
    folder = tampered(tmp_path, identical_code)
    rebuild_record(folder)
    problems = check_record(folder)
    assert any("launches_match is True" in p and "trace" in p for p in problems), problems


def test_code_arch_must_be_the_trial_devices(tmp_path):
    folder = tampered(tmp_path, lambda trial: trial["code"].update(arch="sm_80"))
    problems = check_record(folder)
    assert any("code.arch is 'sm_80'" in p and "sm_90" in p for p in problems), problems


def test_code_arms_must_be_the_plans_kind(tmp_path):
    folder = tampered(tmp_path, lambda trial: trial["code"].update(arms="library"))
    problems = check_record(folder)
    assert any("code.arms is 'library'" in p for p in problems), problems


@pytest.mark.parametrize("command", [["report", "--check"], ["report"]])
def test_a_missing_digest_is_a_one_line_error_not_a_crash(tmp_path, capsys, command):
    folder = tampered(tmp_path, lambda trial: trial["code"].update(digests={}))
    with pytest.raises(SystemExit) as exc:
        main([*command, str(folder)])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert err.startswith("qualify: error:") and err.count("\n") == 1 and "digests" in err


# --- on the fake device: a free A/A that is one, and the trace as the only witness ---------------


def test_an_honest_free_aa_passes_and_a_trace_of_other_kernels_refutes_it(tmp_path):
    from test_code_identity import SAME_AS_BASE, plan_for, trial_of

    from qualify.record.code_facts import _code_plan_problems

    loaded, trial = trial_of(tmp_path, plan_for(SAME_AS_BASE))
    assert trial.code.free_aa and _code_plan_problems(trial, loaded.plan) == []
    case = trial.cases[0]
    renamed = {
        side: [
            call.model_copy(
                update={"kernels": [k.model_copy(update={"name": f"{k.name}_{side}"}) for k in call.kernels]}
            )
            for call in calls
        ]
        for side, calls in case.trace.items()
    }
    forged = trial.model_copy(update={"cases": [case.model_copy(update={"trace": renamed}), *trial.cases[1:]]})
    assert _code_plan_problems(forged, loaded.plan) == [
        "code.launches_match is True, but the kernel trace saw the arms launch different kernels"
    ]
    # the cautious claim is refused too where plan and trace both say the launches agree
    modest = trial.model_copy(
        update={"code": trial.code.model_copy(update={"launches_match": False, "free_aa": False})}
    )
    assert any("launches_match is False" in p for p in _code_plan_problems(modest, loaded.plan))
