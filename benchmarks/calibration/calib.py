"""The calibration benchmark's CPU half: plans, spin choice, ncu arithmetic, rate tables, Markdown.

`run_calibration.py` (GPU) drives qualify's engine with the plans written here and saves what it
measured as JSON; everything that turns that JSON into rates and tables lives here, as pure
functions, so it is tested on the CPU with a fabricated JSON (tests/test_calibration.py).

JSON layout (version 1):
  {"version": 1, "meta": {...}, "cases": [
     {"family", "case", "label",
      "ladder": [[spin, delta_pct], ...],                       # the pre-measurement
      "points": [{"nominal_pct", "spin",
                  "ncu": {"base_us", "variant_us", "delta_pct", "spread_pct", "launches"} | null,
                  "trials": [{"trial", "status", "case_class", "delta_pct", "ci_low", "ci_high",
                              "mde_pct", "blocks", "reason"}, ...]}, ...]}, ...]}
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
from pathlib import Path

from qualify.evaluate.stats import t_quantile

JSON_VERSION = 1
NOMINAL_PCT = (0.0, 0.5, 1.0, 2.0, 3.0)
# Spin counts tried by the pre-measurement (SM clocks per main-loop iteration and thread).
LADDER = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
AA_FALSE_MAX = 0.05  # issue 10: an A/A "faster"/"slower" in at most 5 % of trials
DETECT_MIN = 0.95  # ... a planted 1 % slowdown found in at least 95 % where the MDE allows
AGREE_PP = 0.5  # ... qualify's change within 0.5 percentage points of ncu's

REPO = Path(__file__).resolve().parents[2]
ATTENTION_SOURCE = REPO / "kernels" / "attention" / "attention.cu"
BANDWIDTH_SOURCE = Path(__file__).resolve().parent / "kernels.cu"
VECLOAD_SOURCE = REPO / "kernels" / "vecload" / "vecload.cu"
# A plan's `source` (relative to its throw-away repository) -> the file copied there.
SOURCES = {
    "kernels/attention.cu": ATTENTION_SOURCE,
    "kernels/kernels.cu": BANDWIDTH_SOURCE,
    "kernels/vecload.cu": VECLOAD_SOURCE,
}

# The base attention tile (BM = 64, 128 threads) runs two blocks per SM on the H200's 132 SMs:
# 264 blocks a wave. Hq = 16 heads: T = 1536 gives 24 x 16 = 384 blocks (1.45 waves, the case
# where the A/A failed); T = 2112 gives 33 x 16 = 528 blocks (2 full waves).
FAMILIES = {
    "attention": {
        "source": "kernels/attention.cu",
        "kernel": "attention_gated_fwd<64>",
        "params": {"BM": 64},
        "labels": {"T=1536": "attention T=1536 (1.45 waves)", "T=2112": "attention T=2112 (2 full waves)"},
        "workload": {
            "params": {"Hq": 16, "Hk": 4, "D": 256},
            "cases": [{"T": 1536}, {"T": 2112}],
            "buffers": [
                {
                    "name": "q",
                    "dtype": "bf16",
                    "shape": ["T", "Hq", "D"],
                    "role": "input",
                    "init": {"kind": "normal", "std": 1.0},
                },
                {
                    "name": "k",
                    "dtype": "bf16",
                    "shape": ["T", "Hk", "D"],
                    "role": "input",
                    "init": {"kind": "normal", "std": 1.0},
                },
                {
                    "name": "v",
                    "dtype": "bf16",
                    "shape": ["T", "Hk", "D"],
                    "role": "input",
                    "init": {"kind": "normal", "std": 1.0},
                },
                {
                    "name": "gate",
                    "dtype": "bf16",
                    "shape": ["T", "Hq", "D"],
                    "role": "input",
                    "init": {"kind": "normal", "std": 2.0},
                },
                {"name": "out", "dtype": "bf16", "shape": ["T", "Hq", "D"], "role": "output"},
            ],
            "launch": {
                "grid": ["cdiv(T, BM)", "Hq"],
                "block": ["BM * 2"],
                "shared_bytes": "(BM + 2 * 32) * 264 * 2",
                "args": [
                    {"kind": "buffer", "name": "q"},
                    {"kind": "buffer", "name": "k"},
                    {"kind": "buffer", "name": "v"},
                    {"kind": "i32", "value": "Hk * D"},
                    {"kind": "buffer", "name": "gate"},
                    {"kind": "buffer", "name": "out"},
                    {"kind": "i32", "value": "T"},
                    {"kind": "i32", "value": "Hq"},
                    {"kind": "i32", "value": "Hk"},
                    {"kind": "f32", "value": "rsqrt(D)"},
                    {"kind": "i32", "value": 0},
                ],
            },
        },
    },
    # Reads only (per-block partial sums): 10 Mi floats, 40 MiB, ~10 µs; 100 Mi floats, 400 MiB,
    # ~100 µs on the H200 (about 4 TB/s).
    "bandwidth": {
        "source": "kernels/kernels.cu",
        "kernel": "calib_sum",
        "params": {"BLOCKS": 1056},
        "labels": {"N=10485760": "read 40 MiB (~10 µs)", "N=104857600": "read 400 MiB (~100 µs)"},
        "workload": {
            "params": {"THREADS": 256},
            "cases": [{"N": 10485760}, {"N": 104857600}],
            "buffers": [
                {
                    "name": "x",
                    "dtype": "f32",
                    "shape": ["N"],
                    "role": "input",
                    "init": {"kind": "uniform", "low": -1.0, "high": 1.0},
                },
                {"name": "partial", "dtype": "f32", "shape": ["BLOCKS"], "role": "output"},
            ],
            "launch": {
                "grid": ["BLOCKS"],
                "block": ["THREADS"],
                "shared_bytes": 0,
                "args": [
                    {"kind": "buffer", "name": "x"},
                    {"kind": "buffer", "name": "partial"},
                    {"kind": "i64", "value": "N // 4"},
                ],
            },
        },
    },
    # protocols/vecload's workload with the candidate's kernel on both arms (axpy<4>, 16-byte
    # loads): ~5 µs at 1 Mi floats, ~17 µs at 4 Mi; the spin runs once per thread, before its loads.
    "vecload": {
        "source": "kernels/vecload.cu",
        "kernel": "axpy<4>",
        "params": {"VEC": 4},
        "labels": {"N=1048576": "vecload axpy<4> N=1048576 (~5 µs)", "N=4194304": "vecload axpy<4> N=4194304 (~17 µs)"},
        "workload": {
            "params": {"THREADS": 256, "A": 0.75},
            "cases": [{"N": 1048576}, {"N": 4194304}],
            "buffers": [
                {"name": "x", "dtype": "f32", "shape": ["N"], "role": "input", "init": {"kind": "normal", "std": 1.0}},
                {
                    "name": "y",
                    "dtype": "f32",
                    "shape": ["N"],
                    "role": "input",
                    "init": {"kind": "uniform", "low": -4.0, "high": 4.0},
                },
                {"name": "out", "dtype": "f32", "shape": ["N"], "role": "output"},
            ],
            "launch": {
                "grid": ["cdiv(N, THREADS * VEC)"],
                "block": ["THREADS"],
                "shared_bytes": 0,
                "args": [
                    {"kind": "buffer", "name": "x"},
                    {"kind": "buffer", "name": "y"},
                    {"kind": "buffer", "name": "out"},
                    {"kind": "f32", "value": "A"},
                    {"kind": "i64", "value": "N"},
                ],
            },
        },
    },
}


def schedule(quick: bool) -> dict:
    """Per trial and case: 10 blocks of 4 x 10 samples (the protocols' shape); --quick: 6 x 4 x 5."""
    if quick:
        return {
            "warmup": 3,
            "iterations_per_sample": 1,
            "samples_per_block": 5,
            "blocks": 6,
            "trials": 1,
            "cache": "cold",
            "timing": "blocking-kernel",
        }
    return {
        "warmup": 5,
        "iterations_per_sample": 1,
        "samples_per_block": 10,
        "blocks": 10,
        "trials": 1,
        "cache": "cold",
        "timing": "blocking-kernel",
    }


def plan_dict(family: str, nominal_pct: float, spin: int, arch: str, trials: int, quick: bool) -> dict:
    """A plan whose candidate is the base kernel compiled with `spin` clocks per loop iteration."""
    spec = FAMILIES[family]
    sched = schedule(quick)
    sched["trials"] = trials
    per_arm = sched["blocks"] * 2 * sched["samples_per_block"]
    arm = {
        "kind": "cuda",
        "source": f"../../{spec['source']}",
        "kernel": spec["kernel"],
        "params": dict(spec["params"]),
    }
    return {
        "schema_version": 1,
        "name": f"calib-{family}-{nominal_pct:g}",
        "hypothesis": f"a planted slowdown of about {nominal_pct:g} % ({spin} spin clocks per loop iteration) is found",
        "independent_variable": f"QUALIFY_SPIN_CYCLES={spin} in the candidate build",
        "revisions": {"base": "spin 0", "candidate": f"spin {spin}"},
        "hardware": {"devices": [{"name": "*"}], "architectures": [arch]},
        "arms": {"base": arm, "candidate": dict(arm, defines={"QUALIFY_SPIN_CYCLES": int(spin)})},
        "workload": spec["workload"],
        "seeds": {"generator": "pcg64", "base": 20261201},
        "schedule": sched,
        "budget": {"max_trials": trials, "max_samples": per_arm, "max_wall_seconds": 300},
        "stop": {"rule": "fixed", "fail_fast": ["fidelity", "fault"]},
        "acceptance": {"gates": [], "fidelity": {"mode": "bytes", "against": "base"}, "sanitizer": []},
        "controls": {"aa": False, "negative": []},
    }


def write_plan(root: Path, family: str, nominal_pct: float, spin: int, arch: str, trials: int, quick: bool) -> Path:
    """A throw-away repository under `root` with the kernel sources and a frozen plan; its plan path."""
    plan = plan_dict(family, nominal_pct, spin, arch, trials, quick)
    return write_plan_dict(root / f"{family}-{nominal_pct:g}", plan)


def write_plan_dict(repo: Path, plan: dict) -> Path:
    """`plan` frozen in a throw-away repository at `repo` holding every kernel source; its path."""
    from qualify.plan.digest import freeze
    from qualify.plan.load import load_plan

    (repo / ".git").mkdir(parents=True, exist_ok=True)  # marks the repository root for qualify
    for relative, source in SOURCES.items():
        (repo / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, repo / relative)
    plan_dir = repo / "protocols" / "calib"
    plan_dir.mkdir(parents=True, exist_ok=True)
    path = plan_dir / "plan.json"
    path.write_text(json.dumps(plan, indent=2))
    loaded = load_plan(path)
    freeze(loaded.path, loaded.freeze)
    return path


# ---------------------------------------------------------------------------------------------
# spin choice


def choose_spin(ladder: list[tuple[int, float]], target_pct: float) -> int:
    """The spin count expected to plant `target_pct`, from the pre-measured (spin, Δ %) ladder.

    The ladder is noisy and, at small spins, flat (a short spin hides behind memory latency), so it
    is made monotone first (running maximum, starting from (0, 0)); the target is then linearly
    interpolated between the two rungs around it, or extrapolated from the last rung's slope.
    """
    if target_pct <= 0:
        return 0
    points = [(0, 0.0)]
    for spin, delta in sorted(ladder):
        points.append((spin, max(delta, points[-1][1])))
    for (s0, d0), (s1, d1) in zip(points, points[1:]):
        if d1 >= target_pct and d1 > d0:
            return max(1, round(s0 + (target_pct - d0) * (s1 - s0) / (d1 - d0)))
    s_last, d_last = points[-1]
    if d_last <= 0:
        return s_last  # the spin does not show: run the largest rung and let ncu say what it planted
    return max(1, round(s_last * target_pct / d_last))


# ---------------------------------------------------------------------------------------------
# ncu arithmetic


def paired_change(base: list[float], variant: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """(Δ %, 95 % half-width %) of variant against base from launches taken in alternating rounds."""
    logs = [math.log(v / b) for b, v in zip(base, variant)]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.expm1(mean) * 100, math.inf
    half = t_quantile(0.5 + confidence / 2, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.expm1(mean) * 100, math.expm1(half) * 100


def split_ncu(values: list[float], cases: int, rounds: int, width: int) -> list[list[list[float]]]:
    """ncu's durations, in launch order, as [case][variant][round].

    The child launches case by case, and within a case `rounds` rounds of the `width` variants in
    a fixed order; ncu lists the launches in the order they ran.
    """
    if len(values) != cases * rounds * width:
        raise ValueError(f"ncu reported {len(values)} launches, expected {cases * rounds * width}")
    out = []
    for c in range(cases):
        block = values[c * rounds * width : (c + 1) * rounds * width]
        out.append([block[j::width] for j in range(width)])
    return out


# ---------------------------------------------------------------------------------------------
# rates and tables


def point_summary(point: dict) -> dict:
    trials = [t for t in point["trials"] if t["status"] == "complete" and t.get("case_class")]
    n = len(trials)
    counts = {k: sum(t["case_class"] == k for t in trials) for k in ("faster", "same", "cant_tell", "slower")}
    deltas = [t["delta_pct"] for t in trials]
    mdes = [t["mde_pct"] for t in trials if t["mde_pct"] is not None]
    resolvable = [t for t in trials if t["mde_pct"] is not None and t["mde_pct"] <= point["nominal_pct"]]
    unresolvable = [t for t in trials if t not in resolvable]
    ncu = point.get("ncu")
    out = {
        "nominal_pct": point["nominal_pct"],
        "spin": point["spin"],
        "trials": n,
        "counts": counts,
        "false_rate": (counts["faster"] + counts["slower"]) / n if n else None,
        "detect_rate": counts["slower"] / n if n else None,
        "qualify_delta_pct": statistics.median(deltas) if deltas else None,
        "qualify_delta_range": (min(deltas), max(deltas)) if deltas else None,
        "mde_pct": statistics.median(mdes) if mdes else None,
        "resolvable": len(resolvable),
        "detect_rate_resolvable": (
            sum(t["case_class"] == "slower" for t in resolvable) / len(resolvable) if resolvable else None
        ),
        # where the MDE is above the planted change, a miss must say so: can't tell, MDE in the reason
        "unresolvable_honest": all(
            t["case_class"] == "slower" or (t["case_class"] == "cant_tell" and "smallest change" in t["reason"])
            for t in unresolvable
        ),
        "ncu_delta_pct": ncu["delta_pct"] if ncu else None,
        "ncu_spread_pct": ncu["spread_pct"] if ncu else None,
    }
    if ncu and deltas:
        diff = out["qualify_delta_pct"] - ncu["delta_pct"]
        out["diff_pp"] = diff
        out["agrees"] = abs(diff) <= AGREE_PP if ncu["spread_pct"] <= AGREE_PP else None  # None: ncu too wide
    else:
        out["diff_pp"], out["agrees"] = None, None
    return out


def case_verdicts(case: dict) -> dict:
    """The issue's three criteria for one case, each True, False or None (not measured)."""
    by_nominal = {p["nominal_pct"]: point_summary(p) for p in case["points"]}
    aa = by_nominal.get(0.0)
    one = by_nominal.get(1.0)
    out = {"aa_false_ok": None, "one_pct_ok": None, "never_faster": None, "ncu_agrees": None}
    if aa and aa["trials"]:
        out["aa_false_ok"] = aa["false_rate"] <= AA_FALSE_MAX
    if one and one["trials"]:
        detect = one["detect_rate_resolvable"]
        out["one_pct_ok"] = (detect is None or detect >= DETECT_MIN) and one["unresolvable_honest"]
    planted = [s for k, s in by_nominal.items() if k > 0 and s["trials"]]
    if planted:
        out["never_faster"] = all(s["counts"]["faster"] == 0 for s in planted)
        judged = [s["agrees"] for s in planted if s["agrees"] is not None]
        out["ncu_agrees"] = all(judged) if judged else None
    return out


def _pct(x: float | None, signed: bool = True) -> str:
    if x is None:
        return "n/a"
    return f"{x:+.2f} %" if signed else f"{x:.2f} %"


def _rate(k: int, n: int) -> str:
    return f"{k}/{n} ({k / n:.0%})" if n else "0/0"


def _yes(flag: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "not measured"}[flag]


def render_case(case: dict) -> list[str]:
    rows = [point_summary(p) for p in case["points"]]
    v = case_verdicts(case)
    lines = [
        f"### {case['label']}",
        "",
        "| planted | spin (clocks) | ncu Δ (95 % ±) | qualify Δ: median [min, max] | qualify − ncu | faster | same | can't tell | slower | stated MDE (median) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        c, n = r["counts"], r["trials"]
        ncu = "n/a" if r["ncu_delta_pct"] is None else f"{_pct(r['ncu_delta_pct'])} (± {r['ncu_spread_pct']:.2f})"
        rng = (
            ""
            if r["qualify_delta_range"] is None
            else f" [{r['qualify_delta_range'][0]:+.2f}, {r['qualify_delta_range'][1]:+.2f}]"
        )
        diff = (
            "n/a"
            if r["diff_pp"] is None
            else f"{r['diff_pp']:+.2f} pp" + (" (ncu too wide)" if r["agrees"] is None else "")
        )
        lines.append(
            f"| {r['nominal_pct']:g} % | {r['spin']} | {ncu} | {_pct(r['qualify_delta_pct'])}{rng} | {diff} "
            f"| {_rate(c['faster'], n)} | {_rate(c['same'], n)} | {_rate(c['cant_tell'], n)} | {_rate(c['slower'], n)} "
            f"| {_pct(r['mde_pct'], signed=False)} |"
        )
    aa = next((r for r in rows if r["nominal_pct"] == 0), None)
    one = next((r for r in rows if r["nominal_pct"] == 1.0), None)
    lines.append("")
    if aa and aa["trials"]:
        k = aa["counts"]["faster"] + aa["counts"]["slower"]
        lines.append(
            f"- A/A (0 %) false faster/slower: {_rate(k, aa['trials'])}; at most {AA_FALSE_MAX:.0%}: {_yes(v['aa_false_ok'])}."
        )
    if one and one["trials"]:
        det = "no trial" if one["resolvable"] == 0 else f"{one['detect_rate_resolvable']:.0%} of {one['resolvable']}"
        lines.append(
            f"- Planted 1 %: called slower in {det} trials whose stated MDE ≤ 1 %; the others can't tell "
            f"with the MDE in the reason (or slower): {_yes(v['one_pct_ok'])}."
        )
    lines.append(f"- Never called faster on a planted slowdown: {_yes(v['never_faster'])}.")
    lines.append(
        f"- qualify's Δ within {AGREE_PP} pp of ncu's where ncu's own ± is at most {AGREE_PP} pp: {_yes(v['ncu_agrees'])}."
    )
    return lines


def render(result: dict) -> str:
    meta = result["meta"]
    lines = [
        f"Measured {meta.get('started', '?')} on {meta.get('device', '?')}"
        f"{' (--quick)' if meta.get('quick') else ''}: {meta.get('trials_per_point', '?')} trials per point planned, "
        f"{meta.get('rounds_done', '?')} run; per trial and case {meta.get('blocks', '?')} blocks × 4 × "
        f"{meta.get('samples_per_block', '?')} samples; {meta.get('elapsed_s', 0):.0f} s in all.",
        "",
    ]
    for case in result["cases"]:
        lines += render_case(case) + [""]
    return "\n".join(lines).rstrip() + "\n"


def load_result(path: Path, version: int = JSON_VERSION) -> dict:
    """A calibration JSON of the given format version (each benchmark versions its own format)."""
    data = json.loads(Path(path).read_text())
    if data.get("version") != version:
        raise ValueError(f"{path}: calibration JSON version {data.get('version')!r}, expected {version}")
    return data
