"""`qualify summary`: a record's Markdown summary, rendered only from a record that checks.

The summary lands on a CI run's page before anyone reads the record, so it must never state a
verdict the evidence does not give: the record is checked first (`record.check.inspect_record`,
as `report --check` does). A record that checks has a results.json equal, byte for byte, to what
its trial files derive, so the summary renders that; one that does not gets a summary saying so,
and the check's exit code.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from qualify.errors import ExitCode
from qualify.record.assemble import read_record_plan
from qualify.record.check import check_exit_code, inspect_record
from qualify.render.summary import MAX_ITEMS, render_summary, text
from qualify.results.store import Record


def holding_commit(folder: Path) -> str | None:
    """The commit that last changed the record, where it lies in a git repository and is committed."""
    try:
        done = subprocess.run(
            ["git", "-C", str(folder), "log", "-1", "--format=%H", "--end-of-options", "HEAD", "--", "."],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    found = done.stdout.strip()
    return found if done.returncode == 0 and found else None


def checked_summary(folder: Path) -> tuple[str, ExitCode | None]:
    """(Markdown, exit code): None as the code when the record checks (the verdict's code applies)."""
    problems = inspect_record(folder)
    if problems:
        lines = [
            f"### ⚠️ qualify: {text(folder.name)} — RECORD DOES NOT CHECK",
            "",
            f"Record {text(str(folder), 200)}: `qualify report --check` finds {len(problems)} "
            "problems, so no verdict is shown:",
            "",
            *[f"- {text(p.text, 300)}" for p in problems[:MAX_ITEMS]],
        ]
        if len(problems) > MAX_ITEMS:
            lines.append(f"- … and {len(problems) - MAX_ITEMS} more")
        return "\n".join(lines) + "\n", check_exit_code(problems)
    plan, _ = read_record_plan(folder)
    results = Record(folder).results()
    return render_summary(results, plan, str(folder), holding_commit(folder)), None
