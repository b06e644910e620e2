"""The headline of a record: what the candidate did, in a few sentences, computed as data.

A reviewer reads the answer first and the evidence after. `headline(results, plan)` reduces the
verdict and the trials to that answer — per device, the cases grouped into runs of one class
("slower at all 6 cases, by 10.9 % to 23.8 %"), the fidelity contract, the controls and sanitizer,
and the missed gates grouped one line per gate — as frozen values (`headline_model`).
`headline_lines` and `reason_lines` (`headline_text`, importable from here too) word them. Nothing
here recomputes a statistic; every number is a field of Results.
"""

from __future__ import annotations

import math
import statistics

from qualify.evaluate.headline_model import (
    MIXED,
    UNMEASURED,
    CaseEffect,
    Checks,
    Crossover,
    DeviceEffect,
    Fidelity,
    GateMiss,
    Headline,
    Run,
)

# the words, re-exported (`x as x`): render/ imports them from here
from qualify.evaluate.headline_text import cause_lines as cause_lines
from qualify.evaluate.headline_text import headline_lines as headline_lines
from qualify.evaluate.headline_text import reason_lines as reason_lines
from qualify.evaluate.pooled import pool
from qualify.evaluate.throughput import case_rates
from qualify.evaluate.verdict import aa_pooled, device_label, fidelity_passes, free_aa
from qualify.evaluate.why import case_causes
from qualify.plan.model import ARM_SIDES, Plan
from qualify.plan.resolve import case_id
from qualify.results.model import GateResult, Results, Trial


def _by_device(trials: list[Trial]) -> dict[str, list[Trial]]:
    out: dict[str, list[Trial]] = {}
    for t in trials:
        out.setdefault(device_label(t), []).append(t)
    return out


def pooled_words(trials: list[Trial]) -> bool:
    """Whether the headline speaks of the pooled interval: for trials that record trace version 3
    or later (records made since; see qualify.evaluate.cupti_delta). Records made before keep the
    words they were written with (the median of the trials' changes, a class per trial), so
    `report --check` renders them as they are."""
    complete = [t for t in trials if t.status == "complete"]
    return bool(complete) and all(t.kernel_trace is not None and t.kernel_trace.version >= 3 for t in complete)


def case_effects(plan: Plan, trials: list[Trial]) -> list[CaseEffect]:
    """Each planned case on one device's complete trials (unplanned case ids are left out): its
    class and change from the two-level interval pooled over them (pooled_words), else the class
    the trials agree on and the median of their changes."""
    complete = [t for t in trials if t.status == "complete"]
    pooled = pooled_words(trials)
    out = []
    for case in plan.workload.cases:
        cid = case_id(case)
        rows = [c for t in complete for c in t.cases if c.case == cid]
        if not rows:
            out.append(CaseEffect(cid, UNMEASURED, None, 0))
            continue
        if pooled:
            p = pool([c.stats for c in rows])
            out.append(CaseEffect(cid, p.case_class, p.delta_pct, len(rows)))
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
        out.append(
            Run(
                g[0].case_class,
                tuple(e.case for e in g),
                where,
                min(deltas) if deltas else None,
                max(deltas) if deltas else None,
            )
        )
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
    elif all(faster[: faster.index(False)]) and not any(faster[faster.index(False) :]):
        direction, at = "<=", faster.index(False) - 1
    else:
        return None
    chosen = {e.case for e, f in zip(effects, faster) if f}
    highs = [
        c.stats.ci_high
        for t in trials
        if t.status == "complete"
        for c in t.cases
        if c.case in chosen and c.stats.ci_high is not None
    ]
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
        out.append(
            DeviceEffect(
                device=label,
                complete_trials=sum(t.status == "complete" for t in trials),
                pooled=pooled_words(trials),
                cases=len(effects),
                runs=runs(effects, ordered),
                crossover=crossover(plan, trials, effects),
                free_aa=_all_free_aa(trials),
            )
        )
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
    failing: list[str] = []
    nondet: list[str] = []
    mismatch: list[str] = []
    checks = 0
    for t in results.trials:
        for c in t.cases:
            where = f"{c.case} (trial {t.index})"
            if c.parity:
                checks += 1
                if not fidelity_passes(c.parity, plan.acceptance.fidelity):
                    failing.append(where)
            nondet.extend(f"{side} at {where}" for side in ARM_SIDES if c.deterministic.get(side) is False)
            if not c.timed_outputs_match:
                mismatch.append(where)
        # a fail-fast stop records the fidelity failure without a case row
        failing.extend(
            f"{f.case or 'a case'} (trial {t.index})"
            for f in t.failures
            if f.kind == "fidelity" and f"{f.case} (trial {t.index})" not in failing
        )
    return Fidelity(contract(plan), checks, tuple(failing), tuple(nondet), tuple(mismatch))


def checks(plan: Plan, results: Results) -> Checks:
    aa_runs, aa_resolved, aa_classes = 0, [], dict[str, int]()
    neg_runs, neg_missed = 0, []
    san_runs, san_bad, tools = 0, [], []
    seen: dict[str, set[tuple[str, str, str]]] = {}
    for t in results.trials:
        label = device_label(t)
        for c in t.cases:
            if c.aa is not None:
                aa_runs += 1
                aa_classes[c.aa.case_class] = aa_classes.get(c.aa.case_class, 0) + 1
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
    declared = [(s.tool, cid, side) for s in plan.acceptance.sanitizer for cid in s.cases for side in ARM_SIDES]
    not_run = sum(1 for d in devices for key in declared if key not in seen.get(d, set()))
    return Checks(
        aa_declared=plan.controls.aa,
        aa_runs=aa_runs,
        aa_resolved=tuple(aa_resolved),
        aa_pooled_resolved=tuple(
            f"{p.case_class} at {cid} on {device}" for device, cid, p, _ in aa_pooled(results.trials)
        ),
        aa_classes=tuple(sorted(aa_classes.items(), key=lambda kv: -kv[1])),
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
    groups: dict[tuple[str, str], list[GateResult]] = {}
    for g in results.verdict.gates:
        groups.setdefault((g.gate, g.device), []).append(g)
    out = []
    for (name, device), judged in groups.items():
        missed = [g for g in judged if not g.passed]
        if not missed:
            continue
        gate = bounds.get(name)
        # a per-trial miss with the speed-up in hand failed on its interval (class not faster)
        unresolved = any(
            gate is not None
            and gate.min_speedup_pct is not None
            and g.trial is not None
            and -g.value_pct >= gate.min_speedup_pct
            and classes.get((g.trial, g.case)) != "faster"
            for g in missed
        )
        cases = tuple(dict.fromkeys(g.case for g in missed))
        out.append(
            GateMiss(
                gate=name,
                device=device,
                bound=missed[0].bound,
                cases=cases,
                all_cases=set(cases) == {g.case for g in judged},
                missed=len(missed),
                judged=len(judged),
                low_change_pct=min(g.value_pct for g in missed),
                high_change_pct=max(g.value_pct for g in missed),
                unresolved=unresolved,
            )
        )
    return tuple(out)


def _gate_reason_prefixes(results: Results) -> tuple[str, ...]:
    # the verdict words a missed gate "gate NAME missed at CASE on DEVICE (...)"; those lines are
    # regrouped here, every other reason is kept as the verdict wrote it
    return tuple(f"gate {g.gate} missed at {g.case} on {g.device} " for g in results.verdict.gates if not g.passed)


def headline(results: Results, plan: Plan) -> Headline:
    prefixes = _gate_reason_prefixes(results)
    others = tuple(r for r in results.verdict.reasons if not r.startswith(prefixes))
    groups = _by_device(results.trials)
    causes, left = case_causes(plan, groups, case_rates(plan, groups))
    return Headline(
        status=results.verdict.status,
        devices=device_effects(plan, results),
        fidelity=fidelity(plan, results),
        checks=checks(plan, results),
        gate_misses=gate_misses(plan, results),
        other_reasons=others,
        causes=tuple(causes),
        causes_left=left,
    )
