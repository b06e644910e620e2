"""compute-sanitizer's output read into data: the exit code first (--error-exitcode marks findings),
then the summary lines; any finding, timeout or failure of the child fails the gate. The first lines
of each finding are kept for the record. Pure, so `report --check` re-reads stored results with it.
"""

from __future__ import annotations

import re

from qualify.results.model import SanitizerResult

FINDINGS_EXIT = 86
_SUMMARY = re.compile(r"=+\s+((?:ERROR|RACECHECK|LEAK) SUMMARY:.*)")
_ERRORS = re.compile(r"ERROR SUMMARY:\s+(\d+) errors?")
_HAZARDS = re.compile(r"RACECHECK SUMMARY:\s+(\d+) hazards? displayed \((\d+) errors?")
_FINDING = re.compile(r"^=+\s+(Invalid|Race|Uninitialized|Barrier|Program hit|Error|Leaked|Warning|Address)")


def parse(tool: str, case: str, side: str, returncode: int | None, output: str, seconds: float) -> SanitizerResult:
    summary = [m.group(1).strip() for m in map(_SUMMARY.search, output.splitlines()) if m]
    errors = None
    for line in summary:
        if m := _ERRORS.search(line):
            errors = int(m.group(1))
        if m := _HAZARDS.search(line):
            errors = max(errors or 0, int(m.group(2)))
    excerpt: list[str] = []
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if _FINDING.search(line) and len(excerpt) < 24:
            excerpt.extend(ln.rstrip() for ln in lines[i : i + 4])
    worker_fault = '"event": "fault"' in output
    if returncode is None:
        status = "timeout"
    elif returncode == FINDINGS_EXIT or (errors or 0) > 0:
        # before "fault": memcheck aborts a kernel at its first bad access, so the worker also
        # sees a launch failure; the finding is the cause, the fault its consequence
        status = "findings"
    elif worker_fault:
        status = "fault"
    elif returncode != 0 or errors is None:
        status = "error"  # the worker failed, or the tool printed no summary: not a clean bill
    else:
        status = "clean"
    if status == "error" and not excerpt:
        excerpt = [ln for ln in lines if ln.strip()][-8:]
    return SanitizerResult(
        tool=tool,
        case=case,
        side=side,
        status=status,
        errors=errors,
        exit_code=returncode,
        summary=summary,
        excerpt=excerpt[:24],
        seconds=round(seconds, 3),
    )
