"""`plan check` lists every stage's errors in one run, says which stages it could not reach, and
keeps each line readable; and the rules that arrived with it: generators against their dtype,
buffer dtypes against the kernel's pointees, devices against architectures, unused arch targets."""

from __future__ import annotations

import copy
import re

import pytest
from plans import HEADER, KERNEL, make_repo, plan_copy

from qualify.build.kernel_match import pointee_dtype
from qualify.cli import main
from qualify.commands.check import check_plan
from qualify.errors import PlanError, capped
from qualify.plan.generators import produced
from qualify.plan.load import load_plan
from qualify.plan.model import ConstantInit, NormalInit, UniformInit
from qualify.plan.stages import StagedProblems


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return exc.value.code, capsys.readouterr().err


def errors_of(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("qualify: error: ")]


# ---- every stage at once


def test_errors_of_four_stages_come_in_one_run(tmp_path, capsys):
    """A selector, a generator, a launch argument's size and a buffer's dtype: four stages' worth
    of mistakes, one run, one line each, then the summary."""
    plan = plan_copy()
    plan["acceptance"]["gates"][0] = {"name": "faster", "cases": ["N=99"], "min_speedup_pct": 1.0}  # selectors
    plan["workload"]["buffers"][0]["init"] = {"kind": "normal", "std": 1e39}  # inputs: f32 infinity
    plan["workload"]["buffers"][1]["dtype"] = "f16"  # kernels: y is `const float*`
    plan["workload"]["launch"]["args"][4] = {"kind": "i32", "value": "N"}  # kernels: n is long long
    code, err = run_cli(["plan", "check", str(make_repo(tmp_path, plan))], capsys)
    assert code == 2, err
    fields = [re.match(r"qualify: error: [^:]+: ([^:]+):", line).group(1) for line in errors_of(err)]
    assert fields == [
        "acceptance.gates[0].cases[0]",
        "workload.buffers[0].init",
        "workload.launch.args[4]",  # the size, once: not also the kind of the same argument
        "workload.launch.args[1]",  # the base arm's kernel
        "workload.launch.args[1]",  # the candidate's
    ], err
    assert err.splitlines()[-1] == "qualify: 5 errors in 3 stages (selectors, inputs, kernels)"


def test_a_stage_that_cannot_run_says_which_failure_it_waits_on(tmp_path, capsys):
    plan = plan_copy()
    plan["workload"]["buffers"][0]["shape"] = ["N - 2048"]  # arguments: negative for N=1024
    plan["acceptance"]["sanitizer"][0]["cases"] = ["N=7"]  # selectors
    code, err = run_cli(["plan", "check", "--no-compile", str(make_repo(tmp_path, plan))], capsys)
    assert code == 2
    assert len(errors_of(err)) == 2, err
    assert (
        "qualify: not checked: inputs, compile, kernels: they need the stages that failed "
        "(selectors, arguments) to pass first" in err
    )
    assert err.splitlines()[-1] == "qualify: 2 errors in 2 stages (selectors, arguments); 3 stages not checked"


def test_a_schema_error_stops_everything_and_says_so(tmp_path, capsys):
    plan = plan_copy()
    plan["workload"]["buffers"][0]["dtype"] = "f33"
    plan["schedule"]["blocks"] = "four"
    code, err = run_cli(["plan", "check", str(make_repo(tmp_path, plan))], capsys)
    assert code == 2
    assert len(errors_of(err)) == 2, err
    assert err.splitlines()[-1] == "qualify: 2 errors in 1 stage (schema); 7 stages not checked"


def test_one_error_needs_no_summary(tmp_path, capsys):
    plan = plan_copy()
    plan["acceptance"]["sanitizer"][0]["cases"] = ["N=7"]
    code, err = run_cli(["plan", "check", "--no-compile", str(make_repo(tmp_path, plan))], capsys)
    assert code == 2 and len(err.splitlines()) == 1, err


def test_a_long_error_is_cut_in_its_middle_saying_how_much(tmp_path, capsys):
    plan = plan_copy()
    plan["workload"]["cases"] = [{"N": 1024 + 16 * i} for i in range(400)]
    plan["acceptance"]["sanitizer"][0]["cases"] = ["N=7"]
    code, err = run_cli(["plan", "check", "--no-compile", str(make_repo(tmp_path, plan))], capsys)
    (line,) = errors_of(err)
    message = line.split("acceptance.sanitizer[0].cases[0]: ", 1)[1]
    assert len(message) < 340, len(message)
    cut = int(re.search(r"\[([\d,]+) characters cut\]", message).group(1).replace(",", ""))
    assert message.startswith("undeclared case 'N=7' (cases: N=1024")
    whole = "undeclared case 'N=7' (cases: " + ", ".join(sorted(f"N={1024 + 16 * i}" for i in range(400))) + ")"
    assert message.endswith(whole[-60:])  # the end survives: it is where the fix usually is
    assert len(message) + cut - len(f" … [{cut:,} characters cut] … ") == len(whole)


def test_capped_keeps_short_lines_whole_and_cuts_long_ones_to_the_limit():
    assert capped("x" * 340) == "x" * 340  # cutting fewer characters than the marker adds is no cut
    cut = capped("a" * 500 + "b" * 500)
    assert cut.startswith("a" * 200) and cut.endswith("b" * 75) and "[725 characters cut]" in cut
    assert len(cut) < 320


# ---- generators against their dtype


@pytest.mark.parametrize(
    "init, dtype, overflow, fragment",
    [
        ({"kind": "normal", "std": 1000.0}, "f8e4m3", None, "64 % NaN or infinite"),
        ({"kind": "uniform", "low": 1000.0, "high": 2000.0}, "f8e4m3", "saturate", "100 % saturated at ±448"),
        ({"kind": "constant", "value": 1e-9}, "f8e4m3", None, "100 % zero"),
        ({"kind": "constant", "value": 1e-9}, "f16", None, "100 % zero"),
        ({"kind": "uniform", "low": 0.001, "high": 0.002}, "f4e2m1", None, "100 % zero"),
    ],
)
def test_a_generator_its_dtype_cannot_hold_is_refused_with_the_numbers(
    tmp_path, capsys, init, dtype, overflow, fragment
):
    plan = plan_copy()
    buf = plan["workload"]["buffers"][0]
    buf.update(dtype=dtype, init=init)
    plan["workload"]["launch"]["args"][0]["reinterpret"] = True  # the kernel reads floats
    plan["controls"]["negative"][0]["mutation"]["bit"] = 1
    if overflow:
        buf["overflow"] = overflow
    code, err = run_cli(["plan", "check", "--no-compile", str(make_repo(tmp_path, plan))], capsys)
    assert code == 2, err
    (line,) = errors_of(err)
    assert "workload.buffers[0].init: " in line and fragment in line and f"in {dtype}" in line, line


@pytest.mark.parametrize(
    "init, dtype",
    [
        ({"kind": "normal"}, "f8e4m3"),
        ({"kind": "normal"}, "f4e2m1"),  # a fifth of the values round to 0: below half
        ({"kind": "constant", "value": 0.0}, "f8e4m3"),  # zero was meant
        ({"kind": "zeros"}, "f4e2m1"),
        ({"kind": "constant", "value": 448.0}, "f8e4m3"),  # the largest value, written as such
        ({"kind": "constant", "value": 1e-9}, "bf16"),  # bf16 has f32's exponent range
    ],
)
def test_a_generator_its_dtype_holds_passes(tmp_path, capsys, init, dtype):
    plan = plan_copy()
    plan["workload"]["buffers"][0].update(dtype=dtype, init=init)
    plan["workload"]["launch"]["args"][0]["reinterpret"] = True  # the kernel reads floats
    plan["controls"]["negative"][0]["mutation"]["bit"] = 1
    code, err = run_cli(["plan", "check", "--no-compile", str(make_repo(tmp_path, plan))], capsys)
    assert code is None or code == 0, err


def test_the_sample_is_the_trials_cast():
    """The fractions are those of from_float64 with the overflow rule, not a separate model."""
    normal = produced(NormalInit(kind="normal", std=1000.0), "f8e4m3", "saturate", 7)
    assert normal.nonfinite == 0 and normal.saturated > 0.6  # saturate turns the NaN into ±448
    assert produced(UniformInit(kind="uniform", low=1.0, high=2.0), "f32", "nonfinite", 7).zero == 0
    assert produced(ConstantInit(kind="constant", value=-1e-9), "f8e5m2", "nonfinite", 7).zero == 1.0


# ---- buffer dtypes against the kernel's pointees


def test_a_buffer_of_another_dtype_than_the_pointee_is_refused_and_reinterpret_admits_it(tmp_path, capsys):
    plan = plan_copy()
    plan["workload"]["buffers"][0]["dtype"] = "f8e4m3"
    plan["controls"]["negative"][0]["mutation"]["bit"] = 1
    path = make_repo(tmp_path / "a", plan)
    code, err = run_cli(["plan", "check", str(path)], capsys)
    assert code == 2, err
    line, other = errors_of(err)  # each arm's kernel
    assert "workload.launch.args[0]: buffer 'x' is f8e4m3 but parameter 'x' of axpy<4> (candidate arm" in other
    assert "workload.launch.args[0]: buffer 'x' is f8e4m3 but parameter 'x' of axpy<1>" in line
    assert "points to float (f32)" in line and '"reinterpret": true' in line
    plan["workload"]["launch"]["args"][0]["reinterpret"] = True
    code, err = run_cli(["plan", "check", str(make_repo(tmp_path / "b", plan))], capsys)
    assert code is None or code == 0, err


def test_reinterpret_left_unset_keeps_the_digest():
    """Plans frozen before the field existed keep their digest (AddedFields)."""
    from plans import PLAN

    from qualify.plan.model import Plan

    with_default = copy.deepcopy(PLAN)
    with_default["workload"]["launch"]["args"][0]["reinterpret"] = False
    assert Plan.model_validate(with_default).model_dump() == Plan.model_validate(PLAN).model_dump()
    with_default["workload"]["launch"]["args"][0]["reinterpret"] = True
    assert Plan.model_validate(with_default).model_dump() != Plan.model_validate(PLAN).model_dump()


@pytest.mark.parametrize(
    "ctype, dtype",
    [
        ("float*", "f32"),
        ("float4*", "f32"),
        ("__half*", "f16"),
        ("__nv_bfloat162*", "bf16"),
        ("__nv_fp8_e4m3*", "f8e4m3"),
        ("uint8_t*", "u8"),
        ("const unsigned char*", None),  # not a ctype as declared_params gives it: no "const"
        ("void*", None),
        ("T*", None),
        ("float**", None),
    ],
)
def test_pointee_dtypes(ctype, dtype):
    assert pointee_dtype(ctype) == dtype


# ---- devices against architectures, and arch-specific targets that add nothing


@pytest.mark.parametrize(
    "device, archs, refused",
    [
        ({"name": "NVIDIA L40S"}, ["sm_90a"], True),
        ({"compute_capability": "8.9"}, ["sm_90a"], True),
        ({"name": "NVIDIA L40S"}, ["sm_90a", "sm_89"], False),
        ({"name": "NVIDIA H200*"}, ["sm_90a"], False),
        ({"name": "Some Future GPU"}, ["sm_90a"], False),  # unknown: not judged
        ({"name": "NVIDIA B200"}, ["sm_100f"], False),
        ({"name": "NVIDIA B300"}, ["sm_100a"], True),  # 10.3 runs 'f' code of 10.0, not 'a'
    ],
)
def test_a_device_that_runs_none_of_the_architectures_is_refused(tmp_path, device, archs, refused):
    plan = plan_copy()
    plan["hardware"] = {"devices": [device], "architectures": archs}
    path = make_repo(tmp_path, plan)
    if not refused:
        load_plan(path)
        return
    with pytest.raises(PlanError) as exc:
        load_plan(path)
    assert exc.value.field == "hardware.devices[0]"
    assert "add sm_" in exc.value.message and "to hardware.architectures or remove the device" in exc.value.message


SPECIFIC = """\
template <int VEC>
__global__ void __launch_bounds__(256) axpy(const float* x, const float* y, float* out, float a, long long n) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\\n");
#endif
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaf(a, x[i], y[i]);
}
"""


@pytest.mark.parametrize("source, noted", [(KERNEL, True), (SPECIFIC, False)])
def test_an_arch_specific_target_that_adds_nothing_is_noted(tmp_path, source, noted):
    plan = plan_copy()
    plan["hardware"]["architectures"] = ["sm_90a"]
    path = make_repo(tmp_path, plan, {"kernels/k.cu": source, "kernels/common.cuh": HEADER})
    check = check_plan(path)
    notes = [n for n in check.notes if n.startswith("sm_90a: ")]
    assert bool(notes) == noted, check.notes
    if noted:
        assert "compile to the same machine code for sm_90; nothing arch-specific" in notes[0]


def test_staged_problems_is_a_plan_error_with_every_line():
    from qualify.plan.stages import Stage

    a, b = PlanError("one", field="x"), PlanError("two", field="y")
    staged = StagedProblems([Stage("schema", (a,)), Stage("structure", skipped="needs the schema stage to pass")])
    assert staged.each() == [a] and staged.notes()[-1] == "1 error in 1 stage (schema); 1 stage not checked"
    staged = StagedProblems([Stage("selectors", (a, b)), Stage("inputs", (PlanError("again", field="y"),))])
    assert [e.message for e in staged.each()] == ["one", "two"]  # a field a later stage refuses again
    both = StagedProblems([Stage("kernels", (PlanError("base", field="z"), PlanError("candidate", field="z")))])
    assert [e.message for e in both.each()] == ["base", "candidate"]  # one stage, one field, two arms


def test_narrow_floats_through_byte_pointers_are_the_convention_not_a_reinterpretation():
    from qualify.build.declarations import Param
    from qualify.build.kernel_match import _pointee_problem
    from qualify.plan.model import BufferArg

    arg = BufferArg(kind="buffer", name="q")
    byte = Param("q", "unsigned char*", True, True)
    assert _pointee_problem(arg, byte, "f8e4m3", "k", "base", "k.cu") is None
    assert _pointee_problem(arg, byte, "f4e2m1", "k", "base", "k.cu") is None
    assert "is i8 but parameter 'q'" in _pointee_problem(arg, byte, "i8", "k", "base", "k.cu")
    assert "is f16 but" in _pointee_problem(arg, byte, "f16", "k", "base", "k.cu")
    assert "is f8e4m3 but" in _pointee_problem(arg, Param("q", "float*", True, True), "f8e4m3", "k", "base", "k.cu")
