"""The engine's calls into counted fidelity, one per step, so `engine.py` stays a sequencer.

Counted fidelity (`Fidelity.counted`) judges each output of each case by element counts under the
bound its entry gives it: against the golden's outputs, or, in mode 'tolerance' against the base
arm, against the base arm's outputs of the same case (one entry model, two sources of expected values).

- `open_golden`: the plan's golden, provenance checked, or None when the plan has none;
- `case_inputs`: a case's inputs, seeded ones generated and golden ones read from the golden;
- `expected`: the values a case's candidate is judged against (the golden's, else the base arm's);
- `judge`: the counts against them, the candidate's calibration, and what failed;
- `control`: one negative control's outcome against them and the plan's expectation.
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


def case_inputs(
    plan: Plan, golden: Golden | None, case_id: str, arm: ResolvedArm, store: input_gen.InputStore | None = None
) -> dict[str, np.ndarray]:
    """Every input of one arm and case as flat uint8 arrays, by buffer name (seeded ones kept in
    `store` for the run's later trial processes)."""
    specs = [s for s in plan.workload.buffers if s.role == "input"]
    seeded = [s for s in specs if not isinstance(s.init, GoldenInit)]
    arrays = input_gen.generate_case(plan.seeds, case_id, [(s, arm.buffer(s.name)) for s in seeded], store=store)
    out = {s.name: a for s, a in zip(seeded, arrays)}
    for s in specs:
        if isinstance(s.init, GoldenInit):
            # the loader has checked the tensor exists with this buffer's dtype and shape
            out[s.name] = golden.expected(case_id, s.name).copy()
    return {s.name: out[s.name] for s in specs}


def _params(plan: Plan, case: ResolvedCase) -> dict:
    return {**plan.workload.params, **case.values}


def expected(golden: Golden | None, case_id: str, outputs: dict[str, dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Each output's expected bytes for one case: the golden's, else the base arm's first run."""
    if golden is None:
        return dict(outputs["base"])
    return {n: golden.expected(case_id, n) for n in outputs["candidate"]}


def judge(
    plan: Plan,
    golden: Golden | None,
    case: ResolvedCase,
    outputs: dict[str, dict[str, np.ndarray]],
    dtypes: dict[str, str],
) -> tuple[CaseTolerance, list[str]]:
    """Counts against the expected values; the candidate is the one gated. Against a golden the
    base arm's counts are kept too (how far the old kernel sat from the same reference); against
    the base arm only the candidate's are. Returns the problems found."""
    fid, params = plan.acceptance.fidelity, _params(plan, case)
    names = list(outputs["candidate"])
    want = expected(golden, case.id, outputs)
    sides = list(outputs) if golden is not None else ["candidate"]
    source = "the golden" if golden is not None else "the base arm"
    counts = {side: judge_case(fid, case.id, params, dtypes, want, outputs[side]) for side in sides}
    problems = [
        f"{c.output}: {c.elements - c.identical} of {c.elements} differ from {source}, worst "
        f"bound fraction {_fraction(c.worst_bound_fraction)} at index {c.worst_index}"
        for c in counts["candidate"]
        if not passes(c)
    ]
    resolutions = []
    if fid.calibration is not None:
        for n in names:
            r = calibrate(fid, fid.calibration, case.id, params, n, dtypes[n], want[n], outputs["candidate"][n])
            resolutions.append(r)
            if r.vacuous:
                problems.append(
                    f"{n}: the gate caught no perturbation up to {fid.calibration.ceiling_quanta} "
                    "quanta: it is vacuous here"
                )
    return CaseTolerance(counts=counts, calibration=resolutions), problems


def control(
    plan: Plan,
    golden: Golden | None,
    case: ResolvedCase,
    control_spec,
    out: dict[str, np.ndarray],
    dtypes: dict[str, str],
    base: dict[str, np.ndarray],
) -> ControlOutcome:
    """A control's candidate outputs `out` judged against the golden, else the base arm's `base`."""
    fid, params = plan.acceptance.fidelity, _params(plan, case)
    want = expected(golden, case.id, {"base": base, "candidate": out})
    return control_outcome(control_spec, case.id, params, judge_case(fid, case.id, params, dtypes, want, out))


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
