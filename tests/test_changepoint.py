"""The change-point method of `qualify history` (qualify/evaluate/changepoint.py) on planted series:
a step is found at its index, a flat noisy series gives none, and the false-positive rate on flat
series stays near alpha. Every series is drawn from a seeded generator, so each test has one answer."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qualify.evaluate import changepoint
from qualify.evaluate.changepoint import MIN_POINTS, arc_statistics, best_arc, permutation_p_value, segment, smallest_p


def _noise(n: int, seed: int, sd: float = 1.0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, sd, size=n)


def test_a_step_of_four_noise_sds_is_found_at_its_index():
    # noise SD 1, step +4 at index 12 of 24, alpha 0.01, 1999 permutations
    y = _noise(24, seed=7)
    y[12:] += 4.0
    found = segment(y)
    assert [c.index for c in found.points] == [12]
    assert found.points[0].p_value <= changepoint.ALPHA
    assert found.points[0].after - found.points[0].before == pytest.approx(4.0, abs=1.0)
    # the levels either side are the pieces' own means, first value included
    assert found.points[0].before == pytest.approx(float(np.mean(y[:12])))
    assert found.points[0].after == pytest.approx(float(np.mean(y[12:])))
    assert [(a, b) for a, b, _ in found.segments] == [(0, 12), (12, 24)]


def test_a_flat_noisy_series_gives_no_change_point():
    # noise SD 1 around a level of -2 %, 40 values, alpha 0.01
    found = segment(_noise(40, seed=3) - 2.0)
    assert found.points == ()
    assert len(found.segments) == 1 and found.segments[0][:2] == (0, 40)
    assert found.segments[0][2] == pytest.approx(float(np.mean(_noise(40, seed=3) - 2.0)))


def test_flat_series_are_flagged_at_about_alpha():
    # 300 flat series of 20 values, alpha 0.05, 199 permutations: 15 false flags expected; the
    # binomial SD is 3.8, so more than 30 means the test does not hold its level
    flagged = sum(bool(segment(_noise(20, seed=s), alpha=0.05, permutations=199, seed=s).points) for s in range(300))
    assert flagged <= 30
    # and a test that flagged nothing at all would not be testing: some of 300 must reach 0.05
    assert flagged >= 3


def test_planted_steps_are_found_most_of_the_time():
    # step of 3 SDs at index 10 of 20: found at exactly that index in most of 40 series
    hits = 0
    for s in range(40):
        y = _noise(20, seed=100 + s)
        y[10:] += 3.0
        hits += [c.index for c in segment(y, permutations=499, seed=s).points] == [10]
    assert hits >= 28


def test_two_steps_up_then_down_are_both_found():
    y = _noise(36, seed=11, sd=0.5)
    y[12:24] += 3.0
    assert [c.index for c in segment(y).points] == [12, 24]


def test_one_stray_record_is_not_a_change():
    y = _noise(30, seed=5)
    y[15] += 12.0  # a single outlier: min_size 2 forbids a one-value segment
    assert all(c.index not in (15, 16) for c in segment(y).points)


def test_a_noiseless_step_is_found_and_a_constant_series_is_not():
    assert [c.index for c in segment([1.0] * 7 + [2.0] * 7).points] == [7]
    assert segment([3.0] * 12).points == ()


def test_a_step_near_the_end_waits_for_enough_records_after_it():
    flat = [0.0, 0.1, -0.1, 0.05, -0.05, 0.0, 0.1, -0.1, 0.0, 0.05, 0.02, -0.03, 0.04, -0.02, 0.03, -0.04]
    # one record after it: a one-value piece is not allowed; two or three: 18/C(18, 2) and
    # 19/C(19, 3) are above alpha 0.01; four: 20/C(20, 4) = 0.004
    assert segment([*flat, 5.0]).points == ()
    assert segment([*flat, 5.0, 5.1, 4.9]).points == ()
    assert [c.index for c in segment([*flat, 5.0, 5.1, 4.9, 5.05]).points] == [16]


def test_too_few_values_flag_nothing_whatever_the_step():
    assert MIN_POINTS == 13  # 13/C(13, 6) = 0.0076 <= 0.01 < 12/C(12, 6) = 0.013
    y = [0.0] * 6 + [10.0] * 6
    assert segment(y).points == ()
    assert smallest_p(12) > changepoint.ALPHA >= smallest_p(13)
    assert smallest_p(3) == 1.0
    assert smallest_p(5, min_size=3) == 1.0  # no test runs below two pieces of min_size


def test_the_arc_statistic_is_the_standardized_mean_difference():
    y = np.array([1.0, 4.0, 2.0, 8.0, 5.0, 3.0])
    pairs = [(0, 2), (1, 4), (2, 6), (0, 5)]
    i, j = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    expected = []
    for a, b in pairs:
        inside, outside = y[a:b], np.concatenate([y[:a], y[b:]])
        expected.append(abs(inside.mean() - outside.mean()) / math.sqrt(1 / len(inside) + 1 / len(outside)))
    assert arc_statistics(y[np.newaxis, :], i, j)[0] == pytest.approx(expected)


def test_the_best_arc_respects_the_smallest_piece():
    y = np.array([0.0, 9.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    i, j, _ = best_arc(y, 2)
    # [1, 2) alone or [0, 1) alone would leave a one-value piece
    assert (j - i) >= 2 and (i == 0 or i >= 2) and (j == 8 or 8 - j >= 2)
    assert best_arc(np.array([1.0, 2.0, 3.0]), 2) is None


def test_the_p_value_counts_the_observed_order():
    rng = np.random.default_rng(0)
    p = permutation_p_value(np.array([0.0, 0.0, 0.0, 1.0, 1.0, 1.0]), 2, 199, rng)
    # with pieces of two or more, only the orders 000111 and 111000 reach this Z (2 of C(6, 3) = 20):
    # p near 0.1, never the 1/200 a test that forgot the observed order's peers would give
    assert 0.05 < p < 0.2
    assert permutation_p_value(np.array([1.0, 2.0, 3.0, 4.0]), 2, 9, rng) >= 0.1


def test_same_seed_same_answer_and_the_seed_matters_only_at_the_margin():
    y = _noise(25, seed=9)
    y[13:] += 2.0
    assert segment(y) == segment(y)


@pytest.mark.parametrize(
    "values, options",
    [([1.0, math.nan, 2.0], {}), ([1.0, math.inf], {}), ([[1.0, 2.0]], {}), ([1.0] * 5, {"alpha": 0.0})],
)
def test_bad_arguments_are_refused(values, options):
    with pytest.raises(ValueError):
        segment(values, **options)


def test_with_pieces_of_one_an_arc_may_start_at_the_second_value():
    # min_size 1: the arc [1, 8) leaves a one-value piece before it, which is now allowed
    found = segment([0.0] + [5.0] * 7 + [0.0] * 8, min_size=1)
    assert [c.index for c in found.points] == [1, 8]
    assert found.points[0].before == 0.0 and found.points[0].after == 5.0


def test_a_p_value_no_permutation_reaches_is_one_over_b_plus_one():
    y = np.concatenate([np.zeros(15), np.full(15, 10.0)]) + np.linspace(0, 0.01, 30)
    # 30/C(30, 15) ≈ 2e-7 of orders tie with this one: none of 99 does
    assert permutation_p_value(y, 2, 99, np.random.default_rng(0)) == 1 / 100
    assert permutation_p_value(np.array([1.0, 2.0, 3.0]), 2, 99, np.random.default_rng(0)) == 1.0


def test_a_segmentation_cannot_be_edited_after_the_fact():
    import dataclasses

    found = segment([1.0] * 7 + [2.0] * 7)
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.points = ()  # type: ignore[misc]
