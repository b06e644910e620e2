"""The stop rule as a pure function: fixed, precision (target met, block/sample/wall caps), replay."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from plans import plan_copy

from qualify.errors import PlanError
from qualify.evaluate.stopping import half_width_pct, replay_stop, stop_reason
from qualify.plan.load import validate_plan
from qualify.plan.schedule import AA, MAIN, block_order

CASE = "N=1024"


def plan(stop: dict | None = None, blocks: int = 8, max_samples: int = 1000):
    data = plan_copy()
    data["schedule"] = {"samples_per_block": 5, "blocks": blocks}
    data["budget"] = {"max_trials": 2, "max_samples": max_samples, "max_wall_seconds": 600}
    if stop is not None:
        data["stop"] = stop
    return validate_plan(data, Path("plan.json"))


def samples(blocks: int, half_sd: float, seed: int = 0, series=("base", "candidate"), per_half: int = 5):
    """Arrays as the engine saves them, for `blocks` blocks of one pair."""
    rng = np.random.default_rng(seed)
    ns = {s: [] for s in series}
    blk = {s: [] for s in series}
    for b in range(blocks):
        for letter in block_order(b):
            s = series[0] if letter == "A" else series[1]
            ns[s].extend(
                10_000.0 * np.exp(half_sd * rng.standard_normal()) * (1 + 0.001 * rng.standard_normal(per_half))
            )
            blk[s].extend([b] * per_half)
    out = {"floor_ns": np.full(10, 1000.0)}
    for s in series:
        out[f"{CASE}/{s}/ns"] = np.asarray(ns[s]) + 1000.0
        out[f"{CASE}/{s}/block"] = np.asarray(blk[s], dtype=np.int32)
    return out


PRECISION = {"rule": "precision", "target_ci_pct": 0.5, "min_blocks": 3}


def test_fixed_rule_runs_every_block():
    p = plan()
    quiet = samples(8, 0.0001)
    assert [stop_reason(quiet, CASE, MAIN, n, p) for n in range(1, 8)] == [None] * 7
    assert stop_reason(quiet, CASE, MAIN, 8, p) == "blocks done"


def test_precision_stops_once_the_half_width_meets_the_target():
    p = plan(PRECISION)
    quiet = samples(8, 0.0005)
    assert stop_reason(quiet, CASE, MAIN, 2, p) is None  # before min_blocks, however narrow
    assert stop_reason(quiet, CASE, MAIN, 3, p) == "target met"


def test_precision_on_a_noisy_case_runs_to_a_cap():
    noisy = samples(8, 0.05)
    p = plan(PRECISION)
    assert [stop_reason(noisy, CASE, MAIN, n, p) for n in (3, 5, 7)] == [None] * 3
    assert stop_reason(noisy, CASE, MAIN, 8, p) == "block cap"
    capped = plan(PRECISION, max_samples=50)  # 10 samples per arm and block: five blocks fit
    assert stop_reason(noisy, CASE, MAIN, 4, capped) is None
    assert stop_reason(noisy, CASE, MAIN, 5, capped) == "sample cap"
    walled = plan(dict(PRECISION, max_case_seconds=30.0))
    assert stop_reason(noisy, CASE, MAIN, 4, walled, elapsed_s=29.9) is None
    assert stop_reason(noisy, CASE, MAIN, 4, walled, elapsed_s=30.0) == "wall cap"


def test_the_aa_pair_is_judged_on_its_own_series():
    p = plan(PRECISION)
    arrays = {**samples(8, 0.05), **samples(8, 0.0005, series=("aa_a", "aa_b"))}
    assert stop_reason(arrays, CASE, MAIN, 4, p) is None
    assert stop_reason(arrays, CASE, AA, 4, p) == "target met"


def test_noise_is_the_earlier_name_of_precision():
    p = plan({"rule": "noise", "target_ci_pct": 0.5, "min_blocks": 3})
    assert stop_reason(samples(8, 0.0005), CASE, MAIN, 3, p) == "target met"


@pytest.mark.parametrize(
    "stop, message",
    [
        ({"rule": "precision", "min_blocks": 3}, "needs target_ci_pct"),
        ({"rule": "precision", "target_ci_pct": 0.5, "min_blocks": 2}, "min_blocks >= 3"),
        ({"rule": "fixed", "max_case_seconds": 10}, "only apply to rule 'precision'"),
        ({"rule": "fixed", "target_ci_pct": 1}, "only apply to rule 'precision'"),
    ],
)
def test_precision_fields_are_checked(stop, message):
    with pytest.raises(PlanError, match=message):
        plan(stop)


def test_replay_finds_where_the_rule_stopped():
    p = plan(PRECISION)
    assert replay_stop(samples(8, 0.0005), CASE, MAIN, p) == (3, "target met")
    assert replay_stop(samples(8, 0.05), CASE, MAIN, p) == (8, "block cap")
    # a record cut short of any reason (a wall cap, or an interrupted trial) replays to its end
    assert replay_stop(samples(5, 0.05), CASE, MAIN, p) == (5, None)


def _through(arrays: dict, last_block: int) -> dict:
    """The samples the engine held after `last_block`, written out independently of the module."""
    out = {"floor_ns": arrays["floor_ns"]}
    for s in ("base", "candidate"):
        keep = arrays[f"{CASE}/{s}/block"] <= last_block
        out[f"{CASE}/{s}/ns"] = arrays[f"{CASE}/{s}/ns"][keep]
        out[f"{CASE}/{s}/block"] = arrays[f"{CASE}/{s}/block"][keep]
    return out


def test_a_half_width_exactly_at_the_target_meets_it_and_the_replay_agrees():
    """The live rule and its replay stop at the same block, on the same interval (floor included)."""
    arrays = samples(8, 0.01, seed=3)
    # a floor close to the samples: leaving it out of the replay would narrow every interval
    arrays["floor_ns"] = np.full(10, 9000.0)
    widths = [half_width_pct(_through(arrays, b - 1), CASE, MAIN, plan(PRECISION)) for b in range(1, 9)]
    stop_at = 5
    assert min(widths[2 : stop_at - 1]) > widths[stop_at - 1]  # narrower at block 5 than at 3 and 4
    p = plan(dict(PRECISION, target_ci_pct=widths[stop_at - 1]))
    assert stop_reason(_through(arrays, stop_at - 1), CASE, MAIN, stop_at, p) == "target met"
    assert stop_reason(_through(arrays, stop_at - 2), CASE, MAIN, stop_at - 1, p) is None
    assert replay_stop(arrays, CASE, MAIN, p) == (stop_at, "target met")


def test_a_pair_never_timed_replays_to_no_block_and_no_reason():
    arrays = samples(2, 0.01)
    empty = {k: v[:0] if k != "floor_ns" else v for k, v in arrays.items()}
    assert replay_stop(empty, CASE, MAIN, plan(PRECISION)) == (0, None)


def test_samples_without_a_floor_replay_as_the_live_rule_judged_them():
    """A trial that measured no empty-window floor (floor 0): the replay must not require one."""
    arrays = samples(8, 0.0005)
    del arrays["floor_ns"]
    p = plan(PRECISION)
    assert stop_reason(arrays, CASE, MAIN, 3, p) == "target met"
    assert replay_stop(arrays, CASE, MAIN, p) == (3, "target met")
