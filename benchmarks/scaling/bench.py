"""How `plan check`, `plan rehearse`, `report --check` and the header walks scale (issue 36, item
3): wall time at 1 k, 10 k and 100 k of cases, samples or headers, in one process, after the imports
(which are timed apart).

A command that is linear shows about ten times the time for ten times the input; a quadratic one a
hundred: the ratio column shows it per step. Each size is built in a fresh temporary repository
(tests/plans.py's tiny plan with N cases of one size, its kernel with N empty headers, or a record
made by `qualify.commands.pipeline.run_plan` on the fake device), the input cache is emptied, and
each command's output is discarded. Building a record is timed apart ("setup") and not in the row.

usage: python benchmarks/scaling/bench.py [--sizes 1000 10000 100000] [--what check rehearse:1000,10000 ...]
                                          [--out F [--append]]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from plans import HEADER, KERNEL, make_repo, plan_copy  # noqa: E402

from qualify.cli import main  # noqa: E402
from qualify.run.inputs import clear_cache  # noqa: E402

_last_error: list[str] = []  # the first line of what the last command printed to stderr, for its row


def _cli(argv: list[str]) -> tuple[int, float]:
    start = time.perf_counter()
    code = 0
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code or 0
    seconds = time.perf_counter() - start
    _last_error[:] = err.getvalue().splitlines()[:1]
    return code, seconds


def _cases(plan: dict, n: int, size: int = 4096) -> dict:
    """N cases of one size (K only tells them apart), so that the work per case is the same at
    every N and the per-item column compares like with like."""
    plan["workload"]["cases"] = [{"N": size, "K": i} for i in range(n)]
    for entry in plan["acceptance"]["sanitizer"]:
        entry["cases"] = [f"K=0,N={size}"]
    plan["acceptance"]["gates"][0]["where"] = f"N >= {size}"
    return plan


def _compact(path: Path) -> Path:
    """The plan written without indentation: 100 k cases fit in the 4 MiB a plan may have
    (qualify.io.MAX_PLAN_BYTES) only so."""
    path.write_text(json.dumps(json.loads(path.read_text()), separators=(",", ":")))
    return path


def _plan_with_cases(folder: Path, n: int) -> Path:
    return _compact(make_repo(folder, _cases(plan_copy(), n)))


def check(n: int, folder: Path) -> tuple[int, float]:
    return _cli(["plan", "check", str(_plan_with_cases(folder, n)), "--no-compile"])


def rehearse(n: int, folder: Path) -> tuple[int, float]:
    """The whole rehearsal of N cases of 4,096 elements and their input control, with a float64
    reference; --reorder-ulp 0 keeps the tiny plan's bit-exact gate passing (exit 0)."""
    plan = _plan_with_cases(folder, n)
    reference = folder / "reference.py"
    reference.write_text("def axpy(params, inputs):\n    return {'out': 0.5 * inputs['x'] + inputs['y']}\n")
    argv = ["plan", "rehearse", str(plan), "--reference", f"{reference}:axpy", "--out", str(folder / "r")]
    return _cli([*argv, "--reorder-ulp", "0"])


def _record(folder: Path, cases: int, samples: int) -> Path:
    """A record made as `qualify run` makes it, on the fake device (qualify.run.fake): `cases`
    cases of 1,024 elements, `samples` timed samples per arm and case over the 2 trials."""
    import fakes
    from test_engine import small_plan

    from qualify.commands.pipeline import load_frozen, run_plan
    from qualify.run.fake import FakeDevice, FakeTelemetry

    plan = _cases(small_plan(), cases, size=1024)
    blocks, trials = plan["schedule"]["blocks"], plan["schedule"]["trials"]
    plan["schedule"]["samples_per_block"] = max(1, samples // (blocks * trials))
    plan["budget"] = {"max_trials": trials, "max_samples": 10**9, "max_wall_seconds": 10**6}
    path = _compact(make_repo(folder, plan))
    code, _ = _cli(["plan", "freeze", str(path)])
    assert code == 0, f"plan freeze exited {code}"
    device = FakeDevice({"axpy": fakes.axpy}, durations={"base": 10_000.0, "candidate": 8_000.0})
    record = folder / "records" / "tiny"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        run_plan(load_frozen(path), record, lambda: device, lambda uuid: FakeTelemetry())
    return record


def _report_check(folder: Path, cases: int, samples: int) -> tuple[int, float, float, float]:
    """(exit, seconds of report --check, seconds making the record, the collector's share of those)."""
    start, gc_start = time.perf_counter(), _gc_seconds[0]
    record = _record(folder, cases, samples)
    made, gc_made = time.perf_counter() - start, _gc_seconds[0] - gc_start
    code, seconds = _cli(["report", "--check", str(record)])
    return code, seconds, made, gc_made


def report_cases(n: int, folder: Path) -> tuple[int, float, float]:
    """`report --check` on a record of N cases (12 samples per arm and case)."""
    return _report_check(folder, n, 12)


def report_samples(n: int, folder: Path) -> tuple[int, float, float]:
    """`report --check` on a record of 2 cases with N samples per arm and case."""
    return _report_check(folder, 2, n)


def headers(n: int, folder: Path) -> tuple[int, float]:
    """plan check --no-compile on a kernel that includes N empty headers (the frozen-file walk and,
    past qualify.build.includes.MAX_HEADERS, the time to its refusal)."""
    files = {"kernels/k.cu": "".join(f'#include "h/h{i}.h"\n' for i in range(n)) + KERNEL, "kernels/common.cuh": HEADER}
    files |= {f"kernels/h/h{i}.h": "" for i in range(n)}
    return _cli(["plan", "check", str(make_repo(folder, files=files)), "--no-compile"])


def headers_scanned(n: int, folder: Path) -> tuple[int, float]:
    """The include scanner's walk alone (qualify.build.includes.resolve_headers) over N headers."""
    from qualify.build import includes
    from qualify.errors import PlanError

    (folder / "h").mkdir(parents=True)
    for i in range(n):
        (folder / "h" / f"h{i}.h").write_text("")
    source = folder / "k.cu"
    source.write_text("".join(f'#include "h/h{i}.h"\n' for i in range(n)))
    start = time.perf_counter()
    try:
        includes.resolve_headers(source, source.read_bytes(), (folder,), (folder,), (), {})
        code = 0
    except PlanError:
        code = 2  # more than MAX_HEADERS: refused
    return code, time.perf_counter() - start


WHAT = {
    "check": check,
    "headers": headers,
    "scanner": headers_scanned,
    "rehearse": rehearse,
    "report-cases": report_cases,
    "report-samples": report_samples,
}


_gc_seconds = [0.0, 0.0]  # the garbage collector's time so far, and when the running collection began


def _gc_timer(phase: str, info: dict) -> None:
    if phase == "start":
        _gc_seconds[1] = time.perf_counter()
    else:
        _gc_seconds[0] += time.perf_counter() - _gc_seconds[1]


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def run(what: list[str], sizes: list[int]) -> list[dict]:
    rows: list[dict] = []
    for spec in what:
        name, _, only = spec.partition(":")  # "check:1000,10000" measures those sizes alone
        for n in [int(x) for x in only.split(",")] if only else sizes:
            before = _load()
            clear_cache()  # no size reuses the inputs an earlier one generated
            gc.collect()  # an earlier size's garbage is not this one's
            with tempfile.TemporaryDirectory(prefix="qualify-scaling-") as tmp:
                gc_before = _gc_seconds[0]
                code, seconds, *setup = WHAT[name](n, Path(tmp) / "repo")
                # the collector's time in the timed command alone (a record's making excluded)
                gc_s = _gc_seconds[0] - gc_before - (setup[1] if len(setup) > 1 else 0.0)
            row = {"what": name, "n": n, "code": code, "s": seconds, "setup": setup[0] if setup else None, "gc": gc_s}
            row["error"] = _last_error[0] if code and _last_error else ""
            row["load"] = f"{before} → {_load()}"
            rows.append(row)
            print(f"{name:14} {n:>7}  exit {code}  {seconds:8.2f} s  load {row['load']}", flush=True)
    return rows


def _ratio(rows: list[dict], row: dict) -> str:
    """Time over the previous size's time of the same command, beside the sizes' ratio: linear
    work shows about the same two numbers (10× for 10× the input), quadratic the square."""
    earlier = [r for r in rows[: rows.index(row)] if r["what"] == row["what"]]
    if not earlier or earlier[-1]["s"] <= 0:
        return "–"
    prev = earlier[-1]
    return f"{row['s'] / prev['s']:.1f}× for {row['n'] / prev['n']:g}×"


def table(rows: list[dict]) -> list[str]:
    lines = [
        "| what | size | exit | seconds | per item (ms) | time ratio to the size before | of which GC s "
        "| setup s (not timed) | load avg 1/5/15 min, before → after |",
        "|---|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for r in rows:
        setup = "–" if r["setup"] is None else f"{r['setup']:.1f}"
        lines.append(
            f"| {r['what']} | {r['n']:,} | {r['code']} | {r['s']:.2f} | {1000 * r['s'] / r['n']:.3f} | "
            f"{_ratio(rows, r)} | {r['gc']:.2f} | {setup} | {r['load']} |"
        )
    errors = [f"- {r['what']} at {r['n']:,} exited {r['code']}: `{r['error']}`" for r in rows if r["code"]]
    return lines + (["", "What each non-zero exit printed first:", "", *errors] if errors else [])


def main_() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--what", nargs="+", default=["check", "headers", "scanner"], help=f"of {sorted(WHAT)}[:N,M]")
    parser.add_argument("--out", type=Path, help="also write the table here (Markdown); with --append, add to it")
    parser.add_argument("--append", action="store_true", help="add this run's table to --out instead of replacing it")
    args = parser.parse_args()
    unknown = [w for w in args.what if w.partition(":")[0] not in WHAT]
    if unknown:
        parser.error(f"--what: unknown {unknown}; choose from {sorted(WHAT)}")
    start = time.perf_counter()
    import qualify.build.arms  # noqa: F401 - the imports, timed apart from every size
    import qualify.commands.check  # noqa: F401
    import qualify.commands.rehearse  # noqa: F401

    imports = time.perf_counter() - start
    print(f"imports {imports:.2f} s")
    gc.callbacks.append(_gc_timer)
    rows = run(args.what, args.sizes)
    head = (
        f"`bench.py {' '.join(sys.argv[1:])}` on {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; imports (once, not in the rows): {imports:.2f} s"
    )
    lines = [head, "", *table(rows)]
    print("\n" + "\n".join(lines))
    if args.out is not None:
        earlier = args.out.read_text(encoding="utf-8") + "\n" if args.append and args.out.exists() else ""
        args.out.write_text(earlier + "\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main_())
