"""Where a trial process's time goes, on the GPU machine (issue 32 item 5).

For each protocol named (default: vecload and softmax), a copy of the protocol and its kernels is
run with `qualify run` into a scratch record, timed end to end. Then, per trial process, from the
trial files the run wrote:

- `process`: the trial process's wall time, measured from outside as the time from the previous
  trial's end (or the run's start, for the first) to this trial's end: interpreter, imports, plan
  load, device and CUPTI set-up, the trial, writing it;
- `trial`: the trial's own wall (`cost.wall_s`, admission to trial file) and `gpu`: its GPU-busy
  time (`cost.gpu_busy_s`, every timed window);
- `start-up`: process − trial (what a process costs before and after its trial);
- the stage accounts of `qualify/run/stages/clock.py` (`cost.stages_s`), and the part of the
  trial no account holds.

Then the record's re-derivation (`report`, after the last trial) as the run's end minus the last
trial's end, and, measured apart, `python -c pass` and the imports of a trial process
(`qualify.cli`, `qualify.procs.trials`, the engine, the device floor) in fresh interpreters.

The targets it reports against: each trial process after the first at most 1.5 s plus its
GPU-busy time; vecload at most 15 s end to end.

    python3 benchmarks/startup/trial.py                      # vecload and softmax
    python3 benchmarks/startup/trial.py --protocol vecload --cold-cache --json $OUT/trial.json

`--cold-cache` gives the run an empty compile cache (QUALIFY_CACHE_DIR), as on a fresh machine;
without it the user's cache is used, as on a second run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROCESS_TARGET_S = 1.5  # per trial process after the first, beyond its GPU-busy time
VECLOAD_TARGET_S = 15.0
VERDICT_EXITS = (0, 1, 7)  # qualified, not qualified, incomplete: the run ended with a record
IMPORTS = "import qualify.cli, qualify.procs.trials, qualify.commands.pipeline, qualify.run.engine, qualify.run.device"


def _when(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def copy_protocol(name: str, into: Path) -> Path:
    """The protocol and the kernels folder in the repository's layout, so its lock's paths hold
    (a `.git` folder marks the copy as the repository its sources must lie in)."""
    (into / ".git").mkdir(parents=True)
    shutil.copytree(ROOT / "protocols" / name, into / "protocols" / name)
    shutil.copytree(ROOT / "kernels", into / "kernels")
    return into / "protocols" / name / "plan.json"


def python_env() -> dict[str, str]:
    """This checkout first on the path, what was there kept (the GPU kit's wheels live on it)."""
    kept = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + kept if kept else "")}


def fresh_python(code: str, runs: int) -> float:
    """Median wall time of `runs` fresh interpreters running `code` (one untimed run first)."""
    cmd = [sys.executable, "-c", code]
    env = python_env()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, cold_cache: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"qualify-trial-{name}-") as scratch:
        work = Path(scratch)
        plan = copy_protocol(name, work / "repo")
        env = python_env()
        if cold_cache:
            env["QUALIFY_CACHE_DIR"] = str(work / "cache")
        record = work / "record"
        started = time.time()
        done = subprocess.run(
            [sys.executable, "-m", "qualify", "run", str(plan), "--record", str(record)],
            env=env,
            capture_output=True,
            text=True,
        )
        ended = time.time()
        trials = [json.loads(p.read_text()) for p in sorted((record / "trials").glob("trial-*.json"))]
    trials.sort(key=lambda t: t["index"])
    rows, previous = [], started
    for t in trials:
        end = _when(t["ended_at"])
        cost = t["cost"]
        stages = {k: v for k, v in cost["stages_s"].items() if v > 0}
        rows.append(
            {
                "trial": t["index"],
                "status": t["status"],
                "process_s": end - previous,
                "trial_s": cost["wall_s"],
                "gpu_busy_s": cost["gpu_busy_s"],
                "startup_s": end - previous - cost["wall_s"],
                "stages_s": stages,
                "unaccounted_s": cost["wall_s"] - sum(stages.values()),
            }
        )
        previous = end
    return {
        "protocol": name,
        "exit_code": done.returncode,
        "stderr_tail": done.stderr[-2000:] if done.returncode not in VERDICT_EXITS else "",
        "end_to_end_s": ended - started,
        "rederive_s": ended - previous if trials else None,
        "trials": rows,
    }


def render(results: list[dict], python_s: float, imports_s: float) -> str:
    lines = [
        f"python -c pass: {python_s:.3f} s; a trial process's imports ({IMPORTS.removeprefix('import ')}): "
        f"{imports_s:.3f} s (median of fresh interpreters)",
        "",
    ]
    for r in results:
        verdict = f"exit {r['exit_code']}"
        target = f" (target <= {VECLOAD_TARGET_S:g} s)" if r["protocol"] == "vecload" else ""
        lines.append(f"## {r['protocol']}: {r['end_to_end_s']:.1f} s end to end{target}, {verdict}")
        lines.append("")
        lines.append("| trial | process | trial | GPU-busy | start-up | over target | stages (s) | unaccounted |")
        lines.append("|---:|---:|---:|---:|---:|---:|---|---:|")
        for i, t in enumerate(r["trials"]):
            over = t["process_s"] - t["gpu_busy_s"] - PROCESS_TARGET_S
            flag = "first (sanitizer, preflight)" if i == 0 else f"{over:+.2f} s"
            stages = ", ".join(f"{k} {v:.2f}" for k, v in sorted(t["stages_s"].items(), key=lambda kv: -kv[1]))
            lines.append(
                f"| {t['trial']} ({t['status']}) | {t['process_s']:.2f} | {t['trial_s']:.2f} | {t['gpu_busy_s']:.3f} | "
                f"{t['startup_s']:.2f} | {flag} | {stages} | {t['unaccounted_s']:.2f} |"
            )
        if r["rederive_s"] is not None:
            lines.append("")
            lines.append(
                f"After the last trial, the record's re-derivation (results, README, plots): {r['rederive_s']:.2f} s"
            )
        if r["stderr_tail"]:
            lines += ["", "stderr:", r["stderr_tail"]]
        lines.append("")
    lines.append(
        f"over target: process − GPU-busy − {PROCESS_TARGET_S:g} s (the issue's bound for every trial process after "
        "the first); negative meets it"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--protocol", action="append", help="protocols/<name> (repeatable; default vecload, softmax)")
    parser.add_argument("--cold-cache", action="store_true", help="an empty compile cache, as on a fresh machine")
    parser.add_argument("--runs", type=int, default=5, help="fresh interpreters per start-up measurement")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args(argv)
    names = args.protocol or ["vecload", "softmax"]
    python_s = fresh_python("pass", args.runs)
    imports_s = fresh_python(IMPORTS, args.runs)
    results = [measure(name, args.cold_cache) for name in names]
    print(render(results, python_s, imports_s))
    if args.json:
        args.json.write_text(json.dumps({"python_s": python_s, "imports_s": imports_s, "runs": results}, indent=1))
    return 0 if all(r["exit_code"] in VERDICT_EXITS for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
