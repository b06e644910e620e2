"""How often does a pooled interval over k trial processes hold the true change? (CPU simulation)

Each trial process has its own true log-ratio, drawn around the change a reader will meet
tomorrow with the between-process variance b; inside the process, n blocks give a mean with
squared standard error w and an SD estimated with n − 1 degrees of freedom. Two estimators of
the pooled 95 % interval over the k trial means are compared on the same draws:

- qualify's (qualify.evaluate.pooled): between = spread − within floored at 0, Welch–Satterthwaite
  degrees of freedom (the within df whenever the floor applies);
- Knapp–Hartung, modified (Röver, Knapp and Friede 2015): se² = max(spread, within) / k with t on
  k − 1 degrees of freedom.

    python benchmarks/pooled/simulate.py > benchmarks/pooled/results.md

The vecload 1 Mi runs of benchmarks/startup/verdict-1.md imply b/w near 3 (the runs' SD of 0.32
points against intervals of about ±0.33 where the floor applied).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from qualify.evaluate.stats import t_quantile  # noqa: E402

SEED, DRAWS, BLOCKS = 20261203, 4000, 20
KS = (2, 3, 4, 6, 8)
RATIOS = (0.0, 0.5, 1.0, 3.0)  # b / w


def _t(df: np.ndarray) -> np.ndarray:
    cache: dict[float, float] = {}
    return np.array([cache.setdefault(float(d), t_quantile(0.975, float(d))) for d in df])


def simulate(k: int, ratio: float, rng: np.random.Generator) -> dict[str, tuple[float, float]]:
    """estimator -> (coverage, mean half-width in units of sqrt(w))."""
    w, b, n = 1.0, ratio, BLOCKS
    means = rng.normal(0.0, math.sqrt(b + w), size=(DRAWS, k))
    within = (w * rng.chisquare(n - 1, size=(DRAWS, k)) / (n - 1)).mean(axis=1)
    spread = means.var(axis=1, ddof=1)
    centre = means.mean(axis=1)
    between = np.maximum(0.0, spread - within)
    within_df = k * (n - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = (between + within) ** 2 / (between**2 / (k - 1) + within**2 / within_df)
    df = np.where(between == 0.0, within_df, np.clip(df, k - 1, within_df))
    half_s = _t(df) * np.sqrt((between + within) / k)
    half_kh = t_quantile(0.975, float(k - 1)) * np.sqrt(np.maximum(spread, within) / k)
    return {
        "satterthwaite": (float(np.mean(np.abs(centre) <= half_s)), float(half_s.mean())),
        "knapp-hartung": (float(np.mean(np.abs(centre) <= half_kh)), float(half_kh.mean())),
    }


def main() -> int:
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}, {DRAWS} draws per cell, {BLOCKS} blocks per trial; half-width in units of √w\n")
    print("| k | b/w | qualify (Satterthwaite) coverage | half-width | Knapp–Hartung coverage | half-width |")
    print("|---:|---:|---:|---:|---:|---:|")
    for k in KS:
        for ratio in RATIOS:
            got = simulate(k, ratio, rng)
            (cs, hs), (ck, hk) = got["satterthwaite"], got["knapp-hartung"]
            print(f"| {k} | {ratio:g} | {cs:.3f} | {hs:.2f} | {ck:.3f} | {hk:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
