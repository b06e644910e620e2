"""The interleaved schedule as the engine runs it: ABBA on even blocks, BAAB on odd ones."""

from __future__ import annotations

from collections import Counter

import pytest

from qualify.plan.schedule import AA, MAIN, Half, block_halves, block_order


@pytest.mark.parametrize(
    "block, order",
    [
        (0, "ABBA"),
        (1, "BAAB"),
        (2, "ABBA"),
        (3, "BAAB"),
        (10, "ABBA"),
        (11, "BAAB"),
    ],
)
def test_blocks_alternate_abba_and_baab(block, order):
    assert "".join(block_order(block)) == order


def test_the_halves_of_a_comparison_block_name_series_side_and_position():
    assert block_halves(4, MAIN) == [
        Half(4, 0, "base", "base"),
        Half(4, 1, "candidate", "candidate"),
        Half(4, 2, "candidate", "candidate"),
        Half(4, 3, "base", "base"),
    ]
    assert block_halves(5, MAIN) == [
        Half(5, 0, "candidate", "candidate"),
        Half(5, 1, "base", "base"),
        Half(5, 2, "base", "base"),
        Half(5, 3, "candidate", "candidate"),
    ]


def test_the_aa_control_runs_the_base_arm_on_both_sides():
    halves = block_halves(0, AA) + block_halves(1, AA)
    assert {h.side for h in halves} == {"base"}
    assert [h.series for h in halves[:4]] == ["aa_a", "aa_b", "aa_b", "aa_a"]
    assert [h.series for h in halves[4:]] == ["aa_b", "aa_a", "aa_a", "aa_b"]


@pytest.mark.parametrize("pair", [MAIN, AA])
@pytest.mark.parametrize("first", [0, 1, 6])
def test_every_two_blocks_put_each_series_once_in_each_position(pair, first):
    """What the alternation is for: the cost of a position falls on both arms equally."""
    halves = block_halves(first, pair) + block_halves(first + 1, pair)
    assert Counter((h.series, h.position) for h in halves) == {
        (series, position): 1 for (series, _), position in ((s, p) for s in pair for p in range(4))
    }


def test_the_schedule_is_data_no_caller_can_change():
    """The engine and the plots read the same halves: neither may edit one the other relies on."""
    import dataclasses

    half = block_halves(0, MAIN)[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        half.series = "candidate"  # type: ignore[misc]
    assert len(set(block_halves(0, MAIN) + block_halves(0, MAIN))) == 4  # hashable, equal by value
