"""Markdown for golden-gated records: the seed's count table, control table and gate resolution.

Each function returns lines and never prints; the README template (qualify/render/readme.py)
decides where they go. Nothing is recomputed here: every number comes from the trial files.
"""

from __future__ import annotations

from qualify.plan.model import Fidelity, Mutation, Plan, ToleranceRule
from qualify.plan.resolve import case_id
from qualify.results.model import Results, Trial
from qualify.results.tolerance import ParityCounts


def fidelity_text(f: Fidelity) -> str:
    """The tolerance mode's sentence (render.fidelity_text covers bytes/ulp/abs/rel)."""
    against = f"the golden file `{f.golden}`" if f.against == "golden" else "the base arm's outputs"
    text = f"outputs within |err| ≤ {f.atol:g} + {f.rtol:g}·|expected| of {against}"
    if f.golden_script:
        text += f" (written by `{f.golden_script}`)"
    if f.exact:
        text += "; bit-exact where selected"
    return text


def rule_words(rule: ToleranceRule | None, f: Fidelity, atol: float | None = None) -> str:
    """One bound in words: a rule's (None: the plan's global bound); `atol`, when known, is the
    absolute part a trial derived from the expected values (golden or base arm) for an `atol_quanta` rule."""
    if rule is None:
        return f"|err| ≤ {f.atol:g} + {f.rtol:g}·|expected|"
    if rule.bit_exact:
        return "bit-exact"
    if rule.atol is not None:
        return f"|err| ≤ {rule.atol:g} + {rule.rtol:g}·|expected|"
    k = f"{rule.atol_quanta:g} {'quantum' if rule.atol_quanta == 1 else 'quanta'}"
    at = f" ({atol:.3g})" if atol is not None else ""
    rms = "the golden's RMS" if f.against == "golden" else "the base arm's RMS"
    return f"|err| ≤ {k} of the output's dtype at {rms}{at} + {rule.rtol:g}·|expected|"


def _selection(rule: ToleranceRule) -> str:
    cases = ", ".join(rule.cases) if rule.cases is not None else (f"where {rule.where}" if rule.where else "every case")
    outputs = "every output" if rule.outputs is None else ", ".join(rule.outputs)
    return f"{cases}, {outputs}"


def tolerances_text(f: Fidelity) -> str:
    """The per-case rules of a plan that has them, in order (the first that selects rules)."""
    rules = "; ".join(f"({i}) {_selection(r)}: {rule_words(r, f)}" for i, r in enumerate(f.tolerances, 1))
    return f"per case and output, the first rule that selects it: {rules}; otherwise {rule_words(None, f)}"


def bounds_table(plan: Plan, results: Results) -> list[str]:
    """Each case's bound per output in words, with the absolute part as the first trial that
    judged the case derived it from the golden; only for plans with per-case tolerances."""
    from qualify.evaluate.tolerance_gate import is_exact, rule_for

    f = plan.acceptance.fidelity
    if not f.tolerances:
        return []
    outputs = [b.name for b in plan.workload.buffers if b.role == "output"]
    derived: dict[tuple[str, str], float] = {}
    for t in results.trials:
        for c in t.cases:
            for n in c.tolerance.counts["candidate"] if c.tolerance is not None else []:
                derived.setdefault((c.case, n.output), n.atol)
    lines = ["| case | output | bound |", "|---|---|---|"]
    for case in plan.workload.cases:
        cid, params = case_id(case), {**plan.workload.params, **case}
        for o in outputs:
            if is_exact(f, cid, params, o):
                words = "bit-exact"
            else:
                words = rule_words(rule_for(f, cid, params, o), f, derived.get((cid, o)))
            lines.append(f"| {cid} | `{o}` | {words.replace('|', chr(92) + '|')} |")
    return lines


def mutation_text(m: Mutation) -> str:
    """The fill and swap mutations' words (render.control_text covers the others)."""
    if m.op == "fill":
        return f"every element set to {m.value:g}"
    if m.op == "swap":
        return f"{m.length} elements at {m.index} exchanged with those at {m.other}"
    raise ValueError(m.op)


def _fraction(value: float | None) -> str:
    return "∞" if value is None else f"{value:.3g}"


def counts_cell(c: ParityCounts) -> str:
    text = f"{c.identical}/{c.elements} bit-identical"
    extra = []
    if c.one_quantum:
        extra.append(f"{c.one_quantum} one-quantum")
    if c.over_one_quantum:
        extra.append(f"{c.over_one_quantum} over one")
    if c.over_two_quanta:
        extra.append(f"{c.over_two_quanta} over two")
    if c.non_finite:
        extra.append(f"{c.non_finite} non-finite")
    if c.identical != c.elements:
        extra.append(f"max abs {c.max_abs:.2g}")
        if c.max_rel is not None:
            extra.append(f"max rel {c.max_rel:.2g}")
    extra.append(f"bound {_fraction(c.worst_bound_fraction)}")
    return text + (f" ({', '.join(extra)})" if extra else "")


def counts_table(trial: Trial, side: str = "candidate") -> list[str]:
    """One row per case, one column per output, as the seed's table."""
    cases = [c for c in trial.cases if c.tolerance is not None and side in c.tolerance.counts]
    if not cases:
        return []  # none, or the side is the expectation itself (against the base arm)
    outputs = [c.output for c in cases[0].tolerance.counts[side]]
    lines = ["| case | " + " | ".join(f"`{o}`" for o in outputs) + " |", "|---|" + "---|" * len(outputs)]
    for case in cases:
        by_output = {c.output: c for c in case.tolerance.counts[side]}
        lines.append(f"| {case.case} | " + " | ".join(counts_cell(by_output[o]) for o in outputs) + " |")
    return lines


def controls_table(trial: Trial) -> list[str]:
    """Each control per case: declared and measured, with the worst bound fraction per output."""
    if not trial.control_outcomes:
        return []
    lines = [
        "| control | case | output | declared | gate | worst bound fraction | as declared |",
        "|---|---|---|---|---|---:|---|",
    ]
    for o in trial.control_outcomes:
        for output, expected in o.expected.items():
            lines.append(
                f"| {o.control} | {o.case} | `{output}` | {expected} | "
                f"{'pass' if o.passed[output] else 'fail'} | {_fraction(o.worst_bound_fraction[output])} | "
                f"{'yes' if o.as_declared else '**no**'} |"
            )
    return lines


def resolution_lines(trial: Trial) -> list[str]:
    """The gate's resolution per case and output: the smallest perturbation it caught."""
    lines = []
    for case in trial.cases:
        if case.tolerance is None:
            continue
        for r in case.tolerance.calibration:
            s = r.smallest_caught
            if s is None:
                ceiling = max(step.quanta for step in r.steps)
                lines.append(f"- {r.case}, `{r.output}`: **vacuous**, no perturbation up to {ceiling} quanta caught")
            else:
                lines.append(
                    f"- {r.case}, `{r.output}`: caught from {s.quanta} "
                    f"{'quantum' if s.quanta == 1 else 'quanta'} on {s.elements} "
                    f"{'element' if s.elements == 1 else 'elements'} (bound fraction "
                    f"{_fraction(s.worst_bound_fraction)})"
                )
    return lines
