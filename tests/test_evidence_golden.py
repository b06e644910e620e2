"""report --check on a golden-gated record: the gate is the golden's, and a control's 'caught'
means "behaved as declared".

The record is the H200's first qsa-keyload record, made under the plan's first bounds (one global
atol of 1e-5, which near-zero outputs cannot meet); it is kept here as a fixture, since the plan was
re-frozen with per-case tolerances and records/qsa-keyload is to be re-made under them. It also
shows that a plan written before `tolerances` existed keeps its digest and still checks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from qualify.record.check import check_record

RECORD = Path(__file__).resolve().parent / "fixtures" / "qsa-keyload-first-plan"


def copy(tmp_path) -> Path:
    dst = tmp_path / "qsa-keyload"
    shutil.copytree(RECORD, dst)
    return dst


def edit_trial(folder: Path, edit) -> None:
    path = folder / "trials" / "trial-1.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=1) + "\n")


def test_the_committed_golden_record_checks():
    assert check_record(RECORD) == []


def test_a_control_relabelled_as_declared_is_refused(tmp_path):
    folder = copy(tmp_path)

    def flip(data):
        wrong = next(c for c in data["controls"] if not c["caught"])
        wrong["caught"] = True

    edit_trial(folder, flip)
    assert any("'caught' disagrees with its recorded outcome" in p for p in check_record(folder))


def test_a_golden_failure_edited_out_is_refused(tmp_path):
    folder = copy(tmp_path)

    def drop(data):
        data["failures"] = [
            f
            for f in data["failures"]
            if "differ from the golden" not in f["message"] and "not as declared" not in f["message"]
        ]

    edit_trial(folder, drop)
    assert any(
        "outputs fail the fidelity gate, but the trial has no fidelity failure" in p for p in check_record(folder)
    )


def test_counts_judged_by_another_bound_are_refused(tmp_path):
    folder = copy(tmp_path)

    def loosen(data):
        case = next(c for c in data["cases"] if c["case"] == "R=64,S=64")
        out = next(n for n in case["tolerance"]["counts"]["candidate"] if n["output"] == "out")
        out["atol"] = 1.0  # a looser bound than the plan's 1e-5 would have passed it

    edit_trial(folder, loosen)
    assert any(
        "R=64,S=64: candidate out was judged by atol 1, rtol 0.03125, not by the bound the plan gives it" in p
        for p in check_record(folder)
    )
