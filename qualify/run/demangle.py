"""Kernel names as a reader knows them: C++ (Itanium ABI) names demangled, parameters dropped.

`c++filt` is used when it is on PATH (it knows the whole grammar). Without it a small builtin
demangler reads the names kernels usually have — namespaces, templates with type and integer
arguments, the back-references among them — and leaves any name it cannot read completely as it
was launched; a half-demangled name would be worse than the mangled one. Nesting is bounded
(`MAX_DEPTH` steps down, each template argument list, type or name one step): a deeper name is
left as it was launched, so no name can exhaust the reader's stack. The trial records which
demangler ran and every name it gave (`KernelTrace`), so a record is re-derived from those names
on any machine.
"""

from __future__ import annotations

import shutil
import subprocess

BUILTIN = "builtin"
CXXFILT = "c++filt"

_BASIC = {
    "v": "void",
    "b": "bool",
    "c": "char",
    "a": "signed char",
    "h": "unsigned char",
    "s": "short",
    "t": "unsigned short",
    "i": "int",
    "j": "unsigned int",
    "l": "long",
    "m": "unsigned long",
    "x": "long long",
    "y": "unsigned long long",
    "n": "__int128",
    "o": "unsigned __int128",
    "f": "float",
    "d": "double",
    "e": "long double",
    "w": "wchar_t",
}
_INTEGRAL = {"i", "j", "l", "m", "x", "y", "s", "t", "h", "a", "c"}
_SUFFIX = {"j": "u", "m": "ul", "y": "ull", "l": "l", "x": "ll"}
# Steps down the builtin reader follows (a template level is about three; each step two Python
# frames): some 40 template levels, more than any kernel name a person writes, and a few hundred
# frames, far below Python's recursion limit. A deeper name stays mangled (the stated fallback).
MAX_DEPTH = 128


class _Unreadable(Exception):
    pass


class _Reader:
    """A recursive-descent reader of the subset named above; anything else raises _Unreadable."""

    def __init__(self, text: str):
        self.s, self.i = text, 0
        self.subs: list[str] = []  # substitution candidates (S_, S0_, ...)
        self.template_args: list[str] = []  # T_, T0_, ... refer to the outermost template's
        self.depth = 0

    def enter(self) -> None:
        """One level deeper into the name; past MAX_DEPTH the name is unreadable."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Unreadable

    def peek(self, n: int = 1) -> str:
        return self.s[self.i : self.i + n]

    def take(self, n: int = 1) -> str:
        out = self.s[self.i : self.i + n]
        if len(out) < n:
            raise _Unreadable
        self.i += n
        return out

    def number(self) -> int:
        start = self.i
        while self.peek().isdigit():
            self.i += 1
        if start == self.i:
            raise _Unreadable
        return int(self.s[start : self.i])

    def seq_id(self) -> int:
        """<seq-id>_ in base 36, where `_` alone is 0 and `X_` is X + 1."""
        if self.peek() == "_":
            self.take()
            return 0
        start = self.i
        while self.peek() and self.peek() != "_":
            self.i += 1
        value = int(self.s[start : self.i], 36)
        self.take()
        return value + 1

    def source_name(self) -> str:
        n = self.number()
        name = self.take(n)
        return "(anonymous namespace)" if name.startswith("_GLOBAL__N") else name

    def name(self) -> str:
        """<name>: a nested name N...E or an unscoped one, each with optional template args."""
        self.enter()
        try:
            return self._name()
        finally:
            self.depth -= 1

    def _name(self) -> str:
        if self.peek() == "N":
            self.take()
            while self.peek() in ("K", "V", "r"):
                self.take()
            parts: list[str] = []
            while self.peek() != "E":
                if self.peek() == "I":
                    parts[-1] += self.template_args_list(outer=True)
                elif self.peek() == "S":
                    parts.append(self.substitution())
                    continue
                else:
                    parts.append(self.source_name())
                self.subs.append("::".join(parts))
            self.take()
            return "::".join(parts)
        if self.peek(2) == "St":
            self.take(2)
            base = "std::" + self.source_name()
        else:
            base = self.source_name()
        if self.peek() == "I":
            self.subs.append(base)
            base += self.template_args_list(outer=True)
        return base

    def substitution(self) -> str:
        self.take()  # S
        if self.peek() == "t":
            self.take()
            return "std::" + self.source_name()
        index = self.seq_id()
        if index >= len(self.subs):
            raise _Unreadable
        return self.subs[index]

    def template_args_list(self, outer: bool) -> str:
        self.enter()
        try:
            return self._template_args_list(outer)
        finally:
            self.depth -= 1

    def _template_args_list(self, outer: bool) -> str:
        self.take()  # I
        args = []
        while self.peek() != "E":
            args.append(self.template_arg())
        self.take()
        if outer and not self.template_args:
            self.template_args = args
        return "<" + ", ".join(args) + ">"

    def template_arg(self) -> str:
        if self.peek() == "L":
            self.take()
            kind = self.take()
            negative = self.peek() == "n"
            if negative:
                self.take()
            value = self.number()
            self.take()  # E
            if kind == "b":
                return "true" if value else "false"
            if kind not in _INTEGRAL:
                raise _Unreadable
            return f"{'-' if negative else ''}{value}{_SUFFIX.get(kind, '')}"
        return self.type()

    def type(self) -> str:
        self.enter()
        try:
            return self._type()
        finally:
            self.depth -= 1

    def _type(self) -> str:
        c = self.peek()
        if c in _BASIC:
            self.take()
            return _BASIC[c]
        if c == "D" and self.peek(5) == "DF16_":
            self.take(5)
            return "_Float16"
        if c in ("P", "R", "K", "V"):
            self.take()
            inner = self.type()
            out = {"P": f"{inner}*", "R": f"{inner}&", "K": f"{inner} const", "V": f"{inner} volatile"}[c]
            self.subs.append(out)
            return out
        if c == "T":
            self.take()
            index = self.seq_id()
            if index >= len(self.template_args):
                raise _Unreadable
            return self.template_args[index]
        if c == "S" and self.peek(2) != "St":
            return self.substitution()
        if c == "N" or c.isdigit() or self.peek(2) == "St":
            out = self.name()
            self.subs.append(out)
            return out
        raise _Unreadable


def builtin_demangle(mangled: str) -> str | None:
    """The kernel's qualified name with its template arguments, or None where the builtin reader
    cannot read the name completely (parameters are read to check the name ends where it should)."""
    if not mangled.startswith("_Z"):
        return None
    reader = _Reader(mangled[2:])
    try:
        name = reader.name()
        while reader.i < len(reader.s):  # the parameter types; a template function names its return first
            reader.type()
    except (_Unreadable, ValueError, IndexError):
        return None
    return name


def short_name(demangled: str) -> str:
    """Drop the parameter list and a leading return type: `void k<1>(float*, int)` -> `k<1>`."""
    text = demangled.strip()
    if text.endswith(")"):
        depth = 0
        for pos in range(len(text) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[pos], 0)
            if depth == 0:
                text = text[:pos]
                break
    depth, cut = 0, 0
    for pos, ch in enumerate(text):  # a return type is separated from the name by a top-level space
        depth += {"<": 1, ">": -1, "(": 1, ")": -1}.get(ch, 0)
        if ch == " " and depth == 0:
            cut = pos + 1
    return text[cut:] or demangled


def which_demangler() -> str:
    return CXXFILT if shutil.which(CXXFILT) else BUILTIN


def demangle_all(names: list[str], demangler: str | None = None) -> tuple[str, dict[str, str]]:
    """(demangler used, launched name -> short readable name) for every name given."""
    demangler = demangler or which_demangler()
    unique = sorted(set(names))
    out: dict[str, str] = {}
    if demangler == CXXFILT and unique:
        try:
            done = subprocess.run(
                [CXXFILT], input="\n".join(unique) + "\n", capture_output=True, text=True, timeout=30, check=True
            ).stdout.splitlines()
        except (OSError, subprocess.SubprocessError):
            done = []
        if len(done) == len(unique):
            return CXXFILT, {m: short_name(d) if d != m else m for m, d in zip(unique, done)}
        demangler = BUILTIN  # c++filt failed: the builtin reader, said so in the trial
    for m in unique:
        out[m] = builtin_demangle(m) or m
    return BUILTIN, out
