"""Where a trial's wall time goes: one account per stage, kept in the trial file's cost."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

# The accounts of a trial's cost, in the order the trial file lists them. "timing" is the time
# spent queueing and waiting for samples (the floor, warm-ups, ABBA and A/A); "readback" (checking
# the timed launches' outputs) and "telemetry" (NVML) are counted apart from it. "inventory" is
# the CUPTI trace of a few calls per arm, taken after a case's timing.
STAGES = (
    "build",
    "preflight",
    "inputs",
    "fidelity",
    "controls",
    "timing",
    "readback",
    "telemetry",
    "inventory",
    "sanitizer",
)


class StageClock:
    """The trial's wall clock, split into the STAGES accounts."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.spent: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        self._open: list[str] = []

    def elapsed(self) -> float:
        """Seconds since the trial started."""
        return time.monotonic() - self.started

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Adds the wall time spent inside to the account; time in a nested account counts for
        the nested one only."""
        start = time.monotonic()
        self._open.append(name)
        try:
            yield
        finally:
            self._open.pop()
            spent = time.monotonic() - start
            self.spent[name] += spent
            if self._open:
                self.spent[self._open[-1]] -= spent
