"""Where in a trial something went wrong: the case and the arm, carried by the exception itself.

A stage wraps the part of its work that belongs to one case or one arm in `watch(case, side)`;
an exception leaving it is re-raised as `Located`, holding the original and that place. The
innermost watch names the place: an outer one passes a `Located` through unchanged.
KeyboardInterrupt and other BaseExceptions are never wrapped (an interrupt belongs to no arm).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Where:
    case: str | None = None
    side: str | None = None


class Located(Exception):
    """An exception raised inside a trial, with the case and arm it was raised for."""

    def __init__(self, where: Where, cause: Exception):
        super().__init__(f"{cause!r} at {where}")
        self.where = where
        self.cause = cause


@contextmanager
def watch(case: str | None = None, side: str | None = None) -> Iterator[Where]:
    where = Where(case, side)
    try:
        yield where
    except Located:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure is the trial's; the sequencer sorts them
        raise Located(where, exc) from exc
