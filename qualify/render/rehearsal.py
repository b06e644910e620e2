"""REHEARSAL.md: a CPU rehearsal (`qualify plan rehearse`) in the shape of a record's fidelity
section, under a banner that says what it is not. Formats values computed elsewhere."""

from __future__ import annotations

from types import SimpleNamespace

from qualify.plan.model import Plan
from qualify.render.markdown import code, md
from qualify.render.readme import fidelity_text
from qualify.render.tolerance_text import bounds_table, counts_cell
from qualify.results.rehearsal import Rehearsal

BANNER = "> **REHEARSAL, NOT A RECORD.** "


def _parity_cell(p) -> str:
    if p.equal:
        return f"identical ({p.elements} elements)"
    return f"{p.differing_elements} of {p.elements} differ, up to {p.max_ulp} ulp"


def rehearsal_markdown(plan: Plan, r: Rehearsal) -> str:
    lines = [
        f"# {md(plan.name)}: rehearsal",
        "",
        BANNER + md(r.not_a_record) + ".",
        "",
        f"- Plan digest: {code(r.plan_digest)} ({'frozen' if r.frozen else 'not frozen'})",
        f"- Hypothesis: {md(plan.hypothesis)}",
        f"- Fidelity contract: {fidelity_text(plan)}",
        f"- Expected values: {md(r.expected_from)}",
        f"- Simulated candidate: {md(r.simulation)} (seed {r.seed})",
        f"- Writes past a buffer's declared size: {md(r.buffer_bounds)}",
        "- Not rehearsed (they need the GPU): timing and the speed gates, the sanitizer, build and callable controls",
        "",
        "## Verdict of the rehearsal",
        "",
    ]
    if r.problems:
        lines += [f"The plan has {len(r.problems)} problem(s) to fix before GPU time is spent:", ""]
        lines += [f"- {md(p)}" for p in r.problems]
        if r.hint:
            lines += ["", f"Hint: {md(r.hint)}."]
    else:
        lines.append("No problem found in what a CPU can rehearse.")
    bounds = bounds_table(plan, SimpleNamespace(trials=[]))
    if bounds:
        lines += ["", "## Each case's bound, per output", "", *bounds]
    lines += ["", "## Cases", "", "| case | inputs (sha256) | simulated candidate | passes |", "|---|---|---|---|"]
    for c in r.cases:
        inputs = ", ".join(f"{md(n)} {code(d[:12])}" for n, d in c.input_sha256.items()) or "not generated"
        if not c.simulated:
            outcome, passed = "not simulated", "n/a"
        else:
            cells = [f"{code(x.output)}: {counts_cell(x)}" for x in c.counts] + [
                f"{code(p.buffer)}: {_parity_cell(p)}" for p in c.parity
            ]
            outcome, passed = "; ".join(cells).replace("|", "\\|"), "yes" if c.passed else "**no**"
        lines.append(f"| {md(c.case)} | {inputs} | {outcome} | {passed} |")
    resolution = [
        f"- {md(x.case)}, {code(x.output)}: "
        + (
            "**vacuous**"
            if x.smallest_caught is None
            else f"caught from {x.smallest_caught.quanta} quanta on {x.smallest_caught.elements} elements"
        )
        for c in r.cases
        for x in c.calibration
    ]
    if resolution:
        lines += ["", "## The gate's resolution on the simulated candidate", "", *resolution]
    if r.controls:
        lines += ["", "## Negative controls", "", "| control | case | rehearsed | result |", "|---|---|---|---|"]
        for k in r.controls:
            if not k.simulated:
                result = f"not rehearsed: {md(k.note)}"
            elif k.outcome is not None:
                result = "as declared" if k.caught else "**NOT as declared**"
            else:
                result = "caught" if k.caught else "**NOT caught**: the gate cannot see it"
            lines.append(f"| {md(k.control)} | {md(k.case)} | {'yes' if k.simulated else 'no'} | {result} |")
    return "\n".join(lines) + "\n"
