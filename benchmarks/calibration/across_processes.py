"""Calibration across processes (GPU): does a trial's stated interval hold in the next process?

Issue 24: a trial samples what its process fixed once (where the buffers sit, module loads, the
allocator's history), so trials inside one process are one replicate. Here every replicate is a
process of its own. Points: vecload axpy<4> at N=1048576 and N=4194304, attention (base tile) at
T=512 and T=1536; planted slowdowns of 0, 1 and 2 % under the new design (the plan's defaults: a
placement per block, seeded block orders) and 0 % under the old one (one placement, alternating
orders), all in the same run. Steps:

1. the parent compiles a ladder of spin counts per family, pre-measures each rung against the base
   with qualify's device layer (run_calibration's CaseBench and ladder_deltas), chooses the spin
   per planted change, writes and freezes one plan per variant, and closes its device;
2. `--processes` replicate processes, one after the other, each a fresh
   `python3 across_processes.py --replicate SPEC --process P`: its own CudaDevice, one engine
   trial (no preflight, no sanitizer) of every variant in an order drawn for that process, one
   JSON line on stdout; the parent appends it to the JSON (`--out`) after every process, so a
   time-out keeps what ran;
3. the Markdown tables (calib_processes.render) are written beside the JSON.

    python3 benchmarks/calibration/across_processes.py --quick --out /tmp/cp.json     # ~90 s
    python3 benchmarks/calibration/across_processes.py --out $OUT/calibration-processes.json  # ≤ 8 min
    python3 benchmarks/calibration/across_processes.py --render benchmarks/calibration/calibration-processes.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

import calib  # noqa: E402
import calib_processes as cp  # noqa: E402

LINE_MARK = "CALIBRATION-PROCESS "  # prefixes the replicate's one JSON line on stdout
LADDER_FULL = calib.LADDER[:9]  # 8 … 2048 clocks
LADDER_QUICK = (32, 256)

T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f} s] {msg}", file=sys.stderr, flush=True)


def write_json(path: Path, result: dict) -> None:
    from qualify.io import atomic_write_text

    atomic_write_text(path, json.dumps(result, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------
# parent, step 1: the ladder and the plans


def measure_spins(work: Path, arch: str, quick: bool, result: dict) -> dict[str, dict[float, int]]:
    """Per family: the ladder on each case, then the spin per planted change (from the mean over
    the cases). The parent's device is open only here."""
    from run_calibration import CaseBench, compile_spins, ladder_deltas

    from qualify.plan.load import load_plan
    from qualify.run.device import CudaDevice

    ladder = LADDER_QUICK if quick else LADDER_FULL
    planted = sorted(set(cp.PLANTED_NEW) | set(cp.PLANTED_OLD))
    spins: dict[str, dict[float, int]] = {}
    with CudaDevice(0) as dev:
        for family in cp.FAMILY_ORDER:
            compiled = compile_spins(family, (0, *ladder), arch)
            probe = load_plan(cp.write_plan(work / "probe", cp.Variant(family, 0.0, "new"), 0, arch, quick))
            smem = max(c.arms["base"].launch.shared_bytes for c in probe.cases)
            kernels = {s: dev.load_kernel(f"{family}-spin{s}", k, smem) for s, k in compiled.items()}
            per_case = []
            for case in probe.cases:
                bench = CaseBench(dev, probe, case)
                rungs = ladder_deltas(dev, bench, kernels, blocks=3 if quick else 6, per_half=5 if quick else 8)
                bench.free()
                per_case.append(rungs)
                result["ladders"].setdefault(family, {})[case.id] = rungs
                log(f"{family} {case.id}: ladder " + ", ".join(f"{s}:{d:+.2f}%" for s, d in rungs))
            mean = [(s, sum(r[i][1] for r in per_case) / len(per_case)) for i, (s, _) in enumerate(per_case[0])]
            spins[family] = {p: calib.choose_spin(mean, p) for p in planted}
            compile_spins(family, sorted({s for s in spins[family].values() if s} - set(compiled)), arch)
            result["spins"][family] = {f"{p:g}": s for p, s in spins[family].items()}
            log(f"{family}: spins " + ", ".join(f"{p:g}%→{s}" for p, s in spins[family].items()))
    return spins


# ---------------------------------------------------------------------------------------------
# parent, step 2: the replicate processes


def run_replicate(spec_path: Path, process: int, timeout: float) -> dict:
    """One replicate process; its JSON line, or an error entry that says why there is none."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--replicate", str(spec_path), "--process", str(process)]
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {
            "process": process,
            "order": [],
            "rows": [],
            "elapsed_s": time.monotonic() - started,
            "error": f"timed out after {timeout:.0f} s",
        }
    lines = [ln[len(LINE_MARK) :] for ln in done.stdout.splitlines() if ln.startswith(LINE_MARK)]
    if done.returncode != 0 or not lines:
        return {
            "process": process,
            "order": [],
            "rows": [],
            "elapsed_s": time.monotonic() - started,
            "error": f"exit {done.returncode}: {done.stderr[-1500:]}",
        }
    entry = json.loads(lines[-1])
    entry["elapsed_s"] = time.monotonic() - started
    return entry


def main(args) -> int:
    from qualify.run.device import CudaDevice

    started = time.monotonic()
    deadline = started + args.budget_s
    out = Path(args.out)
    work = Path(tempfile.mkdtemp(prefix="qualify-calibration-processes-"))
    with CudaDevice(0) as dev:
        info = dev.info
    sched = cp.schedule("new", args.quick)
    result = {
        "version": cp.JSON_VERSION,
        "ladders": {},
        "spins": {},
        "processes": [],
        "meta": {
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "device": f"{info.name} ({info.uuid})",
            "driver": info.driver_version,
            "arch": info.arch,
            "quick": args.quick,
            "processes_planned": args.processes,
            "seed": args.seed,
            "blocks": sched["blocks"],
            "samples_per_block": sched["samples_per_block"],
            "variants": [v.key for v in cp.variants()],
            "elapsed_s": 0.0,
        },
    }
    try:
        spins = measure_spins(work, info.arch, args.quick, result)
        plans = {
            v.key: str(cp.write_plan(work / "plans", v, spins[v.family][v.planted_pct], info.arch, args.quick))
            for v in cp.variants()
        }
        spec_path = work / "replicate.json"
        spec_path.write_text(json.dumps({"plans": plans, "seed": args.seed}))
        result["meta"]["ladder_s"] = time.monotonic() - started
        write_json(out, result)
        slowest = 0.0
        for p in range(args.processes):
            left = deadline - time.monotonic()
            if p and slowest > left:
                log(f"time budget: stopping after {p} processes ({left:.0f} s left, the slowest took {slowest:.0f} s)")
                break
            entry = run_replicate(spec_path, p, timeout=max(30.0, left))
            slowest = max(slowest, entry["elapsed_s"])
            result["processes"].append(entry)
            result["meta"]["elapsed_s"] = time.monotonic() - started
            write_json(out, result)
            log(
                f"process {p + 1}/{args.processes}: {entry['elapsed_s']:.1f} s"
                + (f", error: {entry['error'][-300:]}" if entry.get("error") else "")
            )
    finally:
        result["meta"]["elapsed_s"] = time.monotonic() - started
        write_json(out, result)
        shutil.rmtree(work, ignore_errors=True)
    text = cp.render(result)
    out.with_suffix(".md").write_text(text)
    print(text, end="")
    return 0


# ---------------------------------------------------------------------------------------------
# a replicate process


def replicate(spec_path: Path, process: int) -> int:
    """One trial of every variant in this process's order, on a device this process opened; one
    JSON line on stdout.

    The process is the record's trial `process + 1`, as the (process + 1)-th trial process of
    `qualify run` would be: the placements' layout and the block orders are drawn from the plan's
    seed, the trial and the case, so every replicate draws its own."""
    from run_calibration import install_caches

    from qualify.plan.load import load_plan
    from qualify.results.store import Record
    from qualify.run.device import CudaDevice
    from qualify.run.engine import RunOptions, TrialRunner
    from qualify.run.telemetry import Telemetry

    class NumberedRecord(Record):
        def next_trial_index(self) -> int:
            return process + 1

    install_caches()  # compiles memoised by content within the process (NVRTC's disk cache across them)
    spec = json.loads(spec_path.read_text())
    order = cp.process_order(spec["seed"], process, sorted(spec["plans"]))
    rows: list[dict] = []
    records = Path(tempfile.mkdtemp(prefix=f"qualify-replicate-{process}-"))
    try:
        with CudaDevice(0) as dev:
            telemetry = Telemetry(dev.info.uuid)
            for key in order:
                variant = cp.Variant.from_key(key)
                loaded = load_plan(spec["plans"][key])
                folder = records / key.replace("/", "-")
                runner = TrialRunner(loaded, dev, telemetry, RunOptions(record_dir=folder, argv=["calibration"]))
                runner.record = NumberedRecord(folder)
                trial = runner.run()
                rows += cp.trial_rows(variant, trial)
                log(f"process {process}: {key} {trial.status}")
    finally:
        shutil.rmtree(records, ignore_errors=True)
    print(LINE_MARK + json.dumps({"process": process, "order": order, "rows": rows, "error": None}), flush=True)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "calibration-processes.json"))
    parser.add_argument("--quick", action="store_true", help="a ~90 s smoke run: 3 processes, 6 blocks, 2 ladder spins")
    parser.add_argument("--processes", type=int, help="replicate processes (default 12; 3 with --quick)")
    parser.add_argument("--seed", type=int, default=20261202, help="seed of the processes' variant orders")
    parser.add_argument(
        "--budget-s",
        type=float,
        help="stop starting processes when the slowest so far would overrun (default 460; 85 with --quick)",
    )
    parser.add_argument("--render", metavar="JSON", help="print the Markdown tables of a saved result")
    parser.add_argument("--replicate", metavar="SPEC", help=argparse.SUPPRESS)
    parser.add_argument("--process", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.replicate:
        sys.exit(replicate(Path(args.replicate), args.process))
    if args.render:
        print(cp.render(cp.load_result(Path(args.render))), end="")
        sys.exit(0)
    if args.processes is None:
        args.processes = 3 if args.quick else 12
    if not 1 <= args.processes <= cp.MAX_PROCESSES:
        parser.error(f"--processes must be 1..{cp.MAX_PROCESSES}")
    if args.budget_s is None:
        args.budget_s = 85.0 if args.quick else 460.0
    sys.exit(main(args))
