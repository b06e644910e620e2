"""The regression gate's judgement of one arm, before (base revision) against after (working tree).

Per case, from the record's pooled interval on its one machine and the plan's gate policy
(`plan.gate`, the first rule that selects the case):

- slower: the whole interval above 1 and the change beyond max_regression_pct;
- faster: the whole interval below 1 and the change beyond max_regression_pct;
- unchanged: the whole interval inside ±detect_pct (a change the gate must see would have shown);
- can't tell: anything else, with the smallest change the case could resolve.

A case whose smallest resolvable change (MDE) exceeds detect_pct is flagged underpowered, whatever
its class. Once the plan's trials are complete, the gate adds trial processes, one at a time, while
a timed case stays underpowered and budget.max_trials has room (`more_trials`); each added trial is
a trial of the record, with its reason. The rule reads the interval's width alone, never where it
lies: a gate that added trials until a change looked significant would raise its own false-alarm
rate (optional stopping), where one that adds them until it can see detect_pct does not.
Identical machine code with identical launches is its own class and needs no timing.
The bytes are their own finding: identical in every trial, different within the plan's fidelity
bound, or beyond it (a fidelity failure the trial recorded).

The outcome over a gate: fail (exit 1) when any case is slower or its bytes moved beyond the
bound; incomplete (exit 7) when any case can't tell or any protocol or arm could not be gated;
pass (exit 0) otherwise. Pure functions: no files, no device.
"""

from __future__ import annotations

from collections.abc import Iterable

from qualify.errors import ExitCode
from qualify.evaluate.tolerance_gate import selects
from qualify.evaluate.verdict import device_label
from qualify.plan.model import GateRule, Plan
from qualify.plan.resolve import ResolvedCase
from qualify.results.gate import GateArm, GateCase, GateProtocol, Outcome
from qualify.results.model import PooledStats, Results, Trial


def rule_for(plan: Plan, case: ResolvedCase) -> GateRule:
    return plan.gate.rule_for(lambda rule: selects(rule, case.id, case.values))


def classify(stats: PooledStats | None, rule: GateRule) -> tuple[str, str, bool]:
    """(class, reason, underpowered) of one timed case under `rule`."""
    if stats is None:
        return "cant_tell", "no complete trial timed this case", True
    mde = stats.mde_pct
    underpowered = mde is None or mde > rule.detect_pct
    resolves = "no interval" if mde is None else f"resolves {mde:.2f}%"
    lo, hi = stats.ci_low, stats.ci_high
    if lo is None or hi is None:
        return "cant_tell", f"no interval ({stats.reason})", True
    change = (stats.ratio - 1.0) * 100.0
    interval = f"95% CI [{(lo - 1) * 100:+.2f}%, {(hi - 1) * 100:+.2f}%]"
    if lo > 1.0 and change > rule.max_regression_pct:
        return (
            "slower",
            f"{interval} above 0 and {change:+.2f}% beyond the +{rule.max_regression_pct}% tolerated",
            underpowered,
        )
    if hi < 1.0 and -change > rule.max_regression_pct:
        return "faster", f"{interval} below 0 and {change:+.2f}% beyond ±{rule.max_regression_pct}%", underpowered
    band = rule.detect_pct / 100.0
    if 1.0 - band <= lo and hi <= 1.0 + band:
        return "unchanged", f"{interval} inside ±{rule.detect_pct}%", underpowered
    return (
        "cant_tell",
        f"{interval} leaves ±{rule.detect_pct}% without a change beyond the tolerance; {resolves}",
        underpowered,
    )


def bytes_finding(trials: Iterable[Trial], case: str) -> tuple[str, str]:
    """What happened to the outputs of `case` across the arm's trials."""
    beyond = [f.message for t in trials for f in t.failures if f.kind == "fidelity" and f.case in (case, None)]
    if beyond:
        return "beyond_tolerance", beyond[0]
    parities = [p for t in trials for c in t.cases if c.case == case for p in c.parity]
    if not parities:
        return "not_compared", "no trial compared this case's outputs"
    moved = [p for p in parities if not p.equal]
    if not moved:
        return "identical", f"every output byte-identical in {len({id(t) for t in trials})} trial(s)"
    worst = max(moved, key=lambda p: p.differing_elements)
    return (
        "within_tolerance",
        f"{worst.buffer}: {worst.differing_elements} of {worst.elements} elements differ, within the plan's bound",
    )


def one_machine(results: Results) -> str | None:
    """The one machine whose trials the gate reads; ValueError when the record holds several:
    a base measured on one machine is never compared with a change measured on another."""
    complete = [t for t in results.trials if t.status == "complete"]
    machines = sorted({device_label(t) for t in complete})
    if len(machines) > 1:
        raise ValueError(f"the gate's record holds trials from {len(machines)} machines ({', '.join(machines)})")
    return machines[0] if machines else None


def judge_timed(plan: Plan, cases: list[ResolvedCase], results: Results) -> tuple[str | None, list[GateCase]]:
    """Each case of an arm measured before against after, on its one machine."""
    machine = one_machine(results)
    pooled = results.pooled.get(machine, {}) if machine else {}
    complete = [t for t in results.trials if t.status == "complete"]
    out = []
    for case in cases:
        rule = rule_for(plan, case)
        stats = pooled.get(case.id)
        cls, reason, underpowered = classify(stats, rule)
        finding, detail = bytes_finding(results.trials, case.id)
        out.append(
            GateCase(
                case=case.id,
                gate_class=cls,
                reason=reason,
                ratio=stats.ratio if stats else None,
                ci_low=stats.ci_low if stats else None,
                ci_high=stats.ci_high if stats else None,
                delta_pct=stats.delta_pct if stats else None,
                mde_pct=stats.mde_pct if stats else None,
                max_regression_pct=rule.max_regression_pct,
                detect_pct=rule.detect_pct,
                underpowered=underpowered,
                bytes=finding,
                bytes_detail=detail,
                trials=sum(1 for t in complete if any(c.case == case.id for c in t.cases)),
            )
        )
    return machine, out


def more_trials(plan: Plan, results: Results, cases: list[GateCase]) -> str | None:
    """Why one more trial should run for this arm, or None: every trial so far complete (a failed
    or interrupted one is reported, never papered over by another), the device's trials below
    budget.max_trials, and a timed case whose smallest resolvable change is still above the change
    the gate must see (or unknown)."""
    if not results.trials or any(t.status != "complete" for t in results.trials):
        return None
    if not plan.schedule.trials <= len(results.trials) < plan.budget.max_trials:
        return None
    blind = [c for c in cases if c.underpowered and c.trials > 0]
    if not blind:
        return None
    first = blind[0]
    resolves = "no interval" if first.mde_pct is None else f"resolves {first.mde_pct:.2f}%"
    more = f" (and {len(blind) - 1} more case(s))" if len(blind) > 1 else ""
    return (
        f"added by qualify gate: after {len(results.trials)} trial(s), {first.case} {resolves}, "
        f"not the {first.detect_pct:g}% the gate must see{more}"
    )


def judge_identical(plan: Plan, cases: list[ResolvedCase], detail: str) -> list[GateCase]:
    """Identical machine code and launches on both sides: the same program, nothing to time."""
    out = []
    for case in cases:
        rule = rule_for(plan, case)
        out.append(
            GateCase(
                case=case.id,
                gate_class="identical_code",
                reason=detail,
                ratio=None,
                ci_low=None,
                ci_high=None,
                delta_pct=None,
                mde_pct=None,
                max_regression_pct=rule.max_regression_pct,
                detect_pct=rule.detect_pct,
                underpowered=False,
                bytes="identical",
                bytes_detail="the same machine code on the same inputs",
                trials=0,
            )
        )
    return out


def outcome(protocols: list[GateProtocol]) -> tuple[Outcome, ExitCode, str]:
    """The gate's outcome, its exit code and one line saying why."""
    arms: list[GateArm] = [a for p in protocols for a in p.arms]
    cases = [c for a in arms for c in a.cases]
    slower = sum(1 for c in cases if c.gate_class == "slower")
    moved = sum(1 for c in cases if c.bytes == "beyond_tolerance")
    unsure = sum(1 for c in cases if c.gate_class == "cant_tell")
    broken = sum(1 for p in protocols if p.status == "error") + sum(1 for a in arms if a.error is not None)
    counts = f"{len(protocols)} protocol(s), {len(cases)} case(s)"
    if slower or moved:
        return "fail", ExitCode.NOT_QUALIFIED, f"{counts}: {slower} slower, {moved} with outputs beyond the bound"
    if unsure or broken:
        return "incomplete", ExitCode.INCOMPLETE, f"{counts}: {unsure} can't tell, {broken} not gated"
    return "pass", ExitCode.QUALIFIED, f"{counts}: none slower, no output beyond its bound"
