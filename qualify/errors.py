"""The closed set of failures qualify reports, each with its exit code.

Library code raises these; `qualify.cli` catches them once and prints one line. A verdict of
"not qualified" is data, not an error: its exit code (1) is derived from the verdict at the end.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import IntEnum
from pathlib import Path
from typing import Any


class ExitCode(IntEnum):
    QUALIFIED = 0
    NOT_QUALIFIED = 1
    BAD_INPUT = 2
    FROZEN = 3
    BUILD = 4
    DEVICE = 5
    TOOL = 6
    INCOMPLETE = 7
    INTERNAL = 70
    INTERRUPTED = 130


# When several processes of one invocation end (the devices of `--devices`, the trial processes of
# a run), the code that reaches the caller: an interruption first, then what a person must fix,
# then a verdict. Severity is this order, not the codes' numeric order (7 is milder than 2).
SEVERITY = (
    ExitCode.INTERRUPTED,
    ExitCode.INTERNAL,
    ExitCode.DEVICE,
    ExitCode.TOOL,
    ExitCode.BUILD,
    ExitCode.FROZEN,
    ExitCode.BAD_INPUT,
    ExitCode.INCOMPLETE,
    ExitCode.NOT_QUALIFIED,
    ExitCode.QUALIFIED,
)
VERDICTS = frozenset({ExitCode.QUALIFIED, ExitCode.NOT_QUALIFIED, ExitCode.INCOMPLETE})


def most_severe(codes: Iterable[int]) -> ExitCode | None:
    """Of child processes' exit codes, the one that must reach the caller instead of the record's
    verdict: the most severe that is no verdict. A process killed by a signal (a negative code)
    was interrupted (the trial it was in is closed as such); a code qualify never exits with is an
    internal error. None when every code is a verdict (0 included: a trial process that kept its
    trial), so the record's verdict decides."""
    seen = {int(ExitCode.INTERRUPTED) if c < 0 else int(c) for c in codes}
    for code in SEVERITY:
        if int(code) in seen and code not in VERDICTS:
            return code
    if seen - {int(c) for c in SEVERITY}:
        return ExitCode.INTERNAL
    return None


class QualifyError(Exception):
    """Base of every expected failure. `file` and `field` locate the cause for the user."""

    exit_code: ExitCode = ExitCode.BAD_INPUT
    # set by `plan check` (qualify.plan.stages.staged_error): the stages it ran, and the lines to
    # print after its errors (the stages not checked, the summary)
    stages: list[Any] | None = None
    stage_notes: list[str] | None = None

    def __init__(self, message: str, *, file: str | Path | None = None, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.file = str(file) if file is not None else None
        self.field = field

    def one_line(self, limit: int | None = None) -> str:
        """'file: field: message' on one line; with `limit`, the message cut to about that many
        characters (`capped`), the file and field never."""
        parts = [printable(p) for p in (self.file, self.field) if p]
        message = printable(" ".join(self.message.split()))
        parts.append(message if limit is None else capped(message, limit))
        return ": ".join(parts)

    def each(self) -> list[QualifyError]:
        """The failures this error stands for, one line each (several for `Problems`)."""
        return [self]


class PlanError(QualifyError):
    """The plan (or a file it names) is malformed or inconsistent."""


class Problems(PlanError):
    """Every failure found at once (all errors of a plan, or a plan's own problem and then its
    lock's mismatch), in the order they are to be fixed; the first stands for the group as a
    PlanError, and the exit code is the highest of theirs."""

    def __init__(self, errors: Sequence[QualifyError]):
        first = errors[0]
        super().__init__(first.message, file=first.file, field=first.field)
        self.errors = [e for error in errors for e in error.each()]
        self.exit_code = max(e.exit_code for e in self.errors)

    def each(self) -> list[QualifyError]:
        return list(self.errors)


def all_of(errors: Sequence[QualifyError]) -> QualifyError:
    """One error for `errors` (at least one): itself when alone, else `Problems`."""
    return errors[0] if len(errors) == 1 else Problems(errors)


class UsageError(QualifyError):
    """The command line asks for something that cannot be done."""


class FrozenInputChanged(QualifyError):
    """A file or plan changed after freezing, or a record would be overwritten."""

    exit_code = ExitCode.FROZEN


class BuildError(QualifyError):
    """A compiler refused an arm. `log` keeps the compiler lines that matter."""

    exit_code = ExitCode.BUILD

    def __init__(self, message: str, *, log: str = "", file=None, field=None):
        super().__init__(message, file=file, field=field)
        self.log = log


class DeviceError(QualifyError):
    """No usable GPU, a device the plan does not list, or a broken CUDA environment."""

    exit_code = ExitCode.DEVICE


class ToolError(QualifyError):
    """An external tool (compute-sanitizer, nvcc, ncu) is missing or failed to run."""

    exit_code = ExitCode.TOOL


class EnvironmentProblem(QualifyError):
    """The host refused an operation on a file: a read-only folder, a full disk, no permission.

    Not a bad plan and not a bug: the message names the file and what the system said."""

    exit_code = ExitCode.DEVICE


MAX_LINE = 300  # characters of one error's message; a longer one is cut in its middle


def capped(line: str, limit: int = MAX_LINE) -> str:
    """`line` cut to about `limit` characters in its middle, saying how much was cut: the start
    names the file and field, the end usually the fix, and a line listing every case of a large
    plan is no longer one line to read."""
    if len(line) <= limit + 40:  # cutting fewer characters than the marker adds is no cut
        return line
    head, tail = limit * 2 // 3, limit // 4
    cut = len(line) - head - tail
    return f"{line[:head]} … [{cut:,} characters cut] … {line[-tail:]}"


def printable(text: str) -> str:
    """`text` with every control character (a newline, an escape sequence's ESC) written as a
    visible escape, so a hostile file name or label cannot split or restyle a one-line message."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
