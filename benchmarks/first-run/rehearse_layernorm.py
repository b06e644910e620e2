#!/usr/bin/env python3
"""Wall time and peak memory of `qualify plan rehearse` on the 4-case fp32 LayerNorm plan (issue 37,
item 7: "rehearses in <= 10 s and <= 500 MB on the development machine").

Each run is `python -m qualify plan rehearse PLAN --reference ... --out TMP` in a child process of
its own; its wall time is taken around it and its peak resident set from the kernel's accounting of
that child alone (os.wait4's rusage), so nothing of this script is counted. Two plans:

- `plan`: tests/fixtures/layernorm-first-plan, 4096 rows × C in {256, 768, 1024, 2048}: its
  buffers over the four cases are 128 MiB (x and y) — the issue's "4-case, 128 MiB plan";
- `large`: the same plan at 8192 rows × C in {512, 1024, 2048, 4096} (the largest case's x alone
  is 128 MiB), written to a temporary repository: the other reading of "128 MiB".

`--src LABEL=DIR` runs qualify from another source tree (PYTHONPATH=DIR, e.g. an export of main
from before a change) for a row of its own; the default is this tree. The table, with the load
average before and after each run (on a shared machine the load decides much of the seconds), is
printed and, with --write, written beside this script as rehearse-layernorm.md and .json.

    .venv/bin/python benchmarks/first-run/rehearse_layernorm.py --repeat 3 --write
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
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "layernorm-first-plan"
KERNEL = ROOT / "kernels" / "layernorm" / "layernorm.cu"
HERE = Path(__file__).resolve().parent
LARGE = {"N": 8192, "cases": [512, 1024, 2048, 4096]}


def large_plan(folder: Path) -> Path:
    """The fixture at LARGE's sizes, in a repository of its own (the same relative layout)."""
    (folder / ".git").mkdir(parents=True)
    (folder / "kernels" / "layernorm").mkdir(parents=True)
    shutil.copyfile(KERNEL, folder / "kernels" / "layernorm" / "layernorm.cu")
    plan_dir = folder / "tests" / "fixtures" / "layernorm-first-plan"
    plan_dir.mkdir(parents=True)
    shutil.copyfile(FIXTURE / "reference.py", plan_dir / "reference.py")
    plan = json.loads((FIXTURE / "plan.json").read_text())
    plan["workload"]["params"]["N"] = LARGE["N"]
    plan["workload"]["cases"] = [{"C": c} for c in LARGE["cases"]]
    plan["acceptance"]["sanitizer"] = [{"tool": "memcheck", "cases": [f"C={LARGE['cases'][0]}"]}]
    (plan_dir / "plan.json").write_text(json.dumps(plan, indent=2))
    return plan_dir / "plan.json"


def buffer_mib(plan_path: Path) -> tuple[int, float, float]:
    """(cases, MiB of every buffer over all cases, MiB of the largest buffer) from the plan itself."""
    plan = json.loads(plan_path.read_text())
    params = plan["workload"]["params"]
    total, largest = 0, 0
    for case in plan["workload"]["cases"]:
        values = {**params, **case}
        for b in plan["workload"]["buffers"]:
            size = 4  # every buffer of this plan is f32
            for dim in b["shape"]:
                size *= values[dim] if isinstance(dim, str) else dim
            total += size
            largest = max(largest, size)
    return len(plan["workload"]["cases"]), total / 2**20, largest / 2**20


def one_run(plan_path: Path, src: Path | None) -> dict:
    out = Path(tempfile.mkdtemp(prefix="qualify-rehearse-bench-"))
    reference = f"{plan_path.parent / 'reference.py'}:layernorm"
    cmd = [sys.executable, "-m", "qualify", "plan", "rehearse", str(plan_path), "--reference", reference]
    cmd += ["--seed", "0"]  # the default, stated: every run rehearses the same draw
    env = {**os.environ, **({"PYTHONPATH": str(src)} if src is not None else {})}
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    # run from the source tree: `python -m` puts the working folder first on sys.path, before PYTHONPATH
    where = src if src is not None else ROOT
    proc = subprocess.Popen(
        [*cmd, "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=where
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    shutil.rmtree(out, ignore_errors=True)
    return {
        "rc": proc.returncode,
        "wall_s": round(wall, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # Linux: kilobytes
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "error": stderr.strip().splitlines()[-1] if proc.returncode else "",
    }


def revision(src: Path) -> str:
    done = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "an export, not a git checkout"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--src", action="append", default=[], metavar="LABEL=DIR")
    parser.add_argument("--write", action="store_true", help="write rehearse-layernorm.md and .json beside")
    args = parser.parse_args()
    sources: list[tuple[str, Path | None, str]] = [("this tree", None, revision(ROOT))]
    for item in args.src:
        label, _, folder = item.partition("=")
        sources.append((label, Path(folder).resolve(), revision(Path(folder))))
    with tempfile.TemporaryDirectory(prefix="qualify-large-") as tmp:
        plans = {"plan": FIXTURE / "plan.json", "large": large_plan(Path(tmp))}
        rows = []
        for label, src, rev in sources:
            for name, path in plans.items():
                runs = [one_run(path, src) for _ in range(args.repeat)]
                cases, total, largest = buffer_mib(path)
                rows.append(
                    {
                        "qualify": label,
                        "revision": rev,
                        "plan": name,
                        "cases": cases,
                        "buffers_mib": round(total, 1),
                        "largest_buffer_mib": round(largest, 1),
                        "runs": runs,
                        "median_wall_s": statistics.median(r["wall_s"] for r in runs),
                        "max_peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
                        "all_rc": sorted({r["rc"] for r in runs}),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# `plan rehearse` of the 4-case LayerNorm plan: wall time and peak memory",
        "",
        f"Written by `rehearse_layernorm.py --repeat {args.repeat}` on {when}, {os.cpu_count()} cores "
        "(the development machine, shared); every figure below is the script's. Target (issue 37, item 7): "
        "<= 10 s and <= 500 MB.",
        "",
        "| qualify | plan | cases | buffers (all cases) | largest buffer | wall, median (each run) | peak RSS, "
        "max (each run) | CPU s (each run) | load before → after (each run) | exit |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        each = r["runs"]
        lines.append(
            f"| {r['qualify']} ({r['revision']}) | {r['plan']} | {r['cases']} | {r['buffers_mib']} MiB | "
            f"{r['largest_buffer_mib']} MiB | {r['median_wall_s']} s ({', '.join(str(x['wall_s']) for x in each)}) | "
            f"{r['max_peak_rss_mb']} MB ({', '.join(str(x['peak_rss_mb']) for x in each)}) | "
            f"{', '.join(str(x['cpu_s']) for x in each)} | "
            f"{', '.join(str(x['load_before']) + ' → ' + str(x['load_after']) for x in each)} | {r['all_rc']} |"
        )
    table = "\n".join(lines) + "\n"
    print(table)
    if args.write:
        (HERE / "rehearse-layernorm.md").write_text(table)
        (HERE / "rehearse-layernorm.json").write_text(json.dumps({"when": when, "rows": rows}, indent=1) + "\n")
    return 0 if all(r["all_rc"] == [0] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
