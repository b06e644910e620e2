"""`qualify plan rehearse`: the plan's fidelity contract on the CPU, with a simulated candidate.

The committed softmax protocol checks and rehearses clean; planted mistakes (a zero bound, a bound
below one ulp, byte identity for a reordered sum, a control the gate cannot see) are caught before
any GPU time; a rehearsal is never a record."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from plans import make_repo
from test_refused_inputs import refused, run_cli

from qualify.evaluate.rehearsal import declared_identical, reordered
from qualify.plan.model import Fidelity

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = ROOT / "protocols" / "softmax" / "plan.json"
REFERENCE = ROOT / "kernels" / "softmax" / "reference.py"


def softmax_repo(tmp_path: Path, fidelity: dict | None = None, controls: list | None = None, rows: int = 64) -> Path:
    """The softmax protocol in a repository of its own, smaller, with the fidelity and controls given."""
    plan = copy.deepcopy(json.loads(SOFTMAX.read_text()))
    plan["workload"]["params"]["ROWS"] = rows
    if fidelity is not None:
        plan["acceptance"]["fidelity"] = fidelity
    if controls is not None:
        plan["controls"]["negative"] = controls
    return make_repo(
        tmp_path,
        plan,
        files={
            "kernels/softmax/row_softmax.cu": ROOT / "kernels/softmax/row_softmax.cu",
            "kernels/softmax/reference.py": REFERENCE,
        },
    )


def rehearse(capsys, plan: Path, out: Path, *extra) -> tuple[int, str, str, dict]:
    code, stdout, err = run_cli(
        ["plan", "rehearse", plan, "--reference", f"{REFERENCE}:softmax", "--out", out, *extra], capsys
    )
    found = json.loads((out / "rehearsal.json").read_text()) if (out / "rehearsal.json").exists() else {}
    return code, stdout, err, found


@pytest.mark.slow
def test_the_softmax_protocol_checks_and_rehearses_clean(tmp_path, capsys):
    code, _, err = run_cli(["plan", "check", SOFTMAX], capsys)
    assert code == 0, err
    code, stdout, err, found = rehearse(capsys, SOFTMAX, tmp_path / "rehearsal")
    assert code == 0, err
    assert found["rehearsal"] is True and found["problems"] == []
    assert [c["case"] for c in found["cases"]] == ["COLS=256", "COLS=1024", "COLS=4096"]
    assert all(c["simulated"] and c["passed"] for c in found["cases"])
    # the simulated candidate really differs from the base arm, within the per-case bound
    counts = {c["case"]: c["counts"][0] for c in found["cases"]}
    assert all(0 < n["identical"] < n["elements"] for n in counts.values())
    assert (counts["COLS=256"]["rtol"], counts["COLS=4096"]["rtol"]) == (1e-5, 2e-5)
    controls = {(k["control"], k["case"]): k for k in found["controls"]}
    assert controls[("flip_first_x_bit", "COLS=256")]["caught"] is True
    assert controls[("skip_last_col", "COLS=256")]["simulated"] is False
    readme = (tmp_path / "rehearsal" / "REHEARSAL.md").read_text()
    assert "REHEARSAL, NOT A RECORD" in readme and "| COLS=4096 | `y` |" in readme
    assert "rehearsal (not a record):" in stdout


@pytest.mark.parametrize(
    "fidelity, fragment",
    [
        (
            {"mode": "tolerance", "against": "base", "atol": 0.0, "rtol": 0.0},
            "fails the bound (|err| ≤ 0 + 0·|expected|)",
        ),
        (
            {"mode": "tolerance", "against": "base", "atol": 0.0, "rtol": 1e-8},
            "fails the bound (|err| ≤ 0 + 1e-08·|expected|)",
        ),
        # 1e-6 relative: the H200 measured 1.0e-6 at COLS=4096 (tests/gpu/test_softmax_gpu.py)
        (
            {"mode": "tolerance", "against": "base", "atol": 0.0, "rtol": 1e-6},
            "fails the bound (|err| ≤ 0 + 1e-06·|expected|)",
        ),
        ({"mode": "bytes", "against": "base"}, "fails mode 'bytes'"),
        ({"mode": "ulp", "against": "base", "bound": 2}, "fails mode 'ulp'"),
    ],
)
def test_a_planted_wrong_bound_is_caught_before_the_gpu(tmp_path, capsys, fidelity, fragment):
    plan = softmax_repo(tmp_path, fidelity)
    code, _, err, found = rehearse(capsys, plan, tmp_path / "out")
    line = err.splitlines()[-1]
    assert code == 2 and line.startswith("qualify: error: ") and "acceptance.fidelity" in line, err
    assert fragment in line and "COLS=256" in line and "hint: a change of summation order" in line
    assert found["problems"] and not any(c["passed"] for c in found["cases"])


def test_a_change_that_keeps_every_bit_is_rehearsed_with_reorder_ulp_zero(tmp_path, capsys):
    plan = softmax_repo(tmp_path, {"mode": "bytes", "against": "base"})
    code, _, err, found = rehearse(capsys, plan, tmp_path / "out", "--reorder-ulp", "0")
    assert code == 0, err
    assert all(c["parity"][0]["equal"] for c in found["cases"])
    # the record of the rehearsal says what was simulated: nothing moved, not "steps in [-0, 0]"
    assert found["simulation"] == "identical to the expected values" and found["reorder_ulp"] == 0
    assert "identical to the expected values" in (tmp_path / "out" / "REHEARSAL.md").read_text()


def test_outputs_singled_out_as_bit_exact_are_simulated_identical(tmp_path, capsys):
    fidelity = {
        "mode": "tolerance",
        "against": "base",
        "atol": 1e-12,
        "rtol": 2e-5,
        "tolerances": [{"cases": ["COLS=256"], "bit_exact": True}],
    }
    code, _, err, found = rehearse(capsys, softmax_repo(tmp_path, fidelity), tmp_path / "out")
    assert code == 0, err
    counts = {c["case"]: c["counts"][0] for c in found["cases"]}
    assert counts["COLS=256"]["identical"] == counts["COLS=256"]["elements"]
    assert counts["COLS=1024"]["identical"] < counts["COLS=1024"]["elements"]


def test_a_control_the_gate_cannot_see_is_caught(tmp_path, capsys):
    # x scaled by 1 changes nothing: declared (by default) to fail, it passes every bound
    controls = [{"kind": "input", "name": "noop", "buffer": "x", "mutation": {"op": "scale", "index": 0, "value": 1.0}}]
    code, stdout, err, found = rehearse(capsys, softmax_repo(tmp_path, controls=controls), tmp_path / "out")
    assert code == 2 and "negative control noop is not as declared" in err, err
    # the output that behaved otherwise is named, on each case's problem line
    problems = [line for line in stdout.splitlines() if line.startswith("problem: ")]
    assert (
        problems[0] == "problem: COLS=256: negative control noop is not as declared: y passed where 'fail' was declared"
    )
    assert {k["caught"] for k in found["controls"]} == {False}


def test_cases_rehearses_a_subset_and_success_says_so(tmp_path, capsys):
    code, stdout, err, found = rehearse(capsys, SOFTMAX, tmp_path / "one", "--cases", "COLS=1024")
    assert code == 0, err
    assert [c["case"] for c in found["cases"]] == ["COLS=1024"]
    assert {k["case"] for k in found["controls"]} == {"COLS=1024"}
    out = " ".join(stdout.split())
    assert "cases simulated: 1 of 1 (chosen with --cases; the plan has 3)" in out
    assert (
        "rehearsal passed: the gate holds the simulated candidate in 1 case(s); 1 of 1 control run(s) as declared"
        in out
    )
    code, _, err, _ = rehearse(capsys, SOFTMAX, tmp_path / "bad", "--cases", "COLS=7")
    assert code == 2 and "--cases: undeclared case 'COLS=7' (cases: COLS=256, COLS=1024, COLS=4096)" in err, err


def test_without_expected_values_the_inputs_are_rehearsed_and_nothing_is_judged(tmp_path, capsys):
    plan = make_repo(tmp_path / "repo")
    code, stdout, err = run_cli(["plan", "rehearse", plan, "--out", tmp_path / "out"], capsys)
    assert code == 0, err
    found = json.loads((tmp_path / "out" / "rehearsal.json").read_text())
    assert [c["simulated"] for c in found["cases"]] == [False, False]
    assert all(len(c["input_sha256"]["x"]) == 64 for c in found["cases"])
    assert "cases simulated: 0 of 2" in stdout


def test_a_rehearsal_is_never_a_record(tmp_path, capsys):
    plan = softmax_repo(tmp_path)
    code, _, err, _ = rehearse(capsys, plan, tmp_path / "out")
    assert code == 0, err
    code, _, err = run_cli(["report", "--check", tmp_path / "out"], capsys)
    assert code != 0 and "qualify: error:" in err
    refused(
        capsys,
        ["plan", "rehearse", plan, "--out", tmp_path / "records" / "softmax"],
        2,
        "--out",
        "a rehearsal is not a record",
    )
    assert not (tmp_path / "records").exists()


def test_an_unloadable_reference_is_one_line_naming_the_option(tmp_path, capsys):
    plan = softmax_repo(tmp_path)
    refused(capsys, ["plan", "rehearse", plan, "--reference", f"{REFERENCE}:softmaxx"], 2, "--reference", "softmaxx")
    refused(capsys, ["plan", "rehearse", plan, "--reference", "softmax"], 2, "--reference", "file.py:function")
    broken = tmp_path / "broken.py"
    broken.write_text("def softmax(params, inputs):\n    return {'z': inputs['x']}\n")
    refused(capsys, ["plan", "rehearse", plan, "--reference", f"{broken}:softmax"], 2, "--reference", "['y']")


def f32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint8)


def test_reordered_moves_each_float_within_k_steps_and_leaves_the_rest():
    values = f32(np.linspace(-3, 3, 4001))
    moved = reordered(values, "f32", 3, 0, "case", "y")
    steps = moved.view(np.int32).astype(np.int64) - values.view(np.int32).astype(np.int64)
    signs = np.sign(values.view(np.float32))
    assert np.abs(steps).max() == 3 and (steps != 0).mean() > 0.5
    # the draw is keyed by case and output, and reproducible
    assert np.array_equal(moved, reordered(values, "f32", 3, 0, "case", "y"))
    assert not np.array_equal(moved, reordered(values, "f32", 3, 0, "case", "z"))
    assert np.array_equal(np.sign(moved.view(np.float32))[signs != 0], signs[signs != 0])
    special = f32([np.nan, np.inf, np.finfo(np.float32).max])
    kept = reordered(special, "f32", 1 << 10, 1, "c", "y").view(np.float32)
    assert np.isnan(kept[0]) and kept[1] == np.inf and np.isfinite(kept[2])
    ints = np.arange(10, dtype=np.int32).view(np.uint8)
    assert np.array_equal(reordered(ints, "i32", 5, 0, "c", "y"), ints)


def test_only_exact_selectors_and_bit_exact_rules_are_declared_identical():
    base = {"mode": "tolerance", "atol": 0.0, "rtol": 0.0}
    zero = Fidelity.model_validate(base)
    assert not declared_identical(zero, "N=1", {"N": 1}, "y")
    assert not declared_identical(Fidelity.model_validate({"mode": "bytes"}), "N=1", {"N": 1}, "y")
    exact = Fidelity.model_validate({**base, "exact": [{"where": "N < 2", "outputs": ["y"]}]})
    assert declared_identical(exact, "N=1", {"N": 1}, "y") and not declared_identical(exact, "N=1", {"N": 1}, "z")
    rule = Fidelity.model_validate({**base, "tolerances": [{"cases": ["N=2"], "bit_exact": True}]})
    assert declared_identical(rule, "N=2", {"N": 2}, "y") and not declared_identical(rule, "N=1", {"N": 1}, "y")


def test_the_example_reference_is_the_one_the_readme_names():
    assert "def softmax(params, inputs)" in REFERENCE.read_text()
    assert "kernels/softmax/reference.py:softmax" in (ROOT / "README.md").read_text()


def test_a_float64_plan_is_rehearsed_with_its_own_reference(tmp_path, capsys):
    fidelity = {
        "mode": "rel",
        "bound": 1e-5,
        "against": "float64",
        "reference": "../../kernels/softmax/reference.py:softmax",
    }
    plan = softmax_repo(tmp_path, fidelity, controls=[])
    code, _, err = run_cli(["plan", "rehearse", plan, "--out", tmp_path / "out"], capsys)
    assert code == 0, err
    found = json.loads((tmp_path / "out" / "rehearsal.json").read_text())
    assert found["expected_from"].startswith("the float64 reference ") and all(c["passed"] for c in found["cases"])


def test_a_plan_with_golden_inputs_is_rehearsed_on_the_goldens_values(tmp_path, capsys):
    """Inputs from the golden, expected values from the golden: every case is simulated and judged
    (a rehearsal that simulated nothing would report no problem and prove nothing)."""
    from test_golden import setup

    plan = setup(tmp_path)
    out = tmp_path / "rehearsal"
    code, _, err = run_cli(["plan", "rehearse", plan, "--out", out], capsys)
    assert code == 0, err
    found = json.loads((out / "rehearsal.json").read_text())
    assert [c["case"] for c in found["cases"]] == ["N=1024", "N=4096"]
    assert all(c["simulated"] and c["passed"] is True for c in found["cases"]), found["cases"]
    assert all(set(c["input_sha256"]) == {"x", "y"} for c in found["cases"])
    assert found["expected_from"].startswith("the golden file golden.safetensors") and found["problems"] == []


def test_a_calibrated_gate_is_calibrated_in_the_rehearsal(tmp_path, capsys):
    """With `calibration`, each simulated case's outputs are perturbed as a trial perturbs them and
    the rehearsal names the smallest perturbation the gate catches; a ceiling below the bound (64
    f32 quanta are ~8e-6 relative, under rtol 1e-5) is a vacuous gate, refused before any GPU time."""
    fidelity = {
        "mode": "tolerance",
        "against": "base",
        "atol": 1e-12,
        "rtol": 1e-5,
        "calibration": {"ceiling_quanta": 64, "elements": [1, 16], "seed": 7},
    }
    code, _, err, found = rehearse(capsys, softmax_repo(tmp_path / "low", fidelity), tmp_path / "low-out")
    assert code == 2 and "y: the gate caught no perturbation up to 64 quanta: it is vacuous here" in err
    assert all(r["vacuous"] for c in found["cases"] for r in c["calibration"]) and found["cases"]
    fidelity["calibration"]["ceiling_quanta"] = 1024
    code, _, err, found = rehearse(capsys, softmax_repo(tmp_path / "high", fidelity), tmp_path / "out")
    assert code == 0, err
    for case in found["cases"]:
        assert case["simulated"] and [r["output"] for r in case["calibration"]] == ["y"], case["calibration"]
        (resolution,) = case["calibration"]
        assert resolution["case"] == case["case"] and not resolution["vacuous"]
        assert resolution["smallest_caught"] is not None and resolution["steps"]


def test_a_control_a_parity_gate_cannot_see_is_named_as_such(tmp_path, capsys):
    """Under a parity mode (no counted tolerance, so no declared outcome to compare), a control
    whose mutation changes nothing is refused saying the gate cannot see it."""
    controls = [{"kind": "input", "name": "noop", "buffer": "x", "mutation": {"op": "scale", "index": 0, "value": 1.0}}]
    plan = softmax_repo(tmp_path, {"mode": "bytes", "against": "base"}, controls=controls)
    code, _, err, found = rehearse(capsys, plan, tmp_path / "out", "--reorder-ulp", "0")
    assert code == 2 and "negative control noop passes the gate: the gate cannot see it" in err, err
    assert found["controls"] and not any(c["caught"] for c in found["controls"])


LAYERNORM = ROOT / "tests" / "fixtures" / "layernorm-first-plan"


def test_the_layernorm_fixture_rehearses_clean_with_its_reference(tmp_path, capsys):
    """The 4-case LayerNorm plan of issue 37 (benchmarks/first-run/rehearse_layernorm.py times it):
    its smallest case rehearses clean against its float64 reference, the sign-flip control caught
    on every output."""
    plan = LAYERNORM / "plan.json"
    reference = f"{LAYERNORM / 'reference.py'}:layernorm"
    code, out, err = run_cli(
        ["plan", "rehearse", plan, "--reference", reference, "--out", tmp_path / "r", "--cases", "C=256"], capsys
    )
    assert code == 0, err
    found = json.loads((tmp_path / "r" / "rehearsal.json").read_text())
    assert [c["case"] for c in found["cases"]] == ["C=256"] and found["cases"][0]["passed"] is True
    assert [c["caught"] for c in found["controls"]] == [True]
    assert {c["output"] for c in found["cases"][0]["counts"]} == {"y", "mean", "rstd"}
