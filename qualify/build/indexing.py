"""What a kernel's source says about its sizes, for `plan new`: a placeholder per integer
parameter, and each buffer's shape read from how the kernel indexes it.

A reading of the text, not of the semantics: a pointer indexed with an integer parameter inside
a product (`x[row * C + i]`) is taken to span every integer parameter (an N×C tile), one indexed
by a variable the body bounds by a parameter (`gamma[i]` with `i < C`) to span that parameter,
and any other (`mean[row]`) to span the first. The skeleton lists the shapes
it inferred for the user to confirm; `plan check` and the compiled kernel's sizes catch a
misreading of the arguments, not of a shape, so the guess is said to be a guess.
"""

from __future__ import annotations

import re

from qualify import expr

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def kernel_body(source: str, kernel: str) -> str | None:
    """The text between the braces of `__global__ ... kernel(...) { ... }`, or None."""
    name = kernel.split("<", 1)[0].split("::")[-1]
    text = _COMMENTS.sub(" ", source)
    match = re.search(r"__global__[^;{}]*?\b" + re.escape(name) + r"\s*\(", text)
    if match is None:
        return None
    start = text.find("{", match.end())
    if start < 0:
        return None
    depth = 0
    for end in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        if depth == 0:
            return text[start + 1 : end]
    return None


def placeholders(names: list[str]) -> dict[str, str]:
    """{integer parameter: its placeholder}: one each, the parameter's name in capitals where that
    is a usable name ('n' -> 'N', 'cols' -> 'COLS'), else P1, P2 ...; a lone parameter is 'N'."""
    if len(names) <= 1:
        return {name: "N" for name in names}
    out: dict[str, str] = {}
    for k, name in enumerate(names, start=1):
        upper = name.upper()
        usable = re.fullmatch(r"[A-Z_][A-Z0-9_]*", upper) and upper not in expr.FUNCTIONS and upper != "THREADS"
        out[name] = upper if usable and upper not in out.values() else f"P{k}"
    return out


def _index_expressions(body: str, pointer: str) -> list[str]:
    out = []
    for match in re.finditer(r"\b" + re.escape(pointer) + r"\s*\[", body):
        depth, start = 1, match.end()
        for end in range(start, len(body)):
            depth += {"[": 1, "]": -1}.get(body[end], 0)
            if depth == 0:
                out.append(body[start:end])
                break
    return out


def inferred_shape(body: str | None, pointer: str, integers: dict[str, str]) -> list[str] | None:
    """The shape of the buffer passed as `pointer`, in placeholders, or None when the body says
    nothing of it (not indexed, or no body found)."""
    if body is None or not integers:
        return None
    indices = _index_expressions(body, pointer)
    if not indices:
        return None
    for index in indices:
        for name in integers:
            if re.search(r"\*\s*" + re.escape(name) + r"\b|\b" + re.escape(name) + r"\s*\*", index):
                return list(integers.values())
    # indexed by a variable alone (`gamma[col]`): the parameter that variable is bounded by
    for index in indices:
        var = index.strip()
        if re.fullmatch(r"[A-Za-z_]\w*", var):
            bound = re.search(r"\b" + re.escape(var) + r"\s*(?:<|>=)\s*([A-Za-z_]\w*)\b", body)
            if bound is not None and bound.group(1) in integers:
                return [integers[bound.group(1)]]
    return [next(iter(integers.values()))]
