"""Fault isolation: every arm runs its cases first in child workers, never in the timing process.

A case whose kernel faults (illegal address, misaligned access, trap) or hangs (no progress within
the timeout) is recorded against its arm and case, and the worker is restarted for the cases after
it, in a fresh process and context. The engine then times only the cases that passed, so the
timing process never loses its context to a kernel already known to be bad.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from qualify import strict_json
from qualify.errors import PlanError
from qualify.io import MAX_JSON_BYTES, UnreadableFile, atomic_write_text, read_text_limited

CASE_TIMEOUT_S = 60.0  # a single launch of a plan's case never takes a minute; a hang does
STARTUP_TIMEOUT_S = 120.0  # interpreter start, NVRTC build and module load before the first case


@dataclass(frozen=True)
class CaseOutcome:
    case: str
    side: str
    status: str  # ok | fault | timeout | error
    message: str = ""


def worker_command(plan: Path, side: str, cases: list[str], ordinal: int, library: Path | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "qualify.run.worker", str(plan), "--side", side, "--device", str(ordinal)]
    if library is not None:
        cmd += ["--library", str(library)]
    for c in cases:
        cmd += ["--case", c]
    return cmd


def _run_worker(cmd: list[str], startup_timeout: float, case_timeout: float) -> tuple[list[dict], bool, str]:
    """Events the worker printed, whether it was killed for a hang, and its last stderr line.

    The clock restarts at every event: the worker has `startup_timeout` to build and reach its
    first case, then `case_timeout` from each case's start to its end.
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    events: list[dict] = []
    killed = False
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + startup_timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                killed = True
                break
            if not selector.select(timeout=min(left, 1.0)):
                if proc.poll() is not None:
                    break
                continue
            line = proc.stdout.readline()
            if not line:
                break
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict) and "event" in event:
                events.append(event)
                deadline = time.monotonic() + case_timeout
    finally:
        selector.close()
        try:
            _, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, stderr = proc.communicate()
    tail = (stderr or "").strip().splitlines()
    return events, killed, tail[-1] if tail else ""


def preflight(
    plan: Path,
    side: str,
    cases: list[str],
    ordinal: int = 0,
    case_timeout: float = CASE_TIMEOUT_S,
    run_worker=_run_worker,
    library: Path | None = None,
) -> list[CaseOutcome]:
    """Run `cases` of one arm in workers; one outcome per case, in order."""
    outcomes: list[CaseOutcome] = []
    pending = list(cases)
    while pending:
        started = time.monotonic()
        events, killed, stderr = run_worker(
            worker_command(plan, side, pending, ordinal, library), STARTUP_TIMEOUT_S, case_timeout
        )
        done = [e["case"] for e in events if e["event"] == "done"]
        outcomes += [CaseOutcome(c, side, "ok") for c in done]
        rest = pending[len(done) :]
        if not rest:
            break
        culprit = rest[0]
        last = events[-1] if events else {}
        if last.get("event") == "fault":
            outcomes.append(CaseOutcome(culprit, side, "fault", last.get("message", "kernel fault")))
        elif killed:
            waited = time.monotonic() - started
            outcomes.append(
                CaseOutcome(
                    culprit,
                    side,
                    "timeout",
                    f"no end {case_timeout:g} s after the launch started "
                    f"(worker killed after {waited:.0f} s): the launch hangs",
                )
            )
        else:
            message = last.get("message") or stderr or "the worker exited without a report"
            if last.get("event") == "error" and last.get("case") is None:
                # the arm cannot even be built or started: every pending case shares the cause
                outcomes += [CaseOutcome(c, side, "error", message) for c in rest]
                break
            outcomes.append(CaseOutcome(culprit, side, "error", message))
        pending = rest[1:]
    return outcomes


PREFLIGHT_FILE = "preflight.json"
_STATUSES = frozenset({"ok", "fault", "timeout", "error"})


def _is_outcome(item) -> bool:
    return (
        isinstance(item, dict)
        and set(item) <= {"case", "side", "status", "message"}
        and all(isinstance(item.get(k), str) for k in ("case", "side", "status"))
        and item["status"] in _STATUSES
        and isinstance(item.get("message", ""), str)
    )


class PreflightShared:
    """The isolated preflight of each arm, once per invocation, shared by its trial processes.

    The first call for an arm runs the workers and writes their outcomes to `workdir`; a later
    call (in this process or in a later trial's) reads them back and says it reused them: every
    trial of one invocation runs the same build, inputs and device.
    """

    def __init__(self, preflight: Callable, workdir: Path | None = None):
        self._preflight = preflight
        self._file = None if workdir is None else Path(workdir) / PREFLIGHT_FILE
        self._outcomes: dict[str, list] = self._read()
        # the engine asks for both arms at once, from two threads: one writes the file at a time
        self._lock = threading.Lock()
        self.reused = False

    def _read(self) -> dict[str, list[CaseOutcome]]:
        """The outcomes already shared, validated like any input: a damaged file is one error
        naming it and what is wrong (exit 2), never a trial process's internal error."""
        if self._file is None or not os.path.lexists(self._file):
            return {}
        try:
            data = strict_json.parse(read_text_limited(self._file, MAX_JSON_BYTES, root=self._file.parent))
        except UnreadableFile as exc:
            raise PlanError(exc.message, file=self._file) from None
        except strict_json.JSONProblem as exc:
            raise PlanError(
                f"not JSON ({exc.message}); the shared preflight file was damaged", file=self._file
            ) from None
        outcomes: dict[str, list[CaseOutcome]] = {}
        for key, listed in data.items() if isinstance(data, dict) else [(None, None)]:
            if not isinstance(listed, list) or not all(_is_outcome(o) for o in listed):
                where = "the file" if key is None else f"entry {key!r}"
                raise PlanError(
                    f"{where} is not a list of preflight outcomes (case, side, status {sorted(_STATUSES)}, message)",
                    file=self._file,
                )
            outcomes[str(key)] = [CaseOutcome(**o) for o in listed]
        return outcomes

    def __call__(self, side: str, cases: list[str]):
        key = json.dumps([side, list(cases)])
        with self._lock:
            known = self._outcomes.get(key)
        if known is not None:
            self.reused = True
            return known
        outcomes = self._preflight(side, cases)  # the arms' workers run at the same time
        with self._lock:
            self._outcomes[key] = outcomes
            if self._file is not None:
                data = {k: [vars(o) for o in v] for k, v in self._outcomes.items()}
                atomic_write_text(self._file, json.dumps(data))
        return outcomes
