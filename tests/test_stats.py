"""Statistics and gates as pure functions: ratio, block bootstrap, classes, verdict rules."""

from __future__ import annotations

import numpy as np
import pytest

from qualify.evaluate.stats import SAME_BAND, case_stats, classify, paired_ratio, per_launch_ns


def abba(base_ns: float, cand_ns: float, blocks: int = 10, per_half: int = 10, noise: float = 0.002,
         drift: float = 0.0, seed: int = 0):
    """Samples in ABBA order with optional linear drift over time."""
    rng = np.random.default_rng(seed)
    b, bb, c, cb = [], [], [], []
    t = 0
    for block in range(blocks):
        for letter in "ABBA":
            for _ in range(per_half):
                factor = 1 + drift * t + noise * rng.standard_normal()
                t += 1
                if letter == "A":
                    b.append(base_ns * factor)
                    bb.append(block)
                else:
                    c.append(cand_ns * factor)
                    cb.append(block)
    return map(np.asarray, (b, bb, c, cb))


def test_floor_correction_never_negative():
    assert per_launch_ns(np.array([5.0, 1000.0, 2600.0]), 1300.0, 2).tolist() == [0.0, 0.0, 650.0]


def test_ratio_and_interval_recover_a_known_speedup():
    ratio, lo, hi = paired_ratio(*abba(100_000, 90_000))
    assert ratio == pytest.approx(0.9, rel=0.002)
    assert lo < 0.9 < hi and hi - lo < 0.01


def test_bootstrap_is_deterministic():
    data = list(abba(100.0, 97.0))
    assert paired_ratio(*data) == paired_ratio(*data)


def test_abba_cancels_linear_drift():
    """A 20 % drift across the run would fake a difference in AB order; ABBA keeps it at ~0."""
    ratio, lo, hi = paired_ratio(*abba(100_000, 100_000, drift=0.0005, noise=0.0))
    assert ratio == pytest.approx(1.0, abs=0.01)


def test_one_block_has_no_interval():
    ratio, lo, hi = paired_ratio(*abba(100, 80, blocks=1))
    assert lo is None and hi is None
    assert classify(ratio, lo, hi)[0] == "cant_tell"


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
    ],
)
def test_classes(ratio, lo, hi, expected):
    assert classify(ratio, lo, hi)[0] == expected


def test_case_stats_delta():
    s = case_stats(*abba(200.0, 150.0))
    assert s.delta_pct == pytest.approx(-25.0, abs=0.3)
    assert s.case_class == "faster" and "CI" in s.reason


def test_aa_on_identical_arms_is_same():
    s = case_stats(*abba(50_000, 50_000, noise=0.001, seed=3))
    assert s.case_class == "same"


def test_gate_needs_the_class_not_only_the_point_estimate(tmp_path):
    """A 6 % point estimate with an interval straddling 1 does not pass a 5 % speed-up gate."""
    from qualify.evaluate.verdict import _judge
    from qualify.plan.model import SpeedGate

    gate = SpeedGate(name="g", min_speedup_pct=5.0)
    assert _judge(gate, 0.94, "faster")[0] is True
    assert _judge(gate, 0.94, "cant_tell")[0] is False
    assert _judge(gate, 0.96, "faster")[0] is False
    regression = SpeedGate(name="r", max_regression_pct=2.0)
    assert _judge(regression, 1.019, "slower")[0] is True
    assert _judge(regression, 1.021, "slower")[0] is False
