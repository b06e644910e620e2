"""Statistics as pure functions: block log-ratios, the t-interval, classes, the MDE, coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qualify.evaluate.stats import (
    SAME_BAND,
    block_log_ratios,
    case_stats,
    ci_half_width_pct,
    classify,
    mde_pct,
    paired_ratio,
    per_launch_ns,
    summarize,
    t_cdf,
    t_quantile,
    unit_log_ratios,
)
from qualify.plan.schedule import block_order


def interleaved(
    base_ns: float,
    cand_ns: float,
    blocks: int = 10,
    per_half: int = 10,
    noise: float = 0.002,
    drift: float = 0.0,
    half_sd: float = 0.0,
    seed: int = 0,
    tail=None,
):
    """Samples in the engine's ABBA/BAAB order: linear drift over time, a random offset shared by
    the samples of one half (within-block correlation), and optionally a heavy-tail generator."""
    rng = np.random.default_rng(seed)
    b, bb, c, cb = [], [], [], []
    t = 0
    for block in range(blocks):
        for letter in block_order(block):
            shift = half_sd * rng.standard_normal()
            for _ in range(per_half):
                factor = (1 + drift * t + noise * rng.standard_normal()) * math.exp(shift)
                if tail is not None:
                    factor *= tail(rng)
                t += 1
                if letter == "A":
                    b.append(base_ns * factor)
                    bb.append(block)
                else:
                    c.append(cand_ns * factor)
                    cb.append(block)
    return tuple(map(np.asarray, (b, bb, c, cb)))


# ---------------------------------------------------------------------------------------------
# Student's t without scipy


@pytest.mark.parametrize(
    "p, df, expected",
    [
        (0.975, 1, 12.706205),
        (0.975, 2, 4.302653),
        (0.975, 4, 2.776445),
        (0.975, 9, 2.262157),
        (0.975, 29, 2.045230),
        (0.80, 9, 0.883404),
        (0.80, 1, 1.376382),
        (0.995, 19, 2.860935),
    ],
)
def test_t_quantiles_match_published_tables(p, df, expected):
    assert t_quantile(p, df) == pytest.approx(expected, abs=2e-6)
    assert t_quantile(1 - p, df) == pytest.approx(-expected, abs=2e-6)


def test_t_cdf_inverts_the_quantile():
    for df in (2, 5, 40):
        for p in (0.01, 0.3, 0.5, 0.9, 0.999):
            assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-12)


@pytest.mark.parametrize("t", [-1e3, -1e6, -1e8])
def test_t_cdf_keeps_its_relative_precision_far_in_the_tails(t):
    """Closed forms, written without cancellation: df = 1 (Cauchy), atan(1/|t|)/π; df = 2,
    1/(r(r + |t|)) with r = √(2 + t²). A tail probability formed as 1 − (a number near 1) would
    lose every digit here."""
    import math

    r = math.sqrt(2.0 + t * t)
    assert t_cdf(t, 1) == pytest.approx(math.atan(1.0 / -t) / math.pi, rel=1e-9)
    assert t_cdf(t, 2) == pytest.approx(1.0 / (r * (r - t)), rel=1e-9)


def test_a_timing_summary_gives_the_quartiles_median_and_extremes():
    summary = summarize(np.array([5.0, 1.0, 4.0, 2.0, 3.0]), 1, np.array([1400.0] * 5), np.zeros(5, dtype=bool))
    assert (summary.q1_ns, summary.median_ns, summary.q3_ns) == (2.0, 3.0, 4.0)
    assert (summary.min_ns, summary.max_ns, summary.samples, summary.warmup) == (1.0, 5.0, 5, 1)


def test_t_quantile_refuses_impossible_arguments():
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)
    with pytest.raises(ValueError):
        t_quantile(0.5, 0)


# ---------------------------------------------------------------------------------------------
# the estimate and its interval


def test_floor_correction_never_negative():
    assert per_launch_ns(np.array([5.0, 1000.0, 2600.0]), 1300.0, 2).tolist() == [0.0, 0.0, 650.0]


@pytest.mark.parametrize("true_ratio", [0.8, 0.97, 1.0, 1.01, 1.25])
def test_known_ratios_are_recovered_inside_a_narrow_interval(true_ratio):
    ratio, lo, hi, blocks, mde = paired_ratio(*interleaved(100_000, 100_000 * true_ratio, seed=4))
    assert ratio == pytest.approx(true_ratio, rel=0.002)
    assert lo < true_ratio < hi and hi / lo < 1.01
    assert blocks == 10 and 0 < mde < 1.0


def test_point_estimate_is_the_geometric_mean_of_block_ratios():
    data = interleaved(100.0, 97.0, seed=2)
    logs = block_log_ratios(*data)
    manual = [math.log(np.median(data[2][data[3] == b]) / np.median(data[0][data[1] == b])) for b in range(10)]
    assert logs.tolist() == pytest.approx(manual, abs=0)
    ratio, lo, hi, _, _ = paired_ratio(*data)
    assert ratio == pytest.approx(math.exp(np.mean(manual)), rel=1e-12)
    assert math.log(ratio) - math.log(lo) == pytest.approx(math.log(hi) - math.log(ratio), rel=1e-9)


def test_interval_width_follows_the_t_distribution():
    data = interleaved(100.0, 100.0, blocks=5, seed=9)
    logs = block_log_ratios(*data)
    ratio, lo, hi, _, _ = paired_ratio(*data)
    half = 2.776445 * logs.std(ddof=1) / math.sqrt(5)
    assert math.log(hi / ratio) == pytest.approx(half, rel=1e-6)
    assert ci_half_width_pct(case_stats(*data)) == pytest.approx(math.expm1(half) * 100, rel=1e-6)


def test_statistics_are_deterministic():
    data = interleaved(100.0, 97.0)
    assert case_stats(*data) == case_stats(*data)


def test_alternating_blocks_cancel_drift_within_each_block():
    """A 20 % drift across the run would fake a difference in AB order; ABBA/BAAB keeps it at ~0."""
    ratio, lo, hi, _, _ = paired_ratio(*interleaved(100_000, 100_000, drift=0.0005, noise=0.0))
    assert ratio == pytest.approx(1.0, abs=0.005)
    ab_ratio = float(np.median(interleaved(100_000, 100_000, drift=0.0005, noise=0.0)[2])) / 100_000
    assert abs(ab_ratio - 1.0) > 0.05  # the pooled medians alone would not have cancelled it


def test_one_block_has_no_interval_and_no_mde():
    ratio, lo, hi, blocks, mde = paired_ratio(*interleaved(100, 80, blocks=1))
    assert (lo, hi, blocks, mde) == (None, None, 1, None)
    assert ratio == pytest.approx(0.8, rel=0.01)
    s = case_stats(*interleaved(100, 80, blocks=1))
    assert s.case_class == "cant_tell" and "1 block" in s.reason and "no interval" in s.reason
    assert ci_half_width_pct(s) == math.inf


def test_all_equal_samples_give_a_zero_width_interval_and_same():
    s = case_stats(*interleaved(5_000, 5_000, noise=0.0))
    assert (s.ratio, s.ci_low, s.ci_high, s.mde_pct) == (1.0, 1.0, 1.0, 0.0)
    assert s.case_class == "same"
    faster = case_stats(*interleaved(5_000, 4_000, noise=0.0))
    assert faster.case_class == "faster" and faster.ci_low == faster.ci_high == pytest.approx(0.8)


def test_zero_medians_leave_blocks_out_rather_than_divide_by_zero():
    b, bb, c, cb = interleaved(100.0, 90.0, blocks=3)
    b[bb == 0] = 0.0  # a kernel shorter than the floor in block 0
    s = case_stats(b, bb, c, cb)
    assert s.blocks == 2 and s.ratio == pytest.approx(0.9, rel=0.01)
    none = case_stats(np.zeros(4), np.array([0, 0, 1, 1]), np.zeros(4), np.array([0, 0, 1, 1]))
    assert none.blocks == 0 and none.ratio == 1.0 and none.case_class == "cant_tell"
    assert "no block" in none.reason


def test_heavy_tails_do_not_move_the_estimate_or_fake_a_change():
    """One sample in 20 is 2-5x slower (preemption, a clock dip): block medians ignore it."""

    def tail(rng):
        return rng.uniform(2.0, 5.0) if rng.random() < 0.05 else 1.0

    aa = case_stats(*interleaved(40_000, 40_000, tail=tail, seed=11))
    assert aa.case_class == "same" and abs(aa.delta_pct) < 0.2
    slower = case_stats(*interleaved(40_000, 40_800, tail=tail, seed=12))
    assert slower.case_class == "slower" and slower.delta_pct == pytest.approx(2.0, abs=0.2)


# ---------------------------------------------------------------------------------------------
# classes


@pytest.mark.parametrize(
    "ratio, lo, hi, expected",
    [
        (0.90, 0.89, 0.91, "faster"),
        (1.10, 1.09, 1.11, "slower"),
        (1.000, 0.998, 1.003, "same"),
        (0.996, 0.993, 0.999, "cant_tell"),  # resolved, but the change is inside the band
        (0.998, 0.996, 0.999, "same"),  # the whole interval inside the band
        (0.97, 0.94, 1.01, "cant_tell"),  # interval straddles 1
        (1.0 - SAME_BAND, 0.990, 0.999, "faster"),  # exactly at the band edge counts
        (1.0 + SAME_BAND, 1.001, 1.010, "slower"),
        (1.000, 0.995, 1.006, "cant_tell"),  # one end just outside the band
    ],
)
def test_classes(ratio, lo, hi, expected):
    assert classify(ratio, lo, hi)[0] == expected


def test_cant_tell_states_the_smallest_change_the_case_resolves():
    case_class, reason = classify(0.99, 0.97, 1.01, mde=2.345)
    assert case_class == "cant_tell" and "2.35%" in reason
    assert "smallest change" not in classify(0.90, 0.89, 0.91, mde=0.4)[1]


# ---------------------------------------------------------------------------------------------
# minimum detectable effect


def test_mde_formula():
    # (t_.975,9 + t_.80,9) * sd / sqrt(10), as a slow-down in %
    assert mde_pct(0.01, 10) == pytest.approx(math.expm1((2.262157 + 0.883404) * 0.01 / math.sqrt(10)) * 100, rel=1e-6)
    assert mde_pct(0.01, 1) is None


def test_mde_grows_with_spread_and_shrinks_with_blocks():
    by_spread = [mde_pct(sd, 10) for sd in (0.001, 0.002, 0.005, 0.01, 0.05)]
    assert by_spread == sorted(by_spread) and len(set(by_spread)) == 5
    by_blocks = [mde_pct(0.01, n) for n in (2, 3, 5, 10, 20, 80)]
    assert by_blocks == sorted(by_blocks, reverse=True) and len(set(by_blocks)) == 6
    assert mde_pct(0.0, 10) == 0.0


def test_case_mde_comes_from_the_trials_own_block_spread():
    quiet = case_stats(*interleaved(10_000, 10_000, half_sd=0.001, seed=5))
    noisy = case_stats(*interleaved(10_000, 10_000, half_sd=0.03, seed=5))
    assert quiet.mde_pct < 0.5 < 2.0 < noisy.mde_pct
    assert noisy.case_class == "cant_tell" and f"{noisy.mde_pct:.2f}%" in noisy.reason


# ---------------------------------------------------------------------------------------------
# coverage where samples within a block are correlated


def _old_bootstrap_interval(b, bb, c, cb, rng, resamples=1000):
    """The interval qualify used before: a block bootstrap of the ratio of pooled medians."""
    blocks = np.unique(bb)
    base = np.stack([b[bb == k] for k in blocks])
    cand = np.stack([c[cb == k] for k in blocks])
    picks = rng.integers(0, blocks.size, size=(resamples, blocks.size))
    ratios = np.median(cand[picks].reshape(resamples, -1), axis=1) / np.median(
        base[picks].reshape(resamples, -1), axis=1
    )
    return np.percentile(ratios, [2.5, 97.5])


def test_interval_covers_the_true_ratio_with_correlated_samples():
    """Six blocks; each half shares a 1 % offset, larger than the samples' own 0.3 % noise — the
    shape of a partial-wave kernel. Over 300 simulated trials (fixed seed) the t-interval covers
    the true ratio at least 93 % of the time; the old block bootstrap of pooled medians does not."""
    rng = np.random.default_rng(20261201)
    true_ratio, trials = 1.01, 300
    new_hits = old_hits = 0
    for i in range(trials):
        data = interleaved(100.0, 100.0 * true_ratio, blocks=6, noise=0.003, half_sd=0.01, seed=1000 + i)
        _, lo, hi, _, _ = paired_ratio(*data)
        new_hits += lo <= true_ratio <= hi
        olo, ohi = _old_bootstrap_interval(*data, rng)
        old_hits += olo <= true_ratio <= ohi
    assert new_hits / trials >= 0.93
    assert old_hits / trials < 0.93


def test_two_blocks_are_enough_for_an_interval_with_one_degree_of_freedom():
    # block 0: candidate 1 % slower, block 1: 3 % slower -> mean log ratio of the two, t with 1 df
    base = np.array([100.0, 100.0, 100.0, 100.0])
    cand = np.array([101.0, 101.0, 103.0, 103.0])
    blocks = np.array([0, 0, 1, 1])
    ratio, lo, hi, n, mde = paired_ratio(base, blocks, cand, blocks)
    logs = np.log([1.01, 1.03])
    half = t_quantile(0.975, 1) * float(np.std(logs, ddof=1)) / math.sqrt(2)
    assert n == 2 and mde is not None
    assert ratio == pytest.approx(math.exp(logs.mean()))
    assert (lo, hi) == (pytest.approx(math.exp(logs.mean() - half)), pytest.approx(math.exp(logs.mean() + half)))


def test_an_interval_ending_exactly_at_the_band_is_same():
    edge_lo, edge_hi = 1.0 - SAME_BAND, 1.0 + SAME_BAND
    assert classify(1.0, edge_lo, edge_hi)[0] == "same"
    assert classify(1.0, edge_lo, math.nextafter(edge_hi, 2.0))[0] == "cant_tell"


def test_blocks_that_share_a_placement_are_one_unit_of_the_interval():
    """Six blocks on two placements: the interval's units are the two placements (each the mean of
    its blocks' log-ratios), not the six blocks. Blocks as units would narrow the interval to
    "faster" on these very samples, hiding that the effect differs between the placements."""
    blocks = np.repeat(np.arange(6), 2)  # two samples of each arm per block
    placement = blocks % 2  # blocks 0, 2, 4 on placement 0; 1, 3, 5 on placement 1
    per_block = np.array([0.90, 0.96, 0.905, 0.965, 0.90, 0.96])
    base, cand = np.full(blocks.size, 100.0), 100.0 * per_block[blocks]
    units = unit_log_ratios(base, blocks, cand, blocks, placement, blocks)
    expected = [np.mean(np.log(per_block[[0, 2, 4]])), np.mean(np.log(per_block[[1, 3, 5]]))]
    assert units == pytest.approx(expected, rel=1e-12)
    by_placement = case_stats(base, blocks, cand, blocks, placement=placement, placement_block=blocks)
    assert by_placement.blocks == 2 and by_placement.case_class == "cant_tell"
    by_block = case_stats(base, blocks, cand, blocks)
    assert by_block.blocks == 6 and by_block.case_class == "faster"
    assert by_placement.ci_high - by_placement.ci_low > 5 * (by_block.ci_high - by_block.ci_low)


def test_an_interval_that_touches_1_straddles_it_rather_than_excludes_it():
    from qualify.evaluate.stats import classify

    case_class, reason = classify(1.004, 1.0, 1.01, band=0.005)
    assert case_class == "cant_tell" and "straddles 1" in reason
    case_class, reason = classify(0.996, 0.99, 1.0, band=0.005)
    assert case_class == "cant_tell" and "straddles 1" in reason
