"""Time to a verdict on a short kernel pair, and whether the interval still holds across processes (GPU).

Issue 32 asks three things of a short-kernel run, measured on the GPU machine in one call:

1. **End to end**: `qualify run protocols/vecload/plan.json` (5 cases, 2 trials, controls, A/A,
   sanitizer) into a scratch record: its wall time, and per trial process its wall time against its
   GPU-busy time (the trial file's `cost`), with the stages' accounts.
2. **Beside NVBench**: vecload's pair at 1 Mi elements (about 5 µs), one case, no controls: the wall
   time of `qualify run` until its pooled interval is within ±0.5 % (the plan's precision stop,
   `target_ci_pct` 0.25 on each side of the log-ratio... as the plan states it), against NVBench
   (`cuda-bench`, cold, its defaults: it stops when its own noise criterion is met) timing the same
   two kernels on the same inputs in the same run — both walls, both Δs, NVBench's reached noise.
3. **Coverage**: `--runs` independent `qualify run`s of that one-case plan, each its own record
   (each with its trials as processes): does each run's pooled interval cover the mean of all runs?

    python3 benchmarks/startup/verdict.py --runs 10 --out $OUT/verdict.json
    python3 benchmarks/startup/verdict.py --render benchmarks/startup/verdict-*.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "timer"))

import margin  # noqa: E402  (benchmarks/timer/margin.py: reduced plans, NVBench beside qualify)

CASE = {"N": 1048576}
HALF_WIDTH_PCT = 0.5


def one_case_plan(name: str, trials: int) -> Path:
    """vecload reduced to the 1 Mi case, no controls or sanitizer, frozen (git-ignored folder)."""
    src_dir = ROOT / "protocols" / "vecload"
    plan = json.loads((src_dir / "plan.json").read_text())
    dst_dir = margin.PLANS / name
    shutil.rmtree(dst_dir, ignore_errors=True)
    dst_dir.mkdir(parents=True)
    for arm in plan["arms"].values():
        arm["source"] = os.path.relpath((src_dir / arm["source"]).resolve(), dst_dir)
    plan["name"] = name
    plan["workload"]["cases"] = [CASE]
    plan["acceptance"]["sanitizer"] = []
    plan["acceptance"]["gates"] = [{"name": "no_regression", "max_regression_pct": 50.0}]
    plan["controls"] = {"aa": False, "negative": []}
    plan["schedule"]["trials"] = trials
    plan["budget"]["max_trials"] = trials
    plan["budget"]["max_samples"] = 4000
    plan["schedule"]["blocks"] = 200
    # the precision stop rule ends each trial once its interval's half-width is this narrow
    plan["stop"]["target_ci_pct"] = HALF_WIDTH_PCT
    (dst_dir / "plan.json").write_text(json.dumps(plan, indent=2) + "\n")
    margin.qualify("plan", "freeze", str(dst_dir / "plan.json"))
    return dst_dir / "plan.json"


def end_to_end(tmp: Path, n: int = 0) -> dict:
    """One `qualify run protocols/vecload/plan.json`, whatever its verdict: its wall time, exit
    code and reasons, each trial's costs and each case's A/A control (the verdict's own check)."""
    import subprocess

    record = tmp / f"vecload-e2e-{n}"
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "qualify", "run", "protocols/vecload/plan.json", "--record", str(record)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    wall = time.perf_counter() - started
    if not (record / "results.json").exists():
        return {"wall_s": wall, "exit": done.returncode, "verdict": "none", "trials": [], "error": done.stderr[-2000:]}
    results = json.loads((record / "results.json").read_text())
    trials = []
    for path in sorted((record / "trials").glob("trial-*.json")):
        trial = json.loads(path.read_text())
        cost = trial.get("cost") or {}
        trials.append(
            {
                "index": trial["index"],
                "wall_s": cost.get("wall_s"),
                "gpu_busy_s": cost.get("gpu_busy_s"),
                "stages_s": cost.get("stages_s", {}),
            }
        )
    aa = [
        {"trial": t["index"], "case": c["case"]} | {k: c["aa"][k] for k in ("ratio", "ci_low", "ci_high", "case_class")}
        for t in results["trials"]
        for c in t["cases"]
        if c.get("aa")
    ]
    return {
        "wall_s": wall,
        "exit": done.returncode,
        "verdict": results["verdict"]["status"],
        "reasons": results["verdict"].get("reasons", []),
        "trials": trials,
        "aa": aa,
    }


def pooled_case(record: Path) -> dict:
    """The run's pooled interval as qualify recorded it, and each complete trial's moments (the
    block log-ratios' mean, SD and count), so other estimators can be judged on the same runs."""
    results = json.loads((record / "results.json").read_text())
    (_, pooled), *_ = results["pooled"].items()
    (case,) = pooled.values()
    moments = [
        {k: c["stats"][k] for k in ("log_mean", "log_sd", "blocks")}
        for t in results["trials"]
        if t["status"] == "complete"
        for c in t["cases"]
    ]
    return {k: case[k] for k in ("ratio", "ci_low", "ci_high", "case_class", "trials")} | {"moments": moments}


# -- the between-process part, two ways (pure; tests/test_verdict_bench.py) ---------------------


def interval(moments: list[dict], method: str) -> tuple[float, float, float]:
    """(ratio, low, high) of the pooled 95 % interval over trials' moments.

    "satterthwaite": qualify.evaluate.pooled.pool (between = spread − within, floored at 0,
    Welch–Satterthwaite df). "knapp-hartung": the same centre, se² = max(spread, within) / k and
    t with k − 1 degrees of freedom (the trial means are the replicates; the floor at the within
    part is Röver, Knapp and Friede's modification)."""
    from qualify.evaluate.pooled import pool
    from qualify.evaluate.stats import t_quantile
    from qualify.results.base import CaseStats

    if method == "satterthwaite":  # qualify's own pooling, on the trials' recorded moments
        stats = [
            CaseStats(
                ratio=math.exp(m["log_mean"]),
                ci_low=None,
                ci_high=None,
                delta_pct=math.expm1(m["log_mean"]) * 100.0,
                case_class="cant_tell",
                reason="",
                blocks=m["blocks"],
                log_mean=m["log_mean"],
                log_sd=m["log_sd"],
            )
            for m in moments
        ]
        pooled = pool(stats)
        return pooled.ratio, pooled.ci_low, pooled.ci_high
    if method != "knapp-hartung":
        raise ValueError(method)
    k = len(moments)
    mean = math.fsum(m["log_mean"] for m in moments) / k
    within = math.fsum(m["log_sd"] ** 2 / m["blocks"] for m in moments) / k
    spread = math.fsum((m["log_mean"] - mean) ** 2 for m in moments) / (k - 1)
    half = t_quantile(0.975, float(k - 1)) * math.sqrt(max(spread, within) / k)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def coverage(runs: list[list[dict]], method: str, trials: int) -> tuple[int, int, float, float]:
    """Over runs (each a list of trial moments, the first `trials` used): (runs whose interval
    holds the mean of all runs' centres, runs, that mean's change in %, the median half-width in
    points)."""
    used = [r[:trials] for r in runs if len(r) >= trials]
    found = [interval(r, method) for r in used]
    centre = math.exp(statistics.fmean(math.log(r) for r, _, _ in found))
    held = sum(lo <= centre <= hi for _, lo, hi in found)
    half = statistics.median(50.0 * (hi - lo) for _, lo, hi in found)
    return held, len(found), 100.0 * (centre - 1.0), half


def measure(runs: int, trials: int, skip_nvbench: bool, save=lambda doc: None, e2e: int = 1) -> dict:
    """Every part in turn; `save(doc)` after each, so a call cut short keeps what it measured."""
    from qualify.run.device import CudaDevice

    dev = CudaDevice(0)
    info = {"name": dev.info.name, "uuid": dev.info.uuid}
    dev.close()
    doc: dict = {"measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "device": info}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        margin.log("end to end: qualify run protocols/vecload/plan.json")
        doc["end_to_end_runs"] = []
        for n in range(e2e):
            doc["end_to_end_runs"].append(end_to_end(tmp, n))
            doc["end_to_end"] = doc["end_to_end_runs"][0]
            save(doc)
            margin.log(
                f"end to end {n + 1}: {doc['end_to_end_runs'][-1]['wall_s']:.1f} s, exit {doc['end_to_end_runs'][-1]['exit']}"
            )
        plan = one_case_plan("vecload-1mi-verdict", trials)
        margin.log(f"{runs} independent runs of the 1 Mi plan, {trials} trial processes each")
        doc["runs"] = []
        for i in range(runs):
            record = tmp / f"run-{i}"
            started = time.perf_counter()
            margin.qualify("run", str(plan), "--record", str(record))
            row = pooled_case(record) | {"wall_s": time.perf_counter() - started}
            doc["runs"].append(row)
            save(doc)
            margin.log(f"run {i + 1}: {row}")
        if not skip_nvbench:
            margin.log("NVBench on the same pair")
            nv = margin.nvbench_deltas(plan)
            case = next(k for k in nv if not k.startswith("_"))
            doc["nvbench"] = nv[case] | {"wall_s": nv["_wall_s"]}
    return doc


def table(doc: dict) -> list[str]:
    e2e = doc.get("end_to_end") or {"wall_s": float("nan"), "exit": None, "verdict": "not run", "trials": []}
    lines = [
        f"{doc['measured_at']} on {doc['device']['name']} ({doc['device']['uuid'][:12]})",
        "",
        f"`qualify run protocols/vecload/plan.json`: {e2e['wall_s']:.1f} s end to end, exit {e2e['exit']} "
        f"({e2e['verdict']})",
        "",
        "| trial process | wall (s) | GPU busy (s) | wall − GPU busy (s) | largest accounts |",
        "|---:|---:|---:|---:|---|",
    ]
    for t in e2e["trials"]:
        top = sorted(t["stages_s"].items(), key=lambda kv: -kv[1])[:4]
        lines.append(
            f"| {t['index']} | {t['wall_s']:.2f} | {t['gpu_busy_s']:.3f} | {t['wall_s'] - t['gpu_busy_s']:.2f} | "
            + ", ".join(f"{k} {v:.2f}" for k, v in top)
            + " |"
        )
    more = doc.get("end_to_end_runs") or []
    if len(more) > 1:
        lines += [
            "",
            "| end-to-end run | wall (s) | exit | verdict | trial walls (s) | A/A faster or slower |",
            "|---:|---:|---:|---|---|---|",
        ]
        for n, e in enumerate(more, 1):
            odd = [
                f"trial {a['trial']} {a['case']} {a['case_class']} {100 * (a['ratio'] - 1):+.2f} %"
                for a in e.get("aa", [])
                if a["case_class"] not in ("same", "cant_tell")
            ]
            walls = ", ".join(f"{t['wall_s']:.2f}" for t in e["trials"])
            lines.append(
                f"| {n} | {e['wall_s']:.1f} | {e['exit']} | {e['verdict']} | {walls} | {'; '.join(odd) or 'none'} |"
            )
    runs = doc.get("runs") or []
    if not runs:
        return lines + ["", "no independent run finished"]
    mean_log = statistics.fmean(math.log(r["ratio"]) for r in runs)
    mean = math.exp(mean_log)
    covered = sum(r["ci_low"] <= mean <= r["ci_high"] for r in runs)
    walls = [r["wall_s"] for r in runs]
    lines += [
        "",
        f"vecload 1 Mi, one case, precision stop at ±{HALF_WIDTH_PCT} %: {len(runs)} independent runs, "
        f"{runs[0]['trials']} trial processes each",
        "",
        "| run | Δ (%) | interval (%) | class | wall (s) | covers the mean of all runs |",
        "|---:|---:|---|---|---:|---|",
    ]
    for i, r in enumerate(runs, 1):
        lines.append(
            f"| {i} | {100 * (r['ratio'] - 1):+.2f} | [{100 * (r['ci_low'] - 1):+.2f}, {100 * (r['ci_high'] - 1):+.2f}] | "
            f"{r['case_class']} | {r['wall_s']:.1f} | {'yes' if r['ci_low'] <= mean <= r['ci_high'] else 'NO'} |"
        )
    lines += [
        "",
        f"mean of all runs {100 * (mean - 1):+.2f} %; covered by {covered} of {len(runs)} intervals; "
        f"SD of the runs' Δ {100 * statistics.stdev(math.log(r['ratio']) for r in runs):.2f} points; "
        f"median wall to a verdict {statistics.median(walls):.1f} s",
    ]
    per_run = [r["moments"] for r in runs if r.get("moments")]
    if per_run:
        most = min(len(r) for r in per_run)
        lines += [
            "",
            "The same runs' trials, pooled two ways (the first k trial processes of each run):",
            "",
            "| k | estimator | runs covering the mean of all runs | mean Δ (%) | median half-width (points) |",
            "|---:|---|---:|---:|---:|",
        ]
        for k in sorted({2, most}):
            for method in ("satterthwaite", "knapp-hartung"):
                held, n, centre, half = coverage(per_run, method, k)
                lines.append(f"| {k} | {method} | {held} of {n} | {centre:+.2f} | {half:.2f} |")
    nv = doc.get("nvbench")
    if nv:
        lines += [
            "",
            f"NVBench (cuda-bench, cold, its defaults) on the same pair: Δ {100 * (nv['ratio'] - 1):+.2f} % "
            "of its means"
            + (
                f" ({100 * (nv['ratio_median'] - 1):+.2f} % of the medians of its raw samples)"
                if nv.get("ratio_median")
                else ""
            )
            + ", "
            f"noise base {nv['base'].get('noise_pct', float('nan')):.2f} % / candidate "
            f"{nv['candidate'].get('noise_pct', float('nan')):.2f} % (relative SD of its samples), "
            f"{nv['base'].get('samples')} + {nv['candidate'].get('samples')} samples, {nv['wall_s']:.1f} s wall "
            "(one process: NVBench states no interval on the ratio)",
        ]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--skip-nvbench", action="store_true")
    ap.add_argument("--e2e", type=int, default=1, help="end-to-end runs of protocols/vecload (each its own record)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--render", nargs="*", type=Path)
    args = ap.parse_args()
    if args.render:
        for path in args.render:
            print("\n".join(table(json.loads(path.read_text()))) + "\n")
        return 0

    def save(doc: dict) -> None:
        if args.out:
            args.out.write_text(json.dumps(doc, indent=1))

    doc = measure(args.runs, args.trials, args.skip_nvbench, save, args.e2e)
    save(doc)
    print("\n".join(table(doc)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
