"""How often qualify history's change-point method flags a flat history, and how often it finds a
planted step, on simulated series (CPU only; no timing is measured).

    .venv/bin/python benchmarks/history/changepoint_rates.py [--series 400] [--out benchmarks/history]

Writes rates.json (every count) and rates.md (the table docs/history.md quotes). Noise is
standard normal per record; "machines in runs" adds a machine offset (SD 0.5 of the noise) that
changes every 5 records, the non-exchangeable noise a fleet of runners gives when jobs land on
one machine for a while.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from qualify.evaluate.changepoint import ALPHA, segment  # noqa: E402

PERMUTATIONS = 499  # fewer than the page's 1999: the rate, not one p-value, is what is estimated


def _flat(rng, n):
    return rng.normal(size=n)


def _runs(rng, n):
    offsets = np.repeat(rng.normal(0.0, 0.5, size=n // 5 + 1), 5)[:n]
    return rng.normal(size=n) + offsets


def _rate(make, n, series, seed, step=0.0, exact=False):
    rng = np.random.default_rng(seed)
    hits = 0
    for s in range(series):
        y = make(rng, n)
        y[n // 2 :] += step
        found = [c.index for c in segment(y, permutations=PERMUTATIONS, seed=s).points]
        hits += (found == [n // 2]) if exact else bool(found)
    return hits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=400)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args()
    rows = []
    for n in (13, 20, 40, 80):
        rows.append(
            {"n": n, "noise": "flat", "step_sd": 0.0, "flagged": _rate(_flat, n, args.series, n), "series": args.series}
        )
        rows.append(
            {"n": n, "noise": "machines in runs", "step_sd": 0.0, "flagged": _rate(_runs, n, args.series, n + 1)}
            | {"series": args.series}
        )
    for n in (13, 20, 40):
        for step in (1.0, 2.0, 3.0, 4.0):
            found = _rate(_flat, n, args.series, 1000 + n, step=step, exact=True)
            rows.append({"n": n, "noise": "flat", "step_sd": step, "found_at_index": found, "series": args.series})
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rates.json").write_text(
        json.dumps({"alpha": ALPHA, "permutations": PERMUTATIONS, "rows": rows}, indent=1)
    )
    lines = [
        f"alpha {ALPHA}, {PERMUTATIONS} permutations, {args.series} series per row "
        "(benchmarks/history/changepoint_rates.py)",
        "",
        "| records | noise | step (noise SDs) | flagged anything | step found at its index |",
        "|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        flagged = f"{100 * r['flagged'] / r['series']:.1f} %" if "flagged" in r else ""
        found = f"{100 * r['found_at_index'] / r['series']:.1f} %" if "found_at_index" in r else ""
        lines.append(f"| {r['n']} | {r['noise']} | {r['step_sd']:g} | {flagged} | {found} |")
    (args.out / "rates.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
