"""Every record committed under records/ reproduces: `qualify report --check` finds nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from qualify.cli import main

ROOT = Path(__file__).resolve().parents[1]
RECORDS = sorted(p.parent for p in ROOT.glob("records/*/results.json"))


def test_records_exist():
    assert {p.name for p in RECORDS} >= {"attention-wide"}


@pytest.mark.slow
@pytest.mark.parametrize("record", RECORDS, ids=[p.name for p in RECORDS])
def test_report_check_passes(record, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["report", "--check", str(record)])
    assert exc.value.code == 0, capsys.readouterr().err


@pytest.mark.parametrize("record", RECORDS, ids=[p.name for p in RECORDS])
def test_record_was_produced_on_a_planned_gpu(record):
    from qualify.results.store import Record

    for trial in Record(record).trials():
        assert trial.provenance.planned and trial.provenance.device.uuid.startswith("GPU-")
        assert "fake" not in trial.provenance.device.name


def test_readme_table_states_each_records_verdict():
    """The top-level README summarises the records; its verdict words must be the records' own."""
    import json
    import re

    text = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| `records/([^/`]+)/` \| [^|]+ \| ([a-z ]+?)[:|]", text, re.MULTILINE)
    assert {name for name, _ in rows} == {p.name for p in RECORDS}
    for name, stated in rows:
        verdict = json.loads((ROOT / "records" / name / "results.json").read_text())["verdict"]["status"]
        assert stated.strip() == verdict.replace("_", " "), (name, stated, verdict)


def test_a_record_missing_its_readme_says_so_by_name(tmp_path):
    import shutil

    from qualify.record.check import check_record

    copy = tmp_path / "vecload"
    shutil.copytree(ROOT / "records" / "vecload", copy)
    (copy / "README.md").unlink()
    assert "README.md: missing" in check_record(copy)
