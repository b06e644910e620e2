"""The engine's calls into golden-based fidelity, one per step, so `engine.py` stays a sequencer.

- `open_golden`: the plan's golden, provenance checked, or None when the plan has none;
- `case_inputs`: a case's inputs, seeded ones generated and golden ones read from the golden;
- `judge`: both arms' counts against the golden, the candidate's calibration, and what failed;
- `control`: one negative control's outcome against the golden and the plan's expectation.
"""

from __future__ import annotations

import numpy as np

from qualify.evaluate.tolerance_gate import calibrate, control_outcome, judge_case, passes
from qualify.plan.golden import Golden, load_golden
from qualify.plan.model import GoldenInit, Plan
from qualify.plan.resolve import ResolvedArm, ResolvedCase
from qualify.results.tolerance import CaseTolerance, ControlOutcome
from qualify.run import inputs as input_gen


def open_golden(loaded) -> Golden | None:
    if loaded.plan.acceptance.fidelity.golden is None:
        return None
    return load_golden(loaded.plan, loaded.path, loaded.files.root, loaded.cases)


def case_inputs(plan: Plan, golden: Golden | None, case_id: str, arm: ResolvedArm) -> dict[str, np.ndarray]:
    """Every input of one arm and case as flat uint8 arrays, by buffer name."""
    specs = [s for s in plan.workload.buffers if s.role == "input"]
    seeded = [s for s in specs if not isinstance(s.init, GoldenInit)]
    arrays = input_gen.generate_case(plan.seeds, case_id, [(s, arm.buffer(s.name)) for s in seeded])
    out = {s.name: a for s, a in zip(seeded, arrays)}
    for s in specs:
        if isinstance(s.init, GoldenInit):
            # the loader has checked the tensor exists with this buffer's dtype and shape
            out[s.name] = golden.expected(case_id, s.name).copy()
    return {s.name: out[s.name] for s in specs}


def _params(plan: Plan, case: ResolvedCase) -> dict:
    return {**plan.workload.params, **case.values}


def judge(
    plan: Plan, golden: Golden, case: ResolvedCase, outputs: dict[str, dict[str, np.ndarray]], dtypes: dict[str, str]
) -> tuple[CaseTolerance, list[str]]:
    """Counts of both arms against the golden; the candidate is the one gated (the base arm's
    counts say how far the old kernel sat from the same reference). Returns the problems found."""
    fid, params = plan.acceptance.fidelity, _params(plan, case)
    names = list(outputs["candidate"])
    expected = {n: golden.expected(case.id, n) for n in names}
    counts = {side: judge_case(fid, case.id, params, dtypes, expected, outputs[side]) for side in outputs}
    problems = [
        f"{c.output}: {c.elements - c.identical} of {c.elements} differ from the golden, worst "
        f"bound fraction {_fraction(c.worst_bound_fraction)} at index {c.worst_index}"
        for c in counts["candidate"]
        if not passes(c)
    ]
    resolutions = []
    if fid.calibration is not None:
        for n in names:
            r = calibrate(fid, fid.calibration, case.id, params, n, dtypes[n], expected[n], outputs["candidate"][n])
            resolutions.append(r)
            if r.vacuous:
                problems.append(
                    f"{n}: the gate caught no perturbation up to {fid.calibration.ceiling_quanta} "
                    "quanta: it is vacuous here"
                )
    return CaseTolerance(counts=counts, calibration=resolutions), problems


def control(
    plan: Plan, golden: Golden, case: ResolvedCase, control_spec, out: dict[str, np.ndarray], dtypes: dict[str, str]
) -> ControlOutcome:
    fid, params = plan.acceptance.fidelity, _params(plan, case)
    expected = {n: golden.expected(case.id, n) for n in out}
    return control_outcome(control_spec, case.id, params, judge_case(fid, case.id, params, dtypes, expected, out))


def control_problem(outcome: ControlOutcome) -> str | None:
    """Why a control is not as declared, per output, or None when it is."""
    if outcome.as_declared:
        return None
    wrong = [
        f"{o} declared {outcome.expected[o]} but {'passed' if outcome.passed[o] else 'failed'} "
        f"(worst bound fraction {_fraction(outcome.worst_bound_fraction[o])})"
        for o in outcome.expected
        if outcome.passed[o] != (outcome.expected[o] == "pass")
    ]
    return f"negative control {outcome.control} is not as declared: " + "; ".join(wrong)


def _fraction(value: float | None) -> str:
    return "infinite" if value is None else f"{value:.3g}"
