"""Per-case fidelity modes, control expectations and mutation calibration, on the CPU."""

import numpy as np
import pytest
from float_patterns import LARGEST, SIGN, words

from qualify.evaluate.parity_counts import count
from qualify.evaluate.tolerance_gate import (
    calibrate,
    control_outcome,
    expected_outcome,
    is_exact,
    judge_output,
    passes,
    perturb,
)
from qualify.plan.model import Calibration, Fidelity, InputControl

ONE = 0x3F80  # bf16 1.0


def bf16(values):
    return np.asarray(values, dtype=np.uint16).view(np.uint8)


GOLDEN = {"against": "golden", "golden": "golden.safetensors"}


def fidelity(**extra):
    return Fidelity.model_validate({"mode": "tolerance", "atol": 0.0, "rtol": 2**-7, **GOLDEN, **extra})


SEEDLIKE = fidelity(exact=[{"cases": ["S=8"]}, {"where": "S <= 64", "outputs": ["weights"]}])


@pytest.mark.parametrize(
    "case, params, output, exact",
    [
        ("S=8", {"S": 8}, "out", True),  # the whole case
        ("S=64", {"S": 64}, "weights", True),  # only the weights of the short cases
        ("S=64", {"S": 64}, "out", False),
        ("S=2055", {"S": 2055}, "weights", False),
    ],
)
def test_exact_selection_by_case_and_output(case, params, output, exact):
    assert is_exact(SEEDLIKE, case, params, output) is exact


def test_exact_output_fails_on_one_quantum_that_tolerance_accepts():
    expected, actual = bf16([ONE] * 4), bf16([ONE, ONE + 1, ONE, ONE])
    exact = judge_output(SEEDLIKE, "S=8", {"S": 8}, "out", "bf16", expected, actual)
    loose = judge_output(SEEDLIKE, "S=2055", {"S": 2055}, "out", "bf16", expected, actual)
    assert not passes(exact) and passes(loose)
    assert loose.worst_bound_fraction == 1.0


def test_tolerance_against_base_is_accepted_and_against_float64_refused():
    base = Fidelity.model_validate({"mode": "tolerance", "atol": 0.0, "rtol": 0.1})
    assert base.against == "base" and base.counted
    with pytest.raises(ValueError, match="need against 'golden' or 'base'"):
        Fidelity.model_validate(
            {"mode": "tolerance", "atol": 0.0, "rtol": 0.1, "against": "float64", "reference": "r.py:f"}
        )


def test_bytes_mode_treats_signed_zeros_as_a_difference():
    c = count("o", "bf16", bf16([0x0000]), bf16([0x8000]))
    assert c.within and not passes(c)


GATE = InputControl.model_validate(
    {
        "kind": "input",
        "name": "saturate_gate",
        "buffer": "gate",
        "mutation": {"op": "fill", "value": 30.0},
        "expect": [{"outputs": ["weights"], "outcome": "pass"}],
    }
)
CAUSAL = InputControl.model_validate(
    {
        "kind": "input",
        "name": "causal_mask",
        "buffer": "mask",
        "mutation": {"op": "fill", "value": 1.0},
        "expect": [{"where": "S < 2000", "outcome": "pass"}, {"outcome": "fail"}],
    }
)


def test_expectations_first_match_rules_and_default_is_fail():
    assert expected_outcome(GATE, "S=8", {"S": 8}, "weights") == "pass"
    assert expected_outcome(GATE, "S=8", {"S": 8}, "out") == "fail"
    assert expected_outcome(CAUSAL, "S=64", {"S": 64}, "out") == "pass"
    assert expected_outcome(CAUSAL, "S=2055", {"S": 2055}, "weights") == "fail"


def _counts(output, fraction_quanta):
    expected = bf16([ONE] * 4)
    actual = bf16([ONE + fraction_quanta, ONE, ONE, ONE])
    return judge_output(fidelity(), "S=8", {"S": 8}, output, "bf16", expected, actual)


def test_control_as_declared_when_weights_pass_and_output_fails():
    outcome = control_outcome(GATE, "S=8", {"S": 8}, [_counts("weights", 0), _counts("out", 50)])
    assert outcome.expected == {"weights": "pass", "out": "fail"}
    assert outcome.passed == {"weights": True, "out": False}
    assert outcome.worst_bound_fraction["out"] == pytest.approx(50.0)
    assert outcome.as_declared


def test_control_that_stays_green_is_not_as_declared():
    outcome = control_outcome(GATE, "S=8", {"S": 8}, [_counts("weights", 0), _counts("out", 0)])
    assert not outcome.as_declared  # the gate cannot see a saturated gate: vacuous


def test_control_that_fails_where_it_must_pass_is_not_as_declared():
    outcome = control_outcome(GATE, "S=8", {"S": 8}, [_counts("weights", 3), _counts("out", 50)])
    assert not outcome.as_declared


@pytest.mark.parametrize(
    "dtype, data",
    [
        ("bf16", np.full(64, ONE, np.uint16)),
        ("f16", np.full(64, 0x3C00, np.uint16)),
        ("f32", np.linspace(-3, 3, 64, dtype=np.float32)),
    ],
)
@pytest.mark.parametrize("k", [1, 3])
def test_perturb_moves_exactly_n_elements_by_k_quanta(dtype, data, k):
    data = data.view(np.uint8)
    moved = perturb(data, dtype, k, 5, seed=7)
    c = count("o", dtype, data, moved)
    assert c.identical == 59
    assert (c.one_quantum, c.over_one_quantum) == ((5, 0) if k == 1 else (0, 5))
    assert c.over_two_quanta == (5 if k == 3 else 0)
    assert np.array_equal(moved, perturb(data, dtype, k, 5, seed=7))  # seeded
    assert not np.array_equal(moved, perturb(data, dtype, k, 5, seed=8))


def test_perturb_stays_finite_at_the_largest_value():
    top = bf16([0x7F7F, 0xFF7F])
    moved = perturb(top, "bf16", 4, 2, seed=0)
    c = count("o", "bf16", top, moved)
    assert c.non_finite == 0 and c.over_two_quanta == 2


def test_calibration_finds_the_smallest_caught_perturbation():
    cal = Calibration(ceiling_quanta=8, elements=[4, 1], seed=3)
    expected = bf16([ONE] * 32)
    # rtol 2^-7 at 1.0: one quantum up (2^-7) is exactly the bound, two quanta exceed it
    r = calibrate(fidelity(), cal, "S=2055", {"S": 2055}, "out", "bf16", expected, expected.copy())
    assert [(s.quanta, s.elements) for s in r.steps] == [(1, 1), (1, 4), (2, 1), (2, 4), (4, 1), (4, 4), (8, 1), (8, 4)]
    assert [s.caught for s in r.steps] == [False, False] + [True] * 6
    assert (r.smallest_caught.quanta, r.smallest_caught.elements) == (2, 1)
    assert not r.vacuous


def test_exact_case_catches_one_quantum():
    cal = Calibration(ceiling_quanta=4, elements=[1])
    expected = bf16([ONE] * 8)
    r = calibrate(SEEDLIKE, cal, "S=8", {"S": 8}, "out", "bf16", expected, expected.copy())
    assert (r.smallest_caught.quanta, r.smallest_caught.elements) == (1, 1)


def test_gate_too_loose_for_the_ceiling_is_vacuous():
    cal = Calibration(ceiling_quanta=16, elements=[1, 8])
    loose = Fidelity.model_validate({"mode": "tolerance", "atol": 1.0, "rtol": 0.0, **GOLDEN})
    expected = bf16([ONE] * 8)
    r = calibrate(loose, cal, "S=8", {"S": 8}, "out", "bf16", expected, expected.copy())
    assert r.vacuous and r.smallest_caught is None and len(r.steps) == 10


# perturbation at each float dtype's edges


@pytest.mark.parametrize("dtype", sorted(LARGEST))
@pytest.mark.parametrize("k", [1, 2, 5])
def test_perturbing_the_largest_finite_value_steps_toward_zero_and_stays_finite(dtype, k):
    top = LARGEST[dtype][0]
    data = words(dtype, [top, SIGN[dtype] | top])
    moved = perturb(data, dtype, k, 2, seed=1)
    c = count("o", dtype, data, moved)
    assert c.non_finite == 0
    assert (c.identical, c.one_quantum, c.over_one_quantum) == ((0, 2, 0) if k == 1 else (0, 0, 2))
    # k steps below the top, each keeping its sign
    assert moved.view(LARGEST[dtype][1]).tolist() == [top - k, SIGN[dtype] | (top - k)]


@pytest.mark.parametrize("dtype", sorted(LARGEST))
def test_perturbing_just_below_the_top_may_reach_it_but_never_infinity(dtype):
    top = LARGEST[dtype][0]
    moved = perturb(words(dtype, [top - 1]), dtype, 1, 1, seed=0)
    assert moved.view(LARGEST[dtype][1]).tolist() == [top]


def test_f64_perturbation_moves_exactly_n_elements_by_k_quanta():
    data = np.linspace(-2.0, 2.0, 40).view(np.uint8)
    moved = perturb(data, "f64", 3, 6, seed=5)
    c = count("o", "f64", data, moved)
    assert (c.identical, c.one_quantum, c.over_one_quantum, c.over_two_quanta) == (34, 0, 6, 6)
    assert c.non_finite == 0
