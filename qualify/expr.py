"""A small, safe evaluator for the arithmetic in plans (`cdiv(T, BM)`, `(BM + 64) * 264 * 2`).

Plans are data, so their expressions are parsed with `ast` and walked against a whitelist: numbers,
parameter names, + - * / // % **, comparisons, and/or/not, and a handful of functions. Nothing
reaches `eval`. Results are bounded so an expression can neither hang the evaluator nor describe
an absurd allocation without being noticed.
"""

from __future__ import annotations

import ast
import math
import operator
import warnings
from collections.abc import Mapping
from functools import lru_cache

Number = int | float

MAX_SOURCE_CHARS = 200
MAX_MAGNITUDE = 2**62  # beyond any size a kernel launch or buffer can sensibly have
MAX_EXPONENT = 64


class ExprError(ValueError):
    """An expression is malformed or cannot be evaluated with the given parameters."""


def _cdiv(a: Number, b: Number) -> int:
    _require_int("cdiv", a, b)
    if b == 0:
        raise ExprError("division by zero in cdiv")
    return -(-a // b)


def _round_up(a: Number, b: Number) -> int:
    return _cdiv(a, b) * b


def _require_int(fname: str, *values: Number) -> None:
    for v in values:
        if not isinstance(v, int) or isinstance(v, bool):
            raise ExprError(f"{fname}() takes integers, got {v!r}")


FUNCTIONS = {
    "cdiv": _cdiv,
    "round_up": _round_up,
    "min": min,
    "max": max,
    "abs": abs,
    "sqrt": math.sqrt,
    "rsqrt": lambda x: 1.0 / math.sqrt(x),
    "log2": math.log2,
    "ceil": math.ceil,
    "floor": math.floor,
}

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Not: lambda value: int(not value),
}
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


@lru_cache(maxsize=1024)
def parse(source: str) -> ast.expr:
    """Parse and vet an expression; raise ExprError for anything outside the whitelist."""
    if len(source) > MAX_SOURCE_CHARS:
        raise ExprError(f"expression longer than {MAX_SOURCE_CHARS} characters")
    if not source.isascii():
        # Python folds identifiers to NFKC, so 'Ｎ' would silently mean N: parameter names are
        # ASCII (see the plan model), and an expression that only looks like another is refused.
        raise ExprError(f"{source!r}: only ASCII characters are allowed in expressions")
    try:
        with warnings.catch_warnings():
            # '3if N else 4' parses with a SyntaxWarning printed to stderr, and is to become an
            # error in a later Python: refuse it now, and never print from here
            warnings.simplefilter("error")
            tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"not an expression: {source!r} ({exc.msg})") from None
    except (ValueError, MemoryError, RecursionError) as exc:  # NUL bytes (Python 3.10), absurd nesting
        raise ExprError(f"not an expression: {source!r} ({type(exc).__name__})") from None
    for node in ast.walk(tree):
        _vet(node)
    return tree.body


def _vet(node: ast.AST) -> None:
    allowed = (
        ast.Expression,
        ast.BinOp,
        ast.UnaryOp,
        ast.Compare,
        ast.BoolOp,
        ast.IfExp,
        ast.Constant,
        ast.Name,
        ast.Call,
        ast.Load,
        ast.operator,
        ast.unaryop,
        ast.cmpop,
        ast.boolop,
    )
    if not isinstance(node, allowed):
        raise ExprError(f"{type(node).__name__} is not allowed in expressions")
    if isinstance(node, ast.Constant) and (isinstance(node.value, bool) or not isinstance(node.value, (int, float))):
        raise ExprError(f"only numbers are allowed as constants, not {node.value!r}")
    # operators are vetted here, not when evaluated, so that an untaken branch cannot hide one
    if isinstance(node, ast.BinOp) and type(node.op) not in _BINARY:
        raise ExprError(f"operator {type(node.op).__name__} is not allowed")
    if isinstance(node, ast.UnaryOp) and type(node.op) not in _UNARY:
        raise ExprError(f"operator {type(node.op).__name__} is not allowed")
    if isinstance(node, ast.Compare):
        for op in node.ops:
            if type(op) not in _COMPARE:
                raise ExprError(f"comparison {type(op).__name__} is not allowed")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            name = getattr(node.func, "id", ast.dump(node.func))
            raise ExprError(f"unknown function {name!r} (allowed: {', '.join(sorted(FUNCTIONS))})")
        if node.keywords:
            raise ExprError("keyword arguments are not allowed")


def evaluate(source: str | Number, params: Mapping[str, Number]) -> Number:
    """Evaluate an expression (or pass a literal number through) with the given parameters."""
    if isinstance(source, bool):
        raise ExprError("a boolean is not a number")
    if isinstance(source, (int, float)):
        return _bounded(source)
    return _eval(parse(source), params)


def evaluate_int(source: str | Number, params: Mapping[str, Number]) -> int:
    value = evaluate(source, params)
    if isinstance(value, float):
        if not value.is_integer():
            raise ExprError(f"{source!r} = {value!r} is not an integer")
        value = int(value)
    return value


def _bounded(value: Number) -> Number:
    if not isinstance(value, (int, float)):  # a negative number to a fractional power is complex
        raise ExprError(f"result {value!r} is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ExprError(f"result {value!r} is not finite")
    if abs(value) > MAX_MAGNITUDE:
        # an int beyond float range cannot be formatted with :g
        big = isinstance(value, int) and abs(value) >= 2**1000
        shown = f"about 2**{abs(value).bit_length() - 1}" if big else f"{value:.3g}"
        raise ExprError(f"result {shown} exceeds {MAX_MAGNITUDE:.3g}")
    return value


def _eval(node: ast.expr, params: Mapping[str, Number]) -> Number:
    if isinstance(node, ast.Constant):
        return _bounded(node.value)
    if isinstance(node, ast.Name):
        if node.id not in params:
            known = ", ".join(sorted(params)) or "none"
            raise ExprError(f"unknown name {node.id!r} (parameters: {known})")
        return _bounded(params[node.id])
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_eval(node.operand, params))
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, params), _eval(node.right, params)
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise ExprError("division by zero")
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ExprError(f"exponent {right} exceeds {MAX_EXPONENT}")
        try:
            return _bounded(_BINARY[type(node.op)](left, right))
        except (OverflowError, ValueError, ZeroDivisionError) as exc:
            raise ExprError(str(exc)) from None
    if isinstance(node, ast.Compare):
        left = _eval(node.left, params)
        for op, comparator in zip(node.ops, node.comparators):
            right = _eval(comparator, params)
            if not _COMPARE[type(op)](left, right):
                return 0
            left = right
        return 1
    if isinstance(node, ast.BoolOp):
        # short-circuit as Python does, so that `T > 0 and N / T > 2` guards its division
        decisive = not isinstance(node.op, ast.And)  # the value that ends an `or`, or an `and` if false
        for v in node.values:
            if bool(_eval(v, params)) == decisive:
                return int(decisive)
        return int(not decisive)
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _eval(node.test, params) else node.orelse, params)
    if isinstance(node, ast.Call):
        args = [_eval(a, params) for a in node.args]
        try:
            return _bounded(FUNCTIONS[node.func.id](*args))  # type: ignore[union-attr]
        except ExprError:
            raise
        except (TypeError, ValueError, OverflowError, ZeroDivisionError) as exc:
            raise ExprError(f"{node.func.id}(): {exc}") from None  # type: ignore[union-attr]
    raise ExprError(f"{type(node).__name__} is not allowed")  # unreachable after _vet
