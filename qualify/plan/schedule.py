"""The interleaved schedule as data: which series runs in which order, block by block.

Even blocks run A B B A, odd blocks B A A B (each letter `samples_per_block` samples). Within a
block a linear drift cancels in the paired comparison either way; alternating the two orders also
cancels what the *position* in a block does — the first half after a case's set-up or after the
previous block's other arm, a clock that settles during the first samples. With ABBA alone that
cost always fell on arm A (the base): an A/A control has the same arm on both sides but not the
same positions, and it came out "faster"/"slower" on the H200 (issue 10).

Why a fixed alternation rather than an order drawn from the plan's seed: it is balanced exactly
in every pair of blocks (a random order is balanced only on average, and trials stop after few
blocks), and it is a function of the block index alone, so the order never needs recording — the
samples' block indices already say which order each block ran.

The A/A control uses the same shape with the base arm on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def block_halves(block: int, pair: tuple[tuple[str, str], tuple[str, str]]) -> list[Half]:
    """The four halves of one block. pair = ((series_A, side_A), (series_B, side_B))."""
    lookup = {"A": pair[0], "B": pair[1]}
    return [Half(block, pos, *lookup[letter]) for pos, letter in enumerate(block_order(block))]


MAIN = (("base", "base"), ("candidate", "candidate"))
AA = (("aa_a", "base"), ("aa_b", "base"))
