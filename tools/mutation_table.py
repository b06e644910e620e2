#!/usr/bin/env python3
"""The table of each core module's latest mutation score, from the committed report.json files.

    python tools/mutation_table.py            # print the table
    python tools/mutation_table.py --write    # replace it in benchmarks/mutation/README.md and docs/mutation.md

For each module named in tools/mutation.json, the row comes from the benchmarks/mutation/*/report.json
committed last that holds the module (git's commit time of the file; a report not yet committed
counts as the newest). Reports labelled "before: …" are the baseline issue 18 started from, never
a module's latest score. The table sits between `<!-- mutation:table -->` markers, so that it is
regenerated rather than typed, and `tests/test_mutate_tool.py` checks each row against its report.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "benchmarks" / "mutation"
CONFIG = Path(__file__).with_name("mutation.json")
DOCUMENTS = (REPORTS / "README.md", ROOT / "docs" / "mutation.md")
BEGIN, END = "<!-- mutation:table -->", "<!-- /mutation:table -->"
HEADER = [
    "| module | mutants | tried | killed | survived | equivalent | score | report | code |",
    "|---|---:|---:|---:|---:|---:|---:|---|---|",
]


def _committed_at(path: Path) -> int:
    out = subprocess.run(["git", "log", "-1", "--format=%ct", "--", str(path)], cwd=ROOT,
                         capture_output=True, text=True)  # fmt: skip
    dirty = subprocess.run(["git", "status", "--porcelain", "--", str(path)], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    if dirty or not out.stdout.strip():
        return sys.maxsize  # written since the last commit: the newest there is
    return int(out.stdout.strip())


def latest_runs() -> dict[str, tuple[Path, dict]]:
    """module → (report path, the module's section of the newest report that holds it)."""
    found: dict[str, tuple[int, Path, dict]] = {}
    for path in sorted(REPORTS.glob("*/report.json")):
        report = json.loads(path.read_text(encoding="utf-8"))
        if str(report.get("commit", "")).startswith("before:"):
            continue
        when = _committed_at(path)
        for section in report["modules"]:
            module = section["module"]
            if module not in found or when > found[module][0]:
                found[module] = (when, path, {**section, "commit": report["commit"], "seed": report["seed"]})
    return {m: (p, s) for m, (_, p, s) in found.items()}


def row(path: Path, m: dict) -> str:
    """One table row; the test reads these cells back against the report."""
    survived = m["survived"] - m["equivalent"]
    score = "–" if m["score"] is None else f"{m['score']:.1f} %"
    return (f"| `{m['module']}` | {m['mutants_total']} | {m['sampled']} | {m['killed'] + m['timeout']} | "
            f"{survived} | {m['equivalent']} | {score} | `{path.parent.relative_to(ROOT).as_posix()}/` | "
            f"{m['commit']} |")  # fmt: skip


def table() -> list[str]:
    modules = json.loads(CONFIG.read_text(encoding="utf-8"))["targets"]
    runs = latest_runs()
    lines = list(HEADER)
    for module in sorted(modules):
        if module in runs:
            lines.append(row(*runs[module]))
        else:
            lines.append(f"| `{module}` | – | – | – | – | – | not run yet | – | – |")
    return lines


def replace_table(text: str, lines: list[str]) -> str:
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"mutation_table: no {BEGIN} … {END} block")
    return text[: start + len(BEGIN)] + "\n" + "\n".join(lines) + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/mutation_table.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the table into the documents")
    args = parser.parse_args(argv)
    lines = table()
    if not args.write:
        print("\n".join(lines))
        return 0
    for doc in DOCUMENTS:
        doc.write_text(replace_table(doc.read_text(encoding="utf-8"), lines), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
