"""Every GPU of a host at once: one worker process per device, all appending to one record.

Each worker is a whole `qualify run` (or `compare`) on one device: its own process, CUDA context,
budget and trials. They share the record folder safely because a trial index is taken under the
record's lock and every trial writes files of its own (`qualify.results.store`). A device that
faults or hangs ends its own worker; the others go on. The caller re-renders the record once all
have ended.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Protocol

from qualify.errors import ExitCode, UsageError

# When several workers end badly, the code that reaches the caller: an interruption first, then
# what a person must fix, then a verdict.
SEVERITY = (ExitCode.INTERRUPTED, ExitCode.INTERNAL, ExitCode.DEVICE, ExitCode.TOOL, ExitCode.BUILD,
            ExitCode.FROZEN, ExitCode.BAD_INPUT, ExitCode.INCOMPLETE, ExitCode.NOT_QUALIFIED, ExitCode.QUALIFIED)


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
        if not part.isdigit():
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
    """The most severe worker code that is not a verdict; else the re-derived record's verdict."""
    codes = {o.exit_code for o in outcomes}
    for code in SEVERITY:
        if int(code) in codes and code not in (ExitCode.INCOMPLETE, ExitCode.NOT_QUALIFIED, ExitCode.QUALIFIED):
            return int(code)
    unknown = codes - {int(c) for c in SEVERITY}
    if unknown:
        return int(ExitCode.INTERNAL)
    return int(verdict_code) if verdict_code is not None else int(ExitCode.INCOMPLETE)

