"""The tolerance-gated fidelity of one case against its expected values: counts, controls, calibration.

The expected values are the golden's (`against: golden`) or the base arm's (`against: base`,
mode 'tolerance'); one entry model (`Fidelity`: exact, tolerances, atol and rtol) serves both.

Three pure steps over arrays the engine has already read back:
- `judge_case`: each output's parity counts under the bound the plan gives that case and output
  (bit-exact where `acceptance.fidelity.exact` or a bit_exact rule selects it, else the first
  matching `tolerances` rule's atol (or atol_quanta) + rtol·|expected|, else the global one);
- `control_outcome`: what a negative control did to the gate, against what the plan declared
  for that case and output ("must still pass here, must fail there");
- `calibrate`: the candidate's output perturbed by k quanta on n seeded elements, k doubling up
  to the plan's ceiling, and the smallest perturbation the gate catches — the gate's resolution.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from qualify import expr
from qualify.dtypes import BITS, ITEMSIZE, LARGEST_FINITE_BITS, MANTISSA, UNSIGNED, as_float64
from qualify.evaluate.parity_counts import count
from qualify.plan.model import BuildControl, Calibration, CaseSelector, Fidelity, InputControl, ToleranceRule
from qualify.results.tolerance import ControlOutcome, MutationResolution, MutationStep, ParityCounts

Params = Mapping[str, int | float]


def selects(selector: CaseSelector, case_id: str, params: Params) -> bool:
    """Whether a selector (cases or where; neither: every case) takes this case."""
    if selector.cases is not None:
        return case_id in selector.cases
    if selector.where is not None:
        return bool(expr.evaluate(selector.where, params))
    return True


def is_exact(fidelity: Fidelity, case_id: str, params: Params, output: str) -> bool:
    if fidelity.mode == "bytes":
        return True
    return any(selects(s, case_id, params) and (s.outputs is None or output in s.outputs) for s in fidelity.exact)


def rule_for(fidelity: Fidelity, case_id: str, params: Params, output: str) -> ToleranceRule | None:
    """The first `tolerances` entry that selects this case and output, or None (the global bound)."""
    for rule in fidelity.tolerances:
        if selects(rule, case_id, params) and (rule.outputs is None or output in rule.outputs):
            return rule
    return None


def quantum_at_rms(dtype: str, expected: np.ndarray) -> float:
    """One representable step of `dtype` at the RMS magnitude of the expected values: the spacing
    2^(e - mantissa bits) of the binade [2^e, 2^(e+1)) that holds the RMS. An all-zero expectation
    has no magnitude to speak of; its quantum is the dtype's smallest normal step."""
    finite = as_float64(expected, dtype)
    finite = finite[np.isfinite(finite)]
    rms = float(np.sqrt(np.mean(np.square(finite)))) if finite.size else 0.0
    mantissa, min_exponent = MANTISSA[dtype]
    exponent = max(int(np.floor(np.log2(rms))), min_exponent) if rms > 0 else min_exponent
    return float(np.ldexp(1.0, exponent - mantissa))


def declared_bound(fidelity: Fidelity, case_id: str, params: Params, output: str) -> tuple[float | None, float]:
    """(atol, rtol) as the plan declares them for one output in one case: zero for bit-exact
    (exact selectors first, then a bit_exact rule), the first matching rule's, else the global
    ones. atol is None where the rule gives it in quanta: only the expected values can say how much that is."""
    if is_exact(fidelity, case_id, params, output):
        return 0.0, 0.0
    rule = rule_for(fidelity, case_id, params, output)
    if rule is None:
        return float(fidelity.atol or 0.0), float(fidelity.rtol or 0.0)
    if rule.bit_exact:
        return 0.0, 0.0
    assert rule.rtol is not None  # ToleranceRule's validator: a rule that is not bit_exact gives rtol
    return (None if rule.atol is None else float(rule.atol)), float(rule.rtol)


def bound_for(
    fidelity: Fidelity, case_id: str, params: Params, output: str, dtype: str, expected: np.ndarray
) -> tuple[float, float]:
    """(atol, rtol) of one output in one case, an atol in quanta made absolute from the expected values."""
    atol, rtol = declared_bound(fidelity, case_id, params, output)
    if atol is None:  # only a rule with atol_quanta leaves the absolute bound open
        rule = rule_for(fidelity, case_id, params, output)
        if rule is None or rule.atol_quanta is None:
            raise ValueError(f"{case_id}/{output}: no absolute bound and no atol_quanta to derive one from")
        atol = rule.atol_quanta * quantum_at_rms(dtype, expected)
    return float(atol), rtol


def judge_output(
    fidelity: Fidelity, case_id: str, params: Params, output: str, dtype: str, expected: np.ndarray, actual: np.ndarray
) -> ParityCounts:
    atol, rtol = bound_for(fidelity, case_id, params, output, dtype, expected)
    return count(output, dtype, expected, actual, atol=atol, rtol=rtol, rel_floor=fidelity.rel_floor)


def passes(counts: ParityCounts) -> bool:
    """A bit-exact output (zero bound) needs every bit pattern equal: +0 for -0 is a difference there."""
    if counts.atol == 0.0 and counts.rtol == 0.0:
        return counts.identical == counts.elements
    return counts.within


def judge_case(
    fidelity: Fidelity,
    case_id: str,
    params: Params,
    dtypes: Mapping[str, str],
    expected: Mapping[str, np.ndarray],
    actual: Mapping[str, np.ndarray],
) -> list[ParityCounts]:
    return [
        judge_output(fidelity, case_id, params, name, dtypes[name], expected[name], actual[name]) for name in expected
    ]


def expected_outcome(control: InputControl | BuildControl, case_id: str, params: Params, output: str) -> str:
    """The plan's declaration for this case and output: the first matching entry, else 'fail'."""
    for entry in control.expect:
        if selects(entry, case_id, params) and (entry.outputs is None or output in entry.outputs):
            return entry.outcome
    return "fail"


def control_outcome(
    control: InputControl | BuildControl, case_id: str, params: Params, counts: list[ParityCounts]
) -> ControlOutcome:
    """A control behaves as declared when every output passes where it must pass and fails where it
    must fail. An output declared 'fail' that passes means the gate cannot see that fault (vacuous);
    one declared 'pass' that fails means the gate, or the declaration, is mis-specified."""
    expected = {c.output: expected_outcome(control, case_id, params, c.output) for c in counts}
    passed = {c.output: passes(c) for c in counts}
    return ControlOutcome(
        control=control.name,
        case=case_id,
        expected=expected,
        passed=passed,
        worst_bound_fraction={c.output: c.worst_bound_fraction for c in counts},
        as_declared=all(passed[o] == (expected[o] == "pass") for o in expected),
    )


def perturb(actual: np.ndarray, dtype: str, quanta: int, elements: int, seed: int) -> np.ndarray:
    """A copy of `actual` with `elements` seeded elements moved `quanta` steps away from zero on
    the dtype's grid (magnitude bits + k; saturating below the exponent's all-ones pattern, so the
    result stays finite)."""
    largest_finite = LARGEST_FINITE_BITS[dtype]
    unsigned = UNSIGNED[ITEMSIZE[dtype]]
    words = actual.copy().view(unsigned)
    n = words.size
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(quanta, elements))))
    chosen = rng.choice(n, size=min(elements, n), replace=False)
    sign = np.uint64(1) << np.uint64(BITS[dtype] - 1)
    w = words[chosen].astype(np.uint64)
    magnitude = np.minimum(w & (sign - np.uint64(1)), np.uint64(largest_finite)).astype(np.int64)
    up = magnitude + quanta
    # near the largest finite value the step goes toward zero instead, to stay finite
    moved = np.where(up <= largest_finite, up, np.maximum(magnitude - quanta, 0)).astype(np.uint64)
    words[chosen] = ((w & sign) | moved).astype(unsigned)
    out: np.ndarray = words.view(np.uint8)
    return out


def calibrate(
    fidelity: Fidelity,
    calibration: Calibration,
    case_id: str,
    params: Params,
    output: str,
    dtype: str,
    expected: np.ndarray,
    actual: np.ndarray,
) -> MutationResolution:
    """Every (k, n) with k = 1, 2, 4 … up to the ceiling and n from the plan; the smallest caught
    perturbation is the one with the fewest quanta, then the fewest elements."""
    steps = []
    k = 1
    while k <= calibration.ceiling_quanta:
        for n in calibration.elements:
            counts = judge_output(
                fidelity, case_id, params, output, dtype, expected, perturb(actual, dtype, k, n, calibration.seed)
            )
            steps.append(
                MutationStep(
                    quanta=k, elements=n, caught=not passes(counts), worst_bound_fraction=counts.worst_bound_fraction
                )
            )
        k *= 2
    caught = [s for s in steps if s.caught]
    smallest = min(caught, key=lambda s: (s.quanta, s.elements)) if caught else None
    return MutationResolution(
        output=output, case=case_id, steps=steps, smallest_caught=smallest, vacuous=smallest is None
    )
