"""The one way qualify starts and waits for the processes of a run: a `Worker` is anything with
`wait` and `terminate` (a `subprocess.Popen`, or a test's stand-in), started by a function the
caller gives, so the waiting and the handling of Ctrl-C are written once.

Two shapes: `run_in_turn` (the trials of one device, one after the other, the next only once the
last kept its trial) and `run_together` (the devices of `--devices`, all at once).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Callable, Protocol

from qualify.errors import ExitCode

# After Ctrl-C or SIGTERM reached the parent: how long the running trial's worker may take to keep
# its trial (a terminal's Ctrl-C reached it too) before it is asked to stop with SIGTERM.
GRACE_S = 15.0
# A trial process exits 0 once its trial is kept, whatever the trial found: a kernel that faulted
# or hung lost that process's context only, and the next trial starts in a fresh one. Any other
# code (interrupted, a device the plan refuses, a missing tool, a spent budget, a bug) would stop
# the next trial too, so none is started.
KEPT = 0


class Worker(Protocol):
    def wait(self, timeout: float | None = None) -> int: ...

    def terminate(self) -> None: ...


class Primed:
    """A worker started ahead of its turn: it pays its interpreter and imports while the trial
    before it runs, then waits on its stdin; `go` lets it run, `cancel` lets it exit having done
    nothing. The imports are host work only (one core of the host, no CUDA call), so they cannot
    touch the timed samples of the trial running beside them, which the GPU times behind a
    blocking kernel."""

    GO = b"go\n"

    def __init__(self, process: subprocess.Popen):
        self._process = process

    def go(self) -> None:
        self._send(self.GO)

    def cancel(self) -> None:
        self._send(b"")
        try:
            self._process.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            self._process.terminate()
            self._process.wait()

    def _send(self, data: bytes) -> None:
        stdin = self._process.stdin
        if stdin is None or stdin.closed:
            return
        try:
            stdin.write(data)
            stdin.close()
        except (BrokenPipeError, OSError):  # it already ended (a failed import): its exit code says so
            pass

    def wait(self, timeout: float | None = None) -> int:
        return self._process.wait(timeout)

    def terminate(self) -> None:
        self._process.terminate()


def qualify_command(*args: str | Path) -> list[str]:
    """`python -m qualify …` with this interpreter: a child runs the same qualify as its parent."""
    return [sys.executable, "-m", "qualify", *map(str, args)]


def spawn(cmd: list[str], keep_fds: tuple[int, ...] = (), log: IO | None = None) -> Worker:
    """Without `log` the child shares the terminal: its progress bar is the trial's, Ctrl-C
    reaches it too. `keep_fds`: descriptors it inherits (the record's device ownership, held
    while it lives). With `log`, its stdout and stderr go there."""
    if log is None:
        return subprocess.Popen(cmd, pass_fds=keep_fds)
    return subprocess.Popen(cmd, pass_fds=keep_fds, stdout=log, stderr=subprocess.STDOUT)


def spawn_primed(cmd: list[str], keep_fds: tuple[int, ...] = ()) -> Primed:
    """`spawn`, with the child waiting on its stdin for `Primed.go` (the command must say so)."""
    return Primed(subprocess.Popen(cmd, pass_fds=keep_fds, stdin=subprocess.PIPE))


def _begin(worker: Worker) -> None:
    if isinstance(worker, Primed):
        worker.go()


def _drop(worker: Worker | None) -> None:
    if isinstance(worker, Primed):
        worker.cancel()
    elif worker is not None:
        worker.terminate()
        worker.wait()


def run_in_turn(wanted: int, start: Callable[[int], Worker], *, ahead: bool = False) -> list[int]:
    """Start one worker per wanted trial, one after the other; their exit codes in order.

    A worker that kept its trial (exit 0) lets the next trial start; any other code ends the run.
    An interruption of the parent while waiting (Ctrl-C, which reached the worker too, or
    SIGTERM, which did not): the worker has GRACE_S to keep the trial it was in, then it is sent
    SIGTERM, which it records as an interruption; the run ends as interrupted either way.

    With `ahead`, each next worker is started while the one before it runs (a `Primed` worker
    waits for its turn; one never given its turn is cancelled): the next trial process's start-up
    is off the run's critical path.
    """
    codes: list[int] = []
    upcoming: Worker | None = start(0) if wanted > 0 else None
    try:
        for n in range(wanted):
            worker = upcoming if upcoming is not None else start(n)
            upcoming = None
            _begin(worker)
            if ahead and n + 1 < wanted:
                upcoming = start(n + 1)
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
    finally:
        _drop(upcoming)
    return codes


def run_together(keys: list[int], start: Callable[[int], Worker]) -> dict[int, int]:
    """Start one worker per key at once, wait for all, and return their exit codes by key.

    Ctrl-C reaches every worker (they share the terminal's process group) and each keeps the
    trial it was in; here it only stops the waiting, and the workers still running are then
    asked to stop too, so none is left behind.
    """
    workers = {k: start(k) for k in keys}
    codes: dict[int, int] = {}

    def wait(k: int) -> None:
        codes[k] = workers[k].wait()

    threads = [threading.Thread(target=wait, args=(k,), daemon=True) for k in keys]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)
    except KeyboardInterrupt:
        for k, w in workers.items():
            if k not in codes:
                w.terminate()
        for t in threads:
            t.join()
        for k in keys:
            codes.setdefault(k, int(ExitCode.INTERRUPTED))
    return {k: codes[k] for k in keys}
