"""Per-case, per-output tolerances (`acceptance.fidelity.tolerances`): the model, the plan check's
refusals, the bound each case and output gets, and atol in quanta at the golden's RMS."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError
from test_golden import golden_plan, setup

from qualify.cli import main
from qualify.evaluate.tolerance_gate import bound_for, judge_case, judge_output, passes, quantum_at_rms
from qualify.plan.digest import freeze_from_hashes
from qualify.plan.load import validate_plan
from qualify.plan.model import Fidelity

GOLDEN = {"against": "golden", "golden": "golden.safetensors"}


def fidelity(**extra):
    return Fidelity.model_validate({"mode": "tolerance", "atol": 1e-5, "rtol": 2**-5, **GOLDEN, **extra})


def bf16(values):
    return (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)


SEEDLIKE = fidelity(
    tolerances=[
        {"cases": ["S=8"], "bit_exact": True},
        {"where": "S >= 2048", "outputs": ["weights"], "rtol": 2**-7, "atol": 1e-6},
        {"rtol": 2**-6, "atol_quanta": 4},
    ]
)


@pytest.mark.parametrize(
    "rule, message",
    [
        ({"rtol": 0.1}, "one of atol or atol_quanta"),
        ({"rtol": 0.1, "atol": 0.0, "atol_quanta": 2}, "one of atol or atol_quanta"),
        ({"atol": 0.1}, "give rtol"),
        ({"bit_exact": True, "rtol": 0.1}, "takes no rtol"),
        ({"rtol": 0.1, "atol_quanta": 0}, "greater than 0"),
        ({"rtol": -0.1, "atol": 0.0}, "greater than or equal to 0"),
    ],
)
def test_a_rule_needs_one_bound(rule, message):
    with pytest.raises(ValidationError, match=message):
        fidelity(tolerances=[rule])


def test_tolerances_need_the_tolerance_mode_and_a_golden_or_the_base_arm():
    against_base = Fidelity.model_validate(
        {"mode": "tolerance", "atol": 0.0, "rtol": 0.1, "tolerances": [{"rtol": 0.1, "atol": 0.0}]}
    )
    assert against_base.tolerances[0].rtol == 0.1
    with pytest.raises(ValidationError, match="belong to mode 'tolerance'"):
        Fidelity.model_validate({"mode": "ulp", "bound": 2, "exact": [{"cases": ["S=8"]}]})
    with pytest.raises(ValidationError, match="belong to mode 'tolerance'"):
        Fidelity.model_validate({"mode": "abs", "bound": 0.1, **GOLDEN, "tolerances": [{"rtol": 0.1, "atol": 0.0}]})


@pytest.mark.parametrize(
    "case, params, output, bound",
    [
        ("S=8", {"S": 8}, "out", (0.0, 0.0)),  # the bit-exact case, every output
        ("S=8", {"S": 8}, "weights", (0.0, 0.0)),
        ("S=2048", {"S": 2048}, "weights", (1e-6, 2**-7)),  # the second rule, weights only
        ("S=2048", {"S": 2048}, "out", (4 * 2**-7, 2**-6)),  # the third: 4 quanta at RMS 1.0
        ("S=64", {"S": 64}, "weights", (4 * 2**-7, 2**-6)),
    ],
)
def test_first_matching_rule_gives_the_bound(case, params, output, bound):
    expected = bf16(np.ones(16))
    assert bound_for(SEEDLIKE, case, params, output, "bf16", expected) == pytest.approx(bound)


def test_without_a_matching_rule_the_global_bound_holds():
    only_long = fidelity(tolerances=[{"where": "S >= 2048", "rtol": 0.5, "atol": 0.5}])
    assert bound_for(only_long, "S=8", {"S": 8}, "out", "bf16", bf16([1.0])) == (1e-5, 2**-5)


def test_exact_selector_outranks_the_rules():
    both = fidelity(exact=[{"cases": ["S=64"]}], tolerances=[{"rtol": 0.5, "atol": 0.5}])
    assert bound_for(both, "S=64", {"S": 64}, "out", "bf16", bf16([1.0])) == (0.0, 0.0)


@pytest.mark.parametrize(
    "dtype, values, quantum",
    [
        ("bf16", [1.0, -1.0], 2.0**-7),  # RMS 1: the binade [1, 2), 7 mantissa bits
        ("bf16", [0.02, 0.02], 2.0**-6 * 2**-7),  # RMS 0.02 sits in [2^-6, 2^-5)
        ("bf16", [3.0, 4.0], 2.0**1 * 2**-7),  # RMS sqrt(12.5) = 3.54 sits in [2, 4)
        ("f32", [1.0, 1.0], 2.0**-23),
        ("f16", [0.5, 0.5], 2.0**-1 * 2**-10),
        ("bf16", [0.0, 0.0], 2.0**-126 * 2**-7),  # no magnitude: the smallest normal step
    ],
)
def test_quantum_at_rms(dtype, values, quantum):
    data = (
        bf16(values)
        if dtype == "bf16"
        else np.asarray(values, dtype={"f32": np.float32, "f16": np.float16}[dtype]).view(np.uint8)
    )
    assert quantum_at_rms(dtype, data) == quantum


def test_atol_in_quanta_admits_near_zero_values_that_a_tiny_atol_refuses():
    """The H200 record's failure: an element near zero one quantum of its neighbours away."""
    expected = bf16([0.3, -0.3, 0.3, 1e-4])  # RMS 0.26, in [0.25, 0.5): one quantum is 2^-9
    actual = bf16([0.3, -0.3, 0.3, 1e-4 + 2**-9])
    tiny = fidelity()
    quanta = fidelity(tolerances=[{"rtol": 2**-6, "atol_quanta": 2}])
    assert not passes(judge_output(tiny, "S=64", {"S": 64}, "out", "bf16", expected, actual))
    judged = judge_output(quanta, "S=64", {"S": 64}, "out", "bf16", expected, actual)
    assert passes(judged) and judged.atol == 2 * 2**-9
    assert 0.45 < judged.worst_bound_fraction < 0.55


def test_a_bit_exact_rule_fails_one_quantum():
    expected, actual = bf16([1.0, 1.0]), bf16([1.0, 1.0 + 2**-7])
    counts = judge_output(SEEDLIKE, "S=8", {"S": 8}, "out", "bf16", expected, actual)
    assert not passes(counts) and counts.atol == 0.0 and counts.rtol == 0.0


@pytest.mark.parametrize(
    "plan_fidelity",
    [
        SEEDLIKE,  # a bit_exact rule selects S=8
        fidelity(exact=[{"cases": ["S=8"]}], tolerances=[{"rtol": 0.5, "atol": 1.0}]),  # an exact selector
    ],
)
def test_a_bit_exact_output_fails_an_error_that_any_bound_would_admit(plan_fidelity):
    """Bit-exact means no bound at all: an error of 0.5 on 1.0 fails, as every difference does."""
    expected, actual = bf16([1.0, 2.0]), bf16([1.0, 2.5])
    assert not passes(judge_output(plan_fidelity, "S=8", {"S": 8}, "out", "bf16", expected, actual))
    assert passes(judge_output(plan_fidelity, "S=8", {"S": 8}, "out", "bf16", expected, expected))


def test_a_case_is_judged_output_by_output_each_by_its_own_rule():
    """At S=2048 the weights have their own rule and `out` the quanta rule: one count per output."""
    ones = bf16(np.ones(4))
    close = bf16([1.0, 1.0, 1.0, 1.0 + 2**-7])  # one quantum off in one element
    counts = judge_case(
        SEEDLIKE,
        "S=2048",
        {"S": 2048},
        {"out": "bf16", "weights": "bf16"},
        {"out": ones, "weights": ones},
        {"out": close, "weights": close},
    )
    assert [c.output for c in counts] == ["out", "weights"]
    assert (counts[0].atol, counts[0].rtol) == (4 * 2**-7, 2**-6) and passes(counts[0])
    assert (counts[1].atol, counts[1].rtol) == (1e-6, 2**-7) and passes(counts[1])
    at_eight = judge_case(SEEDLIKE, "S=8", {"S": 8}, {"out": "bf16"}, {"out": ones}, {"out": close})
    assert [(c.output, c.atol, passes(c)) for c in at_eight] == [("out", 0.0, False)]


def test_a_plan_without_tolerances_keeps_its_digest():
    """Existing records are bound to their plan's digest: the new field must not enter its dump."""
    plan = golden_plan()
    before = freeze_from_hashes(validate_plan(plan, "p.json"), {}).plan_sha256
    with_rules = golden_plan()
    with_rules["acceptance"]["fidelity"]["tolerances"] = [{"rtol": 0.1, "atol": 0.0}]
    after = freeze_from_hashes(validate_plan(with_rules, "p.json"), {}).plan_sha256
    assert "tolerances" not in validate_plan(plan, "p.json").model_dump()["acceptance"]["fidelity"]
    assert before != after


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


@pytest.mark.parametrize(
    "rule, field, fragment",
    [
        (
            {"cases": ["N=999"], "rtol": 0.1, "atol": 0.0},
            "acceptance.fidelity.tolerances[1].cases[0]",
            "undeclared case 'N=999'",
        ),
        (
            {"where": "N > 10**6", "rtol": 0.1, "atol": 0.0},
            "acceptance.fidelity.tolerances[1].where",
            "selects no case",
        ),
        (
            {"outputs": ["y"], "rtol": 0.1, "atol": 0.0},
            "acceptance.fidelity.tolerances[1].outputs[0]",
            "'y' is not an output buffer",
        ),
        (
            {"outputs": ["nope"], "rtol": 0.1, "atol": 0.0},
            "acceptance.fidelity.tolerances[1].outputs[0]",
            "'nope' is not an output",
        ),
        ({"outputs": [], "rtol": 0.1, "atol": 0.0}, "acceptance.fidelity.tolerances[1].outputs", "selects no output"),
        (
            {"cases": ["N=1024"], "where": "N > 0", "rtol": 0.1, "atol": 0.0},
            "acceptance.fidelity.tolerances[1]",
            "cases or where",
        ),
    ],
)
def test_plan_check_refuses_a_rule_that_selects_nothing(tmp_path, capsys, rule, field, fragment):
    path = setup(tmp_path)
    plan = json.loads(path.read_text())
    plan["acceptance"]["fidelity"]["tolerances"] = [{"cases": ["N=1024"], "bit_exact": True}, rule]
    path.write_text(json.dumps(plan))
    code, out, err = run_cli(["plan", "check", "--no-compile", str(path)], capsys)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"qualify: error: {path}: {field}: "), lines[0]
    assert fragment in lines[0], lines[0]


def test_plan_check_accepts_rules_that_select(tmp_path, capsys):
    path = setup(tmp_path)
    plan = json.loads(path.read_text())
    plan["acceptance"]["fidelity"]["tolerances"] = [
        {"cases": ["N=1024"], "bit_exact": True},
        {"outputs": ["out"], "rtol": 0.1, "atol_quanta": 2},
    ]
    path.write_text(json.dumps(plan))
    code, out, err = run_cli(["plan", "check", "--no-compile", str(path)], capsys)
    assert code == 0, err
