"""The per-block plan of a case: placements, flush slots and orders, seeded and balanced."""

from __future__ import annotations

from collections import Counter

import pytest

from qualify.plan.schedule import AA, MAIN, BlockDraw, Half, block_halves, block_plan


def _spread(values, size):
    counts = Counter(values)
    return max(counts.get(v, 0) for v in range(size)) - min(counts.get(v, 0) for v in range(size))


@pytest.mark.parametrize("blocks", range(1, 41))
def test_every_prefix_uses_placements_and_flush_slots_evenly(blocks):
    plan = block_plan(7, 0, "N=1048576", blocks, placements=8, flush_slots=4)
    assert [d.block for d in plan] == list(range(blocks))
    for n in range(1, blocks + 1):
        assert _spread([d.placement for d in plan[:n]], 8) <= 1
        assert _spread([d.flush_slot for d in plan[:n]], 4) <= 1


@pytest.mark.parametrize("blocks", range(1, 41))
def test_every_prefix_of_pairs_is_half_abba_half_baab(blocks):
    plan = block_plan(7, 0, "N=1048576", blocks, placements=3)
    orders = Counter(d.order for d in plan)
    assert abs(orders["ABBA"] - orders["BAAB"]) <= 1 and orders["ABBA"] + orders["BAAB"] == blocks
    for pairs in range(1, blocks // 2 + 1):
        prefix = Counter(d.order for d in plan[: 2 * pairs])
        assert prefix["ABBA"] == prefix["BAAB"] == pairs


def test_the_same_seed_gives_the_same_plan_and_a_longer_plan_extends_it():
    plan = block_plan(3, 1, "T=512", 24, 8, 4)
    assert plan == block_plan(3, 1, "T=512", 24, 8, 4)
    assert block_plan(3, 1, "T=512", 10, 8, 4) == plan[:10]  # a trial that stops early is a prefix


@pytest.mark.parametrize("other", [(4, 1, "T=512"), (3, 2, "T=512"), (3, 1, "T=1024")])
def test_the_seed_the_trial_and_the_case_each_change_the_plan(other):
    plan = block_plan(3, 1, "T=512", 24, 8, 4)
    again = block_plan(*other, 24, 8, 4)
    assert [d.order for d in again] != [d.order for d in plan]
    assert [d.placement for d in again] != [d.placement for d in plan]
    assert [d.flush_slot for d in again] != [d.flush_slot for d in plan]


def test_orders_are_not_the_fixed_alternation():
    """Across seeds, block 0 opens with either order."""
    assert {block_plan(seed, 0, "c", 2)[0].order for seed in range(20)} == {"ABBA", "BAAB"}


def test_one_placement_and_one_flush_slot_are_todays_layout():
    plan = block_plan(0, 0, "c", 6)
    assert {(d.placement, d.flush_slot) for d in plan} == {(0, 0)}


def test_no_blocks_is_an_empty_plan_and_nonsense_is_refused():
    assert block_plan(0, 0, "c", 0, 8, 4) == ()
    for bad in ((-1, 1, 1), (4, 0, 1), (4, 1, 0)):
        with pytest.raises(ValueError):
            block_plan(0, 0, "c", *bad)
    with pytest.raises(ValueError):
        block_plan(0, -1, "c", 4, 1, 1)  # a trial index below 0
    assert len(block_plan(0, 0, "c", 1, 1, 1)) == 1  # the smallest valid plan of each


def test_block_halves_run_the_drawn_order():
    draw = BlockDraw(block=4, placement=2, flush_slot=1, order="BAAB")
    assert block_halves(draw.block, MAIN, draw.order) == [
        Half(4, 0, "candidate", "candidate"),
        Half(4, 1, "base", "base"),
        Half(4, 2, "base", "base"),
        Half(4, 3, "candidate", "candidate"),
    ]
    assert [h.series for h in block_halves(5, AA, "ABBA")] == ["aa_a", "aa_b", "aa_b", "aa_a"]
    assert block_halves(4, MAIN, None) == block_halves(4, MAIN)  # no order: the fixed alternation
    with pytest.raises(ValueError, match="ABBA or BAAB"):
        block_halves(0, MAIN, "ABAB")
