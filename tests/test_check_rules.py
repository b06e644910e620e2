"""`report --check` (qualify.record.check) on a copy of a committed record with one file changed:
what it checks reaches the user as a named problem."""

from __future__ import annotations

import shutil
from pathlib import Path

from qualify.record.check import check_record

RECORD = Path(__file__).resolve().parents[1] / "records" / "vecload"


def test_a_ledger_whose_trials_start_out_of_order_is_named(tmp_path):
    copy = tmp_path / "vecload"
    shutil.copytree(RECORD, copy)
    lines = (copy / "ledger.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (copy / "ledger.jsonl").write_text("".join([*lines[2:4], *lines[0:2]]), encoding="utf-8")
    problems = check_record(copy)
    assert any("trials start in the order [2, 1]" in line for line in problems), problems
