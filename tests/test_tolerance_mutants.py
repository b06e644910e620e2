"""Parity counts and the calibration's perturbation on every float dtype and at the grid's edges
(tests written from the survivors of mutating parity_counts.py and tolerance_gate.py)."""

from __future__ import annotations

import numpy as np
import pytest

from qualify.evaluate.parity_counts import count, step_index
from qualify.evaluate.tolerance_gate import perturb

# the largest finite bit pattern of each float dtype, and the unsigned word it is stored in
LARGEST = {"bf16": (0x7F7F, np.uint16), "f16": (0x7BFF, np.uint16),
           "f32": (0x7F7FFFFF, np.uint32), "f64": (0x7FEFFFFFFFFFFFFF, np.uint64)}  # fmt: skip
SIGN = {"bf16": 0x8000, "f16": 0x8000, "f32": 0x80000000, "f64": 0x8000000000000000}


def words(dtype: str, patterns) -> np.ndarray:
    return np.asarray(patterns, dtype=LARGEST[dtype][1]).view(np.uint8)


@pytest.mark.parametrize("dtype", sorted(LARGEST))
@pytest.mark.parametrize("k", [1, 2, 5])
def test_perturbing_the_largest_finite_value_steps_toward_zero_and_stays_finite(dtype, k):
    top = LARGEST[dtype][0]
    data = words(dtype, [top, SIGN[dtype] | top])
    moved = perturb(data, dtype, k, 2, seed=1)
    c = count("o", dtype, data, moved)
    assert c.non_finite == 0
    assert (c.identical, c.one_quantum, c.over_one_quantum) == ((0, 2, 0) if k == 1 else (0, 0, 2))
    # k steps below the top, each keeping its sign
    assert moved.view(LARGEST[dtype][1]).tolist() == [top - k, SIGN[dtype] | (top - k)]


@pytest.mark.parametrize("dtype", sorted(LARGEST))
def test_perturbing_just_below_the_top_may_reach_it_but_never_infinity(dtype):
    top = LARGEST[dtype][0]
    moved = perturb(words(dtype, [top - 1]), dtype, 1, 1, seed=0)
    assert moved.view(LARGEST[dtype][1]).tolist() == [top]


def test_f64_perturbation_moves_exactly_n_elements_by_k_quanta():
    data = np.linspace(-2.0, 2.0, 40).view(np.uint8)
    moved = perturb(data, "f64", 3, 6, seed=5)
    c = count("o", "f64", data, moved)
    assert (c.identical, c.one_quantum, c.over_one_quantum, c.over_two_quanta) == (34, 0, 6, 6)
    assert c.non_finite == 0


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
