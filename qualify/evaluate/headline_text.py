"""The headline in words: two to four sentences that open a record, and the verdict's reasons.

Every label a plan author wrote (case ids, gate names, device names, reasons) passes through the
escape function of the format the words land in (Markdown or a terminal); the words qualify adds
do not. Percentages are changes in time per launch, worded by direction: "slower by 12 %" is
12 % more time, "faster by 6 %" is 6 % less time. A sign is never left for the reader to interpret.
"""

from __future__ import annotations

from typing import Callable

from qualify.evaluate.headline_model import (
    MIXED,
    UNMEASURED,
    Checks,
    DeviceEffect,
    Fidelity,
    GateMiss,
    Headline,
    Run,
)
from qualify.evaluate.stats import SAME_BAND

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
    if run.case_class in ("slower", "faster"):
        assert lo is not None and hi is not None  # a run of one measured class has every case's delta
        return f"{run.case_class} {where}, by {pct_range(lo, hi)}"
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
    if d.pooled:
        basis = (
            f"time per launch, pooled over {trials}, each its own process"
            if d.complete_trials != 1
            else f"time per launch, from {trials}"
        )
    else:
        basis = f"time per launch, median of {trials}"
    if d.free_aa:
        return (
            f"{on} candidate runs the base's machine code with the same launches: no change by "
            f"construction (a free A/A); the timer measured it {phrases} ({basis})."
        )
    text = f"{on} candidate is {phrases} ({basis})."
    if d.crossover is not None:
        x = d.crossover
        edge = "from" if x.direction == ">=" else "up to"
        value = x.value if isinstance(x.value, int) else f"{x.value:g}"  # 4194304, never 4.1943e+06
        text += (
            f" It crosses over: faster {edge} {esc(x.parameter)}={value}; the data would support a gate "
            f"where {esc(x.parameter)} {x.direction} {value} with a change of at most "
            f"-{x.supported_speedup_pct:g} % in a new, separately frozen plan (this verdict stands)."
        )
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


_AA_CLASS = {"cant_tell": "can't tell", "same": "same", "faster": "faster", "slower": "slower"}


def checks_sentence(c: Checks, esc: Escape) -> str:
    parts = []
    if c.aa_declared:
        if not c.aa_runs:
            parts.append("A/A control not run")
        else:
            counts = ", ".join(f"{n} {_AA_CLASS.get(cls, cls)}" for cls, n in c.aa_classes)
            if c.aa_pooled_resolved:
                parts.append(
                    f"A/A control of {c.aa_runs} runs: {counts}; pooled over a device's trials, a difference "
                    f"that is not there came out: {_cases(c.aa_pooled_resolved, esc)}"
                )
            elif c.aa_resolved:
                parts.append(
                    f"A/A control of {c.aa_runs} runs: {counts}; in one process a difference that is not there "
                    f"came out ({_cases(c.aa_resolved, esc)}), pooled over the device's trials none did"
                )
            else:
                parts.append(f"A/A control of {c.aa_runs} runs: {counts}; none came out faster or slower")
    if c.negative_declared:
        if not c.negative_runs:
            parts.append("negative controls not run")
        elif c.negative_missed and c.negative_declared_outcomes:
            parts.append(
                f"negative control NOT as declared: {_cases(c.negative_missed, esc)} "
                "(the gate, or the declaration, is wrong there)"
            )
        elif c.negative_missed:
            parts.append(
                f"negative control NOT caught: {_cases(c.negative_missed, esc)} (the fidelity gate is vacuous)"
            )
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
    lo, hi = m.low_change_pct, m.high_change_pct
    if lo > 0:
        values = f"slower by {pct_range(lo, hi)}"
    elif hi <= 0:
        values = f"faster by only {pct_range(lo, hi)}"
        if m.unresolved:
            values = f"faster by {pct_range(lo, hi)}, not resolved by every trial's 95 % interval"
    else:
        values = f"from {pct(lo)} faster to {pct(hi)} slower"
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


def cause_lines(h: Headline, esc: Escape) -> list[str]:
    """Per case, why it moved: its change, then the arms' geometry, occupancy and throughput side by
    side (base → candidate where they differ, "both" where they agree)."""
    many = len(h.devices) > 1
    lines = [
        f"{esc(c.case)}{f' on {esc(c.device)}' if many else ''} ({c.delta_pct:+.1f} % time per launch): {esc(c.text)}"
        for c in h.causes
    ]
    if h.causes_left:
        lines.append(f"… and {h.causes_left} more cases: see the kernels and resources tables.")
    return lines
