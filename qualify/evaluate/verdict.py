"""Gates and the verdict: the plan's acceptance criteria applied to a record's trials.

A verdict is data. "not_qualified" means the candidate failed a pre-registered criterion;
"incomplete" means the evidence is insufficient to decide (missing trials, a failed A/A control,
sanitizer checks not run, an unplanned device, a gate finer than the case could resolve);
"qualified" needs every criterion met on every device. The CLI derives the exit code from it last.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from qualify.evaluate.cupti_delta import traced_disagreements
from qualify.evaluate.device_match import device_label as device_label  # its callers import it from here too
from qualify.evaluate.pooled import pool
from qualify.evaluate.second_timer import disagreement_text
from qualify.evaluate.throughput import impossible_reasons
from qualify.plan.checks import selected_cases
from qualify.plan.model import ARM_SIDES, Fidelity, Plan, SpeedGate
from qualify.plan.resolve import case_id
from qualify.results.model import (
    BufferParity,
    CaseStats,
    CaseTrial,
    GateResult,
    PooledStats,
    SanitizerResult,
    Trial,
    Verdict,
)


def fidelity_passes(parity: list[BufferParity], fidelity: Fidelity) -> bool:
    for p in parity:
        if fidelity.mode == "bytes" and not p.equal:
            return False
        if fidelity.mode == "ulp" and not p.equal and _beyond(p.max_ulp, fidelity.bound):
            return False
        if fidelity.mode == "abs" and not p.equal and _beyond(p.max_abs, fidelity.bound):
            return False
        if fidelity.mode == "rel" and not p.equal and _beyond(p.max_rel, fidelity.bound):
            return False
    return True


def _beyond(distance: float | None, bound: float | None) -> bool:
    """A distance past the bound; one not measured, or no bound to hold it to (the plan's check
    requires one for these modes), fails closed."""
    return distance is None or bound is None or distance > bound


def gate_limit(gate: SpeedGate) -> float:
    """The largest candidate/base ratio the gate accepts (both bounds, when both are given)."""
    limits = []
    if gate.min_speedup_pct is not None:
        limits.append(1.0 - gate.min_speedup_pct / 100.0)
    if gate.max_regression_pct is not None:
        limits.append(1.0 + gate.max_regression_pct / 100.0)
    return min(limits)


def gate_bound_text(gate: SpeedGate) -> str:
    """The gate in the record's one convention: change in time per launch, negative is faster."""
    bounds = []
    if gate.min_speedup_pct is not None:
        bounds.append(f"change <= {-gate.min_speedup_pct:+g}%")
    if gate.max_regression_pct is not None:
        bounds.append(f"change <= {gate.max_regression_pct:+g}%")
    return " and ".join(bounds)


def judge_gate(
    gate: SpeedGate, ratio: float, lo: float | None, hi: float | None, mde_pct: float | None
) -> tuple[str, float, str]:
    """(outcome, change in %, bound) of one gate on one case: outcome is pass, miss or cant_tell.

    The change is in time per launch, (ratio - 1) x 100: negative is faster.

    A gate is a bound L on the ratio. The interval decides first: wholly at or below L passes,
    wholly above misses — whatever the case's noise, the data then support the answer. When the
    interval straddles L, the case's minimum detectable effect says whether the case could have
    resolved a change the size of the gate's margin |L - 1|: if not, the answer is "can't tell"
    (never a miss or a pass the data cannot support); if it could, the candidate had its chance
    and the gate is missed. Without an interval but with an MDE that shows the margin is
    resolvable, the point estimate decides.
    """
    limit = gate_limit(gate)
    speedup = (ratio - 1.0) * 100.0
    bound = gate_bound_text(gate)
    if lo is not None and hi is not None:
        if hi <= limit:
            return "pass", speedup, bound
        if lo > limit:
            return "miss", speedup, bound
    margin = abs(limit - 1.0) * 100.0
    if mde_pct is None or mde_pct > margin:
        return "cant_tell", speedup, bound
    if lo is None or hi is None:
        return ("pass" if ratio <= limit else "miss"), speedup, bound
    return "miss", speedup, bound


def pooled_text(trials: int) -> str:
    """Where a gate judged over all of a device's trials looked: each trial is one process."""
    if trials == 1:
        return "pooled over 1 trial (1 process)"
    return f"pooled over {trials} trials ({trials} processes)"


def _undecided(
    gate: SpeedGate,
    cid: str,
    device: str,
    trial: int | None,
    speedup: float,
    mde_pct: float | None,
    lo: float | None,
    hi: float | None,
    *,
    trials: int,
) -> str:
    where = f"trial {trial}" if trial is not None else pooled_text(trials)
    margin = abs(gate_limit(gate) - 1.0) * 100.0
    if mde_pct is None:
        why = "the case has no interval (fewer than two blocks in a trial)"
    else:
        why = f"the smallest change this case can detect is {mde_pct:.2f}%, above the gate's {margin:g}%"
    interval = "" if lo is None or hi is None else f", 95% CI [{(lo - 1) * 100:+.2f}%, {(hi - 1) * 100:+.2f}%]"
    return (
        f"gate {gate.name} can't tell at {cid} on {device} ({where}): needs {gate_bound_text(gate)}, "
        f"measured change {speedup:+.2f}%{interval}; {why}"
    )


def gate_results(plan: Plan, trials: list[Trial]) -> list[GateResult]:
    """The gates the data decided (pass or miss), per case, device and trial."""
    return judge_gates(plan, trials)[0]


# A free A/A (identical machine code and launches): the candidate is the base, its ratio 1 exactly
# and known without error, whatever the samples say. (ratio, CI low, CI high, MDE in %)
BY_CONSTRUCTION = (1.0, 1.0, 1.0, 0.0)


def free_aa(trial: Trial) -> bool:
    return trial.code is not None and trial.code.free_aa


Evidence = tuple[float, float | None, float | None, float | None]  # ratio, CI low, CI high, MDE in %


def _evidence(trial: Trial, case: CaseTrial) -> Evidence:
    """(ratio, CI low, CI high, MDE in %) a gate judges: the constructed ones in a free A/A."""
    if free_aa(trial):
        return BY_CONSTRUCTION
    return case.stats.ratio, case.stats.ci_low, case.stats.ci_high, case.stats.mde_pct


def _pooled_evidence(cases: list[tuple[Trial, CaseTrial]]) -> Evidence:
    """(ratio, CI low, CI high, MDE in %) over a device's trials: the two-level pooled interval,
    or the constructed one when every trial is a free A/A."""
    if all(free_aa(t) for t, _ in cases):
        return BY_CONSTRUCTION
    p = pool([c.stats for _, c in cases])
    return p.ratio, p.ci_low, p.ci_high, p.mde_pct


def by_device(trials: list[Trial]) -> dict[str, list[Trial]]:
    """Complete trials per device, devices in the order they first ran: devices are never pooled
    together (each is its own population)."""
    out: dict[str, list[Trial]] = defaultdict(list)
    for t in trials:
        if t.status == "complete":
            out[device_label(t)].append(t)
    return dict(out)


def pooled_cases(plan: Plan, trials: list[Trial]) -> dict[str, dict[str, PooledStats]]:
    """Per device and case (the plan's order, unplanned ids last as found): the case's two-level
    statistics over the device's complete trials, as measured (free A/A trials included)."""
    planned = [case_id(c) for c in plan.workload.cases]
    out = {}
    for device, dtrials in by_device(trials).items():
        found = [c.case for t in dtrials for c in t.cases]
        unplanned = [cid for cid in dict.fromkeys(found) if cid not in planned]
        order = [cid for cid in planned if cid in found] + unplanned
        out[device] = {cid: pool([c.stats for t in dtrials for c in t.cases if c.case == cid]) for cid in order}
    return out


def judge_gates(plan: Plan, trials: list[Trial]) -> tuple[list[GateResult], list[str]]:
    """Judged gates, and the reasons of gates the data could not decide (no GateResult for them).

    A gate judged in every trial reads each trial's interval; otherwise it reads the case's
    two-level interval pooled over the device's complete trials (qualify.evaluate.pooled), never
    over devices together. In a free A/A trial the gates see the ratio the construction fixes
    (BY_CONSTRUCTION), not the measured one: a speed-up gate is missed and a regression bound is
    met, by construction."""
    out: list[GateResult] = []
    undecided: list[str] = []
    for gate in plan.acceptance.gates:
        for cid in selected_cases(gate, plan):
            for device, dtrials in by_device(trials).items():
                cases = [(t, c) for t in dtrials for c in t.cases if c.case == cid]
                if not cases:
                    continue
                judged: list[tuple[int | None, Evidence]]
                if gate.every_trial:
                    judged = [(t.index, _evidence(t, c)) for t, c in cases]
                else:
                    judged = [(None, _pooled_evidence(cases))]
                for index, (ratio, lo, hi, mde) in judged:
                    _decide(
                        out,
                        undecided,
                        gate,
                        cid,
                        device,
                        index,
                        (ratio, lo, hi, mde),
                        lambda value: _undecided(gate, cid, device, index, value, mde, lo, hi, trials=len(cases)),
                    )
            if not gate.every_trial:
                over, unsure = _judge_over_machines(gate, cid, trials)
                out += over
                undecided += unsure
    return out, undecided


def _judge_over_machines(gate: SpeedGate, cid: str, trials: list[Trial]) -> tuple[list[GateResult], list[str]]:
    """A gate judged on the machine term of each GPU model measured on two or more machines
    (qualify.evaluate.machines), beside each machine's own judgement: a verdict over machines
    holds only where the spread between them leaves it holding."""
    from qualify.evaluate.machines import machine_term, machines_by_model, model_label

    out: list[GateResult] = []
    undecided: list[str] = []
    for model, machines in machines_by_model(trials).items():
        per_machine = {
            label: pool([c.stats for t in mtrials for c in t.cases if c.case == cid])
            for label, mtrials in machines.items()
            if any(c.case == cid for t in mtrials for c in t.cases)
        }
        if len(per_machine) < 2:
            continue
        label = model_label(model, len(per_machine))
        term = machine_term(per_machine)
        if term is None:
            undecided.append(f"gate {gate.name} can't tell at {cid} on {label}: a machine has no interval")
            continue
        _decide(
            out,
            undecided,
            gate,
            cid,
            label,
            None,
            (term.ratio, term.ci_low, term.ci_high, term.mde_pct),
            lambda value: (
                f"gate {gate.name} can't tell at {cid} on {label} (machines as replicates): needs "
                f"{gate_bound_text(gate)}, measured change {value:+.2f}%, 95% CI "
                f"[{(term.ci_low - 1) * 100:+.2f}%, {(term.ci_high - 1) * 100:+.2f}%], between machines "
                f"{term.between_pct:.2f}%; the smallest change it can detect is {term.mde_pct:.2f}%"
            ),
        )
    return out, undecided


def _decide(
    out: list[GateResult],
    undecided: list[str],
    gate: SpeedGate,
    cid: str,
    device: str,
    trial: int | None,
    evidence: Evidence,
    cant_tell: Callable[[float], str],
) -> None:
    """One gate on one case's evidence: a GateResult into out when the data decide it, else into
    undecided the reason they cannot (cant_tell, given the measured change in %)."""
    ratio, lo, hi, mde = evidence
    outcome, value, bound = judge_gate(gate, ratio, lo, hi, mde)
    if outcome == "cant_tell":
        undecided.append(cant_tell(value))
        return
    out.append(
        GateResult(
            gate=gate.name,
            case=cid,
            trial=trial,
            device=device,
            passed=outcome == "pass",
            value_pct=value,
            bound=bound,
        )
    )


def _case_problems(plan: Plan, trial: Trial, case: CaseTrial) -> list[str]:
    where = f"trial {trial.index}, {case.case}"
    problems = []
    if not fidelity_passes(case.parity, plan.acceptance.fidelity):
        bad = [p for p in case.parity if not p.equal]
        detail = ", ".join(f"{p.buffer}: {p.differing_elements} of {p.elements} elements differ" for p in bad)
        problems.append(f"{where}: outputs differ from base ({detail})")
    for side, ok in case.deterministic.items():
        if not ok:
            problems.append(f"{where}: {side} is not deterministic (two runs gave different bytes)")
    if not case.timed_outputs_match:
        problems.append(f"{where}: outputs of timed launches differ from the checked outputs")
    return problems


def aa_pooled(trials: list[Trial]) -> list[tuple[str, str, PooledStats, int]]:
    """(device, case, pooled statistics, trials) of each A/A control (the base against itself) that
    comes out faster or slower pooled over a device's complete trials, as the change is judged:
    the timer does not resolve that case.

    Judged per trial, five cases in two processes make ten A/A tests per run, and one of them
    strays beyond the ±0.5 % band now and then (2 of 7 vecload runs on H200s, each one trial at one
    case, by −0.53 % and −0.55 %). A bias of one process becomes the pooled interval's spread
    between processes, so the verdict's own interval is the one the A/A must hold to; each
    process's own reading is kept as a note."""
    out = []
    for device, dtrials in by_device(trials).items():
        found: dict[str, list[CaseStats]] = defaultdict(list)
        for t in dtrials:
            for c in t.cases:
                if c.aa is not None:
                    found[c.case].append(c.aa)
        for cid, stats in found.items():
            p = pool(stats)
            if p.case_class in ("faster", "slower"):
                out.append((device, cid, p, len(stats)))
    return out


def verdict(plan: Plan, trials: list[Trial]) -> Verdict:
    failed: list[str] = []  # the candidate failed a criterion
    unsure: list[str] = []  # the evidence cannot decide
    notes: list[str] = []  # said beside the verdict, deciding nothing
    gates, undecided = judge_gates(plan, trials)
    complete = [t for t in trials if t.status == "complete"]
    constructed = {t.index for t in complete if free_aa(t)}
    # pooled over trials, a device whose every complete trial is a free A/A
    constructed_devices = {device_label(t) for t in complete} - {device_label(t) for t in complete if not free_aa(t)}
    for g in gates:
        if not g.passed:
            pooled = [t for t in complete if device_label(t) == g.device and any(c.case == g.case for c in t.cases)]
            trial = f"trial {g.trial}" if g.trial is not None else pooled_text(len(pooled))
            if not pooled and g.trial is None:
                trial = "machines as replicates, the spread between them included"
            by_construction = g.trial in constructed if g.trial is not None else g.device in constructed_devices
            why = "; identical machine code and launches: no change by construction" if by_construction else ""
            failed.append(
                f"gate {g.gate} missed at {g.case} on {g.device} ({trial}): "
                f"change {g.value_pct:+.2f}%, needs {g.bound}{why}"
            )
    if not trials:
        unsure.append("no trials")
    devices: dict[str, int] = defaultdict(int)
    case_ids = [case_id(c) for c in plan.workload.cases]
    for t in trials:
        if not t.provenance.planned:
            unsure.append(f"trial {t.index} ran on {device_label(t)}, a device the plan does not list")
        if t.status != "complete":
            unsure.append(f"trial {t.index} on {device_label(t)} is {t.status}")
        for f in t.failures:
            where = ", ".join(x for x in (f.case, f.side) if x)
            line = f"trial {t.index}: {f.kind}{' at ' + where if where else ''}: {f.message}"
            (failed if f.kind in ("fidelity", "fault", "timeout") else unsure).append(line)
        for c in t.cases:
            failed.extend(_case_problems(plan, t, c))
            if free_aa(t) and c.stats.case_class in ("faster", "slower"):
                unsure.append(
                    f"trial {t.index}, {c.case}: identical machine code and launches measured "
                    f"{c.stats.case_class} ({c.stats.delta_pct:+.2f}%): the timer does not resolve "
                    "this case"
                )
            if c.aa is not None and c.aa.case_class in ("faster", "slower") and t.status == "complete":
                notes.append(
                    f"trial {t.index}, {c.case}: this process's own A/A control read {c.aa.case_class} "
                    f"({c.aa.delta_pct:+.2f}%); the A/A is judged pooled over the device's trials, as the change is"
                )
            # the second timer: the event windows cannot be trusted where CUPTI saw otherwise
            for side, timers in c.kernels.timers.items() if c.kernels is not None else ():
                if not timers.agree:
                    unsure.append(f"trial {t.index}: {disagreement_text(c.case, side, timers)}")
            # Trace version 2's comparisons are said, never decisive: on the H200 CUPTI's traced
            # calls moved vecload's 4 Mi change by 9 points where the event samples stayed within
            # 0.6 point of ncu (benchmarks/timer/margin.py), so CUPTI is the timer that moves at
            # the short end and cannot veto the events. Version 3 does not say them at all: they
            # fired on nearly every case of correct records (qualify.evaluate.cupti_delta).
            notes.extend(f"trial {t.index}: {line}" for line in traced_disagreements(c, t.kernel_trace))
        for control in t.controls:
            # against a golden, a control that misbehaves is a fidelity failure naming what was
            # declared and what happened; "vacuous" would be wrong for one declared to pass
            if not control.caught and t.control_outcomes is None:
                failed.append(
                    f"trial {t.index}: negative control {control.name} at {control.case} "
                    "passed the fidelity gate: the gate is vacuous"
                )
        if t.status == "complete":
            devices[device_label(t)] += 1
            missing = [cid for cid in case_ids if cid not in {c.case for c in t.cases}]
            if missing:
                unsure.append(f"trial {t.index} lacks cases {', '.join(missing)}")
    for device, count in devices.items():
        if count < plan.schedule.trials:
            unsure.append(f"{device}: {count} of {plan.schedule.trials} planned trials complete")
    unsure.extend(
        f"{cid} on {device}: A/A control came out {p.case_class} ({p.delta_pct:+.2f}%, {pooled_text(n)}): "
        "the timer does not resolve this case"
        for device, cid, p, n in aa_pooled(trials)
    )
    unsure.extend(undecided)
    # a rate above the DRAM peak: the candidate's result cannot stand; the base's says the timer errs
    for side, reason in impossible_reasons(plan, by_device(trials)):
        (failed if side == "candidate" else unsure).append(reason)
    _sanitizer(plan, trials, failed, unsure)
    if failed:
        status = "not_qualified"
    elif unsure:
        status = "incomplete"
    else:
        status = "qualified"
    return Verdict(status=status, reasons=failed + unsure + notes, gates=gates)


def _sanitizer(plan: Plan, trials: list[Trial], failed: list[str], unsure: list[str]) -> None:
    by_device: dict[str, dict[tuple[str, str, str], SanitizerResult]] = defaultdict(dict)
    for t in trials:
        for r in t.sanitizer:
            by_device[device_label(t)][(r.tool, r.case, r.side)] = r
            if r.status != "clean":
                failed.append(
                    f"{r.tool} at {r.case} ({r.side}) on {device_label(t)}: {r.status}"
                    + (f", {r.errors} errors" if r.errors else "")
                )
    labels = {device_label(t) for t in trials if t.status == "complete"}
    for check in plan.acceptance.sanitizer:
        for cid in check.cases:
            for side in ARM_SIDES:
                for device in sorted(labels):
                    if (check.tool, cid, side) not in by_device[device]:
                        unsure.append(f"{check.tool} at {cid} ({side}) not run on {device}")
