"""`qualify summary`: the Markdown a CI run appends to $GITHUB_STEP_SUMMARY."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from qualify.cli import main
from qualify.record.assemble import read_record_plan
from qualify.render.summary import MAX_BYTES, MAX_ITEMS, MAX_ROWS, render_summary, text
from qualify.results.model import Failure, GateResult, Verdict
from qualify.results.store import Record

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden" / "summary"
RECORDS = ["vecload", "attention-wide", "attention-wide-entry", "qsa-keyload"]


def results_of(name: str):
    return Record(ROOT / "records" / name).results()


def plan_of(name: str = "vecload"):
    return read_record_plan(ROOT / "records" / name)[0]


def summary(results, record: str, name: str = "vecload", holder: str | None = None) -> str:
    return render_summary(results, plan_of(name), record, holder)


@pytest.mark.parametrize("name", RECORDS)
def test_committed_records_render_as_their_golden_summary(name):
    """Regenerate after an intended change with:
    QUALIFY_REGEN_GOLDEN=1 pytest tests/test_summary.py (the golden names no holding commit)."""
    out = summary(results_of(name), f"records/{name}", name)
    if os.environ.get("QUALIFY_REGEN_GOLDEN") == "1":
        (GOLDEN / f"{name}.md").write_text(out, encoding="utf-8")
    assert out == (GOLDEN / f"{name}.md").read_text(encoding="utf-8")


def test_the_summary_holds_the_verdict_each_case_and_the_missed_gates():
    results = results_of("attention-wide")
    out = summary(results, "records/attention-wide", "attention-wide")
    assert "NOT QUALIFIED" in out.splitlines()[0]
    case_ids = [c.case for c in results.trials[0].cases]
    for cid in case_ids:
        assert re.search(rf"^\| .* \| {re.escape(cid)} \| .* \| (slower|faster|same|can't tell) \|$", out, re.M), cid
    # each missed gate once, with its cases and range: one line per gate, never one per judgement
    for gate in {g.gate for g in results.verdict.gates if not g.passed}:
        assert sum(line.startswith(f"- gate {gate} missed at ") for line in out.splitlines()) == 1, gate


def test_the_attention_wide_summary_is_short_and_says_nothing_twice():
    out = summary(results_of("attention-wide"), "records/attention-wide", "attention-wide", holder="a" * 40)
    lines = out.splitlines()
    assert len(lines) <= 20, len(lines)
    items = [line for line in lines if line.startswith(("- ", "| "))]
    assert len(items) == len(set(items))
    assert "committed in `aaaaaaaaaaaa`" in lines[2]


def table_rows(markdown: str) -> list[str]:
    return [line for line in markdown.splitlines() if line.startswith("| ") and not line.startswith("| device")]


def unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def hostile(n_cases: int, n_gates: int):
    """A record far larger than any plan: many cases with labels that try to be Markdown and HTML."""
    base = results_of("vecload")
    label = "N=1|<img src=x onerror=alert(1)>[link](https://example.com)`code`*bold*\n" + "ü" * 300
    trial = base.trials[0]
    template = trial.cases[0]
    cases = [template.model_copy(update={"case": f"{label}{i}"}) for i in range(n_cases)]
    gates = [
        GateResult(gate=label, case=f"{label}{i}", trial=1, device=label, passed=False, value_pct=-1.0, bound=label)
        for i in range(n_gates)
    ]
    failures = [Failure(kind="error", case=label, side="base", message=label * 10) for _ in range(n_gates)]
    trial = trial.model_copy(update={"cases": cases, "failures": failures})
    verdict = Verdict(status="incomplete", reasons=[label * 5] * n_gates, gates=gates)
    return base.model_copy(update={"trials": [trial], "verdict": verdict, "plan_name": label})


def test_any_record_stays_well_under_the_step_summary_limit():
    out = summary(hostile(5000, 5000), "records/" + "x" * 10_000)
    assert len(out.encode()) <= MAX_BYTES
    rows = table_rows(out)
    assert len(rows) == MAX_ROWS + 1 and f"{5000 - MAX_ROWS} more rows" in rows[-1]
    assert f"and {5001 - MAX_ITEMS} more reasons" in out  # one grouped gate line, 5000 other reasons


def test_labels_are_text_not_markup():
    out = summary(hostile(3, 3), "records/x")
    for markup in (r"<img", r"\]\(https", r"`code", r"\*bold"):
        assert not re.search(r"(?<!\\)" + markup, out), markup  # each opening character escaped
    for row in table_rows(out):
        assert unescaped_pipes(row) == 7, row  # six cells: no label opened a column of its own
    assert all(len(line) < 2000 for line in out.splitlines())


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("a|b", r"a\|b"),
        ("<b>", r"\<b>"),
        ("x\ny", "x y"),
        ("a" * 90, "a" * 79 + "…"),
        ("$\\color{green}{QUALIFIED}$", r"\$\\color{green}{QUALIFIED}\$"),  # GitHub math
        ("&check; done", r"\&check; done"),  # an HTML entity
    ],
)
def test_text_escapes_and_cuts(raw, shown):
    assert text(raw) == shown


def test_an_incomplete_record_says_why():
    out = summary(hostile(1, 1), "records/x")
    assert "INCOMPLETE" in out.splitlines()[0]
    assert "**Why the evidence cannot decide**" in out


@pytest.mark.parametrize("raw", ["\u202eDEIFILAUQ", "\x1b[32mQUALIFIED\x1b[0m", "\u2066x\u2069"])
def test_bidi_overrides_and_escapes_never_reach_the_page(raw):
    shown = text(raw)
    assert not any(ch in shown for ch in "\u202e\x1b\u2066\u2069"), shown


# -- the command ------------------------------------------------------------------------------


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


@pytest.mark.parametrize("name, code", [("vecload", 0), ("attention-wide", 1), ("qsa-keyload", 1)])
def test_summary_exits_with_the_verdicts_code(capsys, name, code):
    status, out, _ = run_cli(["summary", str(ROOT / "records" / name)], capsys)
    assert status == code
    assert out.startswith("### ")


def test_summary_of_a_qualified_record_exits_0(capsys):
    status, out, _ = run_cli(["summary", str(ROOT / "records" / "vecload")], capsys)
    assert status == 0 and out.startswith("### ✅ qualify: vecload — QUALIFIED")


def test_summary_appends_to_the_step_summary_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    target = tmp_path / "step-summary.md"
    target.write_text("earlier step\n")
    status, out, _ = run_cli(["summary", "records/attention-wide", "-o", str(target)], capsys)
    assert status == 1 and out == ""
    written = target.read_text()
    assert written.startswith("earlier step\n### ❌ qualify: attention-wide")
    # the golden names no holding commit; the command names the commit that last changed the record
    assert re.sub(r" \(committed in `[0-9a-f]{12}`\)", "", written).endswith((GOLDEN / "attention-wide.md").read_text())


def test_a_missing_record_is_one_line_and_exit_2(tmp_path, capsys):
    status, out, err = run_cli(["summary", str(tmp_path / "none")], capsys)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "no such file" in err


def test_a_damaged_results_file_is_exit_2(tmp_path, capsys):
    shutil.copytree(ROOT / "records" / "vecload", tmp_path / "rec")
    (tmp_path / "rec" / "results.json").write_text('{"results_version": 9}')
    status, _, err = run_cli(["summary", str(tmp_path / "rec")], capsys)
    assert status == 2 and "Traceback" not in err and err.startswith("qualify: error: ")


def test_a_record_whose_verdict_was_edited_shows_no_verdict(tmp_path, capsys):
    """The summary renders a checked record: a results.json turned QUALIFIED by hand is refused."""
    shutil.copytree(ROOT / "records" / "attention-wide", tmp_path / "rec")
    path = tmp_path / "rec" / "results.json"
    path.write_text(path.read_text().replace('"status": "not_qualified"', '"status": "qualified"'))
    status, out, _ = run_cli(["summary", str(tmp_path / "rec")], capsys)
    assert status == 2
    assert "RECORD DOES NOT CHECK" in out.splitlines()[0] and "QUALIFIED" not in out.replace("NOT QUALIFIED", "")
