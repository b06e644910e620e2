"""The per-sample placement in the samples file, and a case's Δ per placement."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qualify.evaluate.placements import block_placements, placement_deltas
from qualify.evaluate.summarize import pair_stats
from qualify.results.samples import TrialSamples, load, save, series_problems


def _add(s, series, ns, block, placement=None):
    s.add("N=1", series, ns=ns, block=block, sm_mhz=1980.0, throttle=0, temp_c=40.0, placement=placement)


def test_placements_round_trip_as_int32(tmp_path):
    s = TrialSamples()
    for i in range(6):
        _add(s, "base", 1000.0 + i, i // 2, placement=i // 2 % 3)
    arrays = s.arrays()
    assert arrays["N=1/base/placement"].dtype == np.int32
    save(tmp_path / "s.npz", arrays)
    back = load(tmp_path / "s.npz")
    assert np.array_equal(back["N=1/base/placement"], [0, 0, 1, 1, 2, 2])
    assert series_problems(back) == []


def test_samples_without_placements_are_stored_as_before(tmp_path):
    s = TrialSamples()
    for i in range(4):
        _add(s, "base", 1000.0 + i, i)
    arrays = s.arrays()
    assert sorted(k.rsplit("/", 1)[1] for k in arrays) == ["block", "ns", "sm_mhz", "temp_c", "throttle"]
    save(tmp_path / "s.npz", arrays)
    back = load(tmp_path / "s.npz")
    assert series_problems(back) == []
    assert block_placements(back, "N=1", "base") == {0: 0, 1: 0, 2: 0, 3: 0}


def test_a_series_gives_placements_for_all_its_samples_or_none():
    s = TrialSamples()
    _add(s, "base", 1000.0, 0, placement=1)
    with pytest.raises(ValueError, match="placement given for some samples"):
        _add(s, "base", 1000.0, 0)
    t = TrialSamples()
    _add(t, "base", 1000.0, 0)
    with pytest.raises(ValueError, match="placement given for some samples"):
        _add(t, "base", 1000.0, 0, placement=0)


def test_a_placement_array_of_the_wrong_length_or_sign_is_a_problem():
    s = TrialSamples()
    for i in range(3):
        _add(s, "base", 1000.0, 0, placement=0)
    arrays = s.arrays()
    arrays["N=1/base/placement"] = np.array([0, 1], dtype=np.int32)
    assert series_problems(arrays) == ["N=1/base/placement: 2 entries, its ns has 3"]
    arrays["N=1/base/placement"] = np.array([0, -1, 0], dtype=np.int32)
    assert series_problems(arrays) == ["N=1/base/placement: holds a negative value"]
    arrays["N=1/base/placement"] = np.array([0.0, 1.0, 0.0])
    assert series_problems(arrays) == ["N=1/base/placement: dtype <f8, expected integers"]


def _trial(ratios, placements=None, per_half=3):
    """Samples of blocks whose candidate runs `ratios[b]` times the base (floor 0)."""
    s = TrialSamples()
    for b, r in enumerate(ratios):
        p = None if placements is None else placements[b]
        for _ in range(per_half):
            _add(s, "base", 1000.0, b, p)
            _add(s, "candidate", 1000.0 * r, b, p)
    return s.arrays()


def test_deltas_per_placement_come_from_that_placements_blocks():
    arrays = _trial([0.95, 0.90, 0.96, 0.88, 0.94, 0.90], placements=[0, 1, 0, 1, 2, 2])
    got = placement_deltas(arrays, "N=1", floor=0.0, iterations=1)
    assert [d.placement for d in got] == [0, 1, 2]
    assert [d.blocks for d in got] == [(0, 2), (1, 3), (4, 5)]
    assert got[0].log_ratios == pytest.approx((math.log(0.95), math.log(0.96)))
    assert got[1].delta_pct == pytest.approx(math.expm1((math.log(0.90) + math.log(0.88)) / 2) * 100)
    # together they are the case's blocks: the overall mean is the mean over all of them
    logs = [x for d in got for x in d.log_ratios]
    overall = pair_stats(arrays, "N=1", "base", "candidate", 0.0, 1)
    assert math.exp(np.mean(logs)) == pytest.approx(overall.ratio)


def test_a_series_without_placements_is_one_placement():
    got = placement_deltas(_trial([0.9, 0.8]), "N=1", floor=0.0, iterations=1)
    assert len(got) == 1 and got[0].placement == 0 and got[0].blocks == (0, 1)


def test_arms_that_disagree_on_a_blocks_placement_are_refused():
    arrays = _trial([0.9, 0.8], placements=[0, 1])
    arrays["N=1/candidate/placement"] = np.array([0, 0, 0, 0, 0, 0], dtype=np.int32)
    with pytest.raises(ValueError, match="block 1 ran base on placement 1 and candidate on placement 0"):
        placement_deltas(arrays, "N=1", floor=0.0, iterations=1)
