"""Each trial of `qualify run` and `compare` in a fresh worker process.

Where a short kernel's buffers happen to sit, which addresses its modules load at, what the
allocator did before: a process fixes all of these once, and a trial that shares its process with
the trial before it shares them too. Two trials of one process are then one replicate, not two,
and a two-level interval over them (qualify.evaluate.pooled) would leave out the spread between
processes it exists to include. So the parent identifies the device (no context: it opens
nothing) to learn which trials are still planned, and runs each in a child of its own started
from the invocation it resolved (`qualify.procs.invocation`): a fresh CUDA context, fresh
allocations and module loads, and nothing resolved twice. What need run once per plan is not
repeated either: the NVRTC cache serves every child's build, the isolated preflight of the first
child is reused by the later ones (the outcomes travel in a file), and the sanitizer checks run in
the first trial that gets there on a device, as before. The parent re-derives the record once at
the end.
"""

from __future__ import annotations

import tempfile
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from qualify.commands.pipeline import RunOutcome, rederive, remaining_trials, run_plan
from qualify.plan.load import LoadedPlan
from qualify.procs import invocation
from qualify.procs.invocation import Invocation
from qualify.procs.runner import Primed, Worker, qualify_command, run_in_turn, spawn_primed
from qualify.results.store import Record


@dataclass(frozen=True)
class Executed:
    """What `run` and `compare` did on one device: the plan, the record folder and the run's outcome."""

    loaded: LoadedPlan
    folder: Path
    outcome: RunOutcome
    codes: tuple[int, ...] = ()  # each trial process's exit code, in order


def trial_command(path: Path, primed: bool = False) -> list[str]:
    """One trial process: `qualify trial-process INVOCATION`, which renders nothing; `--primed`,
    it imports what its trial needs and then waits for its turn on stdin (runner.Primed)."""
    return qualify_command("trial-process", path, *(("--primed",) if primed else ()))


def start_trial(path: Path, keep_fds: tuple[int, ...]) -> Primed:
    return spawn_primed(trial_command(path, primed=True), keep_fds)


def prime() -> None:
    """A primed trial process's work before its turn: the imports of its trial, host work only.
    Nothing here calls CUDA (cuda.bindings is imported, not initialised), so the trial running
    meanwhile on the device is not disturbed; the device is opened in `one_trial`, after the turn."""
    import qualify.commands.pipeline  # noqa: F401
    import qualify.run.engine  # noqa: F401
    import qualify.run.isolation  # noqa: F401
    import qualify.run.sanitizer  # noqa: F401
    import qualify.run.telemetry  # noqa: F401
    from qualify.build import nvrtc  # noqa: F401
    from qualify.run import device

    device._driver()


def warm_renderer() -> None:
    """What re-deriving the record needs that a trial does not: the record's modules and
    matplotlib with its font list, about a second of imports on the GPU host. The parent does it
    on a thread while its first trial process builds, preflights and sanitizes (seconds in which
    nothing is timed), instead of after the last trial, where it delayed every verdict."""
    from qualify.record import assemble  # noqa: F401
    from qualify.render import plots

    plots.warm()


def run_on_device(resolved: Invocation, start: Callable[[Path, tuple[int, ...]], Worker] = start_trial) -> Executed:
    """`run` and `compare` on the invocation's device: each trial still planned in a process of
    its own (`start(invocation file, descriptors it keeps)`), then the record re-derived."""
    folder, (_, uuid) = resolved.folder, resolved.device()
    warming = threading.Thread(target=_quietly, args=(warm_renderer,), name="qualify-warm-renderer", daemon=True)
    warming.start()
    record = Record(folder)
    wanted, skipped = remaining_trials(resolved.loaded, record, uuid, resolved.trials, resolved.added is not None)
    before = {t.index for t in record.trials()}
    # this process owns the device's trials in the record while its trial processes run: a second
    # run on the device is refused, and a trial a dead trial process left open is closed here
    with record.owned(uuid) as owner, tempfile.TemporaryDirectory(prefix="qualify-trials-") as workdir:
        held = (owner,) if owner is not None else ()
        path = invocation.write(replace(resolved, workdir=Path(workdir)), Path(workdir))
        codes = run_in_turn(wanted, lambda n: start(path, held), ahead=True)
        if record.ledger_path.exists():
            record.close_dead_trials()
    warming.join()
    results = rederive(record, resolved.loaded)
    done = [t for t in record.trials() if t.index not in before]
    return Executed(resolved.loaded, folder, RunOutcome(done, results, skipped), tuple(codes))


def _quietly(work: Callable[[], None]) -> None:
    """A head start only: whatever fails here fails again, and is reported, where it is needed."""
    try:
        work()
    except Exception:  # noqa: BLE001 (re-raised by the re-derivation's own import, with its exit code)
        pass


def one_trial(resolved: Invocation, progress: Callable) -> RunOutcome:
    """One trial in this process (a trial process of `run_on_device`), the record left for the
    parent. `progress(total)` gives a context manager yielding the callback that advances a
    progress bar."""
    from qualify.run.device import CudaDevice
    from qualify.run.engine import samples_per_trial
    from qualify.run.isolation import preflight
    from qualify.run.sanitizer import run_check
    from qualify.run.telemetry import Telemetry

    loaded, (ordinal, _) = resolved.loaded, resolved.device()
    device = CudaDevice(ordinal)
    try:
        resolved.check_device(device.info.uuid)
    except BaseException:
        device.close()
        raise
    with progress(samples_per_trial(loaded)) as advance:
        return run_plan(
            loaded,
            resolved.folder,
            lambda: device,
            Telemetry,
            exploratory=resolved.exploratory,
            trials=1,
            argv=list(resolved.argv),
            progress=advance,
            sanitize=lambda tool, case, side, timeout: run_check(
                tool, loaded.path, case, side, timeout, ordinal, library=resolved.library(side)
            ),
            preflight=lambda side, cases: preflight(loaded.path, side, cases, ordinal, library=resolved.library(side)),
            libraries=resolved.libraries,
            bound=True,
            workdir=resolved.workdir,
            render=False,
            added=resolved.added,
        )
