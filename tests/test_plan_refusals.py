"""A plan that cannot lie (issue 26): freeze, run and compare refuse what `plan check` refuses;
no selector, index, bit or count promises what it cannot cover; argument kinds and blocks are
checked against the compiled kernel; every error is one line naming the file and field."""

from __future__ import annotations

import json
import re

import pytest
from plans import HEADER, KERNEL, make_repo, plan_copy
from test_golden import setup

from qualify.build.arms import headers_read
from qualify.cli import main
from qualify.commands.pipeline import load_frozen
from qualify.errors import PlanError
from qualify.plan.digest import compute_freeze, freeze, lock_path
from qualify.plan.files import PlanFiles
from qualify.plan.load import load_plan


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in argv])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def errors(err: str) -> list[str]:
    lines = err.strip().splitlines()
    # several errors of `plan check` end in its summary of stages (freeze prints the errors alone)
    if lines and not lines[-1].startswith("qualify: error: "):
        assert re.fullmatch(r"qualify: \d+ errors in \d stages? \(.+\)(; \d stages? not checked)?", lines[-1]), err
        lines = [line for line in lines if line.startswith("qualify: error: ")]
    assert "Traceback" not in err and all(line.startswith("qualify: error: ") for line in lines), err
    return [line.removeprefix("qualify: error: ") for line in lines]


def missing_argument():
    plan = plan_copy()
    del plan["workload"]["launch"]["args"][3]  # the float a
    return plan


def too_much_shared_memory():
    plan = plan_copy()
    plan["workload"]["launch"]["shared_bytes"] = 300_000  # sm_90 allows 227 KiB per block
    return plan


def freeze_unchecked(path):
    """A lock written as an older qualify (or a hand) would: without running the checks."""
    loaded = load_plan(path)
    every = {**loaded.files.files, **headers_read(loaded)}
    freeze(
        loaded.path, compute_freeze(loaded.plan, PlanFiles(root=loaded.files.root, files=dict(sorted(every.items()))))
    )


# 1. freeze enforces check


@pytest.mark.parametrize(
    "plan, code, field, fragment",
    [
        (missing_argument, 2, "workload.launch.args", "4 arguments for 5 parameters"),
        (too_much_shared_memory, 4, "workload.launch.shared_bytes", "does not fit on sm_90"),
    ],
)
def test_freeze_refuses_what_check_refuses_with_the_same_line(tmp_path, capsys, plan, code, field, fragment):
    path = make_repo(tmp_path, plan())
    got, _, check_err = run_cli(["plan", "check", path], capsys)
    assert got == code
    assert errors(check_err)[0].startswith(f"{path}: {field}: ") and fragment in check_err
    got, out, err = run_cli(["plan", "freeze", path], capsys)
    assert (got, errors(err)) == (code, errors(check_err))
    assert not lock_path(path).exists() and "frozen" not in out


def test_replace_refuses_a_broken_plan_and_keeps_the_old_lock(tmp_path, capsys):
    path = make_repo(tmp_path, freeze=True)
    lock = lock_path(path).read_text()
    path.write_text(json.dumps(missing_argument()))
    got, _, err = run_cli(["plan", "freeze", "--replace", path], capsys)
    assert got == 2 and "4 arguments for 5 parameters" in errors(err)[0]
    assert lock_path(path).read_text() == lock


def test_check_of_an_edited_frozen_plan_shows_the_plans_problem_first(tmp_path, capsys):
    path = make_repo(tmp_path, freeze=True)
    path.write_text(json.dumps(missing_argument()))
    got, _, err = run_cli(["plan", "check", path], capsys)
    lines = errors(err)
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"{path}: workload.launch.args: 4 arguments for 5 parameters")
    assert lines[1].startswith(f"{path}: changed after freezing")
    assert got == 3  # the highest of the two codes


def test_run_refuses_a_frozen_plan_check_refuses_before_any_trial(tmp_path, capsys, monkeypatch):
    import qualify.run.device

    path = make_repo(tmp_path, too_much_shared_memory())
    freeze_unchecked(path)
    with pytest.raises(PlanError, match="does not fit on sm_90"):
        load_frozen(path)

    def no_device(*args, **kwargs):
        raise AssertionError("the device opened for a plan check refuses")

    monkeypatch.setattr(qualify.run.device, "CudaDevice", no_device)
    got, _, err = run_cli(["run", path], capsys)
    assert got == 4 and "workload.launch.shared_bytes: the base arm's launch does not fit" in errors(err)[0]
    assert not (tmp_path / "records" / "tiny").exists()  # no trial, no ledger: nothing counts


def test_run_on_the_fake_device_after_a_checked_freeze(tmp_path):
    """The guard lets a plan that passes check through to its trials."""
    import fakes

    from qualify.commands.pipeline import run_plan
    from qualify.run.fake import FakeDevice, FakeTelemetry

    path = make_repo(tmp_path, freeze=True)
    device = FakeDevice({"axpy": fakes.axpy})
    outcome = run_plan(load_frozen(path), tmp_path / "rec", lambda: device, lambda uuid: FakeTelemetry(), trials=1)
    assert [t.status for t in outcome.trials] == ["complete"]


# 2. no vacuous promise


def check_lines(path, capsys, *extra) -> tuple[int, list[str]]:
    got, _, err = run_cli(["plan", "check", *extra, path], capsys)
    return got, errors(err) if err else []


def edited(plan_edit, base=None):
    plan = base or plan_copy()
    plan_edit(plan)
    return plan


def control(**mutation):
    def edit(plan):
        plan["controls"]["negative"][0]["mutation"] = {"op": "flip_bit", **mutation}

    return edit


@pytest.mark.parametrize(
    "edit, field, fragment",
    [
        (control(index=10**12, bit=0), "controls.negative[0].mutation.index", "index 1000000000000 is outside"),
        (control(index="N", bit=0), "controls.negative[0].mutation.index", "case N=1024: index 1024 is outside"),
        (control(index=0, bit=40), "controls.negative[0].mutation.bit", "bit 40 is past the 32 bits of a f32"),
        (control(index=0, bit=3, value=2.0), "controls.negative[0].mutation.value", "does not read 'value'"),
        (
            lambda p: p["controls"]["negative"][0].update(
                mutation={"op": "swap", "index": 0, "other": 100, "length": 200}
            ),
            "controls.negative[0].mutation.length",
            "not two separate slices",
        ),
        (lambda p: p["controls"]["negative"][0].update(cases=[]), "controls.negative[0].cases", "never run"),
        (lambda p: p["acceptance"]["gates"][0].update(cases=[], where=None), "acceptance.gates[0].cases", "no case"),
        (
            lambda p: p["controls"]["negative"][0].update(expect=[{"outputs": ["nope"], "outcome": "fail"}]),
            "controls.negative[0].expect[0].outputs[0]",
            "'nope' is not an output buffer",
        ),
        (
            lambda p: p["controls"]["negative"][0].update(expect=[{"where": "N > 10**9", "outcome": "pass"}]),
            "controls.negative[0].expect[0].where",
            "selects no case",
        ),
        (
            lambda p: p["controls"]["negative"][0].update(
                cases=["N=1024"], expect=[{"cases": ["N=4096"], "outcome": "pass"}]
            ),
            "controls.negative[0].expect[0].cases[0]",
            "not one the control runs in",
        ),
    ],
)
def test_check_refuses_a_control_that_promises_nothing(tmp_path, capsys, edit, field, fragment):
    path = make_repo(tmp_path, edited(edit))
    got, lines = check_lines(path, capsys, "--no-compile")
    assert got == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"{path}: {field}: ") and fragment in lines[0], lines[0]
    got, _, err = run_cli(["plan", "freeze", path], capsys)
    assert got == 2 and not lock_path(path).exists()


def golden_repo(tmp_path, fidelity_edit):
    path = setup(tmp_path)
    plan = json.loads(path.read_text())
    fidelity_edit(plan["acceptance"]["fidelity"])
    path.write_text(json.dumps(plan))
    return path


@pytest.mark.parametrize(
    "edit, field, fragment",
    [
        (lambda f: f.update(exact=[{"cases": ["N=5"]}]), "acceptance.fidelity.exact[0].cases[0]", "undeclared case"),
        (lambda f: f.update(exact=[{"where": "N < 0"}]), "acceptance.fidelity.exact[0].where", "selects no case"),
        (
            lambda f: f.update(exact=[{"outputs": ["y"]}]),
            "acceptance.fidelity.exact[0].outputs[0]",
            "'y' is not an output",
        ),
        (
            lambda f: f.update(calibration={"ceiling_quanta": 4, "elements": [1, 5000]}),
            "acceptance.fidelity.calibration.elements[1]",
            "5000 elements to perturb, but output out has 1024 in case N=1024",
        ),
    ],
)
def test_check_refuses_fidelity_selectors_and_counts_that_cover_nothing(tmp_path, capsys, edit, field, fragment):
    path = golden_repo(tmp_path, edit)
    got, lines = check_lines(path, capsys, "--no-compile")
    assert got == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"{path}: {field}: ") and fragment in lines[0], lines[0]


def test_a_misspelled_reference_and_float64_that_run_ignores_are_refused(tmp_path, capsys):
    plan = plan_copy()
    plan["acceptance"]["fidelity"] = {"mode": "ulp", "bound": 2, "against": "float64", "reference": "ref.py:axpy6"}
    files = {"kernels/k.cu": KERNEL, "kernels/common.cuh": HEADER}
    files["protocols/tiny/ref.py"] = "def axpy64(params, inputs):\n    return {}\n"
    path = make_repo(tmp_path, plan, files)
    got, lines = check_lines(path, capsys, "--no-compile")
    assert got == 2
    assert lines[0] == f"{path}: acceptance.fidelity.reference: ref.py defines no function 'axpy6' (functions: axpy64)"
    assert lines[1].startswith(f"{path}: acceptance.fidelity.against: 'float64' is not evaluated by `run`")
    plan["acceptance"]["fidelity"]["reference"] = "ref.py:axpy64"
    path.write_text(json.dumps(plan))
    got, lines = check_lines(path, capsys, "--no-compile")
    assert got == 2 and len(lines) == 1 and "acceptance.fidelity.against" in lines[0]


def test_selectors_that_select_pass(tmp_path, capsys):
    """The refusals above are about emptiness and range, not about having selectors at all."""
    plan = plan_copy()
    plan["controls"]["negative"][0].update(
        cases=["N=1024", "N=4096"],
        mutation={"op": "flip_bit", "index": "N - 1", "bit": 31},
        expect=[{"where": "N >= 4096", "outputs": ["out"], "outcome": "fail"}],
    )
    path = make_repo(tmp_path, plan)
    assert check_lines(path, capsys, "--no-compile") == (0, [])


def test_a_swap_of_two_separate_slices_inside_the_buffer_passes(tmp_path, capsys):
    plan = plan_copy()
    plan["controls"]["negative"][0].update(mutation={"op": "swap", "index": 0, "other": 100, "length": 100})
    assert check_lines(make_repo(tmp_path, plan), capsys, "--no-compile") == (0, [])


def test_a_reference_without_a_function_name_is_refused(tmp_path, capsys):
    plan = plan_copy()
    plan["acceptance"]["fidelity"] = {"mode": "ulp", "bound": 2, "against": "float64", "reference": "ref.py"}
    files = {
        "kernels/k.cu": KERNEL,
        "kernels/common.cuh": HEADER,
        "protocols/tiny/ref.py": "def ref(p, i):\n    return {}\n",
    }
    got, lines = check_lines(make_repo(tmp_path, plan, files), capsys, "--no-compile")
    assert got == 2
    assert lines[0].endswith("acceptance.fidelity.reference: 'ref.py': give the function as file.py:function")


# 3. against the compiled kernel


@pytest.mark.parametrize(
    "index, arg, fragment",
    [
        (3, {"kind": "i32", "value": 1}, "'i32' passed for parameter 'a' (float) of axpy<1> (base arm"),
        (4, {"kind": "u64", "value": "N"}, "'u64' passed for parameter 'n' (long long)"),
        (0, {"kind": "u64", "value": 0}, "'u64' passed for parameter 'x' (float*)"),
    ],
)
def test_argument_kinds_are_checked_against_the_declared_parameters(tmp_path, capsys, index, arg, fragment):
    plan = plan_copy()
    plan["workload"]["launch"]["args"][index] = arg
    path = make_repo(tmp_path, plan)
    got, lines = check_lines(path, capsys)
    assert got == 2, lines
    assert lines[0].startswith(f"{path}: workload.launch.args[{index}]: ") and fragment in lines[0], lines
    assert len(lines) == 2  # each arm's kernel named once


def test_a_block_past_the_launch_bounds_is_refused_per_architecture(tmp_path, capsys):
    plan = plan_copy()
    plan["workload"]["params"]["THREADS"] = 512  # the kernel declares __launch_bounds__(256)
    path = make_repo(tmp_path, plan)
    got, lines = check_lines(path, capsys)
    assert got == 2
    assert lines == [
        f"{path}: workload.launch.block: case N=1024: a block of 512 threads exceeds the 256 that {k} "
        f"({side} arm, sm_90) is compiled for (__launch_bounds__, .maxntid 256,1,1); the launch would fail"
        for side, k in (("base", "axpy<1>"), ("candidate", "axpy<4>"))
    ]
    plan["workload"]["params"]["THREADS"] = 128
    path.write_text(json.dumps(plan))
    assert check_lines(path, capsys) == (0, [])


# 5. messages


def test_a_launch_that_does_not_fit_prints_an_error_line(tmp_path, capsys):
    path = make_repo(tmp_path, too_much_shared_memory())
    got, out, err = run_cli(["plan", "check", path], capsys)
    assert got == 4 and "SOME LAUNCHES DO NOT FIT" in out
    assert errors(err) == [
        f"{path}: workload.launch.shared_bytes: the {side} arm's launch does not fit on sm_90: 300,000 bytes of "
        "shared memory per block (dynamic 300,000 plus static) exceed the 232,448 a block may have, in case(s) "
        "N=1024, N=4096; lower shared_bytes or the kernel's static shared memory"
        for side in ("base", "candidate")
    ]


def test_every_field_with_an_error_is_listed(tmp_path, capsys):
    plan = plan_copy()
    plan["schedule"]["blocks"] = "four"
    plan["budget"]["max_trials"] = -1
    plan["seeds"]["extra"] = 1
    path = make_repo(tmp_path, plan)
    got, lines = check_lines(path, capsys, "--no-compile")
    assert got == 2
    assert [line.split(": ")[1] for line in lines] == ["seeds.extra", "schedule.blocks", "budget.max_trials"]
    assert all(line.startswith(f"{path}: ") and "more field" not in line for line in lines)


def test_gate_names_take_a_dash_as_plan_names_do(tmp_path, capsys):
    plan = plan_copy()
    plan["acceptance"]["gates"][0]["name"] = "p50-speedup"
    path = make_repo(tmp_path, plan)
    assert check_lines(path, capsys, "--no-compile") == (0, [])


def test_check_takes_several_plans_and_exits_with_the_worst(tmp_path, capsys):
    good = make_repo(tmp_path / "good")
    broken = make_repo(tmp_path / "broken", too_much_shared_memory())
    invalid = make_repo(tmp_path / "invalid", edited(control(index=0, bit=40)))
    got, out, err = run_cli(["plan", "check", good, invalid, broken], capsys)
    assert got == 4
    lines = errors(err)
    assert lines[0].startswith(f"{invalid}: controls.negative[0].mutation.bit: ")
    assert [line.split(": ")[0] for line in lines[1:]] == [str(broken)] * 2
    assert out.count("digest") == 2  # the two plans that load are shown
    assert run_cli(["plan", "check", "--no-compile", good, good], capsys)[0] == 0


def test_plan_new_fits_the_block_to_the_launch_bounds(tmp_path, capsys):
    source = tmp_path / "kernels" / "k.cu"
    source.parent.mkdir(parents=True)
    (tmp_path / ".git").mkdir()
    source.write_text(
        "__global__ void __launch_bounds__(128) scale(const float* x, float* y, float a, int n) {\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i];\n}\n"
    )
    path = tmp_path / "protocols" / "scale" / "plan.json"
    got, _, err = run_cli(["plan", "new", path, "--cuda", source, "--kernel", "scale"], capsys)
    assert got == 0, err
    assert json.loads(path.read_text())["workload"]["params"]["THREADS"] == 128
    assert check_lines(path, capsys) == (0, [])  # compiled: the bound is checked


def test_compare_refuses_a_frozen_plan_check_refuses_before_any_trial(tmp_path, capsys, monkeypatch):
    import copy
    import shutil

    import qualify.run.device

    if shutil.which("gcc") is None:
        pytest.skip("needs a C compiler")
    from test_compare import PLAN, build

    plan = copy.deepcopy(PLAN)
    plan["controls"]["negative"] = [
        {"kind": "input", "name": "flip", "buffer": "x", "mutation": {"op": "flip_bit", "index": 0, "bit": 40}}
    ]
    path = make_repo(tmp_path, plan)
    freeze_unchecked(path)
    lib = build(tmp_path, "v1")

    def no_device(*args, **kwargs):
        raise AssertionError("the device opened for a plan check refuses")

    monkeypatch.setattr(qualify.run.device, "CudaDevice", no_device)
    got, _, err = run_cli(["compare", lib, lib, "--plan", path, "--record", tmp_path / "rec"], capsys)
    assert got == 2
    assert errors(err) == [f"{path}: controls.negative[0].mutation.bit: bit 40 is past the 32 bits of a f32 element"]
    assert not (tmp_path / "rec").exists()
