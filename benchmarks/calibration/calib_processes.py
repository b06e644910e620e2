"""Calibration across processes, the CPU half: variants, plans, per-process orders, rates, Markdown.

`across_processes.py` (GPU) runs every replicate as a process of its own and saves what each one
measured as JSON; everything that turns that JSON into coverage, class counts and the pooled
interval lives here, as pure functions, tested on the CPU with a fabricated JSON
(tests/test_calibration_processes.py).

A variant is one plan: a family (both of its cases), a planted slowdown and a design. The new
design is the plan's defaults (a placement per block, seeded block orders); the old one is
`placement.count = 1, order = "alternate"` (one fixed set of buffers per process). Each process
runs one trial of every variant, so a point (case × planted × design) has one row per process.

JSON layout (version 1):
  {"version": 1, "meta": {...},
   "ladders": {family: {case: [[spin, delta_pct], ...]}},
   "spins": {family: {"<planted>": spin}},
   "processes": [{"process", "order": [variant key, ...], "elapsed_s", "error",
                  "rows": [{"variant", "family", "planted_pct", "design", "case", "status",
                            "ratio", "delta_pct", "ci_low", "ci_high", "mde_pct", "case_class",
                            "blocks", "placements", "log_mean", "log_sd", "reason"}, ...]}, ...]}

ci_low and ci_high are ratios (candidate / base), as in a record's CaseStats.
"""

from __future__ import annotations

import copy
import math
import random
import statistics
from dataclasses import dataclass
from pathlib import Path

import calib

JSON_VERSION = 1
FAMILY_ORDER = ("vecload", "attention")
# Attention at a full last wave's neighbour T=512 (8 x 16 = 128 blocks, under one wave) and at the
# partial-wave length T=1536 (384 blocks, 1.45 waves of the base tile's 264 per wave).
CASES = {"vecload": ({"N": 1048576}, {"N": 4194304}), "attention": ({"T": 512}, {"T": 1536})}
LABELS = {
    "vecload": calib.FAMILIES["vecload"]["labels"],
    "attention": {"T=512": "attention T=512 (under one wave)", "T=1536": "attention T=1536 (1.45 waves)"},
}
PLANTED_NEW = (0.0, 1.0, 2.0)
PLANTED_OLD = (0.0,)
DESIGNS = {
    "new": {},  # the plan's defaults: a placement per block, seeded block orders
    "old": {"placement": {"count": 1}, "order": "alternate"},
}
# The plan's trial budget: a replicate process is the record's trial `process + 1`, so it bounds
# the number of processes.
MAX_PROCESSES = 100
CLASSES = ("faster", "same", "cant_tell", "slower")

COVERAGE_MIN = 0.90  # issue 24: each process's 95 % interval covers the mean over all processes
AA_FALSE_MAX = 0.05  # ... A/A false "faster"/"slower" across processes
DETECT_MIN = 0.90  # ... a planted 1 % called slower where the stated MDE is at most 1 %
DETECT_MDE_PCT = 1.0


@dataclass(frozen=True)
class Variant:
    family: str
    planted_pct: float
    design: str

    @property
    def key(self) -> str:
        return f"{self.family}/{self.design}/{self.planted_pct:g}"

    @classmethod
    def from_key(cls, key: str) -> Variant:
        family, design, planted = key.split("/")
        return cls(family, float(planted), design)


def variants() -> tuple[Variant, ...]:
    """Every variant a replicate process runs: per family, the new design's planted points, then
    the old design's."""
    out = []
    for family in FAMILY_ORDER:
        out += [Variant(family, p, "new") for p in PLANTED_NEW]
        out += [Variant(family, p, "old") for p in PLANTED_OLD]
    return tuple(out)


def process_order(seed: int, process: int, keys: list[str]) -> list[str]:
    """The order process `process` runs the variants in: a permutation drawn from (seed, process),
    so no variant always runs first (after start-up) or last, and a rerun draws the same orders."""
    shuffled = list(keys)
    random.Random(seed * 1_000_003 + process).shuffle(shuffled)
    return shuffled


def schedule(design: str, quick: bool) -> dict:
    """Per trial and case: 20 blocks of 4 x 10 samples after 5 warm-up launches; --quick: 6 x 4 x 5.

    No traced calls: the kernels table is not what this benchmark calibrates."""
    sched = {
        "warmup": 3 if quick else 5,
        "iterations_per_sample": 1,
        "samples_per_block": 5 if quick else 10,
        "blocks": 6 if quick else 20,
        "trials": MAX_PROCESSES,
        "cache": "cold",
        "timing": "blocking-kernel",
        "traced_calls": 0,
    }
    sched.update(copy.deepcopy(DESIGNS[design]))
    return sched


def family_spec(family: str) -> dict:
    """calib.FAMILIES' entry with this benchmark's cases."""
    spec = copy.deepcopy(calib.FAMILIES[family])
    spec["workload"]["cases"] = [dict(c) for c in CASES[family]]
    spec["labels"] = dict(LABELS[family])
    return spec


def plan_dict(variant: Variant, spin: int, arch: str, quick: bool) -> dict:
    """A plan whose candidate is the family's base kernel compiled with `spin` clocks of spin.

    One trial per process (the plan's budget allows MAX_PROCESSES), no A/A inside the trial (the
    0 % point is the A/A), no negative controls, a fixed stop rule."""
    spec = family_spec(variant.family)
    sched = schedule(variant.design, quick)
    per_arm = sched["blocks"] * 2 * sched["samples_per_block"]
    arm = {
        "kind": "cuda",
        "source": f"../../{spec['source']}",
        "kernel": spec["kernel"],
        "params": dict(spec["params"]),
    }
    candidate = dict(arm, defines={"QUALIFY_SPIN_CYCLES": int(spin)}) if spin else dict(arm)
    return {
        "schema_version": 1,
        "name": f"calib-{variant.family}-{variant.design}-{variant.planted_pct:g}",
        "hypothesis": f"a planted slowdown of about {variant.planted_pct:g} % ({spin} spin clocks) is found "
        f"in every process",
        "independent_variable": f"QUALIFY_SPIN_CYCLES={spin} in the candidate build",
        "revisions": {"base": "spin 0", "candidate": f"spin {spin}"},
        "hardware": {"devices": [{"name": "*"}], "architectures": [arch]},
        "arms": {"base": arm, "candidate": candidate},
        "workload": spec["workload"],
        "seeds": {"generator": "pcg64", "base": 20261202},
        "schedule": sched,
        "budget": {"max_trials": MAX_PROCESSES, "max_samples": per_arm, "max_wall_seconds": 120},
        "stop": {"rule": "fixed", "fail_fast": ["fidelity", "fault"]},
        "acceptance": {"gates": [], "fidelity": {"mode": "bytes", "against": "base"}, "sanitizer": []},
        "controls": {"aa": False, "negative": []},
    }


def write_plan(root: Path, variant: Variant, spin: int, arch: str, quick: bool) -> Path:
    """The variant's plan, frozen in a throw-away repository under `root`; its path."""
    name = variant.key.replace("/", "-")
    return calib.write_plan_dict(root / name, plan_dict(variant, spin, arch, quick))


def trial_rows(variant: Variant, trial) -> list[dict]:
    """One row per case of the variant's plan from one trial (a qualify.results.model.Trial)."""
    failures = "; ".join(f.message for f in trial.failures)
    rows = []
    for c in trial.cases:
        s = c.stats
        rows.append(
            {
                "variant": variant.key,
                "family": variant.family,
                "planted_pct": variant.planted_pct,
                "design": variant.design,
                "case": c.case,
                "status": trial.status,
                "ratio": s.ratio,
                "delta_pct": s.delta_pct,
                "ci_low": s.ci_low,
                "ci_high": s.ci_high,
                "mde_pct": s.mde_pct,
                "case_class": s.case_class,
                "blocks": s.blocks,
                "placements": (c.placements or {}).get("used"),
                "log_mean": s.log_mean,
                "log_sd": s.log_sd,
                "reason": s.reason if not failures else f"{s.reason}; {failures}",
            }
        )
    return rows


# ---------------------------------------------------------------------------------------------
# rates per point


def point_rows(result: dict) -> dict[tuple[str, str, float, str], list[dict]]:
    """Complete rows grouped by point (family, case, planted, design), processes in order."""
    points: dict[tuple[str, str, float, str], list[dict]] = {}
    for proc in result["processes"]:
        for row in proc["rows"]:
            if row["status"] != "complete" or row.get("case_class") is None:
                continue
            key = (row["family"], row["case"], float(row["planted_pct"]), row["design"])
            points.setdefault(key, []).append(row)
    return points


def _log_mean(row: dict) -> float:
    return row["log_mean"] if row.get("log_mean") is not None else math.log(row["ratio"])


def pooled_interval(rows: list[dict]):
    """The two-level interval over the processes (qualify.evaluate.pooled.pool), each row one
    trial's CaseStats as its record would hold it."""
    from qualify.evaluate.pooled import pool
    from qualify.results.model import CaseStats

    stats = [
        CaseStats(
            ratio=r["ratio"],
            ci_low=r["ci_low"],
            ci_high=r["ci_high"],
            delta_pct=r["delta_pct"],
            case_class=r["case_class"],
            reason=r.get("reason") or "",
            blocks=r["blocks"],
            mde_pct=r["mde_pct"],
            log_mean=r.get("log_mean"),
            log_sd=r.get("log_sd"),
        )
        for r in rows
    ]
    return pool(stats)


def point_summary(planted_pct: float, rows: list[dict]) -> dict:
    """Rates of one point over its processes.

    The mean over processes is the geometric mean ratio (the mean of the processes' mean block
    log-ratios, as the pooled interval takes it); a process covers it when its stated interval
    holds that ratio."""
    n = len(rows)
    counts = {k: sum(r["case_class"] == k for r in rows) for k in CLASSES}
    out: dict = {"planted_pct": planted_pct, "processes": n, "counts": counts}
    if not n:
        return out
    mean_ratio = math.exp(math.fsum(_log_mean(r) for r in rows) / n)
    deltas = [r["delta_pct"] for r in rows]
    with_ci = [r for r in rows if r["ci_low"] is not None and r["ci_high"] is not None]
    covered = sum(r["ci_low"] <= mean_ratio <= r["ci_high"] for r in with_ci)
    halves = [(r["ci_high"] - r["ci_low"]) / 2 * 100 for r in with_ci]
    mdes = [r["mde_pct"] for r in rows if r["mde_pct"] is not None]
    resolving = [r for r in rows if r["mde_pct"] is not None and r["mde_pct"] <= DETECT_MDE_PCT]
    out.update(
        mean_delta_pct=(mean_ratio - 1) * 100,
        sd_pp=statistics.stdev(deltas) if n >= 2 else None,
        median_half_width_pct=statistics.median(halves) if halves else None,
        covered=covered,
        coverage=covered / n,
        false_rate=(counts["faster"] + counts["slower"]) / n if planted_pct == 0 else None,
        opposite=counts["faster"] > 0 and counts["slower"] > 0,
        resolving=len(resolving),
        detect_rate=(
            sum(r["case_class"] == "slower" for r in resolving) / len(resolving)
            if planted_pct == DETECT_MDE_PCT and resolving
            else None
        ),
        median_mde_pct=statistics.median(mdes) if mdes else None,
        placements=sorted({r["placements"] for r in rows if r.get("placements") is not None}),
    )
    pooled = pooled_interval(rows)
    out["pooled"] = {
        "delta_pct": pooled.delta_pct,
        "ci_low": pooled.ci_low,
        "ci_high": pooled.ci_high,
        "case_class": pooled.case_class,
        "within_pct": pooled.within_pct,
        "between_pct": pooled.between_pct,
        "mde_pct": pooled.mde_pct,
        "df": pooled.df,
    }
    return out


def case_targets(summaries: list[dict]) -> dict[str, bool | None]:
    """The issue's targets for one case over its new-design points: True, False, or None where no
    point measures it."""
    with_rows = [s for s in summaries if s["processes"]]
    aa = [s for s in with_rows if s["planted_pct"] == 0]
    detect = [s["detect_rate"] for s in with_rows if s.get("detect_rate") is not None]
    return {
        "coverage": all(s["coverage"] >= COVERAGE_MIN for s in with_rows) if with_rows else None,
        "aa_false": all(s["false_rate"] <= AA_FALSE_MAX for s in aa) if aa else None,
        "no_opposite": not any(s["opposite"] for s in with_rows) if with_rows else None,
        "detect_one_pct": all(d >= DETECT_MIN for d in detect) if detect else None,
    }


# ---------------------------------------------------------------------------------------------
# Markdown


def _signed(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:+.{digits}f} %"


def _plain(x: float | None, suffix: str = " %") -> str:
    return "n/a" if x is None else f"{x:.2f}{suffix}"


def _fraction(k: int, n: int) -> str:
    return f"{k}/{n} ({k / n:.0%})" if n else "0/0"


def _met(flag: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "not measured"}[flag]


def _pooled_cell(p: dict | None) -> str:
    if not p:
        return "n/a"
    if p["ci_low"] is None:
        return f"{_signed(p['delta_pct'])} (no interval)"
    return (
        f"{_signed(p['delta_pct'])} [{(p['ci_low'] - 1) * 100:+.2f}, {(p['ci_high'] - 1) * 100:+.2f}] "
        f"within {_plain(p['within_pct'])}, between {_plain(p['between_pct'])}, MDE {_plain(p['mde_pct'])}"
    )


def render_case(family: str, case: str, points: dict) -> list[str]:
    label = LABELS.get(family, {}).get(case, f"{family} {case}")
    lines = [
        f"### {label}",
        "",
        "| design | planted | processes | mean Δ | SD between processes | median stated ± | coverage "
        "| faster | same | can't tell | slower | A/A false | opposite classes | 1 % detected (MDE ≤ 1 %) "
        "| median MDE | pooled over processes: Δ [95 %], parts, MDE |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    new = []
    for design, planted_set in (("new", PLANTED_NEW), ("old", PLANTED_OLD)):
        for planted in planted_set:
            s = point_summary(planted, points.get((family, case, planted, design), []))
            if design == "new":
                new.append(s)
            n, c = s["processes"], s["counts"]
            if not n:
                lines.append(f"| {design} | {planted:g} % | 0 | " + " | ".join(["n/a"] * 13) + " |")
                continue
            false = "–" if s["false_rate"] is None else _fraction(c["faster"] + c["slower"], n)
            detect = (
                "–"
                if planted != DETECT_MDE_PCT
                else "no process"
                if not s["resolving"]
                else f"{s['detect_rate']:.0%} of {s['resolving']}"
            )
            lines.append(
                f"| {design} | {planted:g} % | {n} | {_signed(s['mean_delta_pct'])} | {_plain(s['sd_pp'], ' pp')} "
                f"| {_plain(s['median_half_width_pct'])} | {_fraction(s['covered'], n)} "
                f"| {c['faster']} | {c['same']} | {c['cant_tell']} | {c['slower']} | {false} "
                f"| {'yes' if s['opposite'] else 'no'} | {detect} | {_plain(s['median_mde_pct'])} "
                f"| {_pooled_cell(s.get('pooled'))} |"
            )
    t = case_targets(new)
    lines += [
        "",
        "Targets (issue 24), over the new design's points that ran:",
        "",
        f"- coverage of each process's stated 95 % interval ≥ {COVERAGE_MIN:.0%} at every point: {_met(t['coverage'])};",
        f"- A/A (planted 0 %) false faster/slower ≤ {AA_FALSE_MAX:.0%}: {_met(t['aa_false'])};",
        f"- no two processes give opposite classes (faster against slower) at any point: {_met(t['no_opposite'])};",
        f"- planted 1 % called slower in ≥ {DETECT_MIN:.0%} of the processes whose stated MDE ≤ "
        f"{DETECT_MDE_PCT:g} %: {_met(t['detect_one_pct'])}.",
    ]
    return lines


def render(result: dict) -> str:
    meta = result["meta"]
    done = len(result["processes"])
    failed = sum(1 for p in result["processes"] if p.get("error"))
    lines = [
        f"Measured {meta.get('started', '?')} on {meta.get('device', '?')}{' (--quick)' if meta.get('quick') else ''}: "
        f"{done} of {meta.get('processes_planned', '?')} replicate processes ran ({failed} with an error), each "
        f"one trial of every variant in its own order; per trial and case {meta.get('blocks', '?')} blocks × 4 × "
        f"{meta.get('samples_per_block', '?')} samples; {meta.get('elapsed_s', 0):.0f} s in all.",
        "",
        "Spins (clocks) chosen from the ladder: "
        + "; ".join(
            f"{fam} " + ", ".join(f"{float(p):g} % → {s}" for p, s in spins.items())
            for fam, spins in result.get("spins", {}).items()
        ),
        "",
    ]
    points = point_rows(result)
    for family in FAMILY_ORDER:
        for case in [f"{k}={v}" for c in CASES[family] for k, v in c.items()]:
            lines += render_case(family, case, points) + [""]
    return "\n".join(lines).rstrip() + "\n"


def load_result(path: Path) -> dict:
    return calib.load_result(path, JSON_VERSION)
