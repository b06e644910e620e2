"""Start-up time of the `qualify` command line: median wall time of fresh processes, and what they import.

Each run is a new interpreter (`python -m qualify ARGS`), so nothing is cached in the process; the
operating system's file cache is warmed by one untimed run first. The second part runs `--help`
once under `python -X importtime` and lists the imports with the largest cumulative time, the
first place to look when the median grows.

usage: python benchmarks/startup/bench.py [--runs N] [--top K] [--repo DIR]
  --repo  a checkout to measure instead of this one (its `qualify` package is imported first)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = (["--help"], ["plan", "--help"], ["plan", "check", "--help"])


def wall_times(args: list[str], runs: int, repo: Path) -> list[float]:
    cmd = [sys.executable, "-m", "qualify", *args]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    subprocess.run(cmd, cwd=repo, env=env, capture_output=True, check=True)  # warms the file cache
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=repo, env=env, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return times


def import_offenders(repo: Path, top: int) -> tuple[list[tuple[int, str]], int]:
    """(cumulative µs, module) of the slowest imports of `--help`, and how many qualify modules it loads."""
    env = {**os.environ, "PYTHONPATH": str(repo)}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "qualify", "--help"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    rows, qualify_modules = [], 0
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = (part.strip() for part in line[len("import time:") :].split("|"))
        qualify_modules += name.startswith("qualify")
        # cumulative: the module and everything it pulled in first, so a chain shows link by link
        rows.append((int(cumulative), name))
    return sorted(rows, reverse=True)[:top], qualify_modules


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[2])
    args = parser.parse_args()
    repo = args.repo.resolve()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {args.runs} runs each, repo {repo.name}")
    print()
    print("| command | median (s) | min (s) | max (s) |")
    print("|---|---:|---:|---:|")
    for command in COMMANDS:
        times = wall_times(command, args.runs, repo)
        print(
            f"| `qualify {' '.join(command)}` | {statistics.median(times):.3f} | {min(times):.3f} | {max(times):.3f} |"
        )
    rows, qualify_modules = import_offenders(repo, args.top)
    print()
    print(f"`python -X importtime -m qualify --help`: {qualify_modules} qualify modules; slowest imports (cumulative):")
    print()
    print("| cumulative (ms) | module |")
    print("|---:|---|")
    for micros, name in rows:
        print(f"| {micros / 1000:.1f} | {name} |")


if __name__ == "__main__":
    main()
