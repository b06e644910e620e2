"""`qualify golden make`: a plan's golden from a float64 reference, with the provenance `plan check`
and `run` verify (producer = the plan's golden_script), and no script against qualify's modules."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_refused_inputs import refused, run_cli
from test_rehearse import softmax_repo

from qualify.plan.golden import load_golden
from qualify.plan.load import load_plan

GOLDEN = {
    "mode": "tolerance",
    "against": "golden",
    "golden": "golden.safetensors",
    "golden_script": "../../kernels/softmax/reference.py",
    "atol": 1e-12,
    "rtol": 1e-5,
}


def golden_repo(tmp_path, **changes):
    return softmax_repo(tmp_path, {**GOLDEN, **changes})


def ref(tmp_path) -> str:
    """The reference as the repository under test holds it (the plan's golden_script)."""
    return f"{tmp_path / 'kernels/softmax/reference.py'}:softmax"


@pytest.mark.slow
def test_golden_make_writes_a_golden_that_check_accepts(tmp_path, capsys):
    plan = golden_repo(tmp_path)
    code, stdout, err = run_cli(["golden", "make", plan, "--reference", ref(tmp_path)], capsys)
    assert code == 0, err
    assert "wrote " in stdout and "3 tensors, 3 cases" in stdout and "producer kernels/softmax/reference.py" in stdout
    assert "next:" not in stdout  # the plan already names the golden and its script
    code, _, err = run_cli(["plan", "check", plan, "--no-compile"], capsys)
    assert code == 0, err
    loaded = load_plan(plan)
    golden = load_golden(loaded.plan, loaded.path, loaded.files.root, loaded.cases)
    assert golden.producer == "kernels/softmax/reference.py"
    y = golden.expected("COLS=256", "y").view(np.float32).reshape(64, 256)
    assert np.allclose(y.sum(axis=1), 1.0, atol=1e-5) and (y > 0).all()
    # the reference's file is frozen with the plan: editing it after freezing is a frozen-input change
    code, _, err = run_cli(["plan", "freeze", plan], capsys)
    assert code == 0, err
    script = tmp_path / "kernels/softmax/reference.py"
    script.write_text(script.read_text() + "# edited\n")
    refused(capsys, ["plan", "check", plan, "--no-compile"], 3)


def test_the_rehearsal_runs_against_the_golden_and_catches_a_zero_bound(tmp_path, capsys):
    plan = golden_repo(tmp_path)
    code, _, err = run_cli(["plan", "rehearse", plan, "--out", tmp_path / "before"], capsys)
    assert code == 2 and "does not exist yet: write it with `qualify golden make" in err, err
    assert run_cli(["golden", "make", plan, "--reference", ref(tmp_path)], capsys)[0] == 0
    code, _, err = run_cli(["plan", "rehearse", plan, "--out", tmp_path / "clean"], capsys)
    assert code == 0, err
    found = json.loads((tmp_path / "clean" / "rehearsal.json").read_text())
    assert found["expected_from"].startswith("the golden file golden.safetensors")
    data = json.loads(plan.read_text())
    data["acceptance"]["fidelity"]["rtol"] = 0.0
    data["acceptance"]["fidelity"]["atol"] = 0.0
    plan.write_text(json.dumps(data))  # atol and rtol are not in the golden's configuration
    code, _, err = run_cli(["plan", "rehearse", plan, "--out", tmp_path / "zero"], capsys)
    assert code == 2 and "fails the bound (|err| ≤ 0 + 0·|expected|)" in err, err


def test_a_module_reference_is_accepted(tmp_path, capsys, monkeypatch):
    plan = golden_repo(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["golden", "make", plan, "--reference", "kernels.softmax.reference:softmax"], capsys)
    assert code == 0, err
    assert run_cli(["plan", "check", plan, "--no-compile"], capsys)[0] == 0


def test_a_golden_script_other_than_the_reference_is_refused(tmp_path, capsys):
    plan = golden_repo(tmp_path, golden_script="make_golden.py")
    (plan.parent / "make_golden.py").write_text("#\n")
    refused(
        capsys,
        ["golden", "make", plan, "--reference", ref(tmp_path)],
        2,
        "acceptance.fidelity.golden_script",
        "protocols/tiny/make_golden.py",
    )
    assert not (plan.parent / "golden.safetensors").exists()


def test_without_golden_script_the_golden_is_written_with_the_next_step(tmp_path, capsys):
    data = dict(GOLDEN)
    del data["golden_script"]
    plan = softmax_repo(tmp_path, data)
    code, stdout, err = run_cli(["golden", "make", plan, "--reference", ref(tmp_path)], capsys)
    assert code == 0, err
    assert "next: set acceptance.fidelity.golden_script to '../../kernels/softmax/reference.py'" in stdout


def test_a_plan_without_a_golden_needs_out(tmp_path, capsys):
    plan = softmax_repo(tmp_path)  # against the base arm
    refused(capsys, ["golden", "make", plan, "--reference", ref(tmp_path)], 2, "give --out")
    code, stdout, err = run_cli(
        ["golden", "make", plan, "--reference", ref(tmp_path), "--out", tmp_path / "g.safetensors"], capsys
    )
    assert code == 0 and "set acceptance.fidelity.against to 'golden'" in stdout, err


def test_a_reference_that_breaks_the_contract_is_one_line(tmp_path, capsys):
    plan = golden_repo(tmp_path, golden_script=None)
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import numpy as np\n"
        "def wrong_size(params, inputs):\n    return {'y': np.zeros(3)}\n"
        "def infinite(params, inputs):\n    return {'y': np.full(inputs['x'].shape, 1e300)}\n"
        "def raises(params, inputs):\n    raise KeyError('COLS')\n"
    )
    refused(
        capsys,
        ["golden", "make", plan, "--reference", f"{bad}:wrong_size"],
        2,
        "--reference",
        "has shape (3,), the buffer (64, 256)",
    )
    refused(capsys, ["golden", "make", plan, "--reference", f"{bad}:infinite"], 2, "--reference", "non-finite")
    refused(capsys, ["golden", "make", plan, "--reference", f"{bad}:raises"], 2, "--reference", "KeyError")
    refused(capsys, ["golden", "make", plan, "--reference", f"{tmp_path}/none.py:f"], 2, "--reference", "no such file")
    assert not (plan.parent / "golden.safetensors").exists()


# ---- the reference's outputs against the plan's shapes and dtypes (issue 37)


@pytest.mark.parametrize(
    "returned, fragment",
    [
        ("(e / e.sum(axis=1, keepdims=True)).T.copy()", "has shape (256, 64), the buffer (64, 256)"),
        ("(e / e.sum(axis=1, keepdims=True)).reshape(-1)", "has shape (16384,), the buffer (64, 256)"),
        ("(e / e.sum(axis=1, keepdims=True)).astype(np.float32)", "is float32, not float64"),
        ("np.rint(e / e.sum(axis=1, keepdims=True)).astype(np.int64)", "is int64, not float64"),
    ],
    ids=["transposed", "flattened", "float32", "int64"],
)
def test_a_reference_of_the_wrong_shape_or_type_is_refused_not_reshaped_or_cast(tmp_path, capsys, returned, fragment):
    plan = golden_repo(tmp_path)
    script = tmp_path / "kernels/softmax/reference.py"
    script.write_text(script.read_text().replace("e / e.sum(axis=1, keepdims=True)}", returned + "}"))
    assert returned in script.read_text()
    code, _, err = run_cli(["golden", "make", plan, "--reference", ref(tmp_path)], capsys)
    assert code == 2, err
    assert f"output 'y' {fragment}" in err and "--reference" in err, err
    assert not (plan.parent / "golden.safetensors").exists()


def test_the_contract_holds_exact_shapes_and_host_types():
    from qualify.run.reference import output_problem

    assert output_problem(np.zeros((4, 8)), "f32", (4, 8)) is None
    assert output_problem(np.zeros((4, 8), dtype=np.int64), "i32", (4, 8)) is None
    assert output_problem(np.zeros((8, 4)), "bf16", (4, 8)) is not None  # same size, transposed
    assert output_problem(np.zeros((4, 8), dtype=np.int32), "i32", (4, 8)) is not None
    assert output_problem([[0.0] * 8] * 4, "f32", (4, 8)) is None  # a list of floats is float64 values
