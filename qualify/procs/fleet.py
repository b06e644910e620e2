"""Every GPU of a host at once: one worker process per device, all appending to one record.

Each worker is a whole `qualify run` (or `compare`) on one device, started from the invocation
this process resolved (`qualify.procs.invocation`: the plan checked, the libraries bound, once for
all devices): its own process, CUDA context, budget and trial processes. They share the record folder safely because a trial index is taken under the
record's lock and every trial writes files of its own (`qualify.results.store`). A device that
faults or hangs ends its own worker; the others go on. The caller re-renders the record once all
have ended, after closing as interrupted any trial a worker that died left open (no live process
owns its device any more: `Record.close_dead_trials`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from qualify.errors import ExitCode, UsageError, most_severe
from qualify.procs import invocation
from qualify.procs.runner import Worker, qualify_command, run_together, spawn


@dataclass(frozen=True)
class DeviceOutcome:
    ordinal: int
    exit_code: int


def parse_devices(text: str, count: int) -> list[int]:
    """`all` or a comma-separated list of ordinals, each once and present on this host."""
    if text.strip() == "all":
        if count == 0:
            raise UsageError("no CUDA device on this host", field="--devices")
        return list(range(count))
    ordinals = []
    for part in text.split(","):
        part = part.strip()
        if not (part.isascii() and part.isdigit()):  # '²' is a digit to str.isdigit, not to int()
            raise UsageError(f"{part!r} is not a device ordinal (use 'all' or e.g. 0,2,5)", field="--devices")
        n = int(part)
        if n >= count:
            raise UsageError(f"device {n} requested, {count} present", field="--devices")
        if n in ordinals:
            raise UsageError(f"device {n} given twice", field="--devices")
        ordinals.append(n)
    if not ordinals:
        raise UsageError("no device given", field="--devices")
    return ordinals


def run_devices(ordinals: list[int], start: Callable[[int], Worker]) -> list[DeviceOutcome]:
    """One worker per device at once (`runner.run_together`); their exit codes in ordinal order."""
    codes = run_together(ordinals, start)
    return [DeviceOutcome(n, codes[n]) for n in ordinals]


def combined_exit_code(outcomes: list[DeviceOutcome], verdict_code: int | None) -> int:
    """The most severe worker code that is not a verdict; else the re-derived record's verdict.
    A worker killed by a signal (a negative code) was interrupted: its trial is closed as such."""
    severe = most_severe(o.exit_code for o in outcomes)
    if severe is not None:
        return int(severe)
    return int(verdict_code) if verdict_code is not None else int(ExitCode.INCOMPLETE)


def device_command(path: Path, ordinal: int) -> list[str]:
    """A device worker: `run` on GPU `ordinal` from the invocation at `path`, not the command line."""
    return qualify_command("device-process", path, "--device", str(ordinal))


def run_on_devices(resolved: invocation.Invocation, devices: str, say: Callable[[str], None]) -> int:
    """`--devices`: one device worker per GPU, in parallel, into one record; then one re-render.
    Returns the most severe worker code or the record's verdict as the exit code; `say` gets one
    line per device (its exit code and its log's last line)."""
    import tempfile

    from qualify.commands.pipeline import exit_code, rederive
    from qualify.results.store import Record
    from qualify.run.device import device_count

    ordinals = parse_devices(devices, device_count())
    # The invocation and each worker's output live in a private temporary folder, removed however
    # the fleet ends: only each log's last line is kept, in `say`'s line for its device.
    with tempfile.TemporaryDirectory(prefix="qualify-devices-") as tmp:
        logs, opened = Path(tmp), []
        path = invocation.write(resolved, logs)

        def start(n: int) -> Worker:
            log = open(logs / f"device-{n}.log", "w")  # noqa: SIM115 - closed once the workers end
            opened.append(log)
            return spawn(device_command(path, n), log=log)

        try:
            outcomes = run_devices(ordinals, start)
        finally:
            for log in opened:
                log.close()
        for o in outcomes:
            tail = _last_line(logs / f"device-{o.ordinal}.log")
            say(f"device {o.ordinal}: exit {o.exit_code}" + (f": {tail}" if tail else ""))
    record = Record(resolved.folder)
    if record.ledger_path.exists():
        record.close_dead_trials()  # a worker that died mid-trial left it open: interrupted
    results = rederive(record, resolved.loaded)
    return combined_exit_code(outcomes, int(exit_code(results)) if results is not None else None)


def _last_line(path: Path) -> str:
    """The last non-empty line of a worker's log, read from at most its last 64 KiB."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - (1 << 16)))
            lines = f.read().decode("utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""
