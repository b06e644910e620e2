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

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from qualify.commands.pipeline import (
    RunOutcome,
    bind_libraries,
    check_libraries,
    load_frozen,
    record_folder,
    rederive,
    remaining_trials,
    run_plan,
)
from qualify.errors import ExitCode
from qualify.plan.load import LoadedPlan
from qualify.results.store import Record

# A trial process exits 0 once its trial is kept, whatever the trial found: a kernel that faulted
# or hung lost that process's context only, and the next trial starts in a fresh one. Any other
# code (interrupted, a device the plan refuses, a missing tool, a spent budget, a bug) would stop
# the next trial too, so none is started.
KEPT = 0


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


@dataclass(frozen=True)
class Executed:
    """What `run` and `compare` did on one device: the plan, the record folder and the run's outcome."""

    loaded: LoadedPlan
    folder: Path
    outcome: RunOutcome
    codes: tuple[int, ...] = ()  # each trial process's exit code, in order (none in a trial process)


def execute(
    plan_path: Path,
    record_dir: Path | None,
    ordinal: int,
    trials: int | None,
    exploratory: bool,
    libraries: dict[str, Path] | None,
    progress: Callable,
    argv: list[str],
    command: list[str],
    trial_process: Path | None = None,
) -> Executed:
    """`run` and `compare` on one device, from the frozen plan to the record, each check at its place.

    The invocation the user typed runs each planned trial in a process of its own (`command`, the
    arguments that name the plan and libraries, is how it starts them); with `trial_process` this
    process is one of those, and runs one trial. `progress(total)` gives a context manager
    yielding the callback that advances a progress bar."""
    import tempfile

    from qualify.run.device import CudaDevice

    loaded = load_frozen(plan_path, checked=trial_process is None)
    if libraries is not None:
        libraries = bind_libraries(loaded, libraries)  # a frozen build cannot be swapped (exit 3)
    check_libraries(loaded, libraries)  # before the driver: a wrong file is named as such
    folder = record_folder(loaded, record_dir)
    device = CudaDevice(ordinal)  # before any output: no GPU is a one-line error, exit 5
    if trial_process is not None:
        return Executed(
            loaded,
            folder,
            _one_trial(loaded, folder, device, ordinal, exploratory, libraries, progress, argv, trial_process),
        )
    try:
        uuid = device.info.uuid
        wanted, skipped = remaining_trials(loaded, Record(folder), uuid, trials)
    finally:
        device.close()  # each trial opens the device afresh in its own process
    record = Record(folder)
    before = {t.index for t in record.trials()}
    # this process owns the device's trials in the record while its trial processes run: a second
    # run on the device is refused, and a trial a dead trial process left open is closed here
    with record.owned(uuid) as owner, tempfile.TemporaryDirectory(prefix="qualify-trials-") as workdir:
        held = (owner,) if owner is not None else ()
        codes = run_each_in_a_process(
            wanted, lambda n: spawn(child_command(command, folder, ordinal, Path(workdir), exploratory), held)
        )
        if record.ledger_path.exists():
            record.close_dead_trials()
    results = rederive(record, loaded)
    done = [t for t in record.trials() if t.index not in before]
    return Executed(loaded, folder, RunOutcome(done, results, skipped), tuple(codes))


def _one_trial(loaded, folder, device, ordinal, exploratory, libraries, progress, argv, workdir) -> RunOutcome:
    """One trial in this process (a trial process of `execute`), the record left for the parent."""
    from qualify.run.engine import samples_per_trial
    from qualify.run.isolation import preflight
    from qualify.run.sanitizer import run_check
    from qualify.run.telemetry import Telemetry

    with progress(samples_per_trial(loaded)) as advance:
        return run_plan(
            loaded,
            folder,
            lambda: device,
            Telemetry,
            exploratory=exploratory,
            trials=1,
            argv=argv,
            progress=advance,
            sanitize=lambda tool, case, side, timeout: run_check(
                tool, loaded.path, case, side, timeout, ordinal, library=(libraries or {}).get(side)
            ),
            preflight=lambda side, cases: preflight(
                loaded.path, side, cases, ordinal, library=(libraries or {}).get(side)
            ),
            libraries=libraries,
            workdir=Path(workdir),
            render=False,
        )
