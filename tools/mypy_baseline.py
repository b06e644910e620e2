#!/usr/bin/env python3
"""mypy over the whole package, held to a committed baseline that can only shrink.

    python tools/mypy_baseline.py            # run mypy; exit 1 on any error not in the baseline,
                                             # or on a baseline entry that no longer occurs
    python tools/mypy_baseline.py --update   # rewrite the baseline after fixing errors (refused
                                             # while there is a new error: fix it instead; with
                                             # no baseline file yet, it writes the first one)

mypy's configuration is pyproject.toml's [tool.mypy]: the whole package, strict on evaluate/, plan/
and results/. An error is keyed by its file, its code and its message, never its line, so editing
a file does not churn the baseline; the same key may appear several times in one file and is
counted. The strict packages may have no entry at all: an error there fails even if listed.
Notes are not errors and are not kept.

Exit codes: 0 clean against the baseline, 1 a new error or a stale entry, 2 mypy itself failed
(a crash, a configuration error: no error list to compare).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = Path(__file__).with_name("mypy-baseline.txt")
# held to zero errors (pyproject's strict override): never in the baseline
STRICT = ("qualify/evaluate/", "qualify/plan/", "qualify/results/")
HEADER = (
    "# mypy errors the package still has, keyed file: [code] message (no line numbers).\n"
    "# It may only shrink: tools/mypy_baseline.py fails on an error not listed here and on a line\n"
    "# that no longer occurs; after fixing errors, `python tools/mypy_baseline.py --update`.\n"
)


def key(error: dict[str, object]) -> str:
    """A stable key of one mypy error: file, code and message; a line number named inside the
    message ("defined on line 12") is blanked too."""
    message = re.sub(r"\bline \d+", "line N", str(error["message"]))
    return f"{error['file']}: [{error.get('code') or 'misc'}] {message}"


def parse(output: str) -> Counter[str]:
    """mypy's `-O json` output (one JSON object per line) as counted keys of its errors."""
    found: Counter[str] = Counter()
    for line in output.splitlines():
        if not line.startswith("{"):
            continue
        error = json.loads(line)
        if error.get("severity") == "error":
            found[key(error)] += 1
    return found


def read_baseline(path: Path) -> Counter[str]:
    if not path.exists():
        return Counter()
    return Counter(
        line for line in path.read_text(encoding="utf-8").splitlines() if line.strip() and not line.startswith("#")
    )


def write_baseline(path: Path, errors: Counter[str]) -> None:
    path.write_text(HEADER + "".join(f"{k}\n" for k in sorted(errors.elements())), encoding="utf-8")


def compare(current: Counter[str], baseline: Counter[str]) -> tuple[list[str], list[str]]:
    """(new: errors beyond the baseline, stale: baseline entries that no longer occur), each key
    repeated as many times as it is over or under. An error in a strict package is always new."""
    strict = Counter({k: n for k, n in current.items() if k.startswith(STRICT)})
    new = (current - baseline) | strict
    stale = baseline - current
    return sorted(new.elements()), sorted(stale.elements())


def run_mypy() -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "-O", "json"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return done.returncode, done.stdout, done.stderr


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", action="store_true", help="rewrite the baseline (only ever shrinks it)")
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    args = parser.parse_args(argv)

    code, out, err = run_mypy()
    current = parse(out)
    if code not in (0, 1) or (code == 1 and not current):
        print(f"mypy failed (exit {code}) without a list of errors:\n{err or out}", file=sys.stderr)
        return 2
    baseline = read_baseline(args.baseline)
    new, stale = compare(current, baseline)
    for line in new:
        print(f"new: {line}")
    if args.update:
        if args.baseline.exists() and new or any(k.startswith(STRICT) for k in new):
            print(f"{len(new)} new errors: fix them; the baseline only shrinks", file=sys.stderr)
            return 1
        write_baseline(args.baseline, current)
        print(f"{args.baseline.name}: {sum(current.values())} errors (was {sum(baseline.values())})")
        return 0
    for line in stale:
        print(f"fixed, still listed: {line}")
    if new or stale:
        if stale:
            print("errors fixed: run `python tools/mypy_baseline.py --update` to shrink the baseline", file=sys.stderr)
        return 1
    print(
        f"mypy: {sum(current.values())} errors, all in the baseline ({args.baseline.name}); none in {', '.join(STRICT)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
