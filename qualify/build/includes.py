"""Every header a compile may read, found and read by qualify before NVRTC starts.

NVRTC is handed the source and its headers in memory (nvrtcCreateProgram's headers and include
names) and runs where it can open no file (qualify.build.sandbox), so this module decides what a
kernel can see:

- An `#include` (or `#include_next`, `#import`) names its file by a literal `"..."` or `<...>`, or
  by one identifier whose every `#define` (in the repository's files and the arm's defines) is
  such a literal. Any other operand is computed (stringized, pasted, a function-like macro) and
  refused with the file and line, as is a `__has_include` or `__has_include_next` whose operand
  is not a literal, or a call to a macro that wraps one (CCCL's `_CCCL_HAS_INCLUDE`) without a
  literal. The toolkit's and CCCL's own headers are trusted to compute names (Thrust does); what
  they compute cannot be found in memory, so the compile fails instead of reading a file.
- A name is resolved as NVRTC's preprocessor would: `"..."` beside the including file, then the
  search folders (the source's folder, the arm's include_dirs, CCCL, the toolkit); `<...>` in the
  search folders. A name whose candidate path leaves the allowed folders (the repository, CCCL,
  the toolkit) is refused whether or not such a file exists, so the refusal reveals nothing.
- NVRTC matches in-memory headers by the name as written, so one name must mean one file; two
  includes that spell one name for two files are refused with both files named.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from qualify.cpp_lexer import HEADER_NAME, INCLUDE_WORDS, header_name, lex
from qualify.errors import PlanError
from qualify.io import MAX_SOURCE_BYTES, UnreadableFile, read_limited

MAX_HEADERS = 20_000
MAX_TOTAL_BYTES = 512 * 2**20

_IDENT = re.compile(r"^[A-Za-z_]\w*$")
_DEFINE = re.compile(r"^\s*([A-Za-z_]\w*)(\([^)]*\))?(.*)$")
_HAS_INCLUDE = re.compile(r"\b__has_include(?:_next)?\b")
_HAS_INCLUDE_OPERAND = re.compile(rf"\s*\(\s*(?:{HEADER_NAME.pattern})\s*\)")
_DEFINED_BEFORE = re.compile(r"\bdefined\s*\(?\s*$")
_IDENTIFIERS = re.compile(r"[A-Za-z_]\w*")
# a name NVRTC and this scan could read two ways (a comment, an escape, a quote, whitespace in it)
_AMBIGUOUS_NAME = re.compile(r"""[\s\\"']|/\*|//""")


@dataclass(frozen=True)
class Directive:
    line: int  # physical line where the directive starts, from 1
    word: str  # include, define, if, ...
    rest: str  # the directive's text after its word, comments blanked, splices joined


@dataclass(frozen=True)
class Scanned:
    directives: tuple[Directive, ...]
    includes: tuple[tuple[int, str, bool], ...]  # (line, name, quoted) of literal includes and __has_include
    macro_includes: tuple[tuple[int, str], ...]  # (line, identifier) of `#include NAME`
    literal_defines: tuple[tuple[str, str, bool, int], ...]  # (macro, name, quoted, line) of `#define M "x"`
    other_defines: tuple[str, ...]  # macros defined as anything but one literal
    wrappers: tuple[str, ...]  # function-like macros whose body reaches __has_include
    computed: tuple[tuple[int, str], ...]  # (line, why) of each computed include


@dataclass(frozen=True)
class Headers:
    """What NVRTC gets: include name -> (file, bytes), and the folders a name may resolve into."""

    by_name: dict[str, tuple[Path, bytes]]
    allowed: tuple[Path, ...]

    def path_of(self, name: str) -> Path | None:
        found = self.by_name.get(name)
        return found[0] if found is not None else None


def _piece_of_has_include(word: str) -> bool:
    """A part of `__has_include(_next)` that token pasting could complete (`__has_`, `include`)."""
    whole = "__has_include_next"
    return (
        word not in ("__has_include", "__has_include_next")
        and len(word) >= 4
        and word in whole
        and ("has" in word or "incl" in word)
    )


def _has_include_problems(word: str, rest: str) -> list[str]:
    """Why a directive's `__has_include` cannot be named by this scan (none when each is a literal)."""
    problems = []
    for found in _HAS_INCLUDE.finditer(rest):
        if word in ("ifdef", "ifndef", "undef") or _DEFINED_BEFORE.search(rest[: found.start()]):
            continue  # `defined(__has_include)` asks whether the feature exists, not a header
        if not _HAS_INCLUDE_OPERAND.match(rest, found.end()):
            problems.append('__has_include of a name that is not a literal "..." or <...>')
    if any(_piece_of_has_include(w) for w in _IDENTIFIERS.findall(rest)):
        problems.append("a piece of __has_include that token pasting could complete")
    return problems


def scan(text: str) -> Scanned:
    directives: list[Directive] = []
    includes: list[tuple[int, str, bool]] = []
    macro_includes: list[tuple[int, str]] = []
    literal_defines: list[tuple[str, str, bool, int]] = []
    other: list[str] = []
    wrappers: list[str] = []
    computed: list[tuple[int, str]] = []
    lexed = lex(text)
    computed.extend((line, why) for line, why in lexed.problems)
    for logical in lexed.lines:
        line = logical.number
        parsed = logical.directive()
        if parsed is None:
            continue
        word, rest = parsed
        directives.append(Directive(line, word, rest))
        if word in INCLUDE_WORDS:
            operand = rest.strip(" \t\f\v")
            named = header_name(operand)
            if named is not None:
                if _AMBIGUOUS_NAME.search(named[0]):
                    computed.append(
                        (line, f"#{word} names {named[0]!r}, which holds a space, quote, backslash or comment")
                    )
                    continue
                includes.append((line, named[0], named[1]))
            elif _IDENT.match(operand):
                macro_includes.append((line, operand))
            else:
                computed.append((line, f"#{word} computes its file name with a macro"))
            continue
        computed.extend((line, why) for why in _has_include_problems(word, rest))
        for found in _HAS_INCLUDE.finditer(rest):
            probed = _HAS_INCLUDE_OPERAND.match(rest, found.end())
            if probed is not None:
                quoted, angled = probed.groups()
                name = quoted if quoted is not None else angled
                if not _AMBIGUOUS_NAME.search(name):
                    includes.append((line, name, quoted is not None))
        if word == "define":
            defined = _DEFINE.match(rest)
            if defined is None:
                continue
            name, params, body = defined.groups()
            body = body.strip(" \t\f\v")
            named = header_name(body)
            if params is None and named and body == named[2] and not _AMBIGUOUS_NAME.search(named[0]):
                literal_defines.append((name, named[0], named[1], line))
            else:
                other.append(name)
                if _HAS_INCLUDE.search(body):
                    if params is None:  # `#define H __has_include`: H(...) would test any name unseen
                        computed.append((line, f"#define {name} stands for __has_include; call __has_include itself"))
                    else:
                        wrappers.append(name)
    return Scanned(
        directives=tuple(directives),
        includes=tuple(includes),
        macro_includes=tuple(macro_includes),
        literal_defines=tuple(literal_defines),
        other_defines=tuple(other),
        wrappers=tuple(wrappers),
        computed=tuple(computed),
    )


_SCAN_MEMO: dict[tuple[str, int, int], tuple[bytes, Scanned]] = {}
_SCAN_LOCK = threading.Lock()


def _read(path: Path, trusted: bool, reader) -> tuple[bytes, Scanned]:
    """A file's bytes and scan; the toolkit's and CCCL's are kept by (path, size, mtime)."""
    if not trusted:
        data = reader(path)
        return data, scan(data.decode("utf-8", errors="replace"))
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _SCAN_LOCK:
        hit = _SCAN_MEMO.get(key)
    if hit is None:
        data = reader(path)
        hit = (data, scan(data.decode("utf-8", errors="replace")))
        with _SCAN_LOCK:
            _SCAN_MEMO[key] = hit
    return hit


def _inside(folder: Path, path: Path) -> bool:
    return path == folder or folder in path.parents


def _lexical(folder: Path, name: str) -> Path:
    return Path(os.path.normpath(folder / name))


def _rel(path: Path, bases: tuple[Path, ...]) -> str:
    for base in bases:
        if _inside(base, path):
            return path.relative_to(base).as_posix() or path.name
    return path.name


@dataclass
class _Walk:
    source: Path
    search: tuple[Path, ...]
    repository: tuple[Path, ...]  # folders whose files are the plan's own (computed includes refused)
    trusted: tuple[Path, ...]  # CCCL and the toolkit
    defines: dict[str, str]
    field: str | None
    plan_path: Path | None

    def refuse(self, message: str, path: Path | None = None, line: int | None = None) -> PlanError:
        """One line naming the file and line (the plan and field where the caller knows them)."""
        if self.plan_path is not None:
            where = f"{_rel(path, self.repository + self.trusted)} line {line}: " if path is not None and line else ""
            return PlanError(f"{where}{message}", file=self.plan_path, field=self.field)
        return PlanError(message, file=path or self.source, field=f"line {line}" if line else None)

    def is_trusted(self, path: Path) -> bool:
        return any(_inside(t, path) for t in self.trusted)

    def allowed(self, path: Path) -> bool:
        return any(_inside(a, path) for a in self.repository + self.trusted)

    def candidates(self, includer: Path, name: str, quoted: bool) -> list[Path]:
        return [_lexical(folder, name) for folder in ((includer.parent, *self.search) if quoted else self.search)]

    def resolve(self, includer: Path, line: int, name: str, quoted: bool) -> Path | None:
        for candidate in self.candidates(includer, name, quoted):
            if not self.allowed(candidate):
                if self.is_trusted(includer):
                    continue  # a toolkit header probing for a host header: not found, never read
                raise self.refuse(
                    f"includes {name!r}, which names a file outside the repository and the CUDA headers",
                    includer,
                    line,
                )
            try:
                if not candidate.exists():
                    continue
                real = candidate.resolve()
            except (OSError, ValueError):  # a name no file system can hold
                continue
            if not self.allowed(real):
                raise self.refuse(f"includes {name!r}, which resolves outside the repository", includer, line)
            if not real.is_file():
                if real.is_dir():
                    continue
                raise self.refuse(
                    f"includes {name!r}, which is not a regular file (a FIFO or device would hang the compiler)",
                    includer,
                    line,
                )
            return real
        return None


def resolve_headers(
    source: Path,
    source_bytes: bytes,
    search: tuple[Path, ...],
    repository: tuple[Path, ...],
    trusted: tuple[Path, ...],
    defines: dict[str, str],
    *,
    plan_path: Path | None = None,
    field: str | None = None,
    reader=None,
) -> Headers:
    """Every header the source can reach, read once, keyed by the name NVRTC will be asked for.

    `search`: the include folders in NVRTC's order; `repository`: folders whose files are the
    plan's (their includes must be literal); `trusted`: the toolkit's and CCCL's folders.
    """
    read = reader or (lambda p: read_limited(p, MAX_SOURCE_BYTES))

    def guarded_read(path: Path) -> bytes:
        try:
            return read(path)
        except UnreadableFile as exc:
            raise PlanError(f"cannot read {path.name}: {exc.message}", file=plan_path or path, field=field) from None

    walk = _Walk(source, search, repository, trusted, defines, field, plan_path)
    by_name: dict[str, tuple[Path, bytes]] = {}
    first_includer: dict[str, Path] = {}
    scanned: dict[Path, Scanned] = {source: scan(source_bytes.decode("utf-8", errors="replace"))}
    contents: dict[Path, bytes] = {source: source_bytes}
    # -D values of the arm count as defines of the source
    literal_defines: dict[str, set[tuple[str, bool]]] = {}
    non_literal: set[str] = set()
    for name, value in defines.items():
        named = header_name(str(value).strip())
        if named and str(value).strip() == named[2]:
            header, quoted, _ = named
            literal_defines.setdefault(name, set()).add((header if quoted else header.strip(), quoted))
        else:
            non_literal.add(name)
    queue = [source]
    total = len(source_bytes)
    while queue:
        path = queue.pop()
        info = scanned[path]
        names = [(line, name, quoted) for line, name, quoted in info.includes]
        for macro, name, quoted, line in info.literal_defines:
            literal_defines.setdefault(macro, set()).add((name, quoted))
            names.append((line, name, quoted))
        if not walk.is_trusted(path):
            non_literal.update(info.other_defines)
        if path == source:  # the arm's -D values name headers as if the source defined them
            names += [(0, name, quoted) for values in list(literal_defines.values()) for name, quoted in values]
        for line, name, quoted in names:
            real = walk.resolve(path, line, name, quoted)
            if real is None:
                continue
            known = by_name.get(name)
            if known is not None:
                if known[0] != real:
                    raise walk.refuse(
                        f"{name!r} names {_rel(real, repository + trusted)} here but "
                        f"{_rel(known[0], repository + trusted)} from {_rel(first_includer[name], repository + trusted)}; "
                        "NVRTC finds headers by the name as written, so give each file its own name",
                        path,
                        line or None,
                    )
                continue
            if real in contents:
                by_name[name] = (real, contents[real])
                first_includer[name] = path
                continue
            if len(scanned) >= MAX_HEADERS:
                raise walk.refuse(f"more than {MAX_HEADERS} headers are reachable from {source.name}")
            data, info_next = _read(real, walk.is_trusted(real), guarded_read)
            total += len(data)
            if total > MAX_TOTAL_BYTES:
                raise walk.refuse(f"the headers reachable from {source.name} exceed {MAX_TOTAL_BYTES >> 20} MiB")
            scanned[real], contents[real] = info_next, data
            by_name[name] = (real, data)
            first_includer[name] = path
            queue.append(real)
    _refuse_computed(walk, scanned, literal_defines, non_literal)
    return Headers(by_name=by_name, allowed=repository + trusted)


def _refuse_computed(
    walk: _Walk, scanned: dict[Path, Scanned], literal_defines: dict[str, set], non_literal: set[str]
) -> None:
    wrappers = {w for info in scanned.values() for w in info.wrappers}
    # a macro that calls a wrapper is one too (to a fixed point); an object-like one stands for it
    defines = [
        (path, d.line, parsed.groups())
        for path, info in scanned.items()
        for d in info.directives
        if d.word == "define" and (parsed := _DEFINE.match(d.rest)) is not None
    ]
    grew = bool(wrappers)
    while grew:
        grew = False
        names = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(wrappers))) + r")\b")
        for path, line, (name, params, body) in defines:
            if name in wrappers or not names.search(body):
                continue
            if params is None and not walk.is_trusted(path):
                raise walk.refuse(
                    f"#define {name} stands for a macro that tests a header; call it by its name", path, line
                )
            wrappers.add(name)
            grew = True
    call = re.compile(r"\b(" + "|".join(map(re.escape, sorted(wrappers))) + r")\b") if wrappers else None
    for path in sorted(scanned):
        if walk.is_trusted(path):
            continue
        info = scanned[path]
        for line, why in info.computed:
            raise walk.refuse(f'{why}; name the header literally ("..." or <...>)', path, line)
        for line, macro in info.macro_includes:
            if macro not in literal_defines or macro in non_literal:
                raise walk.refuse(
                    f"#include {macro} takes its file name from a macro that is not defined as one literal "
                    '"..." or <...>; name the header literally',
                    path,
                    line,
                )
        if call is None:
            continue
        for directive in info.directives:
            if directive.word == "define":
                continue  # a wrapper's own definition (or another built on it) is checked where it is called
            for found in call.finditer(directive.rest):
                if not _HAS_INCLUDE_OPERAND.match(directive.rest, found.end()):
                    raise walk.refuse(
                        f"{found.group(1)}(...) tests a header whose name is not a literal",
                        path,
                        directive.line,
                    )
