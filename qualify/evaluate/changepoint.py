"""Change points in a short series: circular binary segmentation (Olshen, Venkatraman, Lucito
and Wigler 2004, the method of DNAcopy), each split judged by a permutation test.

A case's history is one value per record (its change in %, log scale), a few to a few hundred of
them, whose noise between records is larger than each record's own interval says (a fresh
machine, a fresh process: the issue's H200s disagree by more than their intervals). A method that
needs the noise's variance would have to estimate it from the very series it judges; a
permutation test needs none. The null hypothesis is that a segment's values are exchangeable (no
change). The statistic is the largest standardized difference between the mean of an arc [i, j)
and the mean of the rest,

    Z(i, j) = |mean(y[i:j]) − mean(y outside)| / sqrt(1/L + 1/(n − L)),   L = j − i,

over every arc, so one shift (i = 0 or j = n) and a shift that is later undone (a regression,
then its fix) are both one test. Plain binary segmentation's CUSUM misses the second when the
shifted stretch sits in the middle: the whole series' mean barely moves. Scale cancels: the
p-value is the share of random orders of the segment whose largest Z is at least the observed one,
the observed order counted: p = (1 + #{Z_perm >= Z_obs}) / (1 + B).

Segmentation: test the whole series; where p <= alpha, cut at the arc's ends (one or two change
points) and test each piece the same way. No piece is shorter than min_size (default 2), so one
stray record is never a change by itself: a change is called once two records after it agree.

False positives. On a flat series of exchangeable noise only the first test runs unless it
rejects, so the chance of flagging anything is alpha (within the Monte Carlo error of B
permutations), whatever the series' length or noise level. After a real change each piece is
tested at alpha again, so a spurious extra point appears with probability up to alpha per piece.
Noise that is not exchangeable (a slow drift, machines that differ and come in runs) is not "no
change" to this test: a drift is reported as a change where it is steepest. With n values the
smallest p-value possible is about n/C(n, n/2); below MIN_POINTS values nothing can be flagged at
alpha 0.01.

Pure and deterministic: the permutations come from a generator seeded by `seed`, so a page and its
test get one answer. Work is O(B·n²) per test (every arc of every permutation), in bounded chunks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

METHOD = "circular binary segmentation, permutation test"
ALPHA = 0.01
PERMUTATIONS = 1999
MIN_SIZE = 2
SEED = 20261203


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first value of the new segment
    p_value: float  # of the test that cut here
    before: float  # mean of the piece that ends here
    after: float  # mean of the piece that starts here


@dataclass(frozen=True)
class Segmentation:
    method: str
    alpha: float
    permutations: int
    min_size: int
    points: tuple[ChangePoint, ...]  # in index order
    segments: tuple[tuple[int, int, float], ...]  # (start, stop, mean): [start, stop) of the values


def _pairs(n: int, min_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (i, j), 0 <= i < j <= n, whose inside [i, j) and each outside piece hold min_size values
    or more (an outside piece may be empty: i = 0 or j = n is one split, not two)."""
    i, j = np.triu_indices(n + 1, k=1)
    inside = j - i
    keep = (inside >= min_size) & (n - inside >= min_size)
    keep &= ((i == 0) | (i >= min_size)) & ((j == n) | (n - j >= min_size))
    return i[keep], j[keep]


def arc_statistics(values: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Z(i, j) of each row of `values` (shape (rows, n)) at each pair: the inside mean less the
    outside mean over sqrt(1/L + 1/(n − L)), L = j − i, in absolute value."""
    n = values.shape[-1]
    sums = np.concatenate([np.zeros(values.shape[:-1] + (1,)), np.cumsum(values, axis=-1)], axis=-1)
    inside_sum = sums[..., j] - sums[..., i]
    length = (j - i).astype(float)
    outside_sum = sums[..., -1:] - inside_sum
    diff = inside_sum / length - outside_sum / (n - length)
    scores: np.ndarray = np.abs(diff) / np.sqrt(1.0 / length + 1.0 / (n - length))
    return scores


def best_arc(values: np.ndarray, min_size: int) -> tuple[int, int, float] | None:
    """The pair (i, j) with the largest Z, and Z; None when no pair leaves min_size values apart."""
    i, j = _pairs(len(values), min_size)
    if len(i) == 0:
        return None
    stats = arc_statistics(values[np.newaxis, :], i, j)[0]
    best = int(np.argmax(stats))
    return int(i[best]), int(j[best]), float(stats[best])


def permutation_p_value(values: np.ndarray, min_size: int, permutations: int, rng: np.random.Generator) -> float:
    """p-value of the segment's largest Z among `permutations` random orders of its values."""
    found = best_arc(values, min_size)
    if found is None:
        return 1.0
    observed = found[2]
    i, j = _pairs(len(values), min_size)
    as_large = 0
    # a tolerance for ties: a permutation equal to the observed order must count as "at least"
    threshold = observed * (1 - 1e-12)
    chunk = max(1, 2_000_000 // max(1, len(i)))  # bounded memory whatever the series' length
    for start in range(0, permutations, chunk):
        rows = min(chunk, permutations - start)
        shuffled = rng.permuted(np.tile(values, (rows, 1)), axis=1)
        as_large += int(np.count_nonzero(arc_statistics(shuffled, i, j).max(axis=1) >= threshold))
    return (1 + as_large) / (1 + permutations)


def segment(
    values: Sequence[float],
    *,
    alpha: float = ALPHA,
    permutations: int = PERMUTATIONS,
    min_size: int = MIN_SIZE,
    seed: int = SEED,
) -> Segmentation:
    """The change points of `values` (finite floats) by binary segmentation (module docstring)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    if permutations < 1 or min_size < 1:
        raise ValueError("permutations and min_size must be at least 1")
    y = np.asarray(values, dtype=float)
    if y.ndim != 1 or not np.all(np.isfinite(y)):
        raise ValueError("values must be a flat sequence of finite numbers")
    rng = np.random.default_rng(seed)
    found: list[ChangePoint] = []
    pending = [(0, len(y))]
    while pending:
        start, stop = pending.pop()
        part = y[start:stop]
        if len(part) < 2 * min_size or np.ptp(part) == 0.0:
            continue  # too short to split, or constant: no order of it differs from another
        p = permutation_p_value(part, min_size, permutations, rng)
        if p > alpha:
            continue
        i, j, _ = best_arc(part, min_size)  # type: ignore[misc]  # a p <= alpha had a pair
        cuts = [c for c in (i, j) if 0 < c < len(part)]
        edges = [0, *cuts, len(part)]
        for c in cuts:
            left = part[edges[edges.index(c) - 1] : c]
            right = part[c : edges[edges.index(c) + 1]]
            found.append(ChangePoint(start + c, p, float(left.mean()), float(right.mean())))
        pending += [(start + a, start + b) for a, b in zip(edges, edges[1:])]
    found.sort(key=lambda c: c.index)
    bounds = [0, *(c.index for c in found), len(y)]
    segments = tuple((a, b, float(y[a:b].mean())) for a, b in zip(bounds, bounds[1:]) if b > a)
    return Segmentation(METHOD, alpha, permutations, min_size, tuple(found), segments)


def smallest_p(n: int, min_size: int = MIN_SIZE) -> float:
    """About the smallest p-value n values can give: Z depends only on which values lie inside the
    arc, and the n rotations of a circle of n values carry the same arcs, so at least n of the
    C(n, L) choices of the inside set tie with the observed one: p >= n/C(n, ⌊n/2⌋). Below
    2·min_size values no test is run at all (1.0)."""
    if n < 2 * min_size:
        return 1.0
    return min(1.0, n / math.comb(n, n // 2))


# the fewest values at which a change can be flagged at ALPHA (documented in docs/history.md)
MIN_POINTS = next(n for n in range(2 * MIN_SIZE, 64) if smallest_p(n) <= ALPHA)
