"""How `plan check`, the header walks and `plan rehearse` scale (issue 36, item 3): wall time at
1 k, 10 k and 100 k of cases or headers, in one process, after the imports (which are timed apart).

A walk or check that is linear shows about ten times the time for ten times the input; a quadratic
one a hundred. Each size is built in a fresh temporary repository (tests/plans.py's tiny plan, and
its kernel with N empty headers), and each command's output is discarded.

usage: python benchmarks/scaling/bench.py [--sizes 1000 10000 100000] [--what check headers rehearse]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from plans import HEADER, KERNEL, make_repo, plan_copy  # noqa: E402

from qualify.cli import main  # noqa: E402


def _cli(argv: list[str]) -> tuple[int, float]:
    start = time.perf_counter()
    code = 0
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code or 0
    return code, time.perf_counter() - start


def _plan_with_cases(folder: Path, n: int) -> Path:
    plan = plan_copy()
    cases = plan["workload"]["cases"]
    plan["workload"]["cases"] = cases + [{"N": 5_000 + i} for i in range(n - len(cases))]
    return make_repo(folder, plan)


def check(n: int, folder: Path) -> tuple[int, float]:
    return _cli(["plan", "check", str(_plan_with_cases(folder, n)), "--no-compile"])


def rehearse(n: int, folder: Path) -> tuple[int, float]:
    plan = _plan_with_cases(folder, n)
    reference = folder / "reference.py"
    reference.write_text("def axpy(params, inputs):\n    return {'out': 0.5 * inputs['x'] + inputs['y']}\n")
    return _cli(["plan", "rehearse", str(plan), "--reference", f"{reference}:axpy", "--out", str(folder / "r")])


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


WHAT = {"check": check, "headers": headers, "scanner": headers_scanned, "rehearse": rehearse}


def run(what: list[str], sizes: list[int]) -> list[tuple[str, int, int, float]]:
    rows = []
    for spec in what:
        name, _, only = spec.partition(":")  # "check:1000,10000" measures those sizes alone
        for n in [int(x) for x in only.split(",")] if only else sizes:
            with tempfile.TemporaryDirectory(prefix="qualify-scaling-") as tmp:
                code, seconds = WHAT[name](n, Path(tmp) / "repo")
            rows.append((name, n, code, seconds))
            print(f"{name:9} {n:>7}  exit {code}  {seconds:8.2f} s", flush=True)
    return rows


def main_() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--what", nargs="+", default=["check", "headers", "scanner"], help=f"of {sorted(WHAT)}[:N,M]")
    parser.add_argument("--out", type=Path, help="also write the table here (Markdown)")
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
    rows = run(args.what, args.sizes)
    table = [
        f"imports (once, not in the rows): {imports:.2f} s; `{' '.join(sys.argv[1:])}`",
        "",
        "| what | size | exit | seconds | per item (ms) |",
        "|---|---:|---:|---:|---:|",
        *(f"| {name} | {n:,} | {code} | {seconds:.2f} | {1000 * seconds / n:.3f} |" for name, n, code, seconds in rows),
    ]
    print("\n" + "\n".join(table))
    if args.out is not None:
        args.out.write_text("\n".join(table) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main_())
