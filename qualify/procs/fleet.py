"""Every GPU of a host at once: one worker process per device, all appending to one record.

Each worker is a whole `qualify run` (or `compare`) on one device: its own process, CUDA context,
budget and trials. They share the record folder safely because a trial index is taken under the
record's lock and every trial writes files of its own (`qualify.results.store`). A device that
faults or hangs ends its own worker; the others go on. The caller re-renders the record once all
have ended, after closing as interrupted any trial a worker that died left open (no live process
owns its device any more: `Record.close_dead_trials`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from qualify.errors import ExitCode, UsageError, most_severe


class Worker(Protocol):
    def wait(self) -> int: ...

    def terminate(self) -> None: ...


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
    """Start one worker per device, wait for all, and return their exit codes in ordinal order.

    Ctrl-C reaches every worker (they share the terminal's process group) and each keeps the
    trial it was in; here it only stops the waiting, and the workers still running are then
    asked to stop too, so none is left behind.
    """
    workers = {n: start(n) for n in ordinals}
    codes: dict[int, int] = {}

    def wait(n: int) -> None:
        codes[n] = workers[n].wait()

    threads = [threading.Thread(target=wait, args=(n,), daemon=True) for n in ordinals]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)
    except KeyboardInterrupt:
        for n, w in workers.items():
            if n not in codes:
                w.terminate()
        for t in threads:
            t.join()
        for n in ordinals:
            codes.setdefault(n, int(ExitCode.INTERRUPTED))
    return [DeviceOutcome(n, codes[n]) for n in ordinals]


def combined_exit_code(outcomes: list[DeviceOutcome], verdict_code: int | None) -> int:
    """The most severe worker code that is not a verdict; else the re-derived record's verdict.
    A worker killed by a signal (a negative code) was interrupted: its trial is closed as such."""
    severe = most_severe(o.exit_code for o in outcomes)
    if severe is not None:
        return int(severe)
    return int(verdict_code) if verdict_code is not None else int(ExitCode.INCOMPLETE)


def run_on_devices(
    command: list[str],
    plan_path: Path,
    record_dir: Path | None,
    devices: str,
    trials: int | None,
    exploratory: bool,
    libraries: dict[str, Path] | None,
    say: Callable[[str], None],
) -> int:
    """`--devices`: one `qualify run/compare --device N` worker per GPU, in parallel, into one record;
    then one re-render. Returns the most severe worker code or the record's verdict as the exit code;
    `say` gets one line per device (its exit code and its log's last line)."""
    import subprocess
    import sys
    import tempfile

    from qualify.commands.pipeline import bind_libraries, check_libraries, exit_code, load_frozen, record_folder
    from qualify.record.assemble import write_record
    from qualify.results.store import Record
    from qualify.run.device import device_count

    loaded = load_frozen(plan_path)  # refused here once, not once per worker
    if libraries is not None:
        bind_libraries(loaded, libraries)
    check_libraries(loaded, libraries)
    folder = record_folder(loaded, record_dir)  # before any device is counted or worker started
    ordinals = parse_devices(devices, device_count())
    extra = (["--trials", str(trials)] if trials else []) + (["--exploratory"] if exploratory else [])
    # Each worker's output goes to a log in a private temporary folder, removed however the fleet
    # ends: only each log's last line is kept, in `say`'s line for its device.
    with tempfile.TemporaryDirectory(prefix="qualify-devices-") as tmp:
        logs, opened = Path(tmp), []

        def start(n: int):
            log = open(logs / f"device-{n}.log", "w")  # noqa: SIM115 - closed once the workers end
            opened.append(log)
            return subprocess.Popen(
                [sys.executable, "-m", "qualify", *command, "--record", str(folder), "--device", str(n), *extra],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

        try:
            outcomes = run_devices(ordinals, start)
        finally:
            for log in opened:
                log.close()
        for o in outcomes:
            tail = _last_line(logs / f"device-{o.ordinal}.log")
            say(f"device {o.ordinal}: exit {o.exit_code}" + (f": {tail}" if tail else ""))
    record = Record(folder)
    if record.ledger_path.exists():
        record.close_dead_trials()  # a worker that died mid-trial left it open: interrupted
    verdict = None
    if record.trials():
        with record.locked():
            results = write_record(record, loaded.plan, loaded.lock)
        verdict = int(exit_code(results))
    return combined_exit_code(outcomes, verdict)


def _last_line(path: Path) -> str:
    """The last non-empty line of a worker's log, read from at most its last 64 KiB."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - (1 << 16)))
            lines = f.read().decode("utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""
