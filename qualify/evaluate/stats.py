"""Paired statistics of interleaved samples: one number per block, then a t-interval over blocks.

Inputs are raw event-window durations. Each is corrected by the empty-window floor measured on the
device in the same trial and divided by the launches it holds.

Why blocks, not samples. Samples taken back to back share the device's state of the moment (clock,
memory-controller phase, what the other wave of blocks happened to collide with), so within a block
they are correlated, not independent draws. An interval built from samples as if they were
exchangeable is too narrow exactly where a kernel's own spread is largest: on the H200 a block
bootstrap of the pooled median ratio called an A/A control "faster" or "slower" at a 1.45-wave
attention case where this method did not (/work/shared/gpu A/A facts, issue 10). So each block is
reduced to one paired number — the log of the candidate's block median over the base's block
median — and the blocks, which are far apart in time and each balanced against drift by its
ABBA/BAAB order, are treated as the independent units. The interval is Student's t over those
block log-ratios; the point estimate is their mean, so estimate and interval come from one model.
Medians inside a block keep one preempted sample from moving the block's number.

Everything here is a pure function of the samples: `report --check` recomputes every value
exactly (no random resampling, no state).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from qualify.results.model import CaseStats, TimingSummary

CONFIDENCE = 0.95  # two-sided level of every interval and of the detectable-effect test
POWER = 0.80  # power at which the minimum detectable effect is stated
SAME_BAND = 0.005  # |ratio - 1| below 0.5 % is "same" (NVBench's robust-compare threshold)


def per_launch_ns(window_ns: np.ndarray, floor_ns: float, iterations: int) -> np.ndarray:
    """Floor-corrected duration of one launch; never below zero."""
    return np.maximum(np.asarray(window_ns, dtype=np.float64) - floor_ns, 0.0) / iterations


def summarize(ns: np.ndarray, warmup: int, sm_mhz: np.ndarray, throttled: np.ndarray) -> TimingSummary:
    ns = np.asarray(ns, dtype=np.float64)
    q1, med, q3 = np.percentile(ns, [25, 50, 75])
    clocks = np.asarray(sm_mhz, dtype=np.float64)
    clocks = clocks[clocks > 0]
    return TimingSummary(
        samples=int(ns.size),
        warmup=int(warmup),
        median_ns=float(med),
        q1_ns=float(q1),
        q3_ns=float(q3),
        min_ns=float(ns.min()),
        max_ns=float(ns.max()),
        throttled_samples=int(np.count_nonzero(throttled)),
        mean_sm_clock_mhz=float(clocks.mean()) if clocks.size else None,
    )


# ---------------------------------------------------------------------------------------------
# Student's t, without scipy (qualify's dependencies stay small; see README)


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b), by its continued fraction (modified Lentz)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast only below the mean
        return 1.0 - _incomplete_beta(b, a, 1.0 - x)
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 400):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return math.exp(log_front) * f / a


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom."""
    t2 = t * t
    # P(|T| > |t|) = I_{df/(df+t²)}(df/2, 1/2) = 1 - I_{t²/(df+t²)}(1/2, df/2); take the form whose
    # argument is small, so that 1 - x is never formed from an x that rounds to 1
    if t2 < df:
        tail = 0.5 * (1.0 - _incomplete_beta(0.5, df / 2.0, t2 / (df + t2)))
    else:
        tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t2))
    return 1.0 - tail if t > 0 else tail


@lru_cache(maxsize=512)  # a trial asks for the same few (p, df) pairs over and over
def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t (0 < p < 1), by bisection: slow, exact to double precision."""
    if not 0.0 < p < 1.0 or df < 1:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df >= 1, got p={p}, df={df}")
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    lo, hi = -1.0, 1.0
    while t_cdf(lo, df) > p:
        lo *= 2.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


# ---------------------------------------------------------------------------------------------
# per-block paired log-ratios


def block_logs(
    base_ns: npt.ArrayLike, base_block: npt.ArrayLike, cand_ns: npt.ArrayLike, cand_block: npt.ArrayLike
) -> dict[int, float]:
    """block -> log(candidate's block median / base's block median), for each block both arms
    measured, in block order.

    A block where either arm's median is not positive (a floor-corrected duration of zero: the
    kernel is shorter than the timer resolves) has no ratio and is left out.
    """
    base, cand = np.asarray(base_ns, np.float64), np.asarray(cand_ns, np.float64)
    bb, cb = np.asarray(base_block), np.asarray(cand_block)
    out: dict[int, float] = {}
    for b in np.intersect1d(np.unique(bb), np.unique(cb)):
        mb, mc = np.median(base[bb == b]), np.median(cand[cb == b])
        if mb > 0 and mc > 0:
            out[int(b)] = math.log(mc / mb)
    return out


# (ratio, ci_low, ci_high, blocks, mde_pct): no interval and no MDE below two units
RatioOfLogs = tuple[float, float | None, float | None, int, float | None]


def block_log_ratios(
    base_ns: npt.ArrayLike, base_block: npt.ArrayLike, cand_ns: npt.ArrayLike, cand_block: npt.ArrayLike
) -> np.ndarray:
    """The block log-ratios of `block_logs`, in block order."""
    return np.asarray(list(block_logs(base_ns, base_block, cand_ns, cand_block).values()), dtype=np.float64)


def unit_log_ratios(
    base_ns: npt.ArrayLike,
    base_block: npt.ArrayLike,
    cand_ns: npt.ArrayLike,
    cand_block: npt.ArrayLike,
    placement: npt.ArrayLike | None = None,
    placement_block: npt.ArrayLike | None = None,
) -> np.ndarray:
    """The independent units of a case's interval: one log-ratio per block, or, where blocks share
    a placement of the buffers, the mean of those blocks' log-ratios per placement.

    Blocks that share a placement share whatever that placement does to the ratio (several percent
    for a short memory-bound kernel, benchmarks/placement): they are not independent draws, and a
    t-interval over them would be as narrow as if the placement effect did not exist. The placement
    is then the unit. `placement`/`placement_block` give each sample's placement and block (one
    arm's arrays suffice: both arms of a block run on the same placement); without them, or when
    no placement serves two blocks, the blocks are the units.
    """
    logs = block_logs(base_ns, base_block, cand_ns, cand_block)
    if placement is None or placement_block is None or np.asarray(placement).size == 0:
        return np.asarray(list(logs.values()), dtype=np.float64)
    where = {int(b): int(p) for b, p in zip(np.asarray(placement_block), np.asarray(placement))}
    by_placement: dict[int, list[float]] = {}
    for b, value in logs.items():
        by_placement.setdefault(where.get(b, -1 - b), []).append(value)
    if all(len(v) == 1 for v in by_placement.values()):
        return np.asarray(list(logs.values()), dtype=np.float64)
    return np.asarray([math.fsum(v) / len(v) for _, v in sorted(by_placement.items())], dtype=np.float64)


def mde_log(sd: float, blocks: int, confidence: float = CONFIDENCE, power: float = POWER) -> float | None:
    """Smallest true log-ratio a two-sided t-test over `blocks` block log-ratios detects with
    the given power: (t_{1-α/2} + t_{power}) · sd / √n. None below two blocks."""
    if blocks < 2:
        return None
    df = blocks - 1
    return (t_quantile(0.5 + confidence / 2.0, df) + t_quantile(power, df)) * sd / math.sqrt(blocks)


def mde_pct(sd: float, blocks: int, confidence: float = CONFIDENCE, power: float = POWER) -> float | None:
    """The minimum detectable effect as a change in %, the larger of slow-down and speed-up."""
    d = mde_log(sd, blocks, confidence, power)
    return None if d is None else math.expm1(d) * 100.0


def paired_ratio(
    base_ns: npt.ArrayLike,
    base_block: npt.ArrayLike,
    cand_ns: npt.ArrayLike,
    cand_block: npt.ArrayLike,
    confidence: float = CONFIDENCE,
) -> RatioOfLogs:
    """(ratio, ci_low, ci_high, blocks, mde_pct) of candidate / base.

    ratio = exp(mean of block log-ratios); the interval is the t-interval of that mean mapped back
    through exp. Below two usable blocks there is no interval and no MDE; with no usable block the
    ratio falls back to the pooled medians (or 1.0 if even those are zero), and the class says why.
    """
    logs = block_log_ratios(base_ns, base_block, cand_ns, cand_block)
    return _ratio_of_logs(logs, base_ns, cand_ns, confidence)


def _ratio_of_logs(
    logs: np.ndarray, base_ns: npt.ArrayLike, cand_ns: npt.ArrayLike, confidence: float = CONFIDENCE
) -> RatioOfLogs:
    n = int(logs.size)
    if n == 0:
        mb, mc = float(np.median(np.asarray(base_ns, np.float64))), float(np.median(np.asarray(cand_ns, np.float64)))
        return (mc / mb if mb > 0 and mc > 0 else 1.0), None, None, 0, None
    mean = float(np.mean(logs))
    if n < 2:
        return math.exp(mean), None, None, n, None
    sd = float(np.std(logs, ddof=1))
    half = t_quantile(0.5 + confidence / 2.0, n - 1) * sd / math.sqrt(n)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half), n, mde_pct(sd, n, confidence)


def classify(
    ratio: float,
    lo: float | None,
    hi: float | None,
    band: float = SAME_BAND,
    mde: float | None = None,
    blocks: int | None = None,
) -> tuple[str, str]:
    """A case's class and the reason, from the point estimate and its interval.

    faster/slower need the whole interval on one side of 1 *and* a change beyond the band; same
    needs the whole interval inside the band; anything else is can't tell, with the reason why and
    the smallest change the case could have resolved.
    """
    level = f"{CONFIDENCE:.0%} CI"
    resolve = "" if mde is None else f"; the smallest change this case resolves is {mde:.2f}%"
    if lo is None or hi is None:
        usable = "no block" if not blocks else f"{blocks} block"
        return "cant_tell", f"{usable} with a ratio on both arms: no interval (needs two)"
    if hi < 1.0 and ratio <= 1.0 - band:
        return "faster", f"{level} [{lo:.4f}, {hi:.4f}] below 1 and change beyond {band:.1%}"
    if lo > 1.0 and ratio >= 1.0 + band:
        return "slower", f"{level} [{lo:.4f}, {hi:.4f}] above 1 and change beyond {band:.1%}"
    if 1.0 - band <= lo and hi <= 1.0 + band:
        return "same", f"{level} [{lo:.4f}, {hi:.4f}] within ±{band:.1%}"
    if hi < 1.0 or lo > 1.0:
        return "cant_tell", f"{level} excludes 1 but the change {ratio - 1:+.2%} is inside ±{band:.1%}{resolve}"
    return "cant_tell", f"{level} [{lo:.4f}, {hi:.4f}] straddles 1 and leaves ±{band:.1%}{resolve}"


def case_stats(
    base_ns: npt.ArrayLike,
    base_block: npt.ArrayLike,
    cand_ns: npt.ArrayLike,
    cand_block: npt.ArrayLike,
    placement: npt.ArrayLike | None = None,
    placement_block: npt.ArrayLike | None = None,
) -> CaseStats:
    """A case's statistics over its independent units (blocks, or placements shared by blocks)."""
    logs = unit_log_ratios(base_ns, base_block, cand_ns, cand_block, placement, placement_block)
    ratio, lo, hi, blocks, mde = _ratio_of_logs(logs, base_ns, cand_ns)
    case_class, reason = classify(ratio, lo, hi, mde=mde, blocks=blocks)
    return CaseStats(
        ratio=ratio,
        ci_low=lo,
        ci_high=hi,
        delta_pct=(ratio - 1.0) * 100.0,
        case_class=case_class,
        reason=reason,
        blocks=blocks,
        mde_pct=mde,
        # the trial's own moments, from which its trials' pooled interval is built (qualify.evaluate.pooled)
        log_mean=float(np.mean(logs)) if logs.size else None,
        log_sd=float(np.std(logs, ddof=1)) if logs.size >= 2 else None,
    )


def ci_half_width_pct(stats: CaseStats) -> float:
    """Half the interval's width relative to the ratio, in % (infinite without an interval).

    The interval is symmetric in log space, so this is the same on either side: exp(h) - 1.
    """
    if stats.ci_low is None or stats.ci_high is None:
        return float("inf")
    return math.expm1(0.5 * math.log(stats.ci_high / stats.ci_low)) * 100.0
