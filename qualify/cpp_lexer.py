"""The preprocessor's view of a CUDA source: its logical lines, as NVRTC's front end forms them.

One pass over the text does what translation phases 1-3 do before any directive is obeyed, so the
include scanner (qualify.build.includes) sees exactly the directive lines NVRTC will:

- a backslash immediately before a newline splices two lines (a backslash, a space, then a newline
  does not: NVRTC 13 keeps those lines apart, and so does this);
- comments become one space, and a `//` comment runs on across a splice;
- string and character literals are kept whole, so `"/*"` opens no comment, and a digit separator
  (`1'000`) opens no character literal;
- a raw string literal (`R"delim(...)delim"`, with an L, u, U or u8 prefix or none) is one token
  whatever it holds: quotes, `/*`, backslashes and whole lines, none of them spliced, none a
  directive; it is kept as `R""` and the logical line it belongs to goes on after it;
- space, tab, form feed and vertical tab are whitespace everywhere, beside `#` too; `#` and `%:`
  open a directive (trigraphs are off in NVRTC, but `??=` is taken as one as well: seeing a
  directive too many can only refuse a source, never hide one);
- the operand of `#include` (and `#include_next`, `#import`) is lexed as a header name from the
  characters as written: `<a/*b*/>` names `a/*b*/`, as NVRTC reads it.

What cannot be lexed with certainty (a raw string's delimiter that is not one) is reported, with
its line, as a problem: the caller refuses the source rather than guess.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

WHITESPACE = " \t\f\v"
INCLUDE_WORDS = ("include", "include_next", "import")
OPENERS = ("#", "%:", "??=")  # what opens a directive line
# a header name written as a literal: "..." or <...> on one line, not empty (groups: quoted, angled);
# every reader of include names (the include scanner, the plan's file collector) matches this one
HEADER_NAME = re.compile(r'"([^"\n]+)"|<([^<>\n]+)>')
_OPENER = r"^[ \t\f\v]*(?:#|%:|\?\?=)[ \t\f\v]*"
_WORDS = "|".join(sorted(INCLUDE_WORDS, key=len, reverse=True))  # include_next before include
_NEXT = re.compile(r"""\n|//|/\*|["']""")
_NEXT_IN_DIRECTIVE = re.compile(r"""\n|//|/\*|["'<]""")
_SPLICE = re.compile(r"\\\n")
_NEWLINE = re.compile(r"\n")
_SPACES = re.compile(r"[ \t\f\v]+")
_RAW_PREFIX = re.compile(r"(?:^|[^A-Za-z0-9_.])(?:u8|[uUL])?R$")
_NUMBER_TAIL = re.compile(r"(?:^|[^A-Za-z0-9_.])\.?[0-9][A-Za-z0-9_.']*$")
_INCLUDE_SO_FAR = re.compile(rf"{_OPENER}(?:{_WORDS})[ \t\f\v]*$")
_DIRECTIVE = re.compile(rf"{_OPENER}([A-Za-z_]\w*)(.*)$", re.DOTALL)
_DELIMITER = re.compile(r'[^ ()\\\t\v\f\n"]{0,16}')
_QUOTED = {'"': re.compile(r'(?:\\.|[^"\\\n])*(?:"|(?=\n)|\Z)'), "'": re.compile(r"(?:\\.|[^'\\\n])*(?:'|(?=\n)|\Z)")}
_HEADER_REST = {"<": re.compile(r"[^>\n]*>?"), '"': re.compile(r'[^"\n]*"?')}


@dataclass(frozen=True)
class Line:
    number: int  # the physical line it starts on, from 1
    text: str  # comments as one space, splices joined, raw strings as ""

    def directive(self) -> tuple[str, str] | None:
        """(word, the text after it) of this directive line; None for one with no word (`#` alone,
        `# 1 "file"`)."""
        match = _DIRECTIVE.match(self.text)
        return None if match is None else (match.group(1), match.group(2))


@dataclass(frozen=True)
class Lexed:
    lines: tuple[Line, ...]
    problems: tuple[tuple[int, str], ...]  # (line, why) of what could not be lexed with certainty


def lex(text: str) -> Lexed:
    """The directive lines of `text`, each as the preprocessor sees it (see the module's doc).
    Other lines are read only as far as a comment, a literal or a raw string might span them."""
    original = text.replace("\r\n", "\n")
    # phase 2 on the whole text; a raw string is read again from `original`, where no splice is undone
    splices_orig = [m.start() for m in _SPLICE.finditer(original)]
    spliced = original.replace("\\\n", "")
    splices = [o - 2 * k for k, o in enumerate(splices_orig)]  # where each one was, in `spliced`
    newlines = [m.start() for m in _NEWLINE.finditer(spliced)]

    def physical(at: int) -> int:
        return 1 + bisect_left(newlines, at) + bisect_right(splices, at)

    lines: list[Line] = []
    problems: list[tuple[int, str]] = []
    out: list[str] = []
    directive: bool | None = None  # this line: a directive, not one, or not known yet
    start, i, n = 0, 0, len(spliced)
    while i < n:
        m = (_NEXT if directive is False else _NEXT_IN_DIRECTIVE).search(spliced, i)
        at = n if m is None else m.start()
        if at > i:
            piece = spliced[i:at]
            if directive is None:
                lead = piece.lstrip(WHITESPACE)
                if lead:
                    directive = lead.startswith(OPENERS)
            if directive is not False:
                out.append(piece)
        if m is None:
            break
        tok = m.group(0)
        i = m.end()
        if tok == "\n":
            if directive:
                lines.append(Line(physical(start), "".join(out)))
            out, start, directive = [], i, None
        elif tok == "//":
            end = spliced.find("\n", i)
            i = n if end < 0 else end
            out.append(" ")
        elif tok == "/*":
            end = spliced.find("*/", i)
            i = n if end < 0 else end + 2
            out.append(" ")  # one space, however many lines it spans: the logical line goes on
        elif tok in '<"' and directive and len(out) <= 64 and _INCLUDE_SO_FAR.match(_SPACES.sub(" ", "".join(out))):
            rest = _always(_HEADER_REST[tok], spliced, i)  # a header name: nothing in it is special
            out.append(tok + rest.group(0))
            i = rest.end()
        elif tok == "<":
            out.append(tok)
        elif tok == '"' and _RAW_PREFIX.search(spliced[max(0, at - 6) : at]):
            quote = at + 2 * bisect_right(splices, at)  # the quote, in `original`
            close, problem = _raw_end(original, quote, physical(at))
            if problem:
                problems.append(problem)
            i = close - 2 * bisect_left(splices_orig, close)
            out.append('""')
        elif tok == "'" and _NUMBER_TAIL.search(spliced[max(0, at - 64) : at]):
            out.append(tok)  # a digit separator (1'000), not a character literal
        else:
            rest = _always(_QUOTED[tok], spliced, i)
            out.append(tok + rest.group(0))
            i = rest.end()
        if directive is None and out and out[-1].strip(WHITESPACE):
            directive = False  # a literal before any `#`: not a directive line
    if directive:
        lines.append(Line(physical(start), "".join(out)))
    return Lexed(tuple(lines), tuple(problems))


def _always(pattern: re.Pattern[str], text: str, at: int) -> re.Match[str]:
    """The match of a pattern that matches anywhere (each part optional, an empty match included)."""
    match = pattern.match(text, at)
    if match is None:  # only a wrong pattern gets here
        raise AssertionError(f"{pattern.pattern!r} must match at any position")
    return match


def header_name(text: str) -> tuple[str, bool, str] | None:
    """The header name `text` starts with (HEADER_NAME): (name, quoted, the literal as written);
    None when it starts with none."""
    match = HEADER_NAME.match(text)
    if match is None:
        return None
    quoted, angled = match.groups()
    return (quoted if quoted is not None else angled), quoted is not None, match.group(0)


def _raw_end(original: str, quote: int, line: int) -> tuple[int, tuple[int, str] | None]:
    """Where the raw string opened by the quote at `quote` ends (index after its closing quote),
    and the problem, if its delimiter is not one or it never closes."""
    delim = _always(_DELIMITER, original, quote + 1).group(0)
    if not original.startswith(delim + "(", quote + 1):
        why = "a raw string literal whose delimiter is not one (at most 16 characters, then '(')"
        return quote + 1, (line, why)
    body = quote + 1 + len(delim) + 1
    end = original.find(")" + delim + '"', body)
    if end < 0:
        return len(original), (line, "a raw string literal that is never closed")
    return end + len(delim) + 2, None
