"""Why do traced calls read a kernel pair differently from the timed samples? (GPU)

Records made with trace version 2 show it in their own evidence: the traced calls' *event* windows
(not only CUPTI's spans) put vecload's base kernel 6 % slower than the timed samples at 16 Mi and
67 Mi, and leave the candidate where the samples have it. So the traced calls ran differently; the
question is which of the differences between a traced call and a timed sample does it:

- `timed-b32`   the timed path for long kernels: samples queued 32 to a blocking kernel
- `timed-b1`    the timed path for short kernels: one sample per blocking kernel, no host sync between
- `sync-b1`     as a traced call but without CUPTI: one sample, then synchronize and check idle
- `gap-b1`      `sync-b1` with a 2 ms host pause after each call (the time a CUPTI flush takes)
- `cupti-b32`   CUPTI's kernel activity on, samples queued 32 to a blocking kernel, one flush at the end
- `cupti-b1`    CUPTI on, one sample per blocking kernel, no per-call sync or flush
- `traced`      qualify's traced call: CUPTI on, one call, synchronize, flush the activity buffer

Every mode runs both arms of vecload (axpy<1>, axpy<4>) over one set of buffers, cold L2 (the
clean read flush), in rounds that visit the modes in a fresh seeded order, so drift in clocks or
temperature lands on every mode alike. Per mode and size: each arm's median event window, the
median CUPTI span where CUPTI was on, the SM clock NVML reads after the mode, and the Δ of each.

    python3 benchmarks/timer/traced_vs_timed.py --out $OUT/traced-vs-timed.json
    python3 benchmarks/timer/traced_vs_timed.py --render benchmarks/timer/traced-vs-timed-*.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

SIZES = (1 << 20, 1 << 22, 1 << 24, 1 << 26)
MODES = ("timed-b32", "timed-b1", "sync-b1", "gap-b1", "cupti-b32", "cupti-b1", "traced")
CUPTI_MODES = ("cupti-b32", "cupti-b1", "traced")


def measure(rounds: int, per_round: int, seed: int) -> dict:
    import numpy as np

    from qualify.build.nvrtc import KernelSpec, compile_kernel
    from qualify.run import telemetry
    from qualify.run.cupti_tracer import Tracer
    from qualify.run.device import CudaDevice

    dev = CudaDevice(0)
    dev.prepare_flush_slots(1)
    src = ROOT / "kernels" / "vecload" / "vecload.cu"
    kernels = {}
    for side, name in (("base", "axpy<1>"), ("candidate", "axpy<4>")):
        compiled = compile_kernel(KernelSpec(source=src, kernel=name, arch=dev.info.arch, root=ROOT))
        kernels[side] = dev.load_kernel(side, compiled, 0)
    n_max = max(SIZES)
    x, y, out = dev.alloc(4 * n_max), dev.alloc(4 * n_max), dev.alloc(4 * n_max)
    rng = np.random.default_rng(seed)
    dev.upload(x, rng.standard_normal(n_max, dtype=np.float32))
    dev.upload(y, rng.standard_normal(n_max, dtype=np.float32))
    helpers = dev._helper_names()
    tele = telemetry.Telemetry(dev.info.uuid)

    def enqueue_for(side: str, n: int):
        vec = 4 if side == "candidate" else 1
        grid = (-(-n // (256 * vec)), 1, 1)
        args = [("ptr", x.ptr), ("ptr", y.ptr), ("ptr", out.ptr), ("f32", 1.5), ("i64", n)]
        return lambda: dev.launch(kernels[side], grid, (256, 1, 1), 0, args)

    def poison() -> None:
        dev.poison(out)

    def spans(records) -> list[float]:
        return [float(k.end_ns - k.start_ns) for k in records if k.name not in helpers]

    def run_mode(mode: str, enqueue) -> tuple[list[float], list[float]]:
        ev: list[float] = []
        sp: list[float] = []
        if mode == "timed-b32":
            ev = dev.time_samples(enqueue, per_round, cold=True, before_each=poison, max_batch=32)
        elif mode == "timed-b1":
            ev = dev.time_samples(enqueue, per_round, cold=True, before_each=poison, max_batch=1)
        elif mode in ("sync-b1", "gap-b1"):
            for _ in range(per_round):
                ev += dev.time_samples(enqueue, 1, cold=True, before_each=poison)
                dev.check_idle()
                if mode == "gap-b1":
                    time.sleep(0.002)
        elif mode in ("cupti-b32", "cupti-b1"):
            dev.synchronize()
            with Tracer() as tracer:
                ev = dev.time_samples(
                    enqueue, per_round, cold=True, before_each=poison, max_batch=32 if mode == "cupti-b32" else 1
                )
                dev.check_idle()
                sp = spans(tracer.take())
        elif mode == "traced":
            for call in dev.trace_calls(enqueue, per_round, "arm", True, before_each=poison):
                ev.append(call.event_ns)
                sp += [float(k.end_ns - k.start_ns) for k in call.kernels]
        return ev, sp

    data: dict = {}
    order_rng = random.Random(seed)
    for r in range(rounds):
        for n in SIZES:
            modes = list(MODES)
            order_rng.shuffle(modes)
            for mode in modes:
                sides = ["base", "candidate"]
                order_rng.shuffle(sides)
                for side in sides:
                    ev, sp = run_mode(mode, enqueue_for(side, n))
                    cell = data.setdefault(f"{n}/{mode}/{side}", {"event_ns": [], "span_ns": [], "sm_mhz": []})
                    cell["event_ns"] += ev
                    cell["span_ns"] += sp
                    reading = tele.read()
                    if reading.sm_mhz:
                        cell["sm_mhz"].append(reading.sm_mhz)
        print(f"round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
    floor = dev.time_samples(lambda: None, 200, cold=True)
    info = {"name": dev.info.name, "uuid": dev.info.uuid}
    dev.close()
    return {
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": info,
        "rounds": rounds,
        "per_round": per_round,
        "seed": seed,
        "floor_ns": statistics.median(floor),
        "cells": data,
    }


def table(doc: dict) -> list[str]:
    cells = doc["cells"]
    med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
    lines = [
        f"{doc['device']['name']} {doc['device']['uuid'][:12]}, {doc['rounds']} rounds x {doc['per_round']} "
        f"samples per arm and mode, event floor {doc['floor_ns']:.0f} ns",
        "",
        "| N | mode | base events (ns) | cand events (ns) | Δ events | base span | cand span | Δ span | SM MHz |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in SIZES:
        for mode in MODES:
            b, c = cells.get(f"{n}/{mode}/base"), cells.get(f"{n}/{mode}/candidate")
            if not b or not c:
                continue
            be, ce = med(b["event_ns"]), med(c["event_ns"])
            bs, cs = med(b["span_ns"]), med(c["span_ns"])
            ds = f"{100 * (cs / bs - 1):+.1f} %" if b["span_ns"] else ""
            mhz = med(b["sm_mhz"] + c["sm_mhz"])
            lines.append(
                f"| {n >> 20} Mi | {mode} | {be:.0f} | {ce:.0f} | {100 * (ce / be - 1):+.1f} % | "
                + (f"{bs:.0f} | {cs:.0f} | {ds} |" if b["span_ns"] else " |  |  |")
                + f" {mhz:.0f} |"
            )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--per-round", type=int, default=20)
    ap.add_argument("--seed", type=int, default=20261203)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--render", nargs="*", type=Path)
    args = ap.parse_args()
    if args.render:
        for path in args.render:
            print(f"### {path.name}\n")
            print("\n".join(table(json.loads(path.read_text()))) + "\n")
        return 0
    doc = measure(args.rounds, args.per_round, args.seed)
    if args.out:
        args.out.write_text(json.dumps(doc))
    print("\n".join(table(doc)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
