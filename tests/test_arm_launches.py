"""Arms that are sequences of launches: a base of two kernels (scale into a scratch buffer, then add)
against a fused candidate, each arm with its own geometry and parameters. The plan model, the
resolver, plan check (every launch compiled and its arguments checked), the engine (one call times
the whole sequence, outputs compared after it, scratch never compared) and the single-launch form's
digests unchanged."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from plans import HEADER, KERNEL, make_repo
from pydantic import ValidationError
from test_engine import run_trial, small_plan

from qualify.commands.check import check_plan
from qualify.errors import PlanError
from qualify.plan.digest import freeze_from_hashes
from qualify.plan.load import load_plan
from qualify.plan.model import CudaArm, Plan
from qualify.run.arms import ArmExec, LaunchSequence
from qualify.run.fake import FakeDevice

TWO_STEP = (
    KERNEL
    + """
__global__ void scale_into(const float* x, float* tmp, float a, long long n) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) tmp[i] = a * x[i];
}
__global__ void add_to(const float* tmp, const float* y, float* out, long long n) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tmp[i] + y[i];
}
"""
)
FILES = {"kernels/k.cu": TWO_STEP, "kernels/common.cuh": HEADER}


def _buf(name):
    return {"kind": "buffer", "name": name}


def two_step_plan() -> dict:
    """The base arm: scale_into (its own 128-thread blocks, SCALE_THREADS only it sets) then add_to;
    the candidate: the fused axpy<1> through workload.launch."""
    plan = small_plan()
    plan["controls"] = {"negative": []}
    plan["arms"]["base"] = {
        "kind": "cuda",
        "source": "../../kernels/k.cu",
        "params": {"SCALE_THREADS": 128},
        "scratch": [{"name": "tmp", "dtype": "f32", "shape": ["N"]}],
        "launches": [
            {
                "kernel": "scale_into",
                "grid": ["cdiv(N, SCALE_THREADS)"],
                "block": ["SCALE_THREADS"],
                "args": [_buf("x"), _buf("tmp"), {"kind": "f32", "value": 0.5}, {"kind": "i64", "value": "N"}],
            },
            {
                "kernel": "add_to",
                "grid": ["cdiv(N, 256)"],
                "block": [256],
                "args": [_buf("tmp"), _buf("y"), _buf("out"), {"kind": "i64", "value": "N"}],
            },
        ],
    }
    plan["arms"]["candidate"] = {"kind": "cuda", "source": "../../kernels/k.cu", "kernel": "axpy<1>"}
    plan["workload"]["params"] = {"THREADS": 256, "VEC": 1}
    return plan


def _scale_into(memory, args, kernel):
    (_, x), (_, tmp), (_, a), (_, n) = args
    memory.view(tmp, 4 * n).view(np.float32)[:] = np.float32(a) * memory.view(x, 4 * n).view(np.float32)


def _add_to(memory, args, kernel):
    (_, tmp), (_, y), (_, out), (_, n) = args
    view = lambda p: memory.view(p, 4 * n).view(np.float32)  # noqa: E731
    view(out)[:] = view(tmp) + view(y)


def _axpy(memory, args, kernel):
    (_, x), (_, y), (_, out), (_, a), (_, n) = args
    view = lambda p: memory.view(p, 4 * n).view(np.float32)  # noqa: E731
    view(out)[:] = np.float32(a) * view(x) + view(y)


def _device(**durations) -> FakeDevice:
    kernels = {"scale_into": _scale_into, "add_to": _add_to, "axpy": _axpy}
    return FakeDevice(kernels, durations=durations, cupti=True)


def test_an_arm_names_either_a_kernel_or_its_own_launches():
    plan = two_step_plan()
    both = copy.deepcopy(plan["arms"]["base"]) | {"kernel": "axpy<1>"}
    with pytest.raises(ValidationError, match="either `kernel`"):
        CudaArm(**both)
    neither = {k: v for k, v in plan["arms"]["base"].items() if k not in ("launches", "scratch")}
    with pytest.raises(ValidationError, match="either `kernel`"):
        CudaArm(**neither)
    with pytest.raises(ValidationError, match="`scratch` buffers belong to an arm with its own `launches`"):
        CudaArm(**plan["arms"]["candidate"], scratch=[{"name": "t", "dtype": "f32", "shape": [1]}])


def test_the_single_launch_form_dumps_as_before():
    """The digest hashes the dump: an arm without launches or scratch dumps no such keys."""
    dump = CudaArm(**small_plan()["arms"]["base"]).model_dump(mode="json")
    assert set(dump) == {"kind", "source", "kernel", "params", "defines", "options", "include_dirs"}
    before = freeze_from_hashes(Plan.model_validate(small_plan()), {}).plan_sha256
    with_defaults = small_plan()
    with_defaults["arms"]["base"]["scratch"] = []  # the default, written out: the same plan
    assert freeze_from_hashes(Plan.model_validate(with_defaults), {}).plan_sha256 == before


@pytest.mark.parametrize(
    "change, field, message",
    [
        (
            lambda p: p["arms"]["base"]["launches"][1]["args"].__setitem__(0, _buf("nowhere")),
            "arms.base.launches[1].args[0].name",
            "unknown buffer 'nowhere'",
        ),
        (
            lambda p: p["arms"]["base"]["scratch"][0].__setitem__("name", "out"),
            "arms.base.scratch[0].name",
            "buffer 'out' is declared twice",
        ),
        (
            lambda p: p["arms"]["base"]["scratch"].append({"name": "spare", "dtype": "f32", "shape": ["N"]}),
            "arms.base.scratch[1]",
            "scratch buffer 'spare' is passed to none of the arm's launches",
        ),
        (
            lambda p: p["arms"]["base"]["launches"][0].__setitem__("kernel", "missing_kernel"),
            "arms.base.launches[0].kernel",
            "missing_kernel",
        ),
        (
            lambda p: p["arms"]["base"]["launches"][0].__setitem__("block", ["SCALE_THREADS * 16"]),
            "arms.base.launches[0].block",
            "2048 threads exceed",
        ),
    ],
)
def test_a_bad_launch_is_refused_naming_its_field(tmp_path, change, field, message):
    plan = two_step_plan()
    change(plan)
    with pytest.raises(PlanError, match=message) as exc:
        load_plan(make_repo(tmp_path, plan, FILES))
    assert exc.value.field == field


def test_each_arm_resolves_its_own_geometry_and_scratch(tmp_path):
    loaded = load_plan(make_repo(tmp_path, two_step_plan(), FILES))
    case = loaded.cases[1]  # N=4096
    base, cand = case.arms["base"], case.arms["candidate"]
    assert base.launch is None and [s.kernel for s in base.steps] == ["scale_into", "add_to"]
    assert [s.launch.grid for s in base.steps] == [(32, 1, 1), (16, 1, 1)]
    assert [s.launch.block for s in base.steps] == [(128, 1, 1), (256, 1, 1)]
    assert [b.name for b in base.buffers] == ["x", "y", "out", "tmp"] and base.buffer("tmp").role == "scratch"
    assert "tmp" not in {b.name for b in cand.buffers} and cand.steps == ()
    assert base.launches == tuple(s.launch for s in base.steps) and cand.launches == (cand.launch,)


def test_plan_check_compiles_every_launch_and_checks_its_arguments(tmp_path):
    check = check_plan(make_repo(tmp_path, two_step_plan(), FILES))
    assert sorted(check.compiled) == [
        ("base.launches[0]", "sm_90"),
        ("base.launches[1]", "sm_90"),
        ("candidate", "sm_90"),
    ]
    assert check.compiled[("base.launches[1]", "sm_90")].spec.kernel == "add_to"
    assert {f.side for f in check.fits} == {"base.launches[0]", "base.launches[1]", "candidate"} and check.ok

    wrong = two_step_plan()
    wrong["arms"]["base"]["launches"][1]["args"].pop()  # add_to takes four parameters
    with pytest.raises(PlanError, match="3 arguments for 4 parameters of add_to") as exc:
        check_plan(make_repo(tmp_path / "wrong", wrong, FILES))
    assert exc.value.field == "arms.base.launches[1].args"


def test_freeze_reads_the_headers_of_every_launch(tmp_path):
    loaded = load_plan(make_repo(tmp_path, two_step_plan(), FILES, freeze=True))
    assert "kernels/common.cuh" in loaded.lock["files"]


def test_one_call_enqueues_the_whole_sequence_and_the_window_times_it(tmp_path):
    loaded = load_plan(make_repo(tmp_path, two_step_plan(), FILES, freeze=True))
    device = _device(**{"base:scale_into": 4_000.0, "base:add_to": 6_000.0, "candidate": 7_000.0})
    trial = run_trial(loaded, device, tmp_path)
    assert trial.status == "complete", trial.failures
    loads = [c[1:3] for c in device.calls if c[0] == "load"]
    assert ("base:scale_into", "scale_into") in loads and ("base:add_to", "add_to") in loads
    # each base sample's window held both launches, 4 µs + 6 µs, against the fused 7 µs (the
    # statistics take the empty window's floor off both); one launch alone would make it 1.75 or 1.17
    case = trial.cases[-1]
    assert case.parity[0].equal and [p.buffer for p in case.parity] == ["out"]  # tmp is never compared
    assert case.stats.ratio == pytest.approx(7_000.0 / 10_000.0, rel=0.03)
    # the kernels table names each launch of a traced call, in launch order
    inventory = case.kernels.inventory
    assert [k.name for k in inventory["base"]] == ["scale_into", "add_to"]
    assert [k.name for k in inventory["candidate"]] == ["axpy<1>"]


def test_run_once_poisons_the_scratch_so_a_skipped_first_launch_shows(tmp_path):
    loaded = load_plan(make_repo(tmp_path, two_step_plan(), FILES))
    case = loaded.cases[0]
    device = _device()
    device.kernels["scale_into"] = lambda memory, args, kernel: None  # writes nothing
    arm = case.arms["base"]
    buffers = {b.name: device.alloc(b.nbytes) for b in arm.buffers}
    kernels = LaunchSequence(
        tuple(device.load_kernel(f"base:{s.kernel}", _Compiled(s.kernel), 0) for s in arm.steps), ()
    )
    ex = ArmExec("base", kernels, arm, buffers, ["out"])
    ex.bind_args()
    out = ex.run_once(device)["out"].view(np.float32)
    assert np.isnan(out).all()  # add_to read the poisoned (0xFF: NaN) scratch
    assert ("poison", buffers["tmp"].ptr) in device.calls


class _Compiled:
    def __init__(self, kernel):
        self.spec = type("Spec", (), {"kernel": kernel})()


@pytest.mark.parametrize("archs, code_arch", [(["sm_90"], "sm_90"), (["sm_90a"], "sm_90a")])
def test_a_sequence_arms_code_fact_names_the_target_it_compiled(tmp_path, archs, code_arch):
    # a sequence's machine code is compared launch by launch and the fact names the exact target:
    # an sm_90a plan on a 9.0 device compiles sm_90a, and report --check holds the fact to the plan
    plan = two_step_plan()
    plan["hardware"]["architectures"] = archs
    loaded = load_plan(make_repo(tmp_path, plan, FILES, freeze=True))
    device = _device(**{"base:scale_into": 4_000.0, "base:add_to": 6_000.0, "candidate": 7_000.0})
    trial = run_trial(loaded, device, tmp_path)
    assert trial.status == "complete", trial.failures
    assert trial.code is not None and trial.code.status == "differs" and trial.code.arch == code_arch
    assert [len(trial.code.launched[side]) for side in ("base", "candidate")] == [2, 1]
    assert trial.code.differences[-1] == "launch 2: only the base arm launches add_to"
