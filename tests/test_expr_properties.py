"""Property-based tests of the expression evaluator (hypothesis): whatever an expression says, the
evaluator returns a bounded real number or raises ExprError, quickly. The profile is fuzzing.py's.
"""

from __future__ import annotations

import math
import time
import warnings

from fuzzing import PROFILE
from hypothesis import example, given
from hypothesis import strategies as st

from qualify import expr

TOKENS = [
    *"0123456789",
    "T",
    "N",
    "BM",
    "x",
    "_",
    ".",
    "'",
    '"',
    " ",
    "(",
    ")",
    ",",
    "+",
    "-",
    "*",
    "/",
    "//",
    "%",
    "**",
    "<",
    "<=",
    "==",
    "!=",
    ">",
    "and",
    "or",
    "not",
    "if",
    "else",
    "cdiv",
    "round_up",
    "min",
    "max",
    "abs",
    "sqrt",
    "rsqrt",
    "log2",
    "ceil",
    "floor",
    "e",
    "j",
    "lambda",
    "__import__",
    "[",
    "]",
    "{",
    "}",
    ":",
    "=",
    "@",
    "~",
    "<<",
    "^",
    "\\",
]
PARAMS = {"T": 512, "N": 1024, "BM": 64}


@PROFILE
@given(tokens=st.lists(st.sampled_from(TOKENS), max_size=40))
@example(tokens=["(", "N", "-", "2", "*", "N", ")", "**", "0", ".", "5"])  # complex
@example(tokens=["3", "if", " ", "N", " ", "else", " ", "4"])  # a SyntaxWarning on stderr
@example(tokens=["(", "2", "**", "6", "2", ")", "**", "6", "4"])  # too large to format as a float
def test_expressions_evaluate_to_a_bounded_number_or_raise_expr_error(tokens):
    source = "".join(tokens)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the evaluator must not print, warnings included
        try:
            value = expr.evaluate(source, PARAMS)
        except expr.ExprError:
            value = None
    assert time.perf_counter() - start < 0.5, source
    if value is not None:
        assert type(value) in (int, float), (source, value)
        assert math.isfinite(value) and abs(value) <= expr.MAX_MAGNITUDE, (source, value)


@PROFILE
@given(source=st.text(max_size=220))
def test_arbitrary_text_is_an_expression_or_expr_error(source):
    try:
        value = expr.evaluate(source, PARAMS)
    except expr.ExprError:
        return
    assert type(value) in (int, float) and math.isfinite(value)
