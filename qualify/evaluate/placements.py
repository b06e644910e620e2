"""A case's paired comparison split by buffer placement: how far the placements spread.

Each block runs both arms on one placement (qualify.plan.schedule.block_plan), so a block's
log-ratio belongs to one placement. Grouping the block log-ratios by placement shows what one
fixed layout would have concluded; a series recorded without placements is placement 0 throughout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qualify.evaluate.stats import block_logs
from qualify.evaluate.summarize import series_ns
from qualify.results.samples import key


@dataclass(frozen=True)
class PlacementDelta:
    placement: int
    blocks: tuple[int, ...]  # the blocks that ran on it and have a log-ratio
    log_ratios: tuple[float, ...]  # log(candidate block median / base block median), per block
    mean_log: float
    delta_pct: float  # exp(mean_log) - 1, in percent


def block_placements(arrays: dict[str, np.ndarray], case: str, series: str) -> dict[int, int]:
    """block -> placement of one series (0 for every block of a series recorded without it).

    A block holds one placement; a series whose block ran on two is refused.
    """
    blocks = arrays[key(case, series, "block")]
    placed = arrays.get(key(case, series, "placement"))
    if placed is None:
        placed = np.zeros_like(blocks)
    out: dict[int, int] = {}
    for b, p in zip(blocks.tolist(), placed.tolist(), strict=True):
        if out.setdefault(int(b), int(p)) != int(p):
            raise ValueError(f"{case}/{series}: block {b} ran on placements {out[int(b)]} and {p}")
    return out


def placement_deltas(
    arrays: dict[str, np.ndarray], case: str, floor: float, iterations: int, a: str = "base", b: str = "candidate"
) -> tuple[PlacementDelta, ...]:
    """Per placement, in placement order: the block log-ratios of series b over series a (floor
    corrected, per launch, as the case's paired statistics take them) and their mean as a Δ.

    Both series must agree on each shared block's placement (both arms of a block share it).
    """
    where_a, where_b = block_placements(arrays, case, a), block_placements(arrays, case, b)
    for block in where_a.keys() & where_b.keys():
        if where_a[block] != where_b[block]:
            raise ValueError(
                f"{case}: block {block} ran {a} on placement {where_a[block]} and {b} on placement {where_b[block]}"
            )
    a_ns, b_ns = series_ns(arrays, case, a, floor, iterations), series_ns(arrays, case, b, floor, iterations)
    ratios = block_logs(a_ns, arrays[key(case, a, "block")], b_ns, arrays[key(case, b, "block")])
    out = []
    for p in sorted(set(where_a.values()) | set(where_b.values())):
        # a block without a ratio (a zero median) drops out alone
        kept = [blk for blk in sorted(where_a.keys() & where_b.keys()) if where_a[blk] == p and blk in ratios]
        logs = [ratios[blk] for blk in kept]
        if not logs:
            continue
        mean = float(np.mean(logs))
        out.append(PlacementDelta(p, tuple(kept), tuple(logs), mean, math.expm1(mean) * 100.0))
    return tuple(out)
