"""Timer benchmark: qualify's sample timer against ncu, NVBench and triton's do_bench, side by side.

Run on the GPU machine (ncu on PATH; torch + triton for do_bench; the `cuda-bench` package for NVBench):

    python3 benchmarks/timer/bench_timer.py --out run1.json            # every timer
    python3 benchmarks/timer/bench_timer.py --quick --out run2.json    # qualify and ncu only
    python3 benchmarks/timer/bench_timer.py --render run1.json [run2.json ...]

Per kernel (a launch with nothing to do, then about 5 µs to 5 ms, one of them a grid with a
partial last wave): ncu's gpu__time_duration.sum (--clock-control none, caches flushed) as the
reference; qualify's cold samples three ways — `per-sample` (one blocking kernel, one
synchronisation and one read-back per sample, as the engine did before pipelining), `batched`
(every half of 10 samples queued behind one blocking kernel, read once) and `engine` (what `qualify
run` does now: batched when the kernel's warm-ups take at least `engine.BATCH_MIN_NS`, one sample
per blocking kernel below; see boundary.py for why) —; NVBench's cold measurement
(cuda-bench, its defaults); do_bench (median mode). Each is reported with its error against ncu,
its A/A spread over repeated runs, and the wall time it took per result. A last section times a
verdict: a base/candidate pair (scalar against float4 axpy) through qualify's ABBA schedule with
its A/A control, against NVBench measuring the same two kernels.
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
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

# (label, kernel, size): axpy sizes in floats, fma_chain/wave sizes in iterations
CASES = [
    ("empty launch", "bench_empty", 0),
    ("axpy 1M floats", "bench_axpy", 1 << 20),
    ("axpy 2M floats", "bench_axpy", 2 << 20),
    ("axpy 16M floats", "bench_axpy", 16 << 20),
    ("axpy 128M floats", "bench_axpy", 128 << 20),
    ("partial wave (1.45 waves)", "bench_wave", 20_000),
    ("fma chain 186k iterations", "bench_fma_chain", 186_000),
    ("fma chain 930k iterations", "bench_fma_chain", 930_000),
]
PAIR = ("axpy_scalar 16M floats", "bench_axpy_scalar", 16 << 20), ("axpy 16M floats", "bench_axpy", 16 << 20)
QUALIFY_MODES = ("per-sample", "batched", "engine")
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
        names = ("bench_axpy", "bench_axpy_scalar", "bench_fma_chain", "bench_wave", "bench_empty")
        self.k = {
            name: self.dev.load_kernel(name, compile_kernel(KernelSpec(HERE / "kernels.cu", name, arch)), 0)
            for name in names
        }
        biggest = max(size for _, k, size in CASES if k == "bench_axpy")
        self.x, self.y, self.out = (self.dev.alloc(4 * biggest) for _ in range(3))
        self.dev.synchronize()

    def enqueue(self, kernel: str, size: int, stream: int | None = None):
        sms = self.dev.info.sm_count
        if kernel == "bench_axpy":
            args = [("ptr", self.x.ptr), ("ptr", self.y.ptr), ("ptr", self.out.ptr), ("f32", 0.5), ("i64", size // 4)]
            grid, block = (sms * 16, 1, 1), (256, 1, 1)
        elif kernel == "bench_axpy_scalar":
            args = [("ptr", self.x.ptr), ("ptr", self.y.ptr), ("ptr", self.out.ptr), ("f32", 0.5), ("i64", size)]
            grid, block = (sms * 16, 1, 1), (256, 1, 1)
        elif kernel == "bench_wave":
            args = [("ptr", self.out.ptr), ("i32", size)]
            grid, block = (round(1.45 * 2 * sms), 1, 1), (1024, 1, 1)
        elif kernel == "bench_empty":
            args = [("ptr", self.out.ptr)]
            grid, block = (1, 1, 1), (32, 1, 1)
        else:
            args = [("ptr", self.out.ptr), ("i32", size)]
            grid, block = (sms * 4, 1, 1), (256, 1, 1)
        return lambda: self.dev.launch(self.k[kernel], grid, block, 0, args, stream=stream)


def qualify_floor(bench: Bench, mode: str) -> float:
    if mode == "per-sample":
        return statistics.median(bench.dev.time_sample(lambda: None, cold=True) for _ in range(100))
    return statistics.median(bench.dev.time_samples(lambda: None, 100, cold=True))


def qualify_samples(bench: Bench, mode: str, kernel: str, size: int, floor: float, n: int = SAMPLES) -> list[float]:
    """n floor-corrected cold samples in µs, timed the given way."""
    from qualify.run.engine import BATCH_MIN_NS

    fn = bench.enqueue(kernel, size)
    warm = [bench.dev.time_sample(fn, cold=False, block_stream=False) for _ in range(5)]
    if mode == "per-sample":
        raw = [bench.dev.time_sample(fn, cold=True) for _ in range(n)]
    else:
        batch = 10 if mode == "batched" or statistics.median(warm) >= BATCH_MIN_NS else 1
        raw = []
        while len(raw) < n:  # halves of 10 samples, as the protocols' ABBA halves
            raw += bench.dev.time_samples(fn, min(10, n - len(raw)), cold=True, max_batch=batch)
    return [(ns - floor) / 1e3 for ns in raw]


def qualify_medians(bench: Bench, runs: int, mode: str) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Per case: the median of SAMPLES cold samples, `runs` times; and the wall seconds per median."""
    out: dict[str, list[float]] = {label: [] for label, *_ in CASES}
    wall: dict[str, list[float]] = {label: [] for label, *_ in CASES}
    for _ in range(runs):
        floor = qualify_floor(bench, mode)
        for label, kernel, size in CASES:
            start = time.perf_counter()
            out[label].append(statistics.median(qualify_samples(bench, mode, kernel, size, floor)))
            wall[label].append(time.perf_counter() - start)
    return out, {label: statistics.median(w) for label, w in wall.items()}


def dobench_medians(bench: Bench, runs: int) -> tuple[dict[str, list[float]], dict[str, float]]:
    import torch
    from triton.testing import do_bench

    torch.cuda.init()
    out: dict[str, list[float]] = {label: [] for label, *_ in CASES}
    wall: dict[str, list[float]] = {label: [] for label, *_ in CASES}
    for _ in range(runs):
        for label, kernel, size in CASES:
            # do_bench times torch's current stream: launch there
            fn = bench.enqueue(kernel, size, stream=torch.cuda.current_stream().cuda_stream)
            start = time.perf_counter()
            out[label].append(float(do_bench(fn, return_mode="median")) * 1e3)
            wall[label].append(time.perf_counter() - start)
    return out, {label: statistics.median(w) for label, w in wall.items()}


def ncu_medians(cases) -> dict[str, float]:
    """Each case launched NCU_LAUNCHES times under ncu in a child process; median per case."""
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    labels = [label for label, *_ in cases]
    cmd = [
        ncu,
        "--clock-control",
        "none",
        "--metrics",
        "gpu__time_duration.sum",
        "--csv",
        "--kernel-name",
        "regex:bench_",
        sys.executable,
        __file__,
        "--ncu-target",
        json.dumps(labels),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=500)
    if done.returncode != 0:
        raise RuntimeError(f"ncu failed ({done.returncode}): {done.stderr[-2000:]}")
    text = done.stdout[done.stdout.index('"ID"') :]
    to_us = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}
    values = [
        float(row["Metric Value"].replace(",", "")) * to_us[row["Metric Unit"]]
        for row in csv.DictReader(io.StringIO(text))
        if row["Metric Name"] == "gpu__time_duration.sum"
    ]
    out, i = {}, 0
    for label in labels:
        run = values[i : i + NCU_LAUNCHES]
        out[label] = {"median": statistics.median(run), "q1": _quantile(run, 0.25), "q3": _quantile(run, 0.75)}
        i += NCU_LAUNCHES
    return out


def _quantile(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def ncu_target(labels: list[str]) -> None:
    bench = Bench()
    by_label = {label: (kernel, size) for label, kernel, size in CASES + list(PAIR)}
    for label in labels:
        fn = bench.enqueue(*by_label[label])
        for _ in range(NCU_LAUNCHES):
            fn()
        bench.dev.synchronize()


# -- NVBench (cuda-bench), in a child process so its CUDA state stays apart -----------------------


def nvbench_target(labels: list[str], out_json: str) -> None:
    """Registers one NVBench benchmark over a string axis of the labels; cold measurement, defaults."""
    import cuda.bench as bench_api

    bench = Bench()
    by_label = {label: (kernel, size) for label, kernel, size in CASES + list(PAIR)}
    walls: dict[str, float] = {}

    def run_state(state):
        label = state.get_string("kernel")
        kernel, size = by_label[label]
        start = time.perf_counter()

        def launch(launcher):
            bench.enqueue(kernel, size, stream=int(launcher.get_stream().__cuda_stream__()[1]))()

        state.exec(launch)
        walls[label] = time.perf_counter() - start

    b = bench_api.register(run_state)
    b.add_string_axis("kernel", labels)
    bench_api.run_all_benchmarks([sys.argv[0], "--jsonbin", out_json, "--devices", "0"])
    Path(out_json + ".walls").write_text(json.dumps(walls))


def _axis_value(axis: dict):
    value = axis.get("value")
    return value.get("value") if isinstance(value, dict) else value


def nvbench_results(labels: list[str]) -> dict[str, dict]:
    """Per label: NVBench's cold GPU mean, the median of its raw cold samples where it wrote them,
    its noise, its sample count, and the wall seconds of its measurement loop."""
    with tempfile.TemporaryDirectory() as tmp:
        out_json = str(Path(tmp) / "nvbench.json")
        cmd = [sys.executable, __file__, "--nvbench-target", json.dumps(labels), out_json]
        started = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=500, cwd=tmp)
        total = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"NVBench failed ({done.returncode}): {(done.stdout + done.stderr)[-3000:]}")
        doc = json.loads(Path(out_json).read_text())
        walls = json.loads(Path(out_json + ".walls").read_text())
        out: dict[str, dict] = {}
        for benchmark in doc.get("benchmarks", []):
            for st in benchmark.get("states", []):
                label = next((_axis_value(a) for a in st.get("axis_values", []) if a.get("name") == "kernel"), None)
                if label is None:
                    continue
                row = {"wall_s": walls.get(label)}
                for summ in st.get("summaries", []):
                    tag = summ.get("tag", "")
                    data = {d["name"]: d.get("value") for d in summ.get("data", [])}
                    if tag == "nv/cold/time/gpu/mean":
                        row["mean_us"] = float(data["value"]) * 1e6
                    elif tag == "nv/cold/time/gpu/median":
                        row["median_us"] = float(data["value"]) * 1e6
                    elif tag == "nv/cold/time/gpu/stdev/relative":
                        row["noise_pct"] = float(data["value"]) * 100
                    elif tag == "nv/cold/sample_size":
                        row["samples"] = int(data["value"])
                    elif "sample_times" in tag and "filename" in data and "median_us" not in row:
                        path = Path(tmp) / str(data["filename"])
                        if path.is_file():
                            import numpy as np

                            times = np.fromfile(path, dtype=np.float32)
                            row["median_us"] = float(np.median(times)) * 1e6
                            row["samples"] = int(times.size)
                out[label] = row
        out["_total_wall_s"] = {"wall_s": total}
        return out


# -- a verdict on a pair ----------------------------------------------------------------------------


def qualify_pair(bench: Bench) -> dict:
    """The engine's ABBA schedule on a kernel pair: 10 blocks x 4 halves x 10 cold samples (batched
    as the engine would) for the pair and again for the A/A control, then the paired statistics."""
    import numpy as np

    from qualify.evaluate.stats import case_stats
    from qualify.plan.schedule import AA, MAIN, block_halves

    start = time.perf_counter()
    floor = statistics.median(bench.dev.time_samples(lambda: None, 100, cold=True))
    fns = {"base": bench.enqueue(*PAIR[0][1:]), "candidate": bench.enqueue(*PAIR[1][1:])}
    from qualify.run.engine import BATCH_MIN_NS

    warm = [bench.dev.time_sample(fns[side], cold=False, block_stream=False) for side in fns for _ in range(10)]
    batch = 10 if statistics.median(warm) >= BATCH_MIN_NS else 1
    series: dict[str, tuple[list, list]] = {}
    for pair in (MAIN, AA):
        for block in range(10):
            for half in block_halves(block, pair):
                ns = bench.dev.time_samples(fns[half.side], 10, cold=True, max_batch=batch)
                values, blocks = series.setdefault(half.series, ([], []))
                values += [v - floor for v in ns]
                blocks += [block] * len(ns)
    main = case_stats(
        np.array(series["base"][0]),
        np.array(series["base"][1]),
        np.array(series["candidate"][0]),
        np.array(series["candidate"][1]),
    )
    aa = case_stats(
        np.array(series["aa_a"][0]),
        np.array(series["aa_a"][1]),
        np.array(series["aa_b"][0]),
        np.array(series["aa_b"][1]),
    )
    return {
        "wall_s": time.perf_counter() - start,
        "ratio": main.ratio,
        "ci": [main.ci_low, main.ci_high],
        "class": main.case_class,
        "aa_ratio": aa.ratio,
        "aa_class": aa.case_class,
        "samples": sum(len(v) for v, _ in series.values()),
    }


# -- the run ----------------------------------------------------------------------------------------


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values) * 100


def measure(out_path: Path, quick: bool) -> dict:
    labels = [label for label, *_ in CASES]
    ncu = ncu_medians(CASES + ([] if quick else list(PAIR)))
    result: dict = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "quick": quick,
        "samples_per_median": SAMPLES,
        "aa_runs": AA_RUNS,
        "ncu_launches": NCU_LAUNCHES,
    }
    nv = None
    if not quick:
        try:
            nv = nvbench_results(labels + [PAIR[0][0]])
        except Exception as exc:  # noqa: BLE001 - reported in the results, the rest still runs
            result["nvbench_error"] = f"{exc.__class__.__name__}: {exc}"[-1500:]
    bench = Bench()
    result["device"] = bench.dev.info.model_dump()
    modes = ("engine",) if quick else QUALIFY_MODES
    q = {mode: qualify_medians(bench, AA_RUNS, mode) for mode in modes}
    db = None
    if not quick:
        try:
            db = dobench_medians(bench, AA_RUNS)
        except ImportError as exc:
            result["dobench_error"] = str(exc)
    rows = []
    for label in labels:
        ref = ncu[label]["median"]
        row = {"kernel": label, "ncu_us": ref, "ncu_q1_us": ncu[label]["q1"], "ncu_q3_us": ncu[label]["q3"]}
        for mode, (medians, wall) in q.items():
            m = statistics.median(medians[label])
            row[mode] = {
                "us": m,
                "runs_us": medians[label],
                "error_pct": (m / ref - 1) * 100,
                "aa_spread_pct": spread(medians[label]),
                "wall_s": wall[label],
            }
        if db is not None:
            m = statistics.median(db[0][label])
            row["do_bench"] = {
                "us": m,
                "runs_us": db[0][label],
                "error_pct": (m / ref - 1) * 100,
                "aa_spread_pct": spread(db[0][label]),
                "wall_s": db[1][label],
            }
        if nv is not None and label in nv:
            n = nv[label]
            m = n.get("median_us", n.get("mean_us"))
            row["nvbench"] = {
                **n,
                "us": m,
                "error_pct": (m / ref - 1) * 100 if m else None,
                "statistic": "median" if "median_us" in n else "mean",
            }
        rows.append(row)
    result["rows"] = rows
    if not quick:
        pair = qualify_pair(bench)
        pair["ncu_ratio"] = ncu[PAIR[1][0]]["median"] / ncu[PAIR[0][0]]["median"]
        result["pair"] = {"qualify": pair}
        if nv is not None and PAIR[0][0] in nv and PAIR[1][0] in nv:
            both = [nv[PAIR[0][0]], nv[PAIR[1][0]]]
            result["pair"]["nvbench"] = {
                "wall_s": sum(r.get("wall_s") or 0 for r in both),
                "ratio": (both[1].get("median_us") or both[1]["mean_us"])
                / (both[0].get("median_us") or both[0]["mean_us"]),
            }
        if nv is not None:
            result["nvbench_process_wall_s"] = nv["_total_wall_s"]["wall_s"]
    out_path.write_text(json.dumps(result, indent=1) + "\n")
    print(render([result]))
    return result


def _cell(entry: dict | None) -> str:
    if not entry or entry.get("us") is None:
        return "not run"
    spreadtxt = f", {entry['aa_spread_pct']:.2f} %" if "aa_spread_pct" in entry else ""
    noise = f", noise {entry['noise_pct']:.1f} %" if entry.get("noise_pct") is not None else ""
    wall = f", {entry['wall_s']:.2f} s" if entry.get("wall_s") is not None else ""
    return f"{entry['us']:.2f} ({entry['error_pct']:+.1f} %{spreadtxt}{noise}{wall})"


def render(results: list[dict]) -> str:
    lines = []
    for n, result in enumerate(results, 1):
        modes = [m for m in QUALIFY_MODES if m in result["rows"][0]]
        peers = [p for p in ("nvbench", "do_bench") if any(p in r for r in result["rows"])]
        lines += [
            f"### Run {n}: {result['date']} on {result['device']['name']} ({result['device']['uuid']}), "
            f"driver {result['device']['driver_version']}" + (" — qualify and ncu only" if result.get("quick") else ""),
            "",
            f"Medians in µs (error against ncu, A/A spread over {result['aa_runs']} runs, wall time per result).",
            "",
        ]
        lines.append(
            "| kernel | ncu (IQR) | "
            + " | ".join(f"qualify {m}" for m in modes)
            + "".join(f" | {p}" for p in peers)
            + " | within 1 % / A/A ≤ 0.5 % |"
        )
        lines.append("|---|---:|" + "---:|" * (len(modes) + len(peers)) + "---|")
        for r in result["rows"]:
            best = r["engine"]
            goal = (
                "n/a (below 5 µs)"
                if r["ncu_us"] < 5
                else (
                    ("yes" if abs(best["error_pct"]) <= 1 else "**no**")
                    + " / "
                    + ("yes" if best["aa_spread_pct"] <= 0.5 else "**no**")
                )
            )
            lines.append(
                f"| {r['kernel']} | {r['ncu_us']:.2f} ({r['ncu_q1_us']:.2f}–{r['ncu_q3_us']:.2f}) | "
                + " | ".join(_cell(r.get(m)) for m in modes)
                + "".join(f" | {_cell(r.get(p))}" for p in peers)
                + f" | {goal} |"
            )
        if "pair" in result:
            p = result["pair"]["qualify"]
            lines += [
                "",
                f"Verdict on a pair ({PAIR[0][0]} → {PAIR[1][0]}): qualify {p['class']} at "
                f"{p['ratio']:.4f} [{p['ci'][0]:.4f}, {p['ci'][1]:.4f}], A/A {p['aa_class']} "
                f"({p['aa_ratio']:.4f}), {p['samples']} samples in {p['wall_s']:.2f} s; ncu ratio "
                f"{p['ncu_ratio']:.4f}.",
            ]
            if "nvbench" in result["pair"]:
                nvp = result["pair"]["nvbench"]
                lines.append(
                    f"NVBench measured the two kernels in {nvp['wall_s']:.2f} s (ratio {nvp['ratio']:.4f}; "
                    f"its whole process, start-up included, {result.get('nvbench_process_wall_s', 0):.1f} s)."
                )
        for key in ("nvbench_error", "dobench_error"):
            if key in result:
                lines.append(f"\n{key.split('_')[0]} not measured: {result[key]}")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    try:  # torch first: imported after cuda.bindings and pydantic it failed to initialise here
        import torch  # noqa: F401
    except ImportError:
        pass
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--quick", action="store_true", help="qualify (engine) and ncu only")
    parser.add_argument("--render", type=Path, nargs="+")
    parser.add_argument("--ncu-target")
    parser.add_argument("--nvbench-target", nargs=2)
    args = parser.parse_args()
    if args.ncu_target:
        ncu_target(json.loads(args.ncu_target))
    elif args.nvbench_target:
        nvbench_target(json.loads(args.nvbench_target[0]), args.nvbench_target[1])
    elif args.render:
        print(render([json.loads(p.read_text()) for p in args.render]))
    else:
        measure(args.out or Path(os.environ.get("OUT", ".")) / "timer.json", args.quick)
