"""Calibration benchmark (GPU): do qualify's verdicts hold at the margin? See README.md.

Planted slowdowns of 0 (A/A), 0.5, 1, 2 and 3 % — the base kernel compiled with a short spin per
main-loop iteration — for the attention kernel at a partial and a full last wave and for a
bandwidth-bound read of ~10 µs and ~100 µs. Steps, all in one process on one GPU:

1. compile a ladder of spin counts and pre-measure each against the base (qualify's own timer,
   interleaved blocks) to pick the spin that plants each nominal change;
2. ncu (`gpu__time_duration.sum`, `--clock-control none`) times every chosen variant against the
   base in alternating rounds, in a child process: the true Δ and its spread;
3. qualify trials through the engine (`TrialRunner`, one `CudaDevice` reused, no sanitizer and no
   preflight), round-robin over the points so drift cannot line up with one of them, until the
   planned trials are done or the time budget is spent; the JSON is rewritten after every round.

    python3 benchmarks/calibration/run_calibration.py --out $OUT/calibration.json   # ≤ 7 min
    python3 benchmarks/calibration/run_calibration.py --quick --out /tmp/c.json     # ~1 min
    python3 benchmarks/calibration/run_calibration.py --render benchmarks/calibration/results.json
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

import calib  # noqa: E402

KERNEL_REGEX = "regex:attention_gated_fwd|calib_sum"


T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f} s] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------
# compilation and inputs, memoised: both are pure functions of their arguments, and a trial would
# otherwise spend most of its time recompiling the same source and regenerating the same inputs


_COMPILED: dict = {}
_INPUTS: dict = {}


def install_caches() -> None:
    import qualify.build.nvrtc as nvrtc
    import qualify.run.inputs as inputs

    compile_kernel, generate = nvrtc.compile_kernel, inputs.generate

    def cached_compile(spec):
        # by content, not path: every plan's throw-away repository holds a copy of the same source,
        # and QUALIFY_SPIN_CYCLES=0 compiles to the same kernel as no definition at all
        defines = tuple(d for d in spec.defines if d != ("QUALIFY_SPIN_CYCLES", "0"))
        k = (spec.source.read_bytes(), spec.kernel, spec.arch, defines, spec.options)
        if k not in _COMPILED:
            _COMPILED[k] = compile_kernel(spec)
        return _COMPILED[k]

    def cached_generate(seeds, case_id, spec, resolved):
        k = (seeds.base, case_id, spec.name, repr(spec.init), resolved.elements, resolved.dtype)
        if k not in _INPUTS:
            _INPUTS[k] = generate(seeds, case_id, spec, resolved)
        return _INPUTS[k]

    nvrtc.compile_kernel = cached_compile
    inputs.generate = cached_generate
    # modules that imported the name: the build and controls stages, and the arms specs
    for name in ("qualify.run.stages.build", "qualify.run.stages.controls", "qualify.build.arms"):
        module = sys.modules.get(name) or __import__(name, fromlist=["compile_kernel"])
        if hasattr(module, "compile_kernel"):
            module.compile_kernel = cached_compile


def compile_spins(family: str, spins, arch: str) -> dict[int, object]:
    from qualify.build import nvrtc
    from qualify.build.nvrtc import KernelSpec

    spec = calib.FAMILIES[family]
    source = calib.SOURCES[spec["source"]]
    specs = {
        s: KernelSpec(
            source=source, kernel=spec["kernel"], arch=arch, defines=(("QUALIFY_SPIN_CYCLES", str(s)),) if s else ()
        )
        for s in spins
    }
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 2)) as pool:
        return dict(zip(specs, pool.map(nvrtc.compile_kernel, specs.values())))


# ---------------------------------------------------------------------------------------------
# step 1: the spin ladder


class CaseBench:
    """One case of one family on the device: buffers, inputs and a launch per kernel variant."""

    def __init__(self, dev, loaded, case):
        from qualify.run import inputs as input_gen

        self.dev, self.case = dev, case
        self.arm = case.arms["base"]
        self.buffers = {b.name: dev.alloc(b.nbytes) for b in self.arm.buffers}
        for spec in loaded.plan.workload.buffers:
            if spec.role == "input":
                dev.upload(
                    self.buffers[spec.name],
                    input_gen.generate(loaded.plan.seeds, case.id, spec, self.arm.buffer(spec.name)),
                )
        self.outputs = [b.name for b in self.arm.buffers if b.role == "output"]

    def exec_for(self, kernel):
        from qualify.run.arms import ArmExec

        ex = ArmExec("base", kernel, self.arm, self.buffers, self.outputs)
        ex.bind_args()
        return ex

    def free(self):
        for b in self.buffers.values():
            self.dev.free(b)


def ladder_deltas(dev, bench: CaseBench, kernels: dict, blocks: int, per_half: int) -> list[tuple[int, float]]:
    """Δ % of each spin against spin 0, qualify's timer, ABBA/BAAB blocks, block log-ratios."""
    import math
    import statistics

    from qualify.plan.schedule import block_order

    base = bench.exec_for(kernels[0])
    floor = statistics.median(dev.time_sample(lambda: None, cold=True) for _ in range(30))
    out = []
    for spin, kernel in kernels.items():
        if spin == 0:
            continue
        variant = bench.exec_for(kernel)
        logs = []
        for b in range(blocks):
            ns = {"A": [], "B": []}
            for letter in block_order(b):
                ex = base if letter == "A" else variant
                for _ in range(per_half):
                    ns[letter].append(dev.time_sample(lambda ex=ex: ex.enqueue(dev), cold=True) - floor)
            logs.append(math.log(statistics.median(ns["B"]) / statistics.median(ns["A"])))
        out.append((spin, math.expm1(statistics.fmean(logs)) * 100))
    return out


# ---------------------------------------------------------------------------------------------
# step 2: ncu


def ncu_measure(spec_path: Path, expected: int, timeout: float) -> list[float]:
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    cmd = [
        ncu,
        "--clock-control",
        "none",
        "--metrics",
        "gpu__time_duration.sum",
        "--csv",
        "--kernel-name",
        KERNEL_REGEX,
        sys.executable,
        str(Path(__file__).resolve()),
        "--ncu-target",
        str(spec_path),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"ncu failed ({done.returncode}): {done.stderr[-2000:]} {done.stdout[-2000:]}")
    text = done.stdout[done.stdout.index('"ID"') :]
    to_us = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}
    values = [
        float(row["Metric Value"].replace(",", "")) * to_us[row["Metric Unit"]]
        for row in csv.DictReader(io.StringIO(text))
        if row["Metric Name"] == "gpu__time_duration.sum"
    ]
    if len(values) != expected:
        raise RuntimeError(f"ncu reported {len(values)} kernel launches, expected {expected}")
    return values


def ncu_target(spec_path: Path) -> None:
    """Child process under ncu: launch every (family, case, variant) in alternating rounds."""
    from qualify.plan.load import load_plan
    from qualify.run.device import CudaDevice

    spec = json.loads(spec_path.read_text())
    with CudaDevice(0) as dev:
        for fam in spec["families"]:
            compiled = pickle.loads(Path(fam["kernels"]).read_bytes())
            loaded = load_plan(fam["plan"])
            smem = max(c.arms["base"].launch.shared_bytes for c in loaded.cases)
            kernels = {int(s): dev.load_kernel(f"spin{s}", compiled[int(s)], smem) for s in set(fam["spins"])}
            for case in loaded.cases:
                bench = CaseBench(dev, loaded, case)
                execs = [bench.exec_for(kernels[int(s)]) for s in fam["spins"]]
                for _ in range(spec["rounds"]):
                    for ex in execs:
                        ex.enqueue(dev)
                dev.synchronize()
                bench.free()


# ---------------------------------------------------------------------------------------------
# step 3: trials


def trial_row(trial, case_id: str) -> dict:
    row = {
        "trial": trial.index,
        "status": trial.status,
        "case_class": None,
        "delta_pct": None,
        "ci_low": None,
        "ci_high": None,
        "mde_pct": None,
        "blocks": None,
        "reason": "; ".join(f.message for f in trial.failures),
    }
    for c in trial.cases:
        if c.case == case_id:
            s = c.stats
            row.update(
                case_class=s.case_class,
                delta_pct=s.delta_pct,
                ci_low=s.ci_low,
                ci_high=s.ci_high,
                mde_pct=s.mde_pct,
                blocks=s.blocks,
                reason=s.reason,
            )
    return row


def write_json(path: Path, result: dict) -> None:
    from qualify.io import atomic_write_text

    atomic_write_text(path, json.dumps(result, indent=1) + "\n")


def main(args) -> int:
    from qualify.plan.load import load_plan
    from qualify.run.device import CudaDevice
    from qualify.run.engine import RunOptions, TrialRunner
    from qualify.run.telemetry import Telemetry

    started = time.monotonic()
    deadline = started + args.budget_s
    install_caches()
    out = Path(args.out)
    work = Path(tempfile.mkdtemp(prefix="qualify-calibration-"))
    dev = CudaDevice(0)
    arch = dev.info.arch
    sched = calib.schedule(args.quick)
    result = {
        "version": calib.JSON_VERSION,
        "cases": [],
        "meta": {
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "device": f"{dev.info.name} ({dev.info.uuid})",
            "driver": dev.info.driver_version,
            "arch": arch,
            "quick": args.quick,
            "trials_per_point": args.trials,
            "rounds_done": 0,
            "blocks": sched["blocks"],
            "samples_per_block": sched["samples_per_block"],
            "elapsed_s": 0.0,
        },
    }
    ladder = calib.LADDER[2:7] if args.quick else calib.LADDER
    families = ["attention", "bandwidth"]
    spins: dict[str, dict[float, int]] = {}
    compiled: dict[str, dict[int, object]] = {}
    cases_by_key = {}
    try:
        # 1. the ladder, then the spin per nominal change (one per family: the mean over its cases)
        for family in families:
            compiled[family] = compile_spins(family, (0, *ladder), arch)
            log(f"{family}: compiled {len(compiled[family])} spin variants")
            probe_plan = load_plan(calib.write_plan(work / "probe", family, 0.0, 0, arch, 1, args.quick))
            smem = max(c.arms["base"].launch.shared_bytes for c in probe_plan.cases)
            kernels = {s: dev.load_kernel(f"{family}-spin{s}", k, smem) for s, k in compiled[family].items()}
            per_case = []
            for case in probe_plan.cases:
                bench = CaseBench(dev, probe_plan, case)
                rungs = ladder_deltas(
                    dev, bench, kernels, blocks=3 if args.quick else 6, per_half=5 if args.quick else 8
                )
                bench.free()
                per_case.append(rungs)
                entry = {
                    "family": family,
                    "case": case.id,
                    "label": calib.FAMILIES[family]["labels"][case.id],
                    "ladder": rungs,
                    "points": [],
                }
                result["cases"].append(entry)
                cases_by_key[(family, case.id)] = entry
                log(f"{family} {case.id}: ladder " + ", ".join(f"{s}:{d:+.2f}%" for s, d in rungs))
            mean_ladder = [(s, sum(r[i][1] for r in per_case) / len(per_case)) for i, (s, _) in enumerate(per_case[0])]
            spins[family] = {n: calib.choose_spin(mean_ladder, n) for n in calib.NOMINAL_PCT}
            missing = sorted({s for s in spins[family].values()} - set(compiled[family]))
            compiled[family].update(compile_spins(family, missing, arch))
            log(f"{family}: spins " + ", ".join(f"{n:g}%→{s}" for n, s in spins[family].items()))

        # plans, one record per (family, point)
        plans = {}
        for family in families:
            for nominal, spin in spins[family].items():
                path = calib.write_plan(work / "plans", family, nominal, spin, arch, args.trials, args.quick)
                plans[(family, nominal)] = load_plan(path)
                for case in plans[(family, nominal)].cases:
                    cases_by_key[(family, case.id)]["points"].append(
                        {"nominal_pct": nominal, "spin": spin, "ncu": None, "trials": []}
                    )
        write_json(out, result)

        # 2. ncu: the base twice (its own A/A) and each planted variant, alternating rounds
        rounds = 5 if args.quick else 15
        result["meta"]["ncu_rounds"] = rounds
        if shutil.which("ncu") or Path("/usr/local/cuda/bin/ncu").exists():
            spec = {"rounds": rounds, "families": []}
            expected = 0
            for family in families:
                order = [0] + [spins[family][n] for n in calib.NOMINAL_PCT]  # [base, 0 %, 0.5 %, ...]
                kpath = work / f"{family}-kernels.pkl"
                kpath.write_bytes(pickle.dumps({s: compiled[family][s] for s in set(order)}))
                spec["families"].append({"plan": str(plans[(family, 0.0)].path), "kernels": str(kpath), "spins": order})
                expected += len(plans[(family, 0.0)].cases) * rounds * len(order)
            (work / "ncu.json").write_text(json.dumps(spec))
            try:
                values = ncu_measure(
                    work / "ncu.json", expected, timeout=max(60.0, min(240.0, deadline - time.monotonic() - 120))
                )
                start = 0
                for family, fam in zip(families, spec["families"]):
                    cases = plans[(family, 0.0)].cases
                    size = len(cases) * rounds * len(fam["spins"])
                    per_case = calib.split_ncu(values[start : start + size], len(cases), rounds, len(fam["spins"]))
                    start += size
                    for case, per in zip(cases, per_case):
                        entry = cases_by_key[(family, case.id)]
                        for point, variant in zip(entry["points"], per[1:]):  # per[0]: the base
                            delta, spread = calib.paired_change(per[0], variant)
                            point["ncu"] = {
                                "base_us": statistics.median(per[0]),
                                "variant_us": statistics.median(variant),
                                "delta_pct": delta,
                                "spread_pct": spread,
                                "launches": rounds,
                            }
                log(
                    "ncu: "
                    + "; ".join(
                        f"{c['label']}: " + ", ".join(f"{p['ncu']['delta_pct']:+.2f}" for p in c["points"])
                        for c in result["cases"]
                    )
                )
            except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
                result["meta"]["ncu_error"] = str(exc)[-500:]
                log(f"ncu failed: {str(exc)[-300:]}")
        else:
            result["meta"]["ncu_error"] = "ncu not found"
        write_json(out, result)

        # 3. trials, round-robin over every (family, point)
        telemetry = Telemetry(dev.info.uuid)
        round_s = None
        for r in range(args.trials):
            t_round = time.monotonic()
            if round_s is not None and t_round + round_s > deadline:
                log(f"time budget: stopping after {r} rounds")
                break
            for (family, nominal), loaded in plans.items():
                options = RunOptions(record_dir=work / "records" / f"{family}-{nominal:g}", argv=["calibration"])
                trial = TrialRunner(loaded, dev, telemetry, options).run()
                for case in loaded.cases:
                    entry = cases_by_key[(family, case.id)]
                    point = next(p for p in entry["points"] if p["nominal_pct"] == nominal)
                    point["trials"].append(trial_row(trial, case.id))
            round_s = time.monotonic() - t_round
            result["meta"]["rounds_done"] = r + 1
            result["meta"]["elapsed_s"] = time.monotonic() - started
            write_json(out, result)
            log(f"round {r + 1}/{args.trials} in {round_s:.1f} s")
    finally:
        result["meta"]["elapsed_s"] = time.monotonic() - started
        write_json(out, result)
        dev.close()
        shutil.rmtree(work, ignore_errors=True)
    md = out.with_suffix(".md")
    md.write_text(calib.render(result))
    print(calib.render(result))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "calibration.json"))
    parser.add_argument("--quick", action="store_true", help="a ~1-minute smoke run (3 trials per point)")
    parser.add_argument("--trials", type=int, help="trials per point (default 20; 3 with --quick)")
    parser.add_argument(
        "--budget-s", type=float, help="stop starting rounds after this many seconds (default 360; 50 with --quick)"
    )
    parser.add_argument("--render", metavar="JSON", help="print the Markdown tables of a saved result")
    parser.add_argument("--ncu-target", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ncu_target:
        ncu_target(Path(args.ncu_target))
        sys.exit(0)
    if args.render:
        print(calib.render(calib.load_result(Path(args.render))), end="")
        sys.exit(0)
    if args.trials is None:
        args.trials = 3 if args.quick else 20
    if args.budget_s is None:
        args.budget_s = 50.0 if args.quick else 360.0
    sys.exit(main(args))
