"""Parse JSON that a person may have written or edited: plans, locks, records, ledger lines.

Python's `json` accepts what none of these files may hold, and fails in ways other than
JSONDecodeError on hostile input:

- `NaN`, `Infinity` and numbers such as `1e400` that overflow to infinity (a NaN bound passes
  every comparison, and the digest's canonical JSON cannot even encode it);
- a key given twice in one object, where the last silently wins, so the file says two things;
- nesting deeper than the interpreter's recursion limit (RecursionError) and integers longer
  than its digit limit (a bare ValueError);
- integers far beyond any count, size or seed a file of qualify's holds: a 4,000-digit integer
  parses, then fails wherever it is printed, multiplied or converted to a float.

`parse` turns each of these into one JSONProblem with the field path where there is one;
callers add the file (and, for the ledger, the line).
"""

from __future__ import annotations

import json
import math

# No field of a plan, lock or record needs an integer beyond 64 bits (u64 arguments are the
# widest); over 21 digits are refused while parsing, the exact bound afterwards with the field.
MAX_INT = 2**64
_MAX_INT_DIGITS = 21


class JSONProblem(ValueError):
    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field


class _RepeatedKey(dict):
    """An object in which `key` appeared more than once (raised on after parsing, with its path)."""

    key: str


def _object(pairs: list[tuple[str, object]]) -> dict:
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            marked = _RepeatedKey(out)
            marked.key = key  # the first key met twice
            return marked
        seen.add(key)
    raise AssertionError("fewer keys than pairs, yet none repeated")


def join_field(path: str, key: object) -> str:
    """`a.b` + `c` -> `a.b.c`; a key that is no plain name is quoted (`a["two words\\n"]`), so a
    field path stays on one line and cannot pass for another path."""
    if isinstance(key, str) and key.isidentifier() and key.isascii():
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def _int(digits: str) -> int:
    if len(digits.lstrip("-")) > _MAX_INT_DIGITS:
        # refused before int() turns thousands of digits into a number that breaks later
        raise ValueError(f"an integer of {len(digits)} digits (at most 64 bits)")
    return int(digits)


def parse(text: str) -> object:
    try:
        data = json.loads(text, object_pairs_hook=_object, parse_int=_int)
    except json.JSONDecodeError as exc:
        raise JSONProblem(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise JSONProblem("JSON nested too deeply") from None
    except ValueError as exc:  # an integer beyond sys.get_int_max_str_digits()
        raise JSONProblem(f"invalid JSON: {exc}") from None
    _refuse_ambiguous(data)
    return data


def _refuse_ambiguous(data: object) -> None:
    """Raise on the first repeated key or non-finite number, in document order.

    Iterative: a document just under json's own nesting limit must not overflow the stack here.
    """
    stack: list[tuple[str, object]] = [("", data)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, _RepeatedKey):
            where = join_field(path, node.key)
            raise JSONProblem("key given twice in one object (JSON would keep only the last)", where)
        if isinstance(node, float) and not math.isfinite(node):
            raise JSONProblem(f"{node!r} is not a finite number", path or "(top level)")
        if isinstance(node, int) and not isinstance(node, bool) and not -MAX_INT < node < MAX_INT:
            raise JSONProblem("integer out of range (at most 64 bits)", path or "(top level)")
        if isinstance(node, dict):
            stack.extend((join_field(path, k), v) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(node))))
