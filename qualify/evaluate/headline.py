"""The headline of a record: what the candidate did, in a few sentences, computed as data.

A reviewer reads the answer first and the evidence after. `headline(results, plan)` reduces the
verdict and the trials to that answer — per device, the cases grouped into runs of one class
("slower at all 6 cases, by 10.9 % to 23.8 %"), the fidelity contract, the controls and sanitizer,
and the missed gates grouped one line per gate — as frozen values. `headline_lines` words them,
taking the escape function of the format the words land in (Markdown or a terminal): every label
a plan author wrote (case ids, gate names, device names, reasons) passes through it, the words
qualify adds do not. Nothing here recomputes a statistic; every number is a field of Results.

Percentages are changes in time per launch, worded by direction: "slower by 12 %" is 12 % more
time, "faster by 6 %" is 6 % less time. A sign is never left for the reader to interpret.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable

from qualify.evaluate.stats import SAME_BAND
from qualify.evaluate.verdict import device_label, fidelity_passes, free_aa
from qualify.plan.model import Plan
from qualify.plan.resolve import case_id
from qualify.results.model import Results, Trial

# a case's class across a device's complete trials: the class they agree on, or one of these
MIXED = "mixed"  # the trials disagree
UNMEASURED = "unmeasured"  # no complete trial measured the case

SIDES = ("base", "candidate")


@dataclass(frozen=True)
class CaseEffect:
    case: str
    case_class: str  # faster / slower / same / cant_tell / mixed / unmeasured
    delta_pct: float | None  # median over complete trials of (ratio - 1) * 100
    trials: int


@dataclass(frozen=True)
class Run:
    """Consecutive cases (in the plan's order) of one class on one device."""

    case_class: str
    cases: tuple[str, ...]
    where: str  # "all" | "from" | "up to" | "between" | "at"
    low_pct: float | None  # smallest and largest per-case delta in the run
    high_pct: float | None


@dataclass(frozen=True)
class Crossover:
    """Where the candidate starts (or stops) being faster, and the gate the data would support."""

    parameter: str
    direction: str  # ">=" (faster from `value` up) or "<=" (faster up to `value`)
    value: float | int
    supported_speedup_pct: float  # smallest speed-up the 95 % intervals resolve there, floored to 0.5 %


@dataclass(frozen=True)
class DeviceEffect:
    device: str
    complete_trials: int
    cases: int
    runs: tuple[Run, ...]
    crossover: Crossover | None
    # every complete trial ran identical machine code with identical launches: the runs are what
    # the timer measured between two copies of one kernel, not an effect of the candidate
    free_aa: bool = False


@dataclass(frozen=True)
class Fidelity:
    contract: str  # "byte-identical to the base arm", "within 2 ulp of the float64 reference"...
    checks: int  # case-trials whose outputs were compared
    failing: tuple[str, ...]  # "T=512 (trial 1)"
    nondeterministic: tuple[str, ...]  # "candidate at T=512 (trial 1)"
    timed_mismatch: tuple[str, ...]


@dataclass(frozen=True)
class Checks:
    aa_declared: bool
    aa_runs: int
    aa_resolved: tuple[str, ...]  # "slower at T=512 (trial 1)": the timer saw a difference that is not there
    negative_declared: int
    negative_runs: int
    negative_missed: tuple[str, ...]  # "flip at T=512 (trial 1)"
    sanitizer_runs: int
    sanitizer_tools: tuple[str, ...]
    sanitizer_bad: tuple[str, ...]  # "memcheck at T=512 (candidate): findings"
    sanitizer_not_run: int
    negative_declared_outcomes: bool = False  # judged against declarations (a golden): missed = not as declared


@dataclass(frozen=True)
class GateMiss:
    """One gate on one device: the cases that missed it and the range of values."""

    gate: str
    device: str
    bound: str
    cases: tuple[str, ...]
    all_cases: bool  # every case the gate judged on this device missed
    missed: int  # judgements missed (one per trial, or one per case pooled over trials)
    judged: int
    low_speedup_pct: float  # speed-up in %: positive is faster
    high_speedup_pct: float
    unresolved: bool  # at least one miss had the speed-up but not the interval to back it


@dataclass(frozen=True)
class Headline:
    status: str
    devices: tuple[DeviceEffect, ...]
    fidelity: Fidelity
    checks: Checks
    gate_misses: tuple[GateMiss, ...]
    other_reasons: tuple[str, ...]  # the verdict's reasons that are not gate misses, as written


# ---------------------------------------------------------------------------------------------
# computing


def _by_device(trials: list[Trial]) -> dict[str, list[Trial]]:
    out: dict[str, list[Trial]] = {}
    for t in trials:
        out.setdefault(device_label(t), []).append(t)
    return out


def case_effects(plan: Plan, trials: list[Trial]) -> list[CaseEffect]:
    """Each planned case on one device's complete trials (unplanned case ids are left out)."""
    complete = [t for t in trials if t.status == "complete"]
    out = []
    for case in plan.workload.cases:
        cid = case_id(case)
        rows = [c for t in complete for c in t.cases if c.case == cid]
        if not rows:
            out.append(CaseEffect(cid, UNMEASURED, None, 0))
            continue
        classes = {c.stats.case_class for c in rows}
        cls = classes.pop() if len(classes) == 1 else MIXED
        out.append(CaseEffect(cid, cls, statistics.median(c.stats.delta_pct for c in rows), len(rows)))
    return out


def _ordered_parameter(plan: Plan) -> str | None:
    """The one parameter the cases vary, when its values rise strictly in the plan's order.

    Only then do "from T=2048" and "up to T=1024" say something true about the cases between.
    """
    cases = plan.workload.cases
    keys = {tuple(c) for c in cases}
    if len(keys) != 1 or len(next(iter(keys))) != 1 or len(cases) < 2:
        return None
    (name,) = next(iter(keys))
    values = [c[name] for c in cases]
    return name if all(a < b for a, b in zip(values, values[1:])) else None


def runs(effects: list[CaseEffect], ordered: bool) -> tuple[Run, ...]:
    groups: list[list[CaseEffect]] = []
    for e in effects:
        if groups and groups[-1][0].case_class == e.case_class:
            groups[-1].append(e)
        else:
            groups.append([e])
    out = []
    for i, g in enumerate(groups):
        if len(groups) == 1 and len(g) > 1:
            where = "all"
        elif len(g) == 1 or not ordered:
            where = "at"
        elif i == len(groups) - 1:
            where = "from"
        elif i == 0:
            where = "up to"
        else:
            where = "between"
        deltas = [e.delta_pct for e in g if e.delta_pct is not None]
        out.append(Run(g[0].case_class, tuple(e.case for e in g), where,
                       min(deltas) if deltas else None, max(deltas) if deltas else None))  # fmt: skip
    return tuple(out)


def crossover(plan: Plan, trials: list[Trial], effects: list[CaseEffect]) -> Crossover | None:
    """The boundary when the faster cases are a prefix or a suffix of ordered cases, never all.

    The supported speed-up is the smallest (1 - upper end of the 95 % interval) over the faster
    cases and their trials: what every interval there still resolves. A suggestion for the next,
    separately frozen plan; the verdict of this one does not change.
    """
    name = _ordered_parameter(plan)
    faster = [e.case_class == "faster" for e in effects]
    if name is None or not any(faster) or all(faster):
        return None
    k = faster.index(True)
    if all(faster[k:]) and not any(faster[:k]):
        direction, at = ">=", k
    elif all(faster[: faster.index(False)]) and not any(faster[faster.index(False):]):
        direction, at = "<=", faster.index(False) - 1
    else:
        return None
    chosen = {e.case for e, f in zip(effects, faster) if f}
    highs = [c.stats.ci_high for t in trials if t.status == "complete" for c in t.cases
             if c.case in chosen and c.stats.ci_high is not None]  # fmt: skip
    if not highs:
        return None
    supported = math.floor((1.0 - max(highs)) * 100.0 * 2) / 2  # floored to 0.5 %
    if supported <= 0:
        return None
    return Crossover(name, direction, plan.workload.cases[at][name], supported)


def _all_free_aa(trials: list[Trial]) -> bool:
    complete = [t for t in trials if t.status == "complete"]
    return bool(complete) and all(free_aa(t) for t in complete)


def device_effects(plan: Plan, results: Results) -> tuple[DeviceEffect, ...]:
    ordered = _ordered_parameter(plan) is not None
    out = []
    for label, trials in _by_device(results.trials).items():
        effects = case_effects(plan, trials)
        out.append(DeviceEffect(
            device=label,
            complete_trials=sum(t.status == "complete" for t in trials),
            cases=len(effects),
            runs=runs(effects, ordered),
            crossover=crossover(plan, trials, effects),
            free_aa=_all_free_aa(trials),
        ))  # fmt: skip
    return tuple(out)


def contract(plan: Plan) -> str:
    f = plan.acceptance.fidelity
    against = {"base": "the base arm", "float64": "the float64 reference", "golden": "the golden file"}[f.against]
    if f.mode == "bytes":
        return f"byte-identical to {against}"
    if f.mode == "tolerance" and f.tolerances:
        return f"within each case's bound (the plan's tolerances) of {against}"
    if f.mode == "tolerance":
        return f"within |err| ≤ {f.atol:g} + {f.rtol:g}·|expected| of {against}"
    unit = {"ulp": " ulp", "abs": " (absolute)", "rel": " (relative)"}[f.mode]
    return f"within {f.bound:g}{unit} of {against}"


def fidelity(plan: Plan, results: Results) -> Fidelity:
    failing, nondet, mismatch, checks = [], [], [], 0
    for t in results.trials:
        for c in t.cases:
            where = f"{c.case} (trial {t.index})"
            if c.parity:
                checks += 1
                if not fidelity_passes(c.parity, plan.acceptance.fidelity):
                    failing.append(where)
            nondet.extend(f"{side} at {where}" for side in SIDES if c.deterministic.get(side) is False)
            if not c.timed_outputs_match:
                mismatch.append(where)
        # a fail-fast stop records the fidelity failure without a case row
        failing.extend(f"{f.case or 'a case'} (trial {t.index})" for f in t.failures
                       if f.kind == "fidelity" and f"{f.case} (trial {t.index})" not in failing)  # fmt: skip
    return Fidelity(contract(plan), checks, tuple(failing), tuple(nondet), tuple(mismatch))


def checks(plan: Plan, results: Results) -> Checks:
    aa_runs, aa_resolved = 0, []
    neg_runs, neg_missed = 0, []
    san_runs, san_bad, tools = 0, [], []
    seen: dict[str, set] = {}
    for t in results.trials:
        label = device_label(t)
        for c in t.cases:
            if c.aa is not None:
                aa_runs += 1
                if c.aa.case_class in ("faster", "slower"):
                    aa_resolved.append(f"{c.aa.case_class} at {c.case} (trial {t.index})")
        for ctl in t.controls:
            neg_runs += 1
            if not ctl.caught:
                neg_missed.append(f"{ctl.name} at {ctl.case} (trial {t.index})")
        for r in t.sanitizer:
            san_runs += 1
            seen.setdefault(label, set()).add((r.tool, r.case, r.side))
            if r.tool not in tools:
                tools.append(r.tool)
            if r.status != "clean":
                san_bad.append(f"{r.tool} at {r.case} ({r.side}): {r.status}")
    devices = {device_label(t) for t in results.trials if t.status == "complete"}
    declared = [(s.tool, cid, side) for s in plan.acceptance.sanitizer for cid in s.cases for side in SIDES]
    not_run = sum(1 for d in devices for key in declared if key not in seen.get(d, set()))
    return Checks(
        aa_declared=plan.controls.aa,
        aa_runs=aa_runs,
        aa_resolved=tuple(aa_resolved),
        negative_declared=len(plan.controls.negative),
        negative_runs=neg_runs,
        negative_missed=tuple(neg_missed),
        negative_declared_outcomes=any(t.control_outcomes is not None for t in results.trials),
        sanitizer_runs=san_runs,
        sanitizer_tools=tuple(tools),
        sanitizer_bad=tuple(san_bad),
        sanitizer_not_run=not_run,
    )


def gate_misses(plan: Plan, results: Results) -> tuple[GateMiss, ...]:
    classes = {(t.index, c.case): c.stats.case_class for t in results.trials for c in t.cases}
    bounds = {g.name: g for g in plan.acceptance.gates}
    groups: dict[tuple[str, str], list] = {}
    for g in results.verdict.gates:
        groups.setdefault((g.gate, g.device), []).append(g)
    out = []
    for (name, device), judged in groups.items():
        missed = [g for g in judged if not g.passed]
        if not missed:
            continue
        gate = bounds.get(name)
        # a per-trial miss with the speed-up in hand failed on its interval (class not faster)
        unresolved = any(gate is not None and gate.min_speedup_pct is not None and g.trial is not None
                         and g.value_pct >= gate.min_speedup_pct and classes.get((g.trial, g.case)) != "faster"
                         for g in missed)  # fmt: skip
        cases = tuple(dict.fromkeys(g.case for g in missed))
        out.append(GateMiss(
            gate=name, device=device, bound=missed[0].bound, cases=cases,
            all_cases=set(cases) == {g.case for g in judged},
            missed=len(missed), judged=len(judged),
            low_speedup_pct=min(g.value_pct for g in missed), high_speedup_pct=max(g.value_pct for g in missed),
            unresolved=unresolved,
        ))  # fmt: skip
    return tuple(out)


def _gate_reason_prefixes(results: Results) -> tuple[str, ...]:
    # the verdict words a missed gate "gate NAME missed at CASE on DEVICE (...)"; those lines are
    # regrouped here, every other reason is kept as the verdict wrote it
    return tuple(f"gate {g.gate} missed at {g.case} on {g.device} " for g in results.verdict.gates if not g.passed)


def headline(results: Results, plan: Plan) -> Headline:
    prefixes = _gate_reason_prefixes(results)
    others = tuple(r for r in results.verdict.reasons if not r.startswith(prefixes))
    return Headline(
        status=results.verdict.status,
        devices=device_effects(plan, results),
        fidelity=fidelity(plan, results),
        checks=checks(plan, results),
        gate_misses=gate_misses(plan, results),
        other_reasons=others,
    )


# ---------------------------------------------------------------------------------------------
# wording


Escape = Callable[[str], str]


def pct(value: float) -> str:
    return f"{abs(value):.1f} %"


def pct_range(low: float, high: float) -> str:
    """Magnitudes, smaller first: '10.9 % to 23.8 %', or '6.0 %' when they agree."""
    a, b = sorted((abs(low), abs(high)))
    return pct(a) if f"{a:.1f}" == f"{b:.1f}" else f"{a:.1f} % to {b:.1f} %"


def _cases(cases: tuple[str, ...], esc: Escape) -> str:
    shown = [esc(c) for c in cases]
    if len(shown) <= 4:
        return ", ".join(shown)
    return ", ".join(shown[:3]) + f" and {len(shown) - 3} more"


def _where(run: Run, total: int, esc: Escape) -> str:
    if run.where == "all":
        return "at both cases" if total == 2 else f"at all {total} cases"
    if run.where == "from":
        return f"from {esc(run.cases[0])}"
    if run.where == "up to":
        return f"up to {esc(run.cases[-1])}"
    if run.where == "between":
        return f"from {esc(run.cases[0])} to {esc(run.cases[-1])}"
    return f"at {_cases(run.cases, esc)}"


def _run_phrase(run: Run, total: int, esc: Escape) -> str:
    where = _where(run, total, esc)
    lo, hi = run.low_pct, run.high_pct
    if run.case_class == "slower":
        return f"slower {where}, by {pct_range(lo, hi)}"
    if run.case_class == "faster":
        return f"faster {where}, by {pct_range(lo, hi)}"
    if run.case_class == "same":
        return f"the same {where} (within ±{SAME_BAND * 100:g} %)"
    if run.case_class == MIXED:
        return f"inconsistent across trials {where}"
    if run.case_class == UNMEASURED:
        return f"not measured {where}"
    span = f"{lo:+.1f} %" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:+.1f} % to {hi:+.1f} %"
    return f"not resolved {where} ({span} in time, the 95 % interval too wide to call)"


def device_sentence(d: DeviceEffect, esc: Escape, many_devices: bool) -> str:
    phrases = "; ".join(_run_phrase(r, d.cases, esc) for r in d.runs)
    on = f"On {esc(d.device)}, the" if many_devices else "The"
    trials = f"{d.complete_trials} complete trial{'s' if d.complete_trials != 1 else ''}"
    if d.free_aa:
        return (f"{on} candidate runs the base's machine code with the same launches: no change by "
                f"construction (a free A/A); the timer measured it {phrases} (time per launch, median of {trials}).")  # fmt: skip
    text = f"{on} candidate is {phrases} (time per launch, median of {trials})."
    if d.crossover is not None:
        x = d.crossover
        edge = "from" if x.direction == ">=" else "up to"
        value = x.value if isinstance(x.value, int) else f"{x.value:g}"  # 4194304, never 4.1943e+06
        text += (f" It crosses over: faster {edge} {esc(x.parameter)}={value}; the data would support a gate "
                 f"where {esc(x.parameter)} {x.direction} {value} with a speed-up of at least "
                 f"{x.supported_speedup_pct:g} % in a new, separately frozen plan (this verdict stands).")  # fmt: skip
    return text


def fidelity_sentence(f: Fidelity, esc: Escape) -> str:
    if not f.checks and not f.failing:
        return "Outputs: not compared (no case was measured)."
    if f.failing:
        text = f"Outputs: NOT {f.contract} at {_cases(f.failing, esc)}."
    else:
        text = f"Outputs: {f.contract} in all {f.checks} case-trial checks"
        text += "." if not (f.nondeterministic or f.timed_mismatch) else ";"
    if f.nondeterministic:
        text = text.rstrip(".;") + f"; not deterministic: {_cases(f.nondeterministic, esc)}."
    if f.timed_mismatch:
        text = text.rstrip(".;") + f"; timed launches wrote other bytes at {_cases(f.timed_mismatch, esc)}."
    return text


def checks_sentence(c: Checks, esc: Escape) -> str:
    parts = []
    if c.aa_declared:
        if not c.aa_runs:
            parts.append("A/A control not run")
        elif c.aa_resolved:
            parts.append(f"A/A control resolved a difference that is not there ({_cases(c.aa_resolved, esc)})")
        else:
            parts.append(f"A/A control found no difference in {c.aa_runs} runs")
    if c.negative_declared:
        if not c.negative_runs:
            parts.append("negative controls not run")
        elif c.negative_missed and c.negative_declared_outcomes:
            parts.append(f"negative control NOT as declared: {_cases(c.negative_missed, esc)} "
                         "(the gate, or the declaration, is wrong there)")  # fmt: skip
        elif c.negative_missed:
            parts.append(f"negative control NOT caught: {_cases(c.negative_missed, esc)} (the fidelity gate is vacuous)")
        elif c.negative_declared_outcomes:
            parts.append(f"negative controls as declared in {c.negative_runs} of {c.negative_runs} runs")
        else:
            parts.append(f"negative controls caught in {c.negative_runs} of {c.negative_runs} runs")
    if c.sanitizer_runs or c.sanitizer_not_run:
        tools = ", ".join(c.sanitizer_tools) or "compute-sanitizer"
        if c.sanitizer_bad:
            san = f"compute-sanitizer: {_cases(c.sanitizer_bad, esc)}"
        elif c.sanitizer_runs:
            san = f"compute-sanitizer clean ({tools}; {c.sanitizer_runs} runs)"
        else:
            san = "compute-sanitizer not run"
        if c.sanitizer_not_run and c.sanitizer_runs:
            san += f"; {c.sanitizer_not_run} declared checks not run"
        parts.append(san)
    if not parts:
        return "Controls and sanitizer: none declared."
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def gate_line(m: GateMiss, esc: Escape, many_devices: bool) -> str:
    lo, hi = m.low_speedup_pct, m.high_speedup_pct
    if hi < 0:
        values = f"slower by {pct_range(lo, hi)}"
    elif lo >= 0:
        values = f"faster by only {pct_range(lo, hi)}"
        if m.unresolved:
            values = f"faster by {pct_range(lo, hi)}, not resolved by every trial's 95 % interval"
    else:
        values = f"from {pct(lo)} slower to {pct(hi)} faster"
    if m.all_cases and len(m.cases) > 4:
        where = f"all {len(m.cases)} of its cases"
    else:
        where = _cases(m.cases, esc) + (", all its cases," if m.all_cases and len(m.cases) > 1 else "")
    device = f" on {esc(m.device)}" if many_devices else ""
    where = where.rstrip(",") if not device else where
    judged = f"{m.missed} of {m.judged} judgements"
    return f"gate {esc(m.gate)} missed at {where}{device} ({m.bound}; {judged}): {values}."


def headline_lines(h: Headline, esc: Escape) -> list[str]:
    """The two to four sentences that open a record, in order."""
    many = len(h.devices) > 1
    lines = [device_sentence(d, esc, many) for d in h.devices]
    if not lines:
        lines.append("No trial has run: there is nothing to report yet.")
    lines.append(fidelity_sentence(h.fidelity, esc))
    lines.append(checks_sentence(h.checks, esc))
    return lines


def reason_lines(h: Headline, esc: Escape) -> list[str]:
    """The verdict's reasons: one line per missed gate, then every other reason as written."""
    many = len(h.devices) > 1
    return [gate_line(m, esc, many) for m in h.gate_misses] + [esc(r) for r in h.other_reasons]
