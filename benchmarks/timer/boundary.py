"""Which sample boundary reads like ncu: the experiment behind the engine's choice.

Run on the GPU machine:  python3 benchmarks/timer/boundary.py --out boundary.json
                         python3 benchmarks/timer/boundary.py --render boundary.json

Each variant times the same short and long kernels cold (200 samples, median, floor measured the
same way and subtracted, 3 runs), against ncu in the same run:

- per-sample: one blocking kernel, flush, persisting-L2 reset, one event pair and one
  synchronisation per sample (the engine before pipelining); "no reset" drops the reset;
- batch: samples queued behind one blocking kernel in halves of 10, read once (the pipelined
  engine), with these changes: a persisting-L2 reset per sample ("reset"), a one-thread pause of
  N µs between the flush and the start event ("settle N"), the same pause after the stop event
  ("pause after stop N"), or one sample per blocking kernel ("batch of 1").
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

import bench_timer as bt  # noqa: E402

KERNELS = [
    c
    for c in bt.CASES
    if c[0] in ("empty launch", "axpy 1M floats", "axpy 2M floats", "axpy 16M floats", "axpy 128M floats")
]
VARIANTS = {
    "per-sample": {"batch": False, "reset": True},
    "per-sample, no reset": {"batch": False, "reset": False},
    "batch": {"batch": True},
    "batch, reset": {"batch": True, "reset_each": True},
    "batch of 1": {"batch": True, "max_batch": 1},
    "batch of 1, reset": {"batch": True, "max_batch": 1, "reset_each": True},
    "batch, settle 10 µs": {"batch": True, "settle_ns": 10_000},
    "batch, pause after stop 2 µs": {"batch": True, "settle_after_ns": 2_000},
    "batch, pause after stop 20 µs": {"batch": True, "settle_after_ns": 20_000},
    "batch, pause after stop 100 µs": {"batch": True, "settle_after_ns": 100_000},
}
RUNS = 3


def medians(bench, variant: dict) -> dict[str, list[float]]:
    dev = bench.dev
    if variant["batch"]:
        knobs = {k: v for k, v in variant.items() if k != "batch"}

        def take(fn, n):
            out = []
            while len(out) < n:
                out += dev.time_samples(fn, min(10, n - len(out)), cold=True, **knobs)
            return out
    else:

        def take(fn, n):
            return [dev.time_sample(fn, cold=True, reset=variant["reset"]) for _ in range(n)]

    out = {label: [] for label, *_ in KERNELS}
    for _ in range(RUNS):
        floor = statistics.median(take(lambda: None, 100))
        for label, kernel, size in KERNELS:
            fn = bench.enqueue(kernel, size)
            for _ in range(5):
                dev.time_sample(fn, cold=False, block_stream=False)
            out[label].append((statistics.median(take(fn, bt.SAMPLES)) - floor) / 1e3)
    return out


def main(out_path: Path) -> None:
    ncu = bt.ncu_medians(KERNELS)
    bench = bt.Bench()
    rows = {name: medians(bench, v) for name, v in VARIANTS.items()}
    result = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": bench.dev.info.model_dump(),
        "runs": RUNS,
        "samples": bt.SAMPLES,
        "ncu_us": {k: v["median"] for k, v in ncu.items()},
        "variants": rows,
    }
    out_path.write_text(json.dumps(result, indent=1) + "\n")
    print(render(result))


def render(result: dict) -> str:
    labels = list(result["ncu_us"])
    lines = [
        f"Measured {result['date']} on {result['device']['name']} ({result['device']['uuid']}). "
        f"Median of {result['runs']} runs' medians in µs, error against ncu.",
        "",
        "| variant | " + " | ".join(labels) + " |",
        "|---|" + "---:|" * len(labels),
        "| ncu | " + " | ".join(f"{result['ncu_us'][k]:.2f}" for k in labels) + " |",
    ]
    for name, runs in result["variants"].items():
        cells = []
        for k in labels:
            m = statistics.median(runs[k])
            cells.append(f"{m:.2f} ({(m / result['ncu_us'][k] - 1) * 100:+.1f} %)")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--render", type=Path)
    args = parser.parse_args()
    if args.render:
        print(render(json.loads(args.render.read_text())))
    else:
        main(args.out or Path(os.environ.get("OUT", ".")) / "boundary.json")
