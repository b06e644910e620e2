"""tools/mutation_table.py: a run's summary keeps what its report.md and the score table show, and a
run folder is read from its summary, or from a fresh report.json not yet summarized."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str, file: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


mutate = _tool("qualify_tools_mutate", "mutate.py")
table = _tool("qualify_tools_mutation_table", "mutation_table.py")


def _mutant(status: str, line: int, equivalent: str | None = None) -> dict:
    return {
        "status": status,
        "seconds": 1.0,
        "killed_by": "tests/test_x.py::test_x" if status == "killed" else None,
        "diff": f"-    a = {line}\n+    a = {line + 1}\n",
        "key": {"module": "m.py", "line": f"a = {line}"},
        "line": line,
        "operator": "constant",
        "description": f"`{line}` → `{line + 1}`",
        "equivalent": equivalent,
    }


REPORT = {
    "format": "qualify-mutation/1",
    "seed": 3,
    "sample": 5,
    "commit": "abc1234",
    "modules": [
        {
            "module": "m.py",
            "tests": ["tests/test_x.py"],
            "mutants_total": 9,
            "sampled": 5,
            "killed": 2,
            "timeout": 1,
            "survived": 2,
            "error": 0,
            "equivalent": 1,
            "score": 75.0,
            "raw_score": 60.0,
            "baseline_seconds": 2.5,
            "mutants": [
                _mutant("killed", 1),
                _mutant("survived", 2),
                _mutant("timeout", 3),
                _mutant("survived", 4, equivalent="a reason"),
                _mutant("killed", 5),
            ],
        }
    ],
}


def _rendered(run: dict) -> str:
    """report.md as tools/mutate.py renders it; from a summary, the undetected mutants stand for all."""
    modules = [{**m, "mutants": m.get("mutants", m.get("undetected"))} for m in run["modules"]]
    return "\n".join(mutate.format_markdown({**run, "modules": modules})) + "\n"


def test_a_summary_keeps_the_counts_and_only_the_undetected_mutants():
    summary = table.summary_of(REPORT, 1_700_000_000)
    (module,) = summary["modules"]
    assert summary["format"] == table.SUMMARY_FORMAT and summary["committed_at"] == 1_700_000_000
    assert (summary["seed"], summary["sample"], summary["commit"]) == (3, 5, "abc1234")
    assert {k: module[k] for k in table.MODULE_FIELDS} == {k: REPORT["modules"][0][k] for k in table.MODULE_FIELDS}
    assert [o["line"] for o in module["undetected"]] == [2, 4]


def test_report_md_renders_the_same_from_the_summary_as_from_the_report():
    assert _rendered(table.summary_of(REPORT, 0)) == _rendered(REPORT)


def test_a_folder_is_read_from_its_summary_and_a_fresh_report_from_the_report(tmp_path, monkeypatch):
    monkeypatch.setattr(table, "_committed_at", lambda path: sys.maxsize)  # not committed: the newest
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "report.json").write_text(json.dumps(REPORT))
    path, run = table.read_run(fresh)
    assert path.name == "report.json" and run == table.summary_of(REPORT, sys.maxsize)

    assert table.write_summary(fresh / "report.json") == fresh / "summary.json"
    path, run = table.read_run(fresh)
    assert path.name == "summary.json" and run["modules"] == table.summary_of(REPORT, 0)["modules"]
    assert run["committed_at"] < sys.maxsize  # dated when summarized, so a later run still counts as newer


@pytest.mark.parametrize(
    "folder", sorted(p.parent.name for p in (ROOT / "benchmarks" / "mutation").glob("*/summary.json"))
)
def test_each_committed_report_md_is_its_summary_rendered(folder):
    run_folder = ROOT / "benchmarks" / "mutation" / folder
    _, run = table.read_run(run_folder)
    assert _rendered(run) == (run_folder / "report.md").read_text(encoding="utf-8")
