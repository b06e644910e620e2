"""Each trial of `qualify run` and `compare` in a fresh worker process.

Where a short kernel's buffers happen to sit, which addresses its modules load at, what the
allocator did before: a process fixes all of these once, and a trial that shares its process with
the trial before it shares them too. Two trials of one process are then one replicate, not two,
and a two-level interval over them (qualify.evaluate.pooled) would leave out the spread between
processes it exists to include. So the parent opens the device only to learn which trials are
still planned, and runs each in a `qualify run … --trials 1` child of its own: a fresh CUDA
context, fresh allocations and module loads. What need run once per plan is not repeated: the
NVRTC cache serves every child's build, the isolated preflight of the first child is reused by
the later ones (the outcomes travel in a file), and the sanitizer checks run in the first trial
that gets there on a device, as before. The parent re-derives the record once at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable, Protocol

from qualify import strict_json
from qualify.errors import ExitCode, PlanError
from qualify.io import MAX_JSON_BYTES, UnreadableFile, atomic_write_text, read_text_limited

PREFLIGHT_FILE = "preflight.json"
# A trial process exits 0 once its trial is kept, whatever the trial found: a kernel that faulted
# or hung lost that process's context only, and the next trial starts in a fresh one. Any other
# code (interrupted, a device the plan refuses, a missing tool, a spent budget, a bug) would stop
# the next trial too, so none is started.
KEPT = 0
VERDICTS = frozenset(int(c) for c in (ExitCode.QUALIFIED, ExitCode.NOT_QUALIFIED, ExitCode.INCOMPLETE))


# After Ctrl-C or SIGTERM reached the parent: how long the running trial's worker may take to keep
# its trial (a terminal's Ctrl-C reached it too) before it is asked to stop with SIGTERM.
GRACE_S = 15.0


class Worker(Protocol):
    def wait(self, timeout: float | None = None) -> int: ...

    def terminate(self) -> None: ...


def child_command(command: list[str], folder: Path, ordinal: int, workdir: Path, exploratory: bool) -> list[str]:
    """`qualify <run|compare> …` for one trial, in the worker mode that renders nothing."""
    cmd = [
        sys.executable,
        "-m",
        "qualify",
        *command,
        "--record",
        str(folder),
        "--device",
        str(ordinal),
        "--trials",
        "1",
        "--trial-process",
        str(workdir),
    ]
    return cmd + (["--exploratory"] if exploratory else [])


def spawn(cmd: list[str], keep_fds: tuple[int, ...] = ()) -> Worker:
    """The child shares the terminal: its progress bar is the trial's, Ctrl-C reaches it too.
    `keep_fds`: descriptors it inherits (the record's device ownership, held while it lives)."""
    return subprocess.Popen(cmd, pass_fds=keep_fds)


def run_each_in_a_process(wanted: int, start: Callable[[int], Worker]) -> list[int]:
    """Start one worker per wanted trial, one after the other; their exit codes in order.

    A worker that kept its trial (exit 0) lets the next trial start; any other code ends the run.
    An interruption of the
    parent while waiting (Ctrl-C, which reached the worker too, or SIGTERM, which did not): the
    worker has GRACE_S to keep the trial it was in, then it is sent SIGTERM, which it records as
    an interruption; the run ends as interrupted either way.
    """
    codes: list[int] = []
    for n in range(wanted):
        worker = start(n)
        try:
            code = worker.wait()
        except KeyboardInterrupt:
            try:
                worker.wait(timeout=GRACE_S)
            except (subprocess.TimeoutExpired, KeyboardInterrupt):
                worker.terminate()
                worker.wait()
            codes.append(int(ExitCode.INTERRUPTED))
            break
        codes.append(code)
        if code != KEPT:
            break
    return codes


def most_severe(codes: list[int]) -> int | None:
    """The code that must reach the caller instead of the record's verdict, if a worker ended
    other than by keeping its trial."""
    from qualify.commands.fleet import SEVERITY

    for code in SEVERITY:
        if int(code) in codes and int(code) not in VERDICTS:
            return int(code)
    unknown = set(codes) - {int(c) for c in SEVERITY} - {KEPT}
    return int(ExitCode.INTERNAL) if unknown else None


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

    def _read(self) -> dict[str, list]:
        """The outcomes already shared, validated like any input: a damaged file is one error
        naming it and what is wrong (exit 2), never a trial process's internal error."""
        if self._file is None or not os.path.lexists(self._file):
            return {}
        from qualify.run.isolation import CaseOutcome

        try:
            data = strict_json.parse(read_text_limited(self._file, MAX_JSON_BYTES, root=self._file.parent))
        except UnreadableFile as exc:
            raise PlanError(exc.message, file=self._file) from None
        except strict_json.JSONProblem as exc:
            raise PlanError(
                f"not JSON ({exc.message}); the shared preflight file was damaged", file=self._file
            ) from None
        outcomes = {}
        for key, listed in data.items() if isinstance(data, dict) else [(None, None)]:
            if not isinstance(listed, list) or not all(_is_outcome(o) for o in listed):
                where = "the file" if key is None else f"entry {key!r}"
                raise PlanError(
                    f"{where} is not a list of preflight outcomes (case, side, status {sorted(_STATUSES)}, message)",
                    file=self._file,
                )
            outcomes[key] = [CaseOutcome(**o) for o in listed]
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
