"""Gates and the verdict: the plan's acceptance criteria applied to a record's trials.

A verdict is data. "not_qualified" means the candidate failed a pre-registered criterion;
"incomplete" means the evidence is insufficient to decide (missing trials, a failed A/A control,
sanitizer checks not run, an unplanned device); "qualified" needs every criterion met on every
device. The CLI derives the exit code from it last.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from qualify.plan.checks import selected_cases
from qualify.plan.model import Fidelity, Plan, SpeedGate
from qualify.plan.resolve import case_id
from qualify.results.model import BufferParity, CaseTrial, GateResult, Trial, Verdict


def device_label(trial: Trial) -> str:
    d = trial.provenance.device
    return f"{d.name} ({d.uuid[:12]})"


def fidelity_passes(parity: list[BufferParity], fidelity: Fidelity) -> bool:
    for p in parity:
        if fidelity.mode == "bytes" and not p.equal:
            return False
        if fidelity.mode == "ulp" and not p.equal and (p.max_ulp is None or p.max_ulp > fidelity.bound):
            return False
        if fidelity.mode == "abs" and not p.equal and (p.max_abs is None or p.max_abs > fidelity.bound):
            return False
        if fidelity.mode == "rel" and not p.equal and (p.max_rel is None or p.max_rel > fidelity.bound):
            return False
    return True


def _judge(gate: SpeedGate, ratio: float, case_class: str | None) -> tuple[bool, float, str]:
    """(passed, value, bound) for one gate on one ratio; value is the speed-up in %."""
    speedup = (1.0 - ratio) * 100.0
    checks, bounds = [], []
    if gate.min_speedup_pct is not None:
        # a speed-up must also be resolved by the interval, not only by the point estimate
        checks.append(speedup >= gate.min_speedup_pct and case_class in ("faster", None))
        bounds.append(f"speed-up >= {gate.min_speedup_pct:g}%")
    if gate.max_regression_pct is not None:
        checks.append(-speedup <= gate.max_regression_pct)
        bounds.append(f"regression <= {gate.max_regression_pct:g}%")
    return all(checks), speedup, " and ".join(bounds)


def gate_results(plan: Plan, trials: list[Trial]) -> list[GateResult]:
    complete = [t for t in trials if t.status == "complete"]
    by_device: dict[str, list[Trial]] = defaultdict(list)
    for t in complete:
        by_device[device_label(t)].append(t)
    out = []
    for gate in plan.acceptance.gates:
        for cid in selected_cases(gate, plan):
            for device, dtrials in by_device.items():
                rows = [(t.index, c) for t in dtrials for c in t.cases if c.case == cid]
                if not rows:
                    continue
                if gate.every_trial:
                    for index, c in rows:
                        passed, value, bound = _judge(gate, c.stats.ratio, c.stats.case_class)
                        out.append(GateResult(gate=gate.name, case=cid, trial=index, device=device,
                                              passed=passed, value_pct=value, bound=bound))  # fmt: skip
                else:
                    ratio = statistics.median(c.stats.ratio for _, c in rows)
                    passed, value, bound = _judge(gate, ratio, None)
                    out.append(GateResult(gate=gate.name, case=cid, trial=None, device=device,
                                          passed=passed, value_pct=value, bound=bound))  # fmt: skip
    return out


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


def verdict(plan: Plan, trials: list[Trial]) -> Verdict:
    failed: list[str] = []  # the candidate failed a criterion
    unsure: list[str] = []  # the evidence cannot decide
    gates = gate_results(plan, trials)
    for g in gates:
        if not g.passed:
            trial = f"trial {g.trial}" if g.trial is not None else "median of trials"
            failed.append(f"gate {g.gate} missed at {g.case} on {g.device} ({trial}): "
                          f"speed-up {g.value_pct:+.2f}%, needs {g.bound}")  # fmt: skip
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
            if c.aa is not None and c.aa.case_class in ("faster", "slower"):
                unsure.append(f"trial {t.index}, {c.case}: A/A control came out {c.aa.case_class} "
                              f"({c.aa.delta_pct:+.2f}%): the timer does not resolve this case")  # fmt: skip
        for control in t.controls:
            if not control.caught:
                failed.append(f"trial {t.index}: negative control {control.name} at {control.case} "
                              "passed the fidelity gate: the gate is vacuous")  # fmt: skip
        if t.status == "complete":
            devices[device_label(t)] += 1
            missing = [cid for cid in case_ids if cid not in {c.case for c in t.cases}]
            if missing:
                unsure.append(f"trial {t.index} lacks cases {', '.join(missing)}")
    for device, count in devices.items():
        if count < plan.schedule.trials:
            unsure.append(f"{device}: {count} of {plan.schedule.trials} planned trials complete")
    _sanitizer(plan, trials, failed, unsure)
    if failed:
        status = "not_qualified"
    elif unsure:
        status = "incomplete"
    else:
        status = "qualified"
    return Verdict(status=status, reasons=failed + unsure, gates=gates)


def _sanitizer(plan: Plan, trials: list[Trial], failed: list[str], unsure: list[str]) -> None:
    by_device: dict[str, dict] = defaultdict(dict)
    for t in trials:
        for r in t.sanitizer:
            by_device[device_label(t)][(r.tool, r.case, r.side)] = r
            if r.status != "clean":
                failed.append(f"{r.tool} at {r.case} ({r.side}) on {device_label(t)}: {r.status}"
                              + (f", {r.errors} errors" if r.errors else ""))  # fmt: skip
    labels = {device_label(t) for t in trials if t.status == "complete"}
    for check in plan.acceptance.sanitizer:
        for cid in check.cases:
            for side in ("base", "candidate"):
                for device in sorted(labels):
                    if (check.tool, cid, side) not in by_device[device]:
                        unsure.append(f"{check.tool} at {cid} ({side}) not run on {device}")
