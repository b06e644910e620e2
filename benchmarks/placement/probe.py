#!/usr/bin/env python3
"""Does where the buffers sit move the vecload ratio, and does rotating placements make one
process's interval cover the next process's answer?

One process = one trial-like measurement of axpy<1> (base) against axpy<4> (candidate) with
qualify's own device layer (CudaDevice.time_samples: blocking kernel, cold L2 flush, event pairs,
floor subtracted): `blocks` ABBA/BAAB blocks of `samples` cold samples per half, one log-ratio of
block medians per block, Student's t over blocks. Two designs:

- fixed: one set of buffers for the whole process, as the engine allocates them today;
- rotated: `placements` sets, each after a spacer allocation of random size and at a random
  256-byte-multiple offset inside an over-allocation, a different set per block (both arms of a
  block use the same set, so each placement is drawn by both arms equally).

    python3 benchmarks/placement/probe.py --design rotated --n 1048576 --seed 3   # prints one JSON line
    python3 benchmarks/placement/probe.py --driver --processes 8 --out $OUT/placement.json
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "kernels" / "vecload" / "vecload.cu"
MiB = 1 << 20


def one_process(
    design: str,
    n: int,
    blocks: int,
    samples: int,
    placements: int,
    seed: int,
    granularity: int = 256,
    max_batch: int = 1,
) -> dict:
    from qualify.build.nvrtc import KernelSpec, compile_kernel
    from qualify.evaluate.stats import t_quantile
    from qualify.run.device import CudaDevice, DeviceBuffer

    rng = np.random.default_rng(seed)
    dev = CudaDevice(0)
    kernels = {
        side: dev.load_kernel(side, compile_kernel(KernelSpec(source=SOURCE, kernel=name, arch=dev.info.arch)), 0)
        for side, name in (("base", "axpy<1>"), ("candidate", "axpy<4>"))
    }
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.uniform(-4, 4, n).astype(np.float32)
    nbytes = 4 * n
    sets = []
    count = 1 if design == "fixed" else placements
    for _ in range(count):
        if design == "rotated":
            dev.alloc(int(rng.integers(1, 64)) * 2 * MiB + int(rng.integers(0, 2048)) * 256)  # spacer, kept
        bufs = {}
        for name in ("x", "y", "out"):
            if design == "fixed":
                bufs[name] = dev.alloc(nbytes)
            else:
                raw = dev.alloc(nbytes + 2 * MiB)
                off = int(rng.integers(0, 2 * MiB // granularity)) * granularity
                bufs[name] = DeviceBuffer(raw.ptr + off, nbytes)
        dev.upload(bufs["x"], x)
        dev.upload(bufs["y"], y)
        sets.append(bufs)
    floor = float(np.median(dev.time_samples(lambda: None, 100, cold=True)))
    grid = {"base": (math.ceil(n / 256), 1, 1), "candidate": (math.ceil(n / 1024), 1, 1)}
    order = rng.permutation(blocks) % count
    logs, used = [], []
    for b in range(blocks):
        bufs = sets[order[b]]
        args = [("ptr", bufs["x"].ptr), ("ptr", bufs["y"].ptr), ("ptr", bufs["out"].ptr), ("f32", 0.75), ("i64", n)]
        halves = (
            ("base", "candidate", "candidate", "base") if b % 2 == 0 else ("candidate", "base", "base", "candidate")
        )
        got = {"base": [], "candidate": []}
        for side in halves:
            k = kernels[side]
            times = dev.time_samples(
                lambda k=k, side=side: dev.launch(k, grid[side], (256, 1, 1), 0, args),
                samples,
                cold=True,
                before_each=lambda: dev.poison(bufs["out"]),
                max_batch=max_batch,
            )
            got[side] += [max(t - floor, 0.0) for t in times]
        logs.append(math.log(np.median(got["candidate"]) / np.median(got["base"])))
        used.append(int(order[b]))
    logs = np.asarray(logs)
    mean, sd = float(logs.mean()), float(logs.std(ddof=1))
    half = t_quantile(0.975, blocks - 1) * sd / math.sqrt(blocks)
    per_placement = {int(p): float(np.expm1(logs[np.asarray(used) == p].mean()) * 100) for p in set(used)}
    return {
        "design": design,
        "granularity": granularity,
        "max_batch": max_batch,
        "n": n,
        "seed": seed,
        "blocks": blocks,
        "delta_pct": math.expm1(mean) * 100,
        "lo_pct": math.expm1(mean - half) * 100,
        "hi_pct": math.expm1(mean + half) * 100,
        "block_sd_pct": sd * 100,
        "floor_ns": floor,
        "per_placement_pct": per_placement,
        "addresses": [{k: hex(v.ptr) for k, v in s.items()} for s in sets][:4],
    }


def driver(args) -> None:
    out = []
    t0 = time.time()
    designs = [("fixed", 256)] + [("rotated", g) for g in args.granularity]
    runs = [(d, g, n, s) for s in range(args.processes) for n in args.n for d, g in designs]
    for design, gran, n, s in runs:
        if time.time() - t0 > args.budget_s:
            break
        cmd = [
            sys.executable,
            __file__,
            "--design",
            design,
            "--n",
            str(n),
            "--seed",
            str(1000 + s),
            "--blocks",
            str(args.blocks),
            "--samples",
            str(args.samples),
            "--placements",
            str(args.placements),
            "--granularity",
            str(gran),
            "--max-batch",
            str(args.max_batch),
        ]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stderr[-2000:], file=sys.stderr)
            continue
        out.append(json.loads(r.stdout.strip().splitlines()[-1]))
        Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"{len(out)} processes in {time.time() - t0:.0f} s")
    for n in args.n:
        for design, gran in designs:
            rows = [r for r in out if r["n"] == n and r["design"] == design and r.get("granularity", 256) == gran]
            if not rows:
                continue
            d = np.array([r["delta_pct"] for r in rows])
            cover = sum(r["lo_pct"] <= d.mean() <= r["hi_pct"] for r in rows)
            print(
                f"N={n:>9} {design:8} {gran:>8} processes={len(rows):2} mean={d.mean():+.2f}% sd={d.std(ddof=1):.2f}pt "
                f"half-width(median)={np.median([(r['hi_pct'] - r['lo_pct']) / 2 for r in rows]):.2f}pt "
                f"cover={cover}/{len(rows)} deltas={' '.join(f'{v:+.1f}' for v in d)}"
            )


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--driver", action="store_true")
    p.add_argument("--design", choices=("fixed", "rotated"), default="fixed")
    p.add_argument("--n", type=int, nargs="+", default=[1048576, 4194304])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--blocks", type=int, default=24)
    p.add_argument("--samples", type=int, default=10)
    p.add_argument("--placements", type=int, default=8)
    p.add_argument("--processes", type=int, default=8)
    p.add_argument("--budget-s", type=float, default=400)
    p.add_argument("--granularity", type=int, nargs="+", default=[256])
    p.add_argument(
        "--max-batch", type=int, default=1, help="samples per blocking kernel (the engine uses 1 below 250 µs)"
    )
    p.add_argument("--out", default="placement.json")
    a = p.parse_args()
    if a.driver:
        driver(a)
    else:
        print(
            json.dumps(
                one_process(a.design, a.n[0], a.blocks, a.samples, a.placements, a.seed, a.granularity[0], a.max_batch)
            )
        )
