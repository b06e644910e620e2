"""A case's interval over several trials: two levels, blocks within a trial and trials between.

Each trial runs in its own process, and a process fixes things the blocks inside it all share
(where its buffers sit, its module load, its allocations). Blocks therefore vary around their
process's own ratio, and processes vary around the ratio a reader will meet tomorrow. A trial's
interval describes the first spread only; the pooled interval adds the second. The trials are the
replicates, weighted equally.

For k trials, trial i with n_i block log-ratios of mean m_i and standard deviation s_i:

    se_i² = s_i² / n_i                         a trial's own squared standard error
    w     = mean(se_i²)                        the within-trial part
    b     = max(0, var(m_i, ddof=1) − w)       the between-trial part (method of moments)
    M     = mean(m_i),  se(M)² = (b + w) / k
    df    = (b + w)² / (b²/(k − 1) + w²/Σ(n_i − 1))      Welch–Satterthwaite; b = 0 gives Σ(n_i − 1)
    CI    = exp(M ± t_{0.975, df} · se(M))
    MDE   = expm1((t_{0.975, df} + t_{0.80, df}) · se(M)) · 100

df is capped at Σ(n_i − 1): Satterthwaite's approximation can exceed it (up to Σn_i − 1) when b is
small against w, but the between part only ever adds uncertainty, so the pooled interval never
claims more degrees of freedom than the blocks within the trials hold.

One trial has no between part to estimate: its pooled interval is the trial's own, and its reason
says that the interval covers one process only.

Everything is a pure function of the trials' statistics (`report --check` recomputes it): sums are
exact (math.fsum) and the t quantiles are the bisection of qualify.evaluate.stats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from qualify.evaluate.stats import CONFIDENCE, POWER, classify, t_quantile
from qualify.results.model import CaseStats, PooledStats

ONE_PROCESS = "one trial: the interval covers one process only"


@dataclass(frozen=True)
class TrialMoments:
    """A trial's block log-ratios, summarised: their mean, SD (ddof 1) and count."""

    mean: float
    sd: float | None  # None below two blocks
    blocks: int


def trial_moments(stats: CaseStats) -> TrialMoments:
    """The trial's recorded moments; for trials made before they were recorded, the moments its
    ratio and interval imply (the interval is exp(mean ± t_{0.975, n−1} · sd / √n))."""
    blocks = stats.blocks or 0
    if stats.log_mean is not None:
        return TrialMoments(stats.log_mean, stats.log_sd if blocks >= 2 else None, blocks)
    mean = math.log(stats.ratio)
    if stats.ci_low is None or stats.ci_high is None or blocks < 2:
        return TrialMoments(mean, None, blocks)
    half = 0.5 * (math.log(stats.ci_high) - math.log(stats.ci_low))
    return TrialMoments(mean, half * math.sqrt(blocks) / t_quantile(0.5 + CONFIDENCE / 2.0, blocks - 1), blocks)


def satterthwaite_df(between: float, within: float, trials: int, within_df: int) -> float:
    """Degrees of freedom of between + within (each its own estimate), capped at within_df."""
    if between == 0.0:
        return float(within_df)
    if within == 0.0:
        return float(trials - 1)
    df = (between + within) ** 2 / (between**2 / (trials - 1) + within**2 / within_df)
    return min(max(df, float(trials - 1)), float(within_df))


def _pct(log_sd: float) -> float:
    """A spread in log space as a change in % on the ratio scale."""
    return math.expm1(log_sd) * 100.0


def _one_process(stats: CaseStats, moments: TrialMoments) -> PooledStats:
    """One trial: its own interval, class and MDE; the within part is its standard error."""
    sd = moments.sd if stats.ci_low is not None and stats.ci_high is not None else None
    return PooledStats(
        ratio=stats.ratio,
        ci_low=stats.ci_low,
        ci_high=stats.ci_high,
        delta_pct=stats.delta_pct,
        case_class=stats.case_class,
        reason=f"{stats.reason}; {ONE_PROCESS}",
        trials=1,
        df=float(moments.blocks - 1) if sd is not None else None,
        within_pct=_pct(sd / math.sqrt(moments.blocks)) if sd is not None else None,
        between_pct=None,
        mde_pct=stats.mde_pct,
    )


def _no_interval(moments: list[TrialMoments]) -> PooledStats:
    """Some trial has fewer than two blocks: no within part for it, so no pooled interval."""
    ratio = math.exp(math.fsum(m.mean for m in moments) / len(moments))
    short = sum(1 for m in moments if m.sd is None)
    return PooledStats(
        ratio=ratio,
        ci_low=None,
        ci_high=None,
        delta_pct=(ratio - 1.0) * 100.0,
        case_class="cant_tell",
        reason=f"{short} of {len(moments)} trials have fewer than two blocks with a ratio on both arms: "
        "no pooled interval (each trial needs two)",
        trials=len(moments),
        df=None,
        within_pct=None,
        between_pct=None,
        mde_pct=None,
    )


def pool(trials: Sequence[CaseStats], confidence: float = CONFIDENCE, power: float = POWER) -> PooledStats:
    """The two-level statistics of one case on one device over its complete trials' statistics."""
    if not trials:
        raise ValueError("pooling needs at least one trial")
    moments = [trial_moments(s) for s in trials]
    k = len(moments)
    if k == 1:
        return _one_process(trials[0], moments[0])
    if any(m.sd is None for m in moments):
        return _no_interval(moments)
    mean = math.fsum(m.mean for m in moments) / k
    within = math.fsum(m.sd**2 / m.blocks for m in moments) / k  # type: ignore[operator]
    spread = math.fsum((m.mean - mean) ** 2 for m in moments) / (k - 1)
    between = max(0.0, spread - within)
    se = math.sqrt((between + within) / k)
    df = satterthwaite_df(between, within, k, sum(m.blocks - 1 for m in moments))
    t_level = t_quantile(0.5 + confidence / 2.0, df)
    ratio, lo, hi = math.exp(mean), math.exp(mean - t_level * se), math.exp(mean + t_level * se)
    mde = _pct((t_level + t_quantile(power, df)) * se)
    case_class, reason = classify(ratio, lo, hi, mde=mde, blocks=sum(m.blocks for m in moments))
    return PooledStats(
        ratio=ratio,
        ci_low=lo,
        ci_high=hi,
        delta_pct=(ratio - 1.0) * 100.0,
        case_class=case_class,
        reason=f"{reason}; pooled over {k} trials ({k} processes)",
        trials=k,
        df=df,
        within_pct=_pct(math.sqrt(within)),
        between_pct=_pct(math.sqrt(between)),
        mde_pct=mde,
    )
