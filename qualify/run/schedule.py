"""The ABBA schedule as data: which series runs in which order, block by block.

A block runs base, candidate, candidate, base (each `samples_per_block` samples), so a linear drift
within the block cancels in the paired comparison. The A/A control uses the same shape with the
base arm on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass

ABBA = ("A", "B", "B", "A")


@dataclass(frozen=True)
class Half:
    block: int
    position: int  # 0..3 within the block
    series: str  # samples key: base / candidate / aa_a / aa_b
    side: str  # the arm that runs: base / candidate


def block_halves(block: int, pair: tuple[tuple[str, str], tuple[str, str]]) -> list[Half]:
    """The four halves of one ABBA block. pair = ((series_A, side_A), (series_B, side_B))."""
    lookup = {"A": pair[0], "B": pair[1]}
    return [Half(block, pos, *lookup[letter]) for pos, letter in enumerate(ABBA)]


MAIN = (("base", "base"), ("candidate", "candidate"))
AA = (("aa_a", "base"), ("aa_b", "base"))
