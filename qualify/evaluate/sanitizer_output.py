"""compute-sanitizer's output read into data: the exit code first (--error-exitcode marks findings),
then the summary lines; any finding, timeout or failure of the child fails the gate. The worker's
own finding (a write into the guard after a buffer, which memcheck cannot see) counts as one, and
an address memcheck names is given the buffer it lies in or near, from the worker's layout event. The first lines
of each finding are kept for the record. Pure, so `report --check` re-reads stored results with it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from qualify.results.model import SanitizerResult

FINDINGS_EXIT = 86
_SUMMARY = re.compile(r"=+\s+((?:ERROR|RACECHECK|LEAK) SUMMARY:.*)")
_ERRORS = re.compile(r"ERROR SUMMARY:\s+(\d+) errors?")
_HAZARDS = re.compile(r"RACECHECK SUMMARY:\s+(\d+) hazards? displayed \((\d+) errors?")
# the address of a bad access, however the release words what leads it ("Address 0x… is out of
# bounds" in older releases, "Access at 0x… is out of bounds" in newer ones): the H200's CUDA 13
# compute-sanitizer printed a line the "Address" form did not match
_ADDRESS = re.compile(r"\b(0x[0-9a-fA-F]+) is (?:out of bounds|misaligned)")
_FINDING = re.compile(r"^=+\s+(Invalid|Race|Uninitialized|Barrier|Program hit|Error|Leaked|Warning|Address|Access at)")


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
    # the worker's own findings (a write into a buffer's guard, past its declared size) are not
    # memcheck's: its fault line is kept, and every address memcheck names is given its buffer
    named = [f"worker: {e.get('message')}" for e in _events(output, "fault") if e.get("code") == "overrun"]
    if named:  # a write memcheck could not see (inside the allocation, in the guard) is a finding all the same
        errors = max(errors or 0, len(named))
    layout = [b for e in _events(output, "buffers") for b in e.get("buffers", []) if _is_buffer(b)]
    excerpt = named + _located(output, layout) + excerpt  # first: the excerpt is cut at 24 lines
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


def _events(output: str, kind: str) -> list[dict[str, Any]]:
    """The worker's JSON event lines of one kind (compute-sanitizer passes its stdout through)."""
    found: list[dict[str, Any]] = []
    for line in output.splitlines():
        if line.startswith("{") and f'"event": "{kind}"' in line:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict):
                found.append(event)
    return found


def _is_buffer(b: object) -> bool:
    return (
        isinstance(b, dict)
        and isinstance(b.get("name"), str)
        and all(isinstance(b.get(k), int) and not isinstance(b.get(k), bool) for k in ("ptr", "nbytes", "guard"))
    )


def locate(address: int, layout: list[dict[str, Any]]) -> str | None:
    """Where an address lies among qualify's buffers, in words: inside one (its declared size or its
    guard), or past or before the nearest; None when no buffer is within a guard's reach of it."""
    best: tuple[int, str] | None = None
    for b in layout:
        start, end = b["ptr"], b["ptr"] + b["nbytes"]
        if start <= address < end:
            return f"inside buffer {b['name']!r} at byte {address - start:,} of {b['nbytes']:,}"
        if address >= end:
            distance, words = address - end, f"{address - end + 1:,} byte(s) past the end of buffer {b['name']!r}"
            if address < end + b["guard"]:
                words += f" (in its {b['guard']:,}-byte guard)"
        else:
            distance, words = start - address - 1, f"{start - address:,} byte(s) before buffer {b['name']!r}"
        if best is None or distance < best[0]:
            best = (distance, words + f" (declared {b['nbytes']:,} bytes)")
    reach = max((b["guard"] for b in layout), default=0) + (1 << 20)
    return best[1] if best is not None and best[0] < reach else None


def _located(output: str, layout: list[dict[str, Any]]) -> list[str]:
    """One line for each distinct address memcheck named that lies near a buffer of the worker's."""
    if not layout:
        return []
    lines: list[str] = []
    seen: set[int] = set()
    for m in _ADDRESS.finditer(output):
        address = int(m.group(1), 16)
        if address in seen or len(lines) >= 8:
            continue
        seen.add(address)
        where = locate(address, layout)
        if where is not None:
            lines.append(f"address {m.group(1)}: {where}")
    return lines
