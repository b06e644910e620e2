"""Paired statistics of ABBA-interleaved samples.

Inputs are raw event-window durations. Each is corrected by the empty-window floor measured on the
device in the same trial and divided by the launches it holds. The point estimate of a case is the
ratio of pooled medians (candidate / base); its 95 % interval comes from a bootstrap that
resamples whole ABBA blocks, so drift shared by both arms within a block stays paired.
"""

from __future__ import annotations

import numpy as np

from qualify.results.model import CaseStats, TimingSummary

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20_261_129  # fixed: `report --check` must reproduce every interval exactly
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


def paired_ratio(
    base_ns: np.ndarray,
    base_block: np.ndarray,
    cand_ns: np.ndarray,
    cand_block: np.ndarray,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float | None, float | None]:
    """Ratio of medians (candidate / base) and its 95 % block-bootstrap interval."""
    base_ns, cand_ns = np.asarray(base_ns, float), np.asarray(cand_ns, float)
    base_block, cand_block = np.asarray(base_block), np.asarray(cand_block)
    ratio = float(np.median(cand_ns) / np.median(base_ns))
    blocks = np.unique(np.concatenate([base_block, cand_block]))
    if blocks.size < 2:
        return ratio, None, None
    rng = np.random.Generator(np.random.PCG64(seed))
    base_by_block = [base_ns[base_block == b] for b in blocks]
    cand_by_block = [cand_ns[cand_block == b] for b in blocks]
    picks = rng.integers(0, blocks.size, size=(resamples, blocks.size))
    ratios = np.empty(resamples)
    for i, pick in enumerate(picks):
        b = np.concatenate([base_by_block[j] for j in pick])
        c = np.concatenate([cand_by_block[j] for j in pick])
        ratios[i] = np.median(c) / np.median(b)
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    return ratio, float(lo), float(hi)


def classify(ratio: float, lo: float | None, hi: float | None, band: float = SAME_BAND) -> tuple[str, str]:
    """A case's class and the reason, from the point estimate and its interval.

    faster/slower need the whole interval on one side of 1 *and* a change beyond the band; same
    needs the whole interval inside the band; anything else is can't tell, with the reason why.
    """
    if lo is None or hi is None:
        return "cant_tell", "fewer than two ABBA blocks: no interval"
    if hi < 1.0 and ratio <= 1.0 - band:
        return "faster", f"95% CI [{lo:.4f}, {hi:.4f}] below 1 and change beyond {band:.1%}"
    if lo > 1.0 and ratio >= 1.0 + band:
        return "slower", f"95% CI [{lo:.4f}, {hi:.4f}] above 1 and change beyond {band:.1%}"
    if 1.0 - band <= lo and hi <= 1.0 + band:
        return "same", f"95% CI [{lo:.4f}, {hi:.4f}] within ±{band:.1%}"
    if hi < 1.0 or lo > 1.0:
        return "cant_tell", f"CI excludes 1 but the change {ratio - 1:+.2%} is inside ±{band:.1%}"
    return "cant_tell", f"95% CI [{lo:.4f}, {hi:.4f}] straddles 1 and leaves ±{band:.1%}"


def case_stats(base_ns, base_block, cand_ns, cand_block) -> CaseStats:
    ratio, lo, hi = paired_ratio(base_ns, base_block, cand_ns, cand_block)
    case_class, reason = classify(ratio, lo, hi)
    return CaseStats(
        ratio=ratio,
        ci_low=lo,
        ci_high=hi,
        delta_pct=(ratio - 1.0) * 100.0,
        case_class=case_class,
        reason=reason,
    )


def ci_half_width_pct(stats: CaseStats) -> float:
    if stats.ci_low is None or stats.ci_high is None:
        return float("inf")
    return (stats.ci_high - stats.ci_low) / 2.0 / stats.ratio * 100.0
