"""The expression evaluator: the plan's arithmetic, its refusals, and its edges (exact limits,
every function, types, untaken branches)."""

from __future__ import annotations

import math

import pytest

from qualify import expr


@pytest.mark.parametrize(
    "source, params, expected",
    [
        ("cdiv(T, BM)", {"T": 513, "BM": 64}, 9),
        ("(BM + 64) * 264 * 2", {"BM": 128}, 101_376),
        ("2 ** 10 - 1", {}, 1023),
        ("T // 64 % 3", {"T": 640}, 1),
        ("T >= 640 and T < 8192", {"T": 640}, 1),
        ("not T", {"T": 0}, 1),
        ("max(1, min(T, 4))", {"T": 9}, 4),
        ("round_up(T, 64)", {"T": 65}, 128),
        ("64 if T > 512 else 128", {"T": 513}, 64),
        ("1 < T < 3", {"T": 2}, 1),
        ("1 < T < 3", {"T": 3}, 0),
        (7, {}, 7),
    ],
)
def test_evaluates(source, params, expected):
    assert expr.evaluate(source, params) == expected


def test_float_functions():
    assert expr.evaluate("rsqrt(D)", {"D": 256}) == pytest.approx(1 / 16)
    assert expr.evaluate("log2(8)", {}) == pytest.approx(3.0)
    assert math.isclose(expr.evaluate("sqrt(2.0)", {}), math.sqrt(2))


@pytest.mark.parametrize(
    "source, fragment",
    [
        ("__import__('os').system('id')", "unknown function"),
        ("open('/etc/passwd')", "unknown function"),
        ("(1).__class__", "Attribute"),
        ("[1, 2]", "List"),
        ("lambda: 1", "Lambda"),
        ("'abc'", "only numbers"),
        ("T[0]", "Subscript"),
        ("x := 3", "not an expression"),
        ("f'{T}'", "JoinedStr"),
        ("True", "only numbers"),
        ("cdiv(T, b=2)", "keyword"),
        ("1 << 70", "LShift"),
        ("T @ T", "MatMult"),
        ("a" * 300, "longer than"),
    ],
)
def test_refuses(source, fragment):
    with pytest.raises(expr.ExprError, match=fragment):
        expr.evaluate(source, {"T": 1})


@pytest.mark.parametrize(
    "source, params, fragment",
    [
        ("T / 0", {"T": 1}, "division by zero"),
        ("T // (T - T)", {"T": 1}, "division by zero"),
        ("cdiv(T, 0)", {"T": 1}, "division by zero"),
        ("T % 0", {"T": 1}, "division by zero"),
        ("Q * 2", {"T": 1}, "unknown name 'Q'"),
        ("2 ** 100", {}, "exceeds"),
        ("10 ** 10 ** 10", {}, "exceeds"),
        ("T * T * T * T", {"T": 2**20}, "exceeds"),
        ("cdiv(1.5, 2)", {}, "integers"),
        ("sqrt(-1)", {}, "sqrt"),
        ("1e308 * 10", {}, "exceeds"),
    ],
)
def test_evaluation_errors(source, params, fragment):
    with pytest.raises(expr.ExprError, match=fragment):
        expr.evaluate(source, params)


def test_evaluate_int_refuses_fractions():
    assert expr.evaluate_int("T / 2", {"T": 8}) == 4
    with pytest.raises(expr.ExprError, match="not an integer"):
        expr.evaluate_int("T / 3", {"T": 8})


@pytest.mark.parametrize(
    "source, expected",
    [
        ("cdiv(7, 2)", 4),
        ("cdiv(8, 2)", 4),
        ("cdiv(-7, 2)", -3),  # rounds toward +inf, like ceil(-3.5)
        ("round_up(64, 64)", 64),
        ("round_up(1, 64)", 64),
        ("min(3, 2, 5)", 2),
        ("max(3, 7, 5)", 7),
        ("abs(-4)", 4),
        ("sqrt(16)", 4.0),
        ("rsqrt(4)", 0.5),
        ("log2(1024)", 10.0),
        ("ceil(2.25)", 3),
        ("floor(2.75)", 2),
        ("7 - 2", 5),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("7 % 4", 3),
        ("2 ** 3", 8),
        ("+T", 6),
        ("-T", -6),
        ("not 0.0", 1),
        ("not T", 0),
    ],
)
def test_each_function_and_operator_gives_its_exact_value_and_type(source, expected):
    value = expr.evaluate(source, {"T": 6})
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize(
    "source, expected",
    [
        ("T == 6", 1),
        ("T == 5", 0),
        ("T != 5", 1),
        ("T != 6", 0),
        ("T < 6", 0),
        ("T < 7", 1),
        ("T <= 6", 1),
        ("T <= 5", 0),
        ("T > 6", 0),
        ("T > 5", 1),
        ("T >= 6", 1),
        ("T >= 7", 0),
        ("T > 5 and T < 7", 1),
        ("T > 5 and T > 7", 0),
        ("T < 5 and T < 7", 0),
        ("T < 5 or T > 7", 0),
        ("T < 5 or T < 7", 1),
        ("T > 5 or T > 7", 1),
        ("0 or 0 or 3", 1),
        ("3 and 2 and 0", 0),
        ("1 if T else 2", 1),
        ("1 if T - 6 else 2", 2),
    ],
)
def test_comparisons_and_logic_on_both_sides(source, expected):
    value = expr.evaluate(source, {"T": 6})
    assert value == expected and type(value) is int


@pytest.mark.parametrize(
    "source, expected",
    [("T > 0 and N / T > 2", 0), ("T == 0 or N / T > 2", 1), ("T != 0 and N // T", 0)],
)
def test_and_or_stop_at_the_first_deciding_operand(source, expected):
    """A guard spares its division by zero, as it would in Python."""
    assert expr.evaluate(source, {"T": 0, "N": 8}) == expected


@pytest.mark.parametrize(
    "source, fragment",
    [
        ("1 if T else (T in T)", "comparison In"),
        ("1 if T else (T not in T)", "comparison NotIn"),
        ("1 if T else (T is T)", "comparison Is"),
        ("1 if T else (T is not T)", "comparison IsNot"),
        ("1 if T else ~T", "operator Invert"),
        ("1 if T else T << 2", "operator LShift"),
        ("1 if T else T.real", "Attribute"),
        ("T in T", "comparison In"),
    ],
)
def test_a_forbidden_node_is_refused_when_parsed_even_in_an_untaken_branch(source, fragment):
    with pytest.raises(expr.ExprError, match=fragment):
        expr.parse(source)


def test_evaluate_int_returns_an_int_for_an_integral_float_or_an_int():
    value = expr.evaluate_int("T / 2", {"T": 8})
    assert value == 4 and type(value) is int
    assert type(expr.evaluate_int(4.0, {})) is int
    assert expr.evaluate_int("T * 2", {"T": 3}) == 6


@pytest.mark.parametrize(
    "source, message",
    [
        ("foo(1)", "unknown function 'foo' (allowed: abs, cdiv, ceil, floor"),
        ("cdiv(T, b=2)", "keyword arguments are not allowed"),
        ("2 ** 62 + 1", "result 4.61e+18 exceeds 4.61e+18"),
    ],
)
def test_messages_say_exactly_what_is_wrong(source, message):
    with pytest.raises(expr.ExprError) as exc:
        expr.evaluate(source, {"T": 1})
    assert str(exc.value).startswith(message)


def test_source_length_limit_is_exact():
    at_limit = "   1" + " + 1" * 49  # leading blanks count: the limit is on what the plan holds
    assert len(at_limit) == expr.MAX_SOURCE_CHARS
    assert expr.evaluate(at_limit, {}) == 50
    with pytest.raises(expr.ExprError, match="longer than 200"):
        expr.parse(at_limit + " ")


def test_magnitude_limit_is_exact_for_results_literals_and_parameters():
    assert expr.evaluate("2 ** 62", {}) == 2**62
    assert expr.evaluate("-(2 ** 62)", {}) == -(2**62)
    for source, params in [("2 ** 62 + 1", {}), ("-(2 ** 62) - 1", {}), ("T", {"T": 2**62 + 1})]:
        with pytest.raises(expr.ExprError, match="exceeds"):
            expr.evaluate(source, params)
    with pytest.raises(expr.ExprError, match="exceeds"):
        expr.evaluate(2**62 + 1, {})


def test_exponent_limit_is_exact():
    assert expr.evaluate("1 ** 64", {}) == 1
    assert expr.evaluate("2 ** -64", {}) == 2.0**-64
    for source in ("1 ** 65", "2 ** -65"):
        with pytest.raises(expr.ExprError, match="exponent -?65 exceeds 64"):
            expr.evaluate(source, {})


@pytest.mark.parametrize("source", ["T / 0.0", "T // 0.0", "T % 0.0", "cdiv(T, Z)"])
def test_division_by_a_zero_float_or_parameter_is_an_expr_error(source):
    with pytest.raises(expr.ExprError, match="division by zero"):
        expr.evaluate(source, {"T": 1, "Z": 0})


@pytest.mark.parametrize(
    "source, params, fragment",
    [
        ("cdiv(T, 2)", {"T": True}, "cdiv\\(\\) takes integers, got True"),
        ("round_up(T, 2)", {"T": 2.0}, "takes integers"),
        ("cdiv(2, T)", {"T": 0.5}, "takes integers"),
        ("(-8) ** 0.5", {}, "not a real number"),
        ("T * 1.0", {"T": float("inf")}, "not finite"),
        ("log2(0)", {}, "log2\\(\\)"),
        ("min()", {}, "min\\(\\)"),
        ("Q", {}, "unknown name 'Q' \\(parameters: none\\)"),
        ("Q", {"B": 1, "A": 2}, "parameters: A, B"),
        ("1e300 ** 2", {}, "exceeds|Numerical result"),
    ],
)
def test_evaluation_errors_name_the_problem(source, params, fragment):
    with pytest.raises(expr.ExprError, match=fragment):
        expr.evaluate(source, params)


@pytest.mark.parametrize("value", [True, False])
def test_a_boolean_is_not_a_number(value):
    with pytest.raises(expr.ExprError, match="boolean"):
        expr.evaluate(value, {})


def test_a_huge_integer_result_is_described_not_formatted():
    with pytest.raises(expr.ExprError, match=r"about 2\*\*1000 exceeds"):
        expr.evaluate(2**1000, {})
    with pytest.raises(expr.ExprError, match=r"result 9.22e\+18 exceeds 4.61e\+18"):
        expr.evaluate(2**62 * 1.0 + 2**62 * 1.0, {})


def test_a_syntax_warning_is_refused_and_never_printed(capsys):
    with pytest.raises(expr.ExprError, match="not an expression"):
        expr.parse("3if T else 4")
    assert capsys.readouterr() == ("", "")


def test_non_ascii_look_alike_names_are_refused():
    with pytest.raises(expr.ExprError, match="only ASCII"):
        expr.parse("\uff2e + 1")  # FULLWIDTH N, which Python would read as N
