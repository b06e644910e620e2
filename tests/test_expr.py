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
