"""Quantum counts, bound fractions and offending indices against hand-computed cases."""

import numpy as np
import pytest
from float_patterns import LARGEST, SIGN, words

from qualify.evaluate.parity_counts import count, step_index


def bf16(*bits):
    return np.array(bits, dtype=np.uint16).view(np.uint8)


def f16(*bits):
    return np.array(bits, dtype=np.uint16).view(np.uint8)


def f32(*vals):
    return np.array(vals, dtype=np.float32).view(np.uint8)


def test_bf16_quanta_by_hand():
    # 1.0 = 0x3F80; 0x3F81 = 1 + 2^-7 (one quantum), 0x3F82 two, 0x3F83 three;
    # 0x3F7F = 1 - 2^-8 sits one quantum below 1.0 although the step below is half as wide.
    expected = bf16(0x3F80, 0x3F80, 0x3F80, 0x3F80, 0x3F80, 0x4000)
    actual = bf16(0x3F80, 0x3F81, 0x3F82, 0x3F83, 0x3F7F, 0x4000)
    c = count("out", "bf16", expected, actual, atol=0.0, rtol=2**-7)
    assert (c.elements, c.identical, c.one_quantum, c.over_one_quantum, c.over_two_quanta) == (6, 2, 2, 2, 1)
    assert c.max_abs == 3 * 2**-7
    assert c.max_rel == 3 * 2**-7
    # worst: 3 quanta of 2^-7 over a bound of 2^-7 · 1.0
    assert c.worst_bound_fraction == pytest.approx(3.0)
    assert c.worst_index == 3
    assert c.first_offending == 2  # two quanta is the first element over one bound
    assert not c.within


def test_bf16_sign_crossing_counts_two_quanta():
    # smallest positive subnormal against smallest negative: 0 lies between them
    c = count("out", "bf16", bf16(0x0001), bf16(0x8001), atol=1.0)
    assert (c.one_quantum, c.over_one_quantum, c.over_two_quanta) == (0, 1, 0)
    assert c.within


def test_f16_counts_and_bound_fraction():
    # 1.0 = 0x3C00, one quantum = 2^-10; 2.0 = 0x4000, one quantum = 2^-9
    expected = f16(0x3C00, 0x4000, 0x4000)
    actual = f16(0x3C01, 0x4001, 0x4000)
    c = count("w", "f16", expected, actual, atol=2**-10, rtol=0.0)
    assert (c.identical, c.one_quantum, c.over_one_quantum) == (1, 2, 0)
    assert c.max_abs == 2**-9
    assert c.worst_bound_fraction == pytest.approx(2.0)
    assert c.worst_index == 1 and c.first_offending == 1


def test_f32_rel_floor_hides_tiny_expectations():
    expected = f32(1e-9, 4.0)
    actual = f32(2e-9, 4.0 + 4 * 2**-21)  # 4 quanta at 4.0 (quantum 2^-21)
    c = count("o", "f32", expected, actual, atol=1e-8, rtol=1e-6, rel_floor=1e-6)
    assert c.over_two_quanta >= 1 and c.one_quantum == 0
    # the 1e-9 element's relative error (≈1) is below the floor and not reported
    assert c.max_rel == pytest.approx(2**-21, rel=1e-6)
    assert c.within
    # 4·2^-21 over 1e-8 + 1e-6·4 beats the tiny element's ≈1e-9 over ≈1e-8
    assert c.worst_bound_fraction == pytest.approx(4 * 2**-21 / (1e-8 + 4e-6))
    assert c.worst_index == 1


def test_bit_exact_mode_any_difference_offends():
    c = count("o", "f32", f32(1.0, 2.0, 3.0), f32(1.0, 2.0, np.nextafter(np.float32(3.0), np.float32(4))))
    assert c.identical == 2 and c.one_quantum == 1
    assert c.worst_bound_fraction is None  # a difference over a zero bound: infinite fraction
    assert c.first_offending == 2 and not c.within


def test_identical_outputs():
    c = count("o", "bf16", bf16(0x3F80, 0xC000), bf16(0x3F80, 0xC000))
    assert c.identical == 2 and c.within and c.worst_bound_fraction == 0.0
    assert c.first_offending is None and c.worst_index is None and c.max_rel == 0.0


def test_nan_in_actual_is_counted_and_offends():
    c = count("o", "f32", f32(1.0, 2.0), f32(1.0, np.nan), atol=1.0, rtol=1.0)
    assert c.non_finite == 1 and c.first_offending == 1 and c.worst_bound_fraction is None
    assert c.over_two_quanta == 1


def test_refuses_non_float_and_mismatched_sizes():
    with pytest.raises(ValueError):
        count("o", "i32", f32(1.0), f32(1.0))
    with pytest.raises(ValueError):
        count("o", "f32", f32(1.0), f32(1.0, 2.0))


def test_f64_counts_by_hand():
    one_up = np.nextafter(1.0, 2.0)
    expected = np.array([1.0, 1.0, -4.0, 0.0]).view(np.uint8)
    actual = np.array([1.0, one_up, -4.0 - 3 * 2**-50, -0.0]).view(np.uint8)
    c = count("o", "f64", expected, actual, atol=0.0, rtol=2**-52)
    # -0.0 against +0.0: equal values, different bits; 3 quanta of 2^-50 at -4 (quantum 2^-50)
    assert (c.elements, c.identical, c.one_quantum, c.over_one_quantum, c.over_two_quanta) == (4, 1, 1, 1, 1)
    assert c.max_abs == 3 * 2**-50
    assert c.max_rel == pytest.approx(3 * 2**-52)
    assert c.worst_bound_fraction == pytest.approx(3.0) and c.worst_index == 2
    assert c.first_offending == 2 and not c.within


@pytest.mark.parametrize("dtype", sorted(LARGEST))
def test_step_index_is_signed_distance_from_zero(dtype):
    top = LARGEST[dtype][0]
    patterns = [0, SIGN[dtype], 1, SIGN[dtype] | 1, top, SIGN[dtype] | top]
    assert step_index(words(dtype, patterns), dtype).tolist() == [0, 0, 1, -1, top, -top]


@pytest.mark.parametrize("dtype", sorted(LARGEST))
def test_an_output_with_no_elements_is_within_with_nothing_to_report(dtype):
    empty = np.zeros(0, np.uint8)
    c = count("o", dtype, empty, empty, atol=1.0)
    assert (c.elements, c.identical, c.non_finite, c.max_abs) == (0, 0, 0, 0.0)
    assert c.worst_bound_fraction == 0.0 and c.worst_index is None and c.max_rel is None
    assert c.first_offending is None and c.within


def _f32_bytes(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32).view(np.uint8)


def test_relative_error_counts_from_the_floor_itself():
    # |expected| equal to rel_floor is at the floor, so its relative error is reported; below it is not
    as_bytes = _f32_bytes
    at_floor = count("out", "f32", as_bytes(0.5), as_bytes(0.75), rel_floor=0.5)
    assert at_floor.max_rel == 0.5
    below = count("out", "f32", as_bytes(0.25), as_bytes(0.75), rel_floor=0.5)
    assert below.max_rel is None and below.max_abs == 0.5


def test_judged_in_chunks_the_counts_are_those_of_the_whole():
    """Chunks of 3 elements against one chunk of all: sums, extremes, the first of two equal worst
    fractions (in different chunks), the first offending element and non-finite values agree."""
    expected = np.array([1.0, 2.0, 4.0, 8.0, 0.0, 1e-9, 3.0, 5.0, np.nan, 7.0, 2.0], dtype=np.float32)
    actual = expected.copy()
    actual[1] = np.nextafter(np.float32(2.0), np.float32(3.0))  # one quantum
    actual[4] = np.float32(1e-3)  # err over a bound near zero: the largest fraction
    actual[7] = np.float32(5.0) + np.float32(5.0e-3)  # offending, in the third chunk of 3
    actual[10] = np.float32(2.0) + np.float32(1e-3)  # offending, in the last chunk
    actual[9] = np.inf
    e, a = expected.view(np.uint8), actual.view(np.uint8)
    whole = count("y", "f32", e, a, atol=1e-4, rtol=1e-4, chunk=expected.size)
    # the two non-finite elements count as such, not as errors: the largest error is index 7's
    assert whole.non_finite == 2 and whole.max_abs == float(np.float32(5.0) + np.float32(5.0e-3)) - 5.0
    for chunk in (1, 2, 3, 4, 5):
        assert count("y", "f32", e, a, atol=1e-4, rtol=1e-4, chunk=chunk) == whole, chunk
    tie = np.zeros(8, np.float32)
    moved = tie.copy()
    moved[2] = moved[6] = np.float32(1.0)  # two equal worst fractions, in chunks 0 and 1 of 4
    whole = count("y", "f32", tie.view(np.uint8), moved.view(np.uint8), atol=0.5)
    parts = count("y", "f32", tie.view(np.uint8), moved.view(np.uint8), atol=0.5, chunk=4)
    assert parts == whole and parts.worst_index == 2 and parts.first_offending == 2
