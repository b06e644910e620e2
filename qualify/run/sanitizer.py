"""The compute-sanitizer gate: each declared tool x case x arm in a child worker, parsed into data.

The child is `python -m qualify.run.worker` under compute-sanitizer with a timeout; its output is
read by qualify.evaluate.sanitizer_output, which says what the exit code and summary lines mean.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from qualify.errors import ToolError
from qualify.evaluate.sanitizer_output import FINDINGS_EXIT, parse
from qualify.results.model import SanitizerResult


def find_sanitizer() -> str:
    candidates = [shutil.which("compute-sanitizer")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(str(Path(os.environ[var]) / "bin" / "compute-sanitizer"))
    candidates.append("/usr/local/cuda/bin/compute-sanitizer")
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    raise ToolError(
        "compute-sanitizer not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin); "
        "install the CUDA toolkit or remove acceptance.sanitizer from the plan"
    )


def command(
    tool: str, plan: Path, case: str, side: str, ordinal: int, sanitizer: str, library: Path | None = None
) -> list[str]:
    cmd = [
        sanitizer,
        "--tool",
        tool,
        "--error-exitcode",
        str(FINDINGS_EXIT),
        "--print-limit",
        "20",
        "--ignore-getprocaddress-notfound",
    ]
    if tool == "memcheck":
        cmd += ["--leak-check", "full"]
    cmd += [
        sys.executable,
        "-m",
        "qualify.run.worker",
        str(plan),
        "--case",
        case,
        "--side",
        side,
        "--device",
        str(ordinal),
    ]
    return cmd + (["--library", str(library)] if library is not None else [])


def run_check(
    tool: str, plan: Path, case: str, side: str, timeout: float, ordinal: int = 0, library: Path | None = None
) -> SanitizerResult:
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
