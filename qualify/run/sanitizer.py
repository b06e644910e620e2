"""The compute-sanitizer gate: each declared tool x case x arm in a child worker, parsed into data.

The child is `python -m qualify.run.worker` under compute-sanitizer with a timeout. The gate reads
the exit code first (compute-sanitizer's --error-exitcode marks findings), then the summary lines;
any finding, timeout or failure of the child fails the gate. The first lines of each finding are
kept for the record.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from qualify.errors import ToolError
from qualify.results.model import SanitizerResult

FINDINGS_EXIT = 86
_SUMMARY = re.compile(r"=+\s+((?:ERROR|RACECHECK|LEAK) SUMMARY:.*)")
_ERRORS = re.compile(r"ERROR SUMMARY:\s+(\d+) errors?")
_HAZARDS = re.compile(r"RACECHECK SUMMARY:\s+(\d+) hazards? displayed \((\d+) errors?")
_FINDING = re.compile(r"^=+\s+(Invalid|Race|Uninitialized|Barrier|Program hit|Error|Leaked|Warning|Address)")


def find_sanitizer() -> str:
    candidates = [shutil.which("compute-sanitizer")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(str(Path(os.environ[var]) / "bin" / "compute-sanitizer"))
    candidates.append("/usr/local/cuda/bin/compute-sanitizer")
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    raise ToolError("compute-sanitizer not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin); "
                    "install the CUDA toolkit or remove acceptance.sanitizer from the plan")  # fmt: skip


def command(tool: str, plan: Path, case: str, side: str, ordinal: int, sanitizer: str,
            library: Path | None = None) -> list[str]:
    cmd = [sanitizer, "--tool", tool, "--error-exitcode", str(FINDINGS_EXIT), "--print-limit", "20",
           "--ignore-getprocaddress-notfound"]  # fmt: skip
    if tool == "memcheck":
        cmd += ["--leak-check", "full"]
    cmd += [sys.executable, "-m", "qualify.run.worker", str(plan), "--case", case, "--side", side,
            "--device", str(ordinal)]  # fmt: skip
    return cmd + (["--library", str(library)] if library is not None else [])


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
    return SanitizerResult(tool=tool, case=case, side=side, status=status, errors=errors, exit_code=returncode,
                           summary=summary, excerpt=excerpt[:24], seconds=round(seconds, 3))  # fmt: skip


def run_check(tool: str, plan: Path, case: str, side: str, timeout: float, ordinal: int = 0,
              library: Path | None = None) -> SanitizerResult:
    cmd = command(tool, plan, case, side, ordinal, find_sanitizer(), library)
    start = time.monotonic()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        returncode, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        returncode = None
        output = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
    return parse(tool, case, side, returncode, output, time.monotonic() - start)
