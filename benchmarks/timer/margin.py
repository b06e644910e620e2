"""The margin benchmark (GPU): qualify's Δ beside ncu's and NVBench's on real kernel pairs at 5, 15
and 60 µs, with the cache state and the buffers' placement as the named variables.

A verdict at the short end is a ratio of two kernels of a few µs. Each of three tools reads it
differently, and the differences have causes that can be measured rather than argued:

- **qualify**: the committed protocol's own kernels and launch, one case per point, each trial its
  own process (`qualify run`, placements rotated per block, L2 flushed clean before each sample);
  its Δ is the record's two-level pooled interval over the processes.
- **ncu** (`gpu__time_duration.sum`, `--clock-control none`): every launch profiled on its own,
  replayed after ncu's cache control. It is run twice, `--cache-control all` (caches invalidated
  before each launch) and `--cache-control none` (whatever the previous launch left), and over
  several placements of the buffers inside one process (a seeded spacer before each set), so its
  own spread over placements is visible; its Δ per placement is the ratio of the arms' medians.
- **NVBench** (`cuda-bench`, cold measurement, its defaults): one placement, its L2 flush, its
  noise criterion.

Run on the GPU host (ncu on PATH; `cuda-bench` for NVBench, optional):

    python3 benchmarks/timer/margin.py --processes 8 --out $OUT/margin-1.json
    python3 benchmarks/timer/margin.py --render benchmarks/timer/margin-*.json   # the Markdown tables

The plans it runs are copies of the committed protocols reduced to the chosen cases (no sanitizer,
no controls, one permissive gate: the Δ is what is compared, not a verdict), written and frozen
under benchmarks/timer/margin-plans/ (git-ignored) at run time.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
PLANS = HERE / "margin-plans"


@dataclass(frozen=True)
class Point:
    label: str
    protocol: str
    case: dict
    nominal_us: int  # the margin this point stands for


POINTS = (
    Point("vecload N=1Mi", "vecload", {"N": 1048576}, 5),
    Point("vecload N=4Mi", "vecload", {"N": 4194304}, 15),
    Point("vecload N=16Mi", "vecload", {"N": 16777216}, 60),
    Point("attention T=512", "attention-wide", {"T": 512}, 60),
)
NCU_LAUNCHES = 50  # per kernel, per placement
NCU_PLACEMENTS = 4
SPACER_GRANULE = 2 << 20

T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f} s] {msg}", file=sys.stderr, flush=True)


def case_id(values: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in values.items())


# -- the reduced plans ----------------------------------------------------------------------------


def reduced_plan(protocol: str, processes: int) -> Path:
    """A copy of protocols/<protocol>/plan.json with only this benchmark's cases, frozen."""
    src_dir = ROOT / "protocols" / protocol
    plan = json.loads((src_dir / "plan.json").read_text())
    dst_dir = PLANS / protocol
    shutil.rmtree(dst_dir, ignore_errors=True)
    dst_dir.mkdir(parents=True)
    for arm in plan["arms"].values():
        for key in ("source", "library"):
            if isinstance(arm.get(key), str):
                arm[key] = os.path.relpath((src_dir / arm[key]).resolve(), dst_dir)
        if arm.get("include_dirs"):
            arm["include_dirs"] = [os.path.relpath((src_dir / d).resolve(), dst_dir) for d in arm["include_dirs"]]
    plan["name"] = f"{protocol}-margin"
    plan["workload"]["cases"] = [p.case for p in POINTS if p.protocol == protocol]
    plan["acceptance"]["sanitizer"] = []
    plan["acceptance"]["gates"] = [{"name": "no_regression", "max_regression_pct": 50.0}]
    plan["controls"] = {"aa": False, "negative": []}
    plan["schedule"]["trials"] = processes
    plan["budget"]["max_trials"] = processes
    plan["budget"]["max_wall_seconds"] = 3600
    (dst_dir / "plan.json").write_text(json.dumps(plan, indent=2) + "\n")
    qualify("plan", "freeze", str(dst_dir / "plan.json"))
    return dst_dir / "plan.json"


def qualify(*args: str, timeout: int = 580) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "qualify", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    if done.returncode not in (0, 1):  # 1: not qualified, which this benchmark does not ask about
        raise RuntimeError(f"qualify {' '.join(args)} exited {done.returncode}: {(done.stdout + done.stderr)[-3000:]}")
    return done


def qualify_deltas(plan: Path, record: Path) -> dict[str, dict]:
    """Per case: the pooled two-level Δ over the trials (processes) and each process's own Δ."""
    started = time.perf_counter()
    qualify("run", str(plan), "--record", str(record))
    wall = time.perf_counter() - started
    results = json.loads((record / "results.json").read_text())
    (device, pooled), *more = results["pooled"].items()
    assert not more, "one device expected"
    per_trial: dict[str, list] = {}
    for trial in results["trials"]:
        for case in trial["cases"]:
            s = case["stats"]
            per_trial.setdefault(case["case"], []).append(
                {"ratio": s["ratio"], "ci_low": s["ci_low"], "ci_high": s["ci_high"], "class": s["case_class"]}
            )
    out = {}
    for cid, p in pooled.items():
        out[cid] = {
            "ratio": p["ratio"],
            "ci_low": p["ci_low"],
            "ci_high": p["ci_high"],
            "class": p["case_class"],
            "processes": p["trials"],
            "within_pct": p["within_pct"],
            "between_pct": p["between_pct"],
            "mde_pct": p["mde_pct"],
            "per_process": per_trial.get(cid, []),
        }
    out["_wall_s"] = wall
    out["_device"] = device
    return out


# -- the arms on a device, for ncu and NVBench ----------------------------------------------------


class Arms:
    """Both arms of a plan's cases, compiled and bound on a CudaDevice, at `placements` placements:
    before each placement's buffers a spacer of a seeded size moves where they sit."""

    def __init__(self, plan_path: Path, placements: int):
        import numpy as np

        from qualify.commands.probe import load_arms
        from qualify.plan.load import load_plan
        from qualify.plan.model import ARM_SIDES
        from qualify.run import inputs as input_gen
        from qualify.run.arms import ArmExec
        from qualify.run.device import CudaDevice

        self.dev = CudaDevice(0)
        loaded = load_plan(plan_path)
        self.kernels = load_arms(loaded, self.dev, {})
        rng = np.random.default_rng(20261202)
        specs = [s for s in loaded.plan.workload.buffers if s.role == "input"]
        self.execs: dict[tuple[str, int, str], ArmExec] = {}
        self._keep = []
        for p in range(placements):
            self._keep.append(self.dev.alloc(SPACER_GRANULE * int(rng.integers(1, 64)) + 256 * int(rng.integers(0, 8))))
            for case in loaded.cases:
                data = input_gen.generate_case(
                    loaded.plan.seeds, case.id, [(s, case.arms["base"].buffer(s.name)) for s in specs]
                )
                for side in ARM_SIDES:
                    arm = case.arms[side]
                    buffers = {b.name: self.dev.alloc(b.nbytes) for b in arm.buffers}
                    self._keep.extend(buffers.values())
                    for spec, array in zip(specs, data):
                        self.dev.upload(buffers[spec.name], array)
                    ex = ArmExec(
                        side, self.kernels[side], arm, buffers, [b.name for b in arm.buffers if b.role == "output"]
                    )
                    ex.bind_args()
                    self.execs[(case.id, p, side)] = ex
        self.cases = [c.id for c in loaded.cases]
        self.dev.synchronize()

    def launch(self, key: tuple[str, int, str], stream: int | None = None) -> None:
        ex = self.execs[key]
        if stream is None:
            ex.enqueue(self.dev)
            return
        launch = ex.resolved.launch
        self.dev.launch(ex.kernel, launch.grid, launch.block, launch.shared_bytes, ex.args, stream=stream)


def ncu_target(plan: str, placements: int, launches: int, order_file: str) -> None:
    """The child ncu profiles: each case, placement by placement, the arms alternating."""
    arms = Arms(Path(plan), placements)
    order = []
    for cid in arms.cases:
        for p in range(placements):
            for _ in range(launches):
                for side in ("base", "candidate"):
                    arms.launch((cid, p, side))
                    order.append([cid, p, side])
    arms.dev.synchronize()
    Path(order_file).write_text(json.dumps(order))


def ncu_deltas(plan: Path, cache_control: str, placements: int, launches: int) -> dict[str, dict]:
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    with tempfile.TemporaryDirectory() as tmp:
        order_file = str(Path(tmp) / "order.json")
        cmd = [
            ncu, "--cache-control", cache_control, "--clock-control", "none",
            "--metrics", "gpu__time_duration.sum", "--csv",
            sys.executable, __file__, "--ncu-target", str(plan), str(placements), str(launches), order_file,
        ]  # fmt: skip
        started = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=580, cwd=ROOT)
        wall = time.perf_counter() - started
        if done.returncode != 0 or '"ID"' not in done.stdout:
            raise RuntimeError(f"ncu failed ({done.returncode}): {(done.stdout + done.stderr)[-3000:]}")
        order = json.loads(Path(order_file).read_text())
    text = done.stdout[done.stdout.index('"ID"') :]
    to_ns = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6}
    values = [
        float(row["Metric Value"].replace(",", "")) * to_ns[row["Metric Unit"]]
        for row in csv.DictReader(io.StringIO(text))
        if row["Metric Name"] == "gpu__time_duration.sum"
    ]
    if len(values) != len(order):
        raise RuntimeError(f"ncu profiled {len(values)} launches, the target made {len(order)}")
    by: dict[tuple, list[float]] = {}
    for (cid, p, side), ns in zip(order, values):
        by.setdefault((cid, p, side), []).append(ns)
    out: dict[str, dict] = {}
    for cid in dict.fromkeys(o[0] for o in order):
        rows = []
        for p in range(placements):
            base, cand = statistics.median(by[(cid, p, "base")]), statistics.median(by[(cid, p, "candidate")])
            rows.append({"placement": p, "base_us": base / 1e3, "candidate_us": cand / 1e3, "ratio": cand / base})
        all_base = [v for p in range(placements) for v in by[(cid, p, "base")]]
        all_cand = [v for p in range(placements) for v in by[(cid, p, "candidate")]]
        out[cid] = {
            "ratio": statistics.median(all_cand) / statistics.median(all_base),
            "base_us": statistics.median(all_base) / 1e3,
            "candidate_us": statistics.median(all_cand) / 1e3,
            "per_placement": rows,
            "launches_per_kernel": len(all_base),
        }
    out["_wall_s"] = wall
    return out


def nvbench_target(plan: str, out_json: str) -> None:
    import cuda.bench as bench_api

    arms = Arms(Path(plan), 1)
    labels = [f"{cid}|{side}" for cid in arms.cases for side in ("base", "candidate")]

    def run_state(state):
        cid, side = state.get_string("arm").split("|")

        def launch(launcher):
            arms.launch((cid, 0, side), stream=int(launcher.get_stream().__cuda_stream__()[1]))

        state.exec(launch)

    b = bench_api.register(run_state)
    b.add_string_axis("arm", labels)
    bench_api.run_all_benchmarks([sys.argv[0], "--jsonbin", out_json, "--devices", "0"])


def nvbench_deltas(plan: Path) -> dict[str, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out_json = Path(tmp) / "nvbench.json"
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, __file__, "--nvbench-target", str(plan), str(out_json)],
            capture_output=True, text=True, timeout=580, cwd=tmp,
        )  # fmt: skip
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"NVBench failed ({done.returncode}): {(done.stdout + done.stderr)[-3000:]}")
        out = nvbench_summary(out_json)
    out["_wall_s"] = wall
    return out


SAMPLES_TAG = "nv/json/bin:nv/cold/sample_times"


def nvbench_summary(out_json: Path) -> dict[str, dict]:
    """Per case, NVBench's cold means (what its own reports and compare use) and, from its raw
    samples, their medians (what qualify's blocks use): `ratio` is candidate over base of the
    means, `ratio_median` of the medians. The samples are the `--jsonbin` sidecars: float32
    seconds, little-endian, named in the state's SAMPLES_TAG summary relative to the JSON file."""
    doc = json.loads(out_json.read_text())
    found: dict[tuple[str, str], dict] = {}
    for benchmark in doc.get("benchmarks", []):
        for st in benchmark.get("states", []):
            label = next(
                (a["value"]["value"] if isinstance(a.get("value"), dict) else a.get("value"))
                for a in st.get("axis_values", [])
                if a.get("name") == "arm"
            )
            cid, side = label.split("|")
            row: dict = {}
            for summ in st.get("summaries", []):
                data = {d["name"]: d.get("value") for d in summ.get("data", [])}
                if summ.get("tag") == "nv/cold/time/gpu/mean":
                    row["mean_us"] = float(data["value"]) * 1e6
                elif summ.get("tag") == "nv/cold/time/gpu/stdev/relative":
                    row["noise_pct"] = float(data["value"]) * 100
                elif summ.get("tag") == "nv/cold/sample_size":
                    row["samples"] = int(data["value"])
                elif summ.get("tag") == SAMPLES_TAG:
                    times = _sample_times(out_json.parent / str(data["filename"]), int(data["size"]))
                    row["median_us"] = statistics.median(times) * 1e6
            found[(cid, side)] = row
    out: dict[str, dict] = {}
    for cid in dict.fromkeys(c for c, _ in found):
        base, cand = found[(cid, "base")], found[(cid, "candidate")]
        out[cid] = {"ratio": cand["mean_us"] / base["mean_us"], "base": base, "candidate": cand}
        if "median_us" in base and "median_us" in cand:
            out[cid]["ratio_median"] = cand["median_us"] / base["median_us"]
    return out


def _sample_times(path: Path, count: int) -> list[float]:
    payload = path.read_bytes()
    if len(payload) != 4 * count:
        raise RuntimeError(f"{path}: {len(payload)} bytes of NVBench samples, its JSON says {count} float32s")
    return list(struct.unpack(f"<{count}f", payload))


# -- the run ---------------------------------------------------------------------------------------


def measure(processes: int, out_path: Path, skip_nvbench: bool, protocols: list[str]) -> dict:
    from qualify.run.device import CudaDevice

    dev = CudaDevice(0)
    info = {"name": dev.info.name, "uuid": dev.info.uuid, "arch": dev.info.arch}
    dev.close()
    result = {
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": info,
        "processes": processes,
        "ncu_launches_per_placement": NCU_LAUNCHES,
        "ncu_placements": NCU_PLACEMENTS,
        "points": [p.__dict__ for p in POINTS if p.protocol in protocols],
        "protocols": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for protocol in protocols:
            log(f"{protocol}: freezing the reduced plan")
            plan = reduced_plan(protocol, processes)
            entry: dict = {}
            result["protocols"][protocol] = entry
            log(f"{protocol}: qualify, {processes} processes")
            entry["qualify"] = qualify_deltas(plan, Path(tmp) / protocol)
            _write(out_path, result)
            for cache in ("all", "none"):
                log(f"{protocol}: ncu --cache-control {cache}")
                try:
                    entry[f"ncu_cache_{cache}"] = ncu_deltas(plan, cache, NCU_PLACEMENTS, NCU_LAUNCHES)
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    entry[f"ncu_cache_{cache}_error"] = str(exc)[-1500:]
                _write(out_path, result)
            if not skip_nvbench:
                log(f"{protocol}: NVBench")
                try:
                    entry["nvbench"] = nvbench_deltas(plan)
                except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
                    entry["nvbench_error"] = str(exc)[-1500:]
                _write(out_path, result)
    result["ended_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    _write(out_path, result)
    return result


def _write(path: Path, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(path)


# -- the tables ------------------------------------------------------------------------------------


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.2f} %"


def render(results: list[dict]) -> str:
    lines = []
    for n, result in enumerate(results, 1):
        lines += [
            f"### Run {n}: {result['started_at']} on {result['device']['name']} ({result['device']['uuid'][:12]})",
            "",
            f"Δ = change in time per launch, candidate against base (negative: faster). qualify: pooled over "
            f"{result['processes']} processes, 95 % interval; ncu: medians of {result['ncu_launches_per_placement']} "
            f"launches per kernel and placement over {result['ncu_placements']} placements (range over placements); "
            "NVBench: cold means, one placement.",
            "",
            "| point | qualify Δ [95 % over processes] | MDE | ncu, caches invalidated: Δ (placements) | "
            "ncu, no cache control: Δ (placements) | NVBench Δ | qualify − ncu (invalidated) |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for point in result["points"]:
            entry = result["protocols"][point["protocol"]]
            cid = case_id(point["case"])
            q = entry["qualify"].get(cid)
            cells = [point["label"] + f" (~{point['nominal_us']} µs)"]
            cells.append(f"{_pct(q['ratio'])} [{_pct(q['ci_low'])}, {_pct(q['ci_high'])}]" if q else "—")
            cells.append(f"{q['mde_pct']:.2f} %" if q else "—")
            ncu_ratio = None
            for cache in ("all", "none"):
                n_ = entry.get(f"ncu_cache_{cache}", {}).get(cid)
                if n_ is None:
                    cells.append("—")
                    continue
                ratios = [r["ratio"] for r in n_["per_placement"]]
                cells.append(f"{_pct(n_['ratio'])} ({_pct(min(ratios))} … {_pct(max(ratios))})")
                if cache == "all":
                    ncu_ratio = n_["ratio"]
            nv = entry.get("nvbench", {}).get(cid)
            cells.append(_pct(nv["ratio"]) if nv else "—")
            cells.append(f"{(q['ratio'] - ncu_ratio) * 100:+.2f} points" if q and ncu_ratio else "—")
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", "Base and candidate medians in µs (ncu with caches invalidated, all placements):", ""]
        for point in result["points"]:
            entry = result["protocols"][point["protocol"]]
            n_ = entry.get("ncu_cache_all", {}).get(case_id(point["case"]))
            if n_:
                lines.append(f"- {point['label']}: {n_['base_us']:.2f} → {n_['candidate_us']:.2f} µs")
        for protocol, entry in result["protocols"].items():
            for key, value in entry.items():
                if key.endswith("_error"):
                    lines.append(f"- {protocol}, {key[:-6]}: not measured: {value.splitlines()[-1] if value else ''}")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--ncu-target":
        ncu_target(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--nvbench-target":
        nvbench_target(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--no-nvbench", action="store_true")
    parser.add_argument("--render", nargs="+", type=Path)
    parser.add_argument("--protocols", nargs="+", default=list(dict.fromkeys(p.protocol for p in POINTS)))
    args = parser.parse_args()
    if args.render:
        print(render([json.loads(p.read_text()) for p in args.render]))
        return
    if args.out is None:
        parser.error("--out is required")
    result = measure(args.processes, args.out, args.no_nvbench, args.protocols)
    print(render([result]))


if __name__ == "__main__":
    main()
