"""Markdown for the record's README: escaping every label, and the filters that format one value.

The README template (qualify/render/readme.py) prints every value through `finalize`, so a label
from a plan or a trial file is plain text; the filters here build what the template shows.
"""

from __future__ import annotations

import re

from qualify.render.plain import visible
from qualify.results.model import CaseStats, PooledStats

# ---------------------------------------------------------------------------------------------
# escaping: every value the template prints is escaped unless it is already Markdown (Md)
#
# The template's `finalize` passes every `{{ value }}` through `md` unless the value is an Md, so a
# label from the plan or a trial file (a revision, a hypothesis, a gate or case name, a device
# name, a failure message) lands as plain text: no HTML, comments, emphasis, links, code spans,
# table breaks or headings can be injected. Filters that build Markdown return Md and escape the
# labels they embed; the number filters return Md because they produce no label text.


class Md(str):
    """Text that is already Markdown; written as it is."""


# Characters that start inline Markdown (GitHub flavour: ~ strikethrough, $ math, | table cells,
# & entities, < HTML and autolinks). CommonMark lets a backslash escape any ASCII punctuation.
_INLINE = frozenset("\\`*_[]<|&~$")
_TAG_START = re.compile(r"[A-Za-z/!?]")  # what may follow "<" in an HTML tag, comment or autolink
_BLOCK_START = re.compile(r"^(#|>|[-+=]|\d+(?=[.)]))")


def md(value: object) -> Md:
    """Any value as plain text in Markdown."""
    if isinstance(value, Md):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Md(str(value))  # a number is no label: "-1" stays "-1"
    text = visible(str(value))
    out = []
    for i, ch in enumerate(text):
        # an underscore between two letters or digits can neither open nor close emphasis
        # (CommonMark's flanking rules), so `attention_gated_fwd` stays as written
        inner = ch == "_" and 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()
        # "<=" or "< 2" can open no tag; "<a", "</", "<!--", "<?" can
        harmless = ch == "<" and not _TAG_START.match(text, i + 1)
        out.append("\\" + ch if ch in _INLINE and not (inner or harmless) else ch)
    return Md("".join(out))


def line_start(value: object) -> Md:
    """Text that opens a line or a list item: also no heading, list, quote or rule may start."""
    text = md(value)
    return Md(_BLOCK_START.sub(_escape_block, text, count=1))


def _escape_block(m: re.Match) -> str:
    mark = m.group(1)
    return mark + "\\" if mark[0].isdigit() else "\\" + mark  # "12\." or "\#", "\-"


def code(value: object, cell: bool = False) -> Md:
    """A value as an inline code span; `cell=True` inside a table, where GFM needs `\\|`."""
    text = visible(str(value))
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or (text[:1] == text[-1:] == " " and text.strip()) else ""
    if cell:
        text = text.replace("|", "\\|")
    return Md(f"{fence}{pad}{text}{pad}{fence}")


def code_cell(value: object) -> Md:
    return code(value, cell=True)


def literal(value: object) -> Md:
    """A line inside a fenced code block: written as it is, control characters made visible."""
    return Md(visible(str(value)))


def fence(lines: list[str], minimum: int = 3) -> Md:
    """A backtick fence longer than any backtick run in the lines, so none of them can close it."""
    longest = max((len(run) for line in lines for run in re.findall(r"`+", str(line))), default=0)
    return Md("`" * max(minimum, longest + 1))


def finalize(value: object) -> str:
    return md(value)


# ---------------------------------------------------------------------------------------------
# filters: one value in, text out


def duration(ns: float | None) -> str:
    """Time per launch with fixed decimals: µs below a millisecond, ms from there."""
    if ns is None:
        return Md("n/a")
    if abs(ns) >= 1e6:
        return Md(f"{ns / 1e6:.3f} ms")
    return Md(f"{ns / 1e3:.3f} µs")


def signed_pct(value: float | None) -> str:
    return Md("n/a" if value is None else f"{value:+.2f} %")


def ratio(value: float | None) -> str:
    return Md("n/a" if value is None else f"{value:.4f}")


def interval(stats: CaseStats | PooledStats | None) -> str:
    if stats is None:
        return Md("n/a")
    if stats.ci_low is None or stats.ci_high is None:
        return Md("none (fewer than 2 blocks)")
    # the interval of the ratio candidate / base, written as the change in time it spans
    return Md(f"[{(stats.ci_low - 1) * 100:+.2f} %, {(stats.ci_high - 1) * 100:+.2f} %]")


def count(n: int | float | None) -> str:
    return Md("n/a" if n is None else f"{n:,}")


def plural(n: int | float, singular: str, many: str | None = None) -> str:
    """'1 trial', '2 trials', '1,024 timed samples'."""
    return f"{n:,} {singular if n == 1 else (many or singular + 's')}"


def num(value: float | int) -> str:
    """A declared number as written (1.0 -> '1', 0.25 -> '0.25')."""
    return f"{value:g}"


def seconds(value: float) -> str:
    return f"{value:g} s"


def nbytes(n: int | None) -> str:
    """Bytes exactly (occupancy limits are exact), MiB for large sizes such as L2."""
    if n is None:
        return "n/a"
    if n >= 2**20:
        return f"{n / 2**20:.1f} MiB"
    return f"{n:,} B"


def short(digest: str | None, width: int = 12) -> str:
    return "n/a" if not digest else digest[:width]


def cell(value: object) -> Md:
    """Text safe inside a Markdown table cell (every value is: `md` escapes pipes and newlines)."""
    return md(value)


def yes_no(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def case_class(name: str) -> str:
    return {"cant_tell": "can't tell"}.get(name, name)


def verdict_status(status: str) -> str:
    return status.replace("_", " ").upper()


def clock(mhz: float | int | None) -> str:
    return "n/a" if mhz is None else f"{mhz:,.0f} MHz"


FILTERS = {
    "md": md,
    "code": code,
    "code_cell": code_cell,
    "literal": literal,
    "fence": fence,
    "duration": duration,
    "signed_pct": signed_pct,
    "ratio": ratio,
    "interval": interval,
    "count": count,
    "plural": plural,
    "seconds": seconds,
    "num": num,
    "nbytes": nbytes,
    "short": short,
    "cell": cell,
    "yes_no": yes_no,
    "case_class": case_class,
    "verdict_status": verdict_status,
    "clock": clock,
    "line_start": line_start,
}
