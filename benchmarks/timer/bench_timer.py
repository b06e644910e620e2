"""Timer benchmark: qualify's sample timer against ncu and triton's do_bench on the same kernels.

Run on the GPU machine (needs torch + triton for do_bench and ncu on PATH):

    python3 benchmarks/timer/bench_timer.py --out results.json        # all three timers
    python3 benchmarks/timer/bench_timer.py --render results.json     # README table from a results file

For each kernel (about 5 us to 5 ms): the median of qualify's cold samples (blocking kernel, clean
L2 flush, floor subtracted), ncu's gpu__time_duration.sum (--clock-control none, default cache
control = flushed), and do_bench's median (its own L2 flush, an event pair per call), each
reported with its error against ncu. A/A: the spread (max - min) / median of the medians of
repeated identical runs, for qualify and do_bench.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

# (label, kernel, size): axpy sizes in floats, fma_chain sizes in iterations
CASES = [
    ("axpy 1M floats", "bench_axpy", 1 << 20),
    ("axpy 2M floats", "bench_axpy", 2 << 20),
    ("axpy 16M floats", "bench_axpy", 16 << 20),
    ("axpy 128M floats", "bench_axpy", 128 << 20),
    ("fma chain 186k iterations", "bench_fma_chain", 186_000),
    ("fma chain 930k iterations", "bench_fma_chain", 930_000),
]
SAMPLES = 200
AA_RUNS = 5
NCU_LAUNCHES = 30


class Bench:
    """The benchmark kernels on a qualify device session."""

    def __init__(self):
        from qualify.build.nvrtc import KernelSpec, compile_kernel
        from qualify.run.device import CudaDevice

        self.dev = CudaDevice(0)
        arch = self.dev.info.arch
        self.k = {
            name: self.dev.load_kernel(name, compile_kernel(KernelSpec(HERE / "kernels.cu", name, arch)), 0)
            for name in ("bench_axpy", "bench_fma_chain")
        }
        biggest = max(size for _, k, size in CASES if k == "bench_axpy")
        self.x, self.y, self.out = (self.dev.alloc(4 * biggest) for _ in range(3))
        self.dev.synchronize()

    def enqueue(self, kernel: str, size: int, stream: int | None = None):
        sms = self.dev.info.sm_count
        if kernel == "bench_axpy":
            args = [("ptr", self.x.ptr), ("ptr", self.y.ptr), ("ptr", self.out.ptr), ("f32", 0.5), ("i64", size // 4)]
            grid = (sms * 16, 1, 1)
        else:
            args = [("ptr", self.out.ptr), ("i32", size)]
            grid = (sms * 4, 1, 1)
        return lambda: self.dev.launch(self.k[kernel], grid, (256, 1, 1), 0, args, stream=stream)


def qualify_medians(bench: Bench, runs: int, graph: bool = False) -> dict[str, list[float]]:
    """Per case, the median of SAMPLES floor-corrected cold samples, `runs` times.

    graph=False: qualify's boundary (launch queued behind the blocking kernel). graph=True: the
    alternative, a captured graph replayed with no blocking kernel, its own empty floor subtracted.
    """
    block = not graph
    out: dict[str, list[float]] = {label: [] for label, *_ in CASES}
    for _ in range(runs):
        floor = statistics.median(bench.dev.time_sample(lambda: None, cold=True, block_stream=block)
                                  for _ in range(100))  # fmt: skip
        for label, kernel, size in CASES:
            fn = bench.enqueue(kernel, size)
            if graph:
                fn = bench.dev.capture(fn)
            for _ in range(5):
                bench.dev.time_sample(fn, cold=False, block_stream=False)  # warm-up
            samples = [bench.dev.time_sample(fn, cold=True, block_stream=block) - floor for _ in range(SAMPLES)]
            out[label].append(statistics.median(samples) / 1e3)
    return out


def dobench_medians(bench: Bench, runs: int) -> dict[str, list[float]]:
    import torch
    from triton.testing import do_bench

    torch.cuda.init()
    out: dict[str, list[float]] = {label: [] for label, *_ in CASES}
    for _ in range(runs):
        for label, kernel, size in CASES:
            # do_bench times torch's current stream: launch there
            fn = bench.enqueue(kernel, size, stream=torch.cuda.current_stream().cuda_stream)
            out[label].append(float(do_bench(fn, return_mode="median")) * 1e3)
    return out


def ncu_medians() -> dict[str, float]:
    """Each case launched NCU_LAUNCHES times under ncu in a child process; median per case."""
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    cmd = [ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv",
           "--kernel-name", "regex:bench_", sys.executable, __file__, "--ncu-target"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    if done.returncode != 0:
        raise RuntimeError(f"ncu failed ({done.returncode}): {done.stderr[-2000:]}")
    text = done.stdout[done.stdout.index('"ID"'):]
    to_us = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}
    values = [
        float(row["Metric Value"].replace(",", "")) * to_us[row["Metric Unit"]]
        for row in csv.DictReader(io.StringIO(text))
        if row["Metric Name"] == "gpu__time_duration.sum"
    ]
    out, i = {}, 0
    for label, *_ in CASES:
        out[label] = statistics.median(values[i : i + NCU_LAUNCHES])
        i += NCU_LAUNCHES
    return out


def ncu_target() -> None:
    bench = Bench()
    for _, kernel, size in CASES:
        fn = bench.enqueue(kernel, size)
        for _ in range(NCU_LAUNCHES):
            fn()
        bench.dev.synchronize()


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values) * 100


def measure(out_path: Path) -> dict:
    ncu = ncu_medians()
    bench = Bench()
    q = qualify_medians(bench, AA_RUNS)
    qg = qualify_medians(bench, AA_RUNS, graph=True)
    try:
        db = dobench_medians(bench, AA_RUNS)
    except ImportError as exc:
        db = None
        print(f"do_bench skipped: {exc}")
    rows = []
    for label, *_ in CASES:
        row = {"kernel": label, "ncu_us": ncu[label], "qualify_us": statistics.median(q[label]),
               "qualify_runs_us": q[label], "qualify_aa_spread_pct": spread(q[label])}  # fmt: skip
        row["qualify_error_pct"] = (row["qualify_us"] / row["ncu_us"] - 1) * 100
        row.update(graph_us=statistics.median(qg[label]), graph_runs_us=qg[label],
                   graph_aa_spread_pct=spread(qg[label]))  # fmt: skip
        row["graph_error_pct"] = (row["graph_us"] / row["ncu_us"] - 1) * 100
        if db is not None:
            row.update(dobench_us=statistics.median(db[label]), dobench_runs_us=db[label],
                       dobench_aa_spread_pct=spread(db[label]))  # fmt: skip
            row["dobench_error_pct"] = (row["dobench_us"] / row["ncu_us"] - 1) * 100
        rows.append(row)
    info = bench.dev.info
    result = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": info.model_dump(),
        "samples_per_median": SAMPLES,
        "aa_runs": AA_RUNS,
        "ncu_launches": NCU_LAUNCHES,
        "rows": rows,
    }
    out_path.write_text(json.dumps(result, indent=1) + "\n")
    print(render(result))
    return result


def render(result: dict) -> str:
    lines = [
        f"Measured {result['date']} on {result['device']['name']} ({result['device']['uuid']}), "
        f"driver {result['device']['driver_version']}. Medians in µs; error against ncu; A/A = spread "
        f"(max − min) / median of the medians of {result['aa_runs']} identical runs.",
        "",
        "| kernel | ncu | qualify (error, A/A) | graph replay (error, A/A) | do_bench (error, A/A) | qualify within 1 % / A/A ≤ 0.5 % |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in result["rows"]:
        db = (f"{r['dobench_us']:.2f} ({r['dobench_error_pct']:+.1f} %, {r['dobench_aa_spread_pct']:.2f} %)"
              if "dobench_us" in r else "not run")  # fmt: skip
        goals = ("yes" if abs(r["qualify_error_pct"]) <= 1.0 else "**no**",
                 "yes" if r["qualify_aa_spread_pct"] <= 0.5 else "**no**")  # fmt: skip
        graph = (f"{r['graph_us']:.2f} ({r['graph_error_pct']:+.1f} %, {r['graph_aa_spread_pct']:.2f} %)"
                 if "graph_us" in r else "not run")  # fmt: skip
        lines.append(f"| {r['kernel']} | {r['ncu_us']:.2f} | {r['qualify_us']:.2f} "
                     f"({r['qualify_error_pct']:+.1f} %, {r['qualify_aa_spread_pct']:.2f} %) | {graph} | {db} | "
                     f"{goals[0]} / {goals[1]} |")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    try:  # torch first: imported after cuda.bindings and pydantic it failed to initialise here
        import torch  # noqa: F401
    except ImportError:
        pass
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--render", type=Path)
    parser.add_argument("--ncu-target", action="store_true")
    args = parser.parse_args()
    if args.ncu_target:
        ncu_target()
    elif args.render:
        print(render(json.loads(args.render.read_text())))
    else:
        measure(args.out or Path(os.environ.get("OUT", ".")) / "timer.json")
