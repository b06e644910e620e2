#!/usr/bin/env python3
"""The table of each core module's latest mutation score, from the committed report.json files.

    python tools/mutation_table.py            # print the table
    python tools/mutation_table.py --write    # replace it in benchmarks/mutation/README.md and docs/mutation.md
    python tools/mutation_table.py --seeds    # print the table of every sample: module × seed


For each module named in tools/mutation.json, the row comes from the benchmarks/mutation/*/report.json
committed last that holds the module (git's commit time of the file; a report not yet committed
counts as the newest). Reports labelled "before: …" are the baseline issue 18 started from, never
a module's latest score. The table sits between `<!-- mutation:table -->` markers, so that it is
regenerated rather than typed, and `tests/test_mutate_tool.py` checks each row against its report.

The second table, between `<!-- mutation:seeds -->` markers in benchmarks/mutation/README.md, has
one row per module and seed: the score of the newest committed sample drawn with that seed. The bar
holds on every sample, not on one, so each row is held to it as the latest scores are.
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
SEEDS_BEGIN, SEEDS_END = "<!-- mutation:seeds -->", "<!-- /mutation:seeds -->"
SEEDS_HEADER = [
    "| module | seed | tried | killed | survived | equivalent | score | report | code |",
    "|---|---:|---:|---:|---:|---:|---:|---|---|",
]
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


def _newest_by(key) -> dict:
    """key(section) → (report path, section) of the newest committed report holding such a section."""
    found: dict = {}
    for path in sorted(REPORTS.glob("*/report.json")):
        report = json.loads(path.read_text(encoding="utf-8"))
        if str(report.get("commit", "")).startswith("before:"):
            continue
        when = _committed_at(path)
        for section in report["modules"]:
            k = key({**section, "seed": report["seed"]})
            if k not in found or when > found[k][0]:
                found[k] = (when, path, {**section, "commit": report["commit"], "seed": report["seed"]})
    return {k: (p, s) for k, (_, p, s) in found.items()}


def latest_runs() -> dict[str, tuple[Path, dict]]:
    """module → (report path, the module's section of the newest report that holds it)."""
    return _newest_by(lambda section: section["module"])


def runs_by_seed() -> dict[tuple[str, int], tuple[Path, dict]]:
    """(module, seed) → (report path, the module's section of the newest report of that seed)."""
    return _newest_by(lambda section: (section["module"], section["seed"]))


def _cells(path: Path, m: dict) -> list[str]:
    """tried, killed, survived, equivalent, score, report, code: the cells both tables share."""
    survived = m["survived"] - m["equivalent"]
    score = "–" if m["score"] is None else f"{m['score']:.1f} %"
    return [str(m["sampled"]), str(m["killed"] + m["timeout"]), str(survived), str(m["equivalent"]), score,
            f"`{path.parent.relative_to(ROOT).as_posix()}/`", m["commit"]]


def row(path: Path, m: dict) -> str:
    """One table row; the test reads these cells back against the report."""
    return "| " + " | ".join([f"`{m['module']}`", str(m["mutants_total"]), *_cells(path, m)]) + " |"


def seed_row(path: Path, m: dict) -> str:
    return "| " + " | ".join([f"`{m['module']}`", str(m["seed"]), *_cells(path, m)]) + " |"


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


def seed_table() -> list[str]:
    modules = json.loads(CONFIG.read_text(encoding="utf-8"))["targets"]
    lines = list(SEEDS_HEADER)
    for (module, seed), (path, m) in sorted(runs_by_seed().items()):
        if module in modules:
            lines.append(seed_row(path, m))
    return lines


def replace_table(text: str, lines: list[str], begin: str = BEGIN, end: str = END) -> str:
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise SystemExit(f"mutation_table: no {begin} … {end} block")
    return text[: start + len(begin)] + "\n" + "\n".join(lines) + "\n" + text[stop:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/mutation_table.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the tables into the documents")
    parser.add_argument("--seeds", action="store_true", help="print the table of every sample, module × seed")
    args = parser.parse_args(argv)
    lines = table()
    if not args.write:
        print("\n".join(seed_table() if args.seeds else lines))
        return 0
    for doc in DOCUMENTS:
        doc.write_text(replace_table(doc.read_text(encoding="utf-8"), lines), encoding="utf-8")
    readme = REPORTS / "README.md"
    readme.write_text(replace_table(readme.read_text(encoding="utf-8"), seed_table(), SEEDS_BEGIN, SEEDS_END),
                      encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
