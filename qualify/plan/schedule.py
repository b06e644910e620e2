"""The interleaved schedule as data: which series runs in which order, block by block.

Even blocks run A B B A, odd blocks B A A B (each letter `samples_per_block` samples). Within a
block a linear drift cancels in the paired comparison either way; alternating the two orders also
cancels what the *position* in a block does — the first half after a case's set-up or after the
previous block's other arm, a clock that settles during the first samples. With ABBA alone that
cost always fell on arm A (the base): an A/A control has the same arm on both sides but not the
same positions, and it came out "faster"/"slower" on the H200 (issue 10).

block_order is that fixed alternation: balanced exactly in every pair of blocks and a function of
the block index alone. An order drawn independently per block would be balanced only on average,
and trials stop after few blocks; block_plan therefore draws one ABBA and one BAAB per pair, in a
seeded order, which keeps the exact balance of every pair while no block position fixes the order.

The A/A control uses the same shape with the base arm on both sides.

`block_plan` draws, per block, what a trial randomizes inside itself: the placement of the case's
buffers, the flush buffer, and the block's order. Orders are drawn per pair of blocks (one ABBA and
one BAAB, in a seeded order), so every prefix of whole pairs stays exactly balanced however early
a trial stops; placements and flush slots are drawn in rounds (each round a seeded permutation of
all of them), so every prefix uses each as equally often as its length allows. Everything derives
from (plan seed, trial index, case id) through SeedSequence spawn keys — no global generator — and
each of the three draws has its own stream, so the plan of the first n blocks does not depend on
how many blocks were planned: `report --check` recomputes it from the record alone.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Literal

import numpy as np

ABBA = ("A", "B", "B", "A")
BAAB = ("B", "A", "A", "B")


@dataclass(frozen=True)
class Half:
    block: int
    position: int  # 0..3 within the block
    series: str  # samples key: base / candidate / aa_a / aa_b
    side: str  # the arm that runs: base / candidate


def block_order(block: int) -> tuple[str, str, str, str]:
    """ABBA for even blocks, BAAB for odd ones."""
    return ABBA if block % 2 == 0 else BAAB


def block_halves(
    block: int, pair: tuple[tuple[str, str], tuple[str, str]], order: str | tuple[str, ...] | None = None
) -> list[Half]:
    """The four halves of one block. pair = ((series_A, side_A), (series_B, side_B)); order is
    "ABBA" or "BAAB" (a BlockDraw's), or None for the fixed alternation of block_order."""
    letters = block_order(block) if order is None else tuple(order)
    if letters not in (ABBA, BAAB):
        raise ValueError(f"block order {order!r}: ABBA or BAAB")
    lookup = {"A": pair[0], "B": pair[1]}
    return [Half(block, pos, *lookup[letter]) for pos, letter in enumerate(letters)]


Order = Literal["ABBA", "BAAB"]
# The first spawn-key word of each stream block_plan draws from (crc32 of its name): distinct from
# the inputs' keys (qualify.run.inputs), which are two words long.
_STREAMS = {
    name: zlib.crc32(name.encode())
    for name in ("placement", "flush", "order", "trace placement", "trace flush", "trace order")
}


@dataclass(frozen=True)
class BlockDraw:
    """What one block of a case uses: both arms run on `placement` with flush buffer `flush_slot`,
    in `order`."""

    block: int
    placement: int
    flush_slot: int
    order: Order


def _stream(seed: int, trial: int, case_id: str, name: str) -> np.random.Generator:
    key = (_STREAMS[name], trial, zlib.crc32(case_id.encode()))
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))


def _rounds(rng: np.random.Generator, size: int, count: int) -> list[int]:
    """`count` values from rounds of seeded permutations of range(size)."""
    out: list[int] = []
    while len(out) < count:
        out.extend(int(v) for v in rng.permutation(size))
    return out[:count]


def block_plan(
    seed: int, trial: int, case_id: str, blocks: int, placements: int = 1, flush_slots: int = 1
) -> tuple[BlockDraw, ...]:
    """Per block of one case in one trial: its placement, flush slot and order.

    seed: the plan's base seed; trial: the trial's index; placements and flush_slots: how many the
    case has (the pool's K used, the device's prepared slots). Each placement and flush slot is
    used equally often (±1) in every prefix; the blocks of every prefix of whole pairs are half
    ABBA and half BAAB (an odd count: one more of the order its last pair drew first).
    """
    return _draw(seed, trial, case_id, blocks, placements, flush_slots, "")


def _draw(
    seed: int, trial: int, case_id: str, blocks: int, placements: int, flush_slots: int, streams: str
) -> tuple[BlockDraw, ...]:
    if blocks < 0 or placements < 1 or flush_slots < 1 or trial < 0:
        raise ValueError(
            f"block plan of {blocks} blocks, {placements} placements, {flush_slots} flush slots, trial {trial}"
        )
    where = _rounds(_stream(seed, trial, case_id, streams + "placement"), placements, blocks)
    flush = _rounds(_stream(seed, trial, case_id, streams + "flush"), flush_slots, blocks)
    orders_rng = _stream(seed, trial, case_id, streams + "order")
    orders: list[Order] = []
    for _ in range((blocks + 1) // 2):
        orders.extend(("ABBA", "BAAB") if orders_rng.integers(0, 2) == 0 else ("BAAB", "ABBA"))
    return tuple(BlockDraw(b, where[b], flush[b], orders[b]) for b in range(blocks))


@dataclass(frozen=True)
class TracedDraw:
    """One traced call of a case: which arm runs it, in which block and at which position of the
    block's order, on which placement and flush slot."""

    block: int
    position: int  # 0..3 within its block
    side: str  # base / candidate
    placement: int
    flush_slot: int
    order: Order


def trace_plan(
    seed: int, trial: int, case_id: str, calls: int, placements: int = 1, flush_slots: int = 1
) -> tuple[TracedDraw, ...]:
    """The traced calls of one case in one trial, in the order they run: `calls` per arm, as ABBA /
    BAAB blocks of one call per half, each block on one placement and flush slot.

    Drawn like `block_plan` (rounds over the pool's placements and the flush slots, one ABBA and one
    BAAB per pair of blocks) from streams of its own, so the traced blocks never shift the timed
    blocks' draws. An odd `calls` ends on half a block: the first two letters of its order, one
    call per arm, so both arms always have `calls` calls.
    """
    if calls < 0:
        raise ValueError(f"trace plan of {calls} calls per arm")
    sides = {"A": "base", "B": "candidate"}
    taken = dict.fromkeys(sides.values(), 0)
    out = []
    for d in _draw(seed, trial, case_id, (calls + 1) // 2, placements, flush_slots, "trace "):
        for position, letter in enumerate(d.order):
            side = sides[letter]
            if taken[side] < calls:
                taken[side] += 1
                out.append(TracedDraw(d.block, position, side, d.placement, d.flush_slot, d.order))
    return tuple(out)


# a timed pair: (series, the side whose arm it runs) for each of its two arms
Pair = tuple[tuple[str, str], tuple[str, str]]
MAIN: Pair = (("base", "base"), ("candidate", "candidate"))
AA: Pair = (("aa_a", "base"), ("aa_b", "base"))
