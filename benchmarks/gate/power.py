"""The regression gate's own qualification on a GPU (issue 34, item 2): N gate runs of a noop and
N of a planted slowdown on one protocol, and the counts.

Targets: the planted slowdown (2 % by default) called slower in at least 9 of 10 gate runs, the noop
never called faster or slower in 10.

Everything happens in a scratch repository of this checkout's working tree (the user's files are untouched):

1. base commit: the protocol's plan with the schedule this script asks for (fewer cases, trials
   or blocks, to fit a GPU budget), refrozen. The kernel file is unchanged.
2. noop: `qualify gate --base HEAD --protocol P --time-identical`, N times: both sides are the
   same code, timed anyway (a gate's false-positive rate).
3. slowdown: the kernel file gains `#define QUALIFY_SPIN_CYCLES n` at its top (vecload's and the
   calibration kernels' hook: every thread spins n SM clocks before its loads, the data untouched).
   n is calibrated first so the gate's own estimate is near --slowdown-pct (calibration runs are
   printed apart and not counted); then `qualify gate --base HEAD`, N times.

Run on the GPU machine from the repository root, after `source .gpu/setup.sh`:

    python benchmarks/gate/power.py --protocol vecload --runs 10 --cases N=1048576,N=16777216 \
        --trials 2 --out /tmp/gate-power

It prints one line per gate run and case, then the counts table, and writes OUT/power.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLASSES = ("identical_code", "unchanged", "faster", "slower", "cant_tell")


def plant(source: str, cycles: int) -> str:
    """The kernel source with the spin hook defined at its top: a change in the kernel file itself."""
    if cycles <= 0:
        raise ValueError("a planted slowdown needs a positive number of cycles")
    return f"#define QUALIFY_SPIN_CYCLES {cycles}\n" + source


def narrowed(
    plan: dict, cases: list[str] | None, trials: int | None, blocks: int | None, max_trials: int | None = None
) -> dict:
    """The plan with fewer cases, trials or blocks (the budget kept large enough); max_trials: the
    budget's trials per device, the room the gate has to add trials to an underpowered case."""
    plan = json.loads(json.dumps(plan))
    if cases:
        ids = {",".join(f"{k}={v}" for k, v in c.items()): c for c in plan["workload"]["cases"]}
        missing = [c for c in cases if c not in ids]
        if missing:
            raise SystemExit(f"power.py: no case {missing[0]!r} in the plan (cases: {', '.join(ids)})")
        plan["workload"]["cases"] = [ids[c] for c in cases]
    # what the gate's derived plans leave out anyway; removed so a narrowed case list still checks
    plan["acceptance"]["sanitizer"] = []
    plan["acceptance"]["gates"] = []
    plan["controls"]["negative"] = []
    if trials:
        plan["schedule"]["trials"] = trials
        plan["budget"]["max_trials"] = max(plan["budget"]["max_trials"], trials)
    if blocks:
        plan["schedule"]["blocks"] = blocks
    if max_trials:
        plan["budget"]["max_trials"] = max(max_trials, plan["schedule"]["trials"])
    plan.pop("gate", None)
    return plan


def rows(doc: dict, arm: str | None = None) -> list[dict]:
    """Every (protocol, arm, case) row of a gate document; with `arm`, that arm's only."""
    return [
        {"protocol": p["name"], "arm": a["side"], **c}
        for p in doc["protocols"]
        for a in p["arms"]
        if arm is None or a["side"] == arm
        for c in a["cases"]
    ]


def counts(docs: list[dict], arm: str | None = None) -> dict[tuple[str, str, str], Counter]:
    """(protocol, arm, case) -> how often each class was called over the runs."""
    out: dict[tuple[str, str, str], Counter] = {}
    for doc in docs:
        for r in rows(doc, arm):
            out.setdefault((r["protocol"], r["arm"], r["case"]), Counter())[r["gate_class"]] += 1
    return out


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)


def _git(clone: Path, *args: str) -> None:
    done = _run(["git", *args], clone)
    if done.returncode:
        raise SystemExit(f"power.py: git {' '.join(args)}: {done.stderr.strip()}")


def scratch_repository(clone: Path) -> None:
    """A one-commit repository of this checkout's working tree to gate in; the user's files are
    never touched. The working tree, not HEAD: the gate runs the clone's own `qualify` (`python -m`
    from its folder), and on the lent GPU machine the checkout's `.git` can lag its files (power-3
    ran the gate of an older commit that way)."""
    shutil.copytree(
        ROOT,
        clone,
        ignore=shutil.ignore_patterns(
            ".git", ".gpu", ".venv*", ".cu12", ".whl", "__pycache__", ".pytest_cache", "records", ".pb"
        ),
    )
    _git(clone, "init", "--quiet", "--initial-branch", "main")
    _git(clone, "config", "user.email", "power@qualify.invalid")
    _git(clone, "config", "user.name", "gate power")
    _git(clone, "add", "-A")
    _git(clone, "commit", "--quiet", "-m", "the checkout as received")


def gate(clone: Path, out: Path, extra: list[str]) -> dict:
    done = _run([sys.executable, "-m", "qualify", "gate", "--base", "HEAD", "--out", str(out), *extra], clone)
    document = out / "gate.json"
    if not document.is_file():
        raise SystemExit(f"power.py: qualify gate exited {done.returncode} without gate.json:\n{done.stderr[-2000:]}")
    doc = json.loads(document.read_text())
    for p in doc["protocols"]:
        for a in p["arms"]:
            if a.get("error"):
                print(f"  {p['name']} {a['side']}: not gated: {a['error']}", file=sys.stderr)
    return doc


def _say(label: str, doc: dict) -> None:
    for r in rows(doc):
        change = "untimed" if r["delta_pct"] is None else f"{r['delta_pct']:+.2f}%"
        ci = (
            ""
            if r["ci_low"] is None
            else f" [{(r['ci_low'] - 1) * 100:+.2f}, {(r['ci_high'] - 1) * 100:+.2f}] mde {r['mde_pct']:.2f}%"
        )
        print(
            f"{label:<14} {r['arm']:<9} {r['case']:<14} {r['gate_class']:<14} {change}{ci}  "
            f"trials {r['trials']}  bytes {r['bytes']}",
            flush=True,  # a run cut short by a time limit still shows every gate run it finished
        )


def mean_delta(doc: dict, arm: str | None = None) -> float | None:
    deltas = [r["delta_pct"] for r in rows(doc, arm) if r["delta_pct"] is not None]
    return statistics.median(deltas) if deltas else None


def table(title: str, found: dict, runs: int) -> list[str]:
    lines = [title, f"{'arm':<9} {'case':<14} " + " ".join(f"{c:>14}" for c in CLASSES) + "   runs"]
    for (_, arm, case), counter in sorted(found.items()):
        lines.append(f"{arm:<9} {case:<14} " + " ".join(f"{counter[c]:>14}" for c in CLASSES) + f"   {runs}")
    return lines


def targets(noop: dict, slow: dict, runs: int, skip_noop: bool) -> tuple[bool | None, bool]:
    """(noop met, power met): the noop never faster or slower (None where it was not run: a noop
    skipped is not a noop met), the planted slowdown slower in at least 9 of 10 runs of every case."""
    noop_ok = None if skip_noop else bool(noop) and all(c["faster"] == 0 and c["slower"] == 0 for c in noop.values())
    power_ok = bool(slow) and all(c["slower"] >= 0.9 * runs for c in slow.values())
    return noop_ok, power_ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--protocol", default="vecload")
    ap.add_argument("--kernel", default="kernels/vecload/vecload.cu", help="the kernel file the slowdown is planted in")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--slowdown-pct", type=float, default=2.0)
    ap.add_argument("--spin", type=int, default=0, help="QUALIFY_SPIN_CYCLES to plant (0: calibrate to --slowdown-pct)")
    ap.add_argument("--cases", help="comma-separated case ids to keep (default: all)")
    ap.add_argument("--trials", type=int, help="trials per gate run (default: the plan's)")
    ap.add_argument("--blocks", type=int, help="blocks per trial (default: the plan's)")
    ap.add_argument(
        "--max-trials",
        type=int,
        help="budget.max_trials: how far the gate may add trials to an underpowered case (default: the plan's)",
    )
    ap.add_argument("--out", type=Path, default=Path("/tmp/gate-power"))
    ap.add_argument(
        "--arm",
        help="calibrate and judge the planted slowdown on this arm only: a spin before the loads slowed "
        "vecload's scalar arm and sped its float4 arm up on an H200 (power-1.txt), so one plant is not one "
        "known slowdown of every arm sharing the file",
    )
    ap.add_argument("--skip-noop", action="store_true", help="only the planted slowdown (the noop measured apart)")
    args = ap.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        # a gate document already there would be read back as this run's (power-4's first try did)
        raise SystemExit(f"power.py: {args.out} is not empty; give a fresh --out")
    args.out.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="gate-power-") as tmp:
        clone = Path(tmp) / "clone"
        scratch_repository(clone)
        plan_path = clone / "protocols" / args.protocol / "plan.json"
        plan = narrowed(
            json.loads(plan_path.read_text()),
            args.cases.split(",") if args.cases else None,
            args.trials,
            args.blocks,
            args.max_trials,
        )
        plan_path.write_text(json.dumps(plan, indent=2) + "\n")
        (plan_path.parent / "plan.lock.json").unlink()
        done = _run([sys.executable, "-m", "qualify", "plan", "freeze", str(plan_path)], clone)
        if done.returncode:
            raise SystemExit(f"power.py: plan freeze: {done.stdout}{done.stderr}")
        _git(clone, "commit", "-qam", "gate power: the schedule of this qualification")
        kernel = clone / args.kernel
        source = kernel.read_text()

        noop_docs = []
        for n in range(0 if args.skip_noop else args.runs):
            doc = gate(clone, args.out / f"noop-{n}", ["--protocol", args.protocol, "--time-identical"])
            _say(f"noop {n + 1}", doc)
            noop_docs.append(doc)

        spin = args.spin
        calibration = []
        if spin <= 0:
            spin = 200
            for step in range(3):
                kernel.write_text(plant(source, spin))
                doc = gate(clone, args.out / f"calibrate-{step}", [])
                kernel.write_text(source)
                delta = mean_delta(doc, args.arm)
                _say(f"calib {spin}", doc)
                calibration.append({"spin": spin, "median_delta_pct": delta})
                if delta is None or delta <= 0.05:
                    spin *= 4
                    continue
                spin = max(1, round(spin * args.slowdown_pct / delta))
        kernel.write_text(plant(source, spin))
        slow_docs = []
        for n in range(args.runs):
            doc = gate(clone, args.out / f"slow-{n}", [])
            _say(f"slow {n + 1}", doc)
            slow_docs.append(doc)
        kernel.write_text(source)

    noop, slow = counts(noop_docs), counts(slow_docs, args.arm)
    deltas = [r["delta_pct"] for d in slow_docs for r in rows(d, args.arm) if r["delta_pct"] is not None]
    lines = [
        "",
        *table(f"NOOP: {args.protocol}, {args.runs} gate runs (timed although the code is identical)", noop, args.runs),
        "",
        *table(f"PLANTED SLOWDOWN: QUALIFY_SPIN_CYCLES={spin}, {args.runs} gate runs", slow, args.runs),
        f"planted slowdown as the gate measured it: median {statistics.median(deltas):+.2f}% "
        f"(range {min(deltas):+.2f} … {max(deltas):+.2f})"
        if deltas
        else "planted slowdown: no timed case",
        "",
        "targets: noop never faster or slower; the planted slowdown slower in at least 9 of 10",
    ]
    noop_ok, power_ok = targets(noop, slow, args.runs, args.skip_noop)
    said = {True: "MET", False: "MISSED", None: "not run"}
    lines.append(f"noop: {said[noop_ok]}   power: {said[power_ok]}")
    print("\n".join(lines))
    (args.out / "power.json").write_text(
        json.dumps(
            {
                "protocol": args.protocol,
                "runs": args.runs,
                "spin_cycles": spin,
                "calibration": calibration,
                "noop": {"|".join(k): dict(v) for k, v in noop.items()},
                "slow": {"|".join(k): dict(v) for k, v in slow.items()},
                "noop_met": noop_ok,
                "power_met": power_ok,
            },
            indent=2,
        )
        + "\n"
    )
    return 0 if noop_ok is not False and power_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
