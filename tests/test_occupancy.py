"""Occupancy, hand-computed for the H200's limits (FAKE_LIMITS holds what its driver reports)."""

from __future__ import annotations

import pytest

from qualify.evaluate.occupancy import occupancy
from qualify.run.fake import FAKE_LIMITS


@pytest.mark.parametrize(
    "threads, regs, static, dynamic, blocks, warps, limiter",
    [
        # 32 regs x 32 lanes = 1,024 per warp; 16 warps per sub-partition, 64 per SM: warp slots bind
        (256, 32, 0, 0, 8, 64, "warps"),
        # one warp per block: 64 warp slots allow 64 blocks, the SM holds 32
        (32, 0, 0, 0, 32, 32, "blocks"),
        # 255 regs -> 8,160 -> 8,192 per warp; 16,384 per sub-partition holds 2 warps: 8 warps, 2 blocks of 4
        (128, 255, 0, 0, 2, 8, "registers"),
        # 101,376 + 1,024 reserved = 102,400 B per block; 233,472 // 102,400 = 2
        (128, 32, 0, 101_376, 2, 8, "shared memory"),
        # 168 regs -> 5,376 per warp; 3 warps per sub-partition, 12 per SM: one block of 8 warps
        (256, 168, 0, 67_584, 1, 8, "registers"),
        # 65 regs -> 2,080 -> 2,304 per warp; 32 warps need 73,728 > 65,536 registers per block
        (1024, 65, 0, 0, 0, 0, "registers per block"),
        (1025, 32, 0, 0, 0, 0, "threads per block"),
        (0, 32, 0, 0, 0, 0, "threads per block"),
        # one thread is one warp: the 32 block slots bind
        (1, 32, 0, 0, 32, 32, "blocks"),
        # 100 threads take 4 warps (a partial warp is a whole one): 64 // 4 = 16 blocks
        (100, 32, 0, 0, 16, 64, "warps"),
        # 3 warps per block: 64 // 3 = 21 blocks (registers would allow 42)
        (96, 16, 0, 0, 21, 63, "warps"),
        # 64 regs x 32 = 2,048 per warp x 32 warps = 65,536: exactly the per-block limit, so one block fits
        (1024, 64, 0, 0, 1, 32, "registers"),
        # exactly the opt-in maximum: 232,448 + 1,024 reserved = 233,472 B, the whole SM
        (128, 32, 0, 232_448, 1, 4, "shared memory"),
        (128, 32, 1024, 232_448 - 1023, 0, 0, "shared memory per block"),
        # static shared memory counts like dynamic: 48 KiB + 1 KiB reserved -> 4 blocks (16 by registers)
        (64, 64, 49_152, 0, 4, 8, "shared memory"),
    ],
)
def test_occupancy_on_sm90(threads, regs, static, dynamic, blocks, warps, limiter):
    occ = occupancy(FAKE_LIMITS, threads, regs, static, dynamic)
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.limiter) == (blocks, warps, limiter)


def test_shared_memory_is_rounded_up_to_its_allocation_unit():
    # 32,276 + 1,024 reserved = 33,300 B: 7 blocks would fit unrounded (233,472 // 33,300); rounded up to
    # 33,408 only 6 do
    assert occupancy(FAKE_LIMITS, 32, 16, 0, 32_276).blocks_per_sm == 6
    assert occupancy(FAKE_LIMITS, 32, 16, 0, 0).blocks_per_sm == 32


def test_an_occupancy_is_a_value_no_caller_can_change():
    """The inventory copies an occupancy into its row; the same launch must give an equal, hashable,
    unchangeable answer."""
    import dataclasses

    occ = occupancy(FAKE_LIMITS, 256, 32, 0, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        occ.blocks_per_sm = 1  # type: ignore[misc]
    assert len({occ, occupancy(FAKE_LIMITS, 256, 32, 0, 0)}) == 1
