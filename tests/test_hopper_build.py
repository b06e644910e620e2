"""Kernels Hopper teams write (issue 28, items 1-2): arch-specific targets compiled without a
GPU and refused on a device that cannot run them; CCCL's device-side headers, every one a kernel
reads frozen by the lock; and the build errors that say how to fix a missing header or a template
named without its arguments."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from plans import HEADER, KERNEL, make_repo, plan_copy
from test_refused_inputs import refused, run_cli

from qualify.build import header_reads, nvrtc
from qualify.build.arms import kernel_spec
from qualify.commands.check import check_plan
from qualify.errors import BuildError, QualifyError
from qualify.plan.load import load_plan
from qualify.plan.model.hardware import ARCH_SPECIFIC, FAMILY_SPECIFIC, refusal, runs_on, target_for

CCCL = nvrtc.cccl_include_dir()
needs_cccl = pytest.mark.skipif(CCCL is None, reason="the CCCL headers of the CUDA extra are not installed")

HOPPER = """\
#include <cuda/std/limits>
#include <cuda/barrier>
#include "common.cuh"
template <int VEC>
__global__ void __launch_bounds__(256) axpy(const float* x, const float* y, float* out, float a, long long n) {
    __shared__ cuda::barrier<cuda::thread_scope_block> bar;
    if (threadIdx.x == 0) init(&bar, blockDim.x);
    __syncthreads();
    const long long i = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
    for (int k = 0; k < VEC; ++k)
        if (i + k < n) out[i + k] = scaled(a, x[i + k], y[i + k]) + cuda::std::numeric_limits<float>::min();
    bar.arrive_and_wait();
}
"""


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("QUALIFY_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    nvrtc.clear_memo()
    yield
    nvrtc.clear_memo()


def hopper_repo(tmp_path, archs=("sm_90a",), kernel=HOPPER):
    plan = plan_copy()
    plan["hardware"]["architectures"] = list(archs)
    return make_repo(tmp_path, plan, files={"kernels/k.cu": kernel, "kernels/common.cuh": HEADER})


def lock_files(path) -> dict:
    return json.loads(path.with_name("plan.lock.json").read_text())["files"]


# ---------------------------------------------------------------------------------------------
# arch-specific targets


def test_arch_rules():
    assert runs_on("sm_90a", "sm_90") and not runs_on("sm_90a", "sm_100") and not runs_on("sm_100a", "sm_103")
    assert runs_on("sm_100f", "sm_103") and not runs_on("sm_103f", "sm_100") and not runs_on("sm_100f", "sm_120")
    assert target_for(["sm_90a"], "sm_90") == "sm_90a"
    assert target_for(["sm_90", "sm_90a"], "sm_90") == "sm_90"  # the device's own, when listed
    assert target_for(["sm_100f", "sm_103a"], "sm_103") == "sm_103a"  # arch-specific before family
    assert target_for(["sm_90a"], "sm_100") is None and target_for(["sm_100a"], "sm_103") is None
    why = refusal(["sm_90a"], "sm_100", "10.0")
    assert (
        "\n" not in why
        and "compute capability 10.0" in why
        and "sm_90a code runs only on compute capability 9.0" in why
    )


def test_plan_check_compiles_every_arch_specific_target_without_a_gpu(tmp_path):
    archs = [a for a in (*ARCH_SPECIFIC, *FAMILY_SPECIFIC) if int(a[3:-1]) in nvrtc.supported_archs()]
    path = hopper_repo(tmp_path, archs, kernel=KERNEL.replace('#include "common.cuh"', '#include "common.cuh"\n'))
    check = check_plan(path)
    assert sorted({arch for _, arch in check.compiled}) == sorted(archs)
    for (_, arch), compiled in check.compiled.items():
        assert compiled.spec.arch == arch and compiled.cubin[:4] == b"\x7fELF"


def test_an_sm_90a_only_instruction_compiles_for_sm_90a_and_not_for_sm_90(tmp_path, capsys):
    fence = KERNEL.replace(
        "    const long long i", '    asm volatile("wgmma.fence.sync.aligned;");\n    const long long i'
    )
    assert run_cli(["plan", "check", hopper_repo(tmp_path / "a", ("sm_90a",), kernel=fence)], capsys)[0] == 0
    code, _, err = run_cli(["plan", "check", hopper_repo(tmp_path / "plain", ("sm_90",), kernel=fence)], capsys)
    assert code == 4 and "wgmma" in err, err


def test_a_device_compiles_the_plans_arch_specific_target(tmp_path):
    loaded = load_plan(hopper_repo(tmp_path, ("sm_90a",), kernel=KERNEL))
    assert kernel_spec(loaded, "base", "sm_90").arch == "sm_90a"  # what run asks for an H200
    assert kernel_spec(loaded, "base", "sm_90a").arch == "sm_90a"  # what plan check asks for


def test_an_architecture_nvrtc_does_not_know_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(nvrtc, "supported_archs", lambda: (75, 80))
    path = hopper_repo(tmp_path, ("sm_90a",), kernel=KERNEL)
    # plan check reports every arm NVRTC refuses together: each is its own line, all naming sm_90a
    with pytest.raises(QualifyError) as caught:
        check_plan(path)
    errors = list(caught.value.each())
    assert len(errors) >= 2  # both arms target sm_90a
    for each in errors:
        assert isinstance(each, BuildError)
        assert re.search(r"cannot compile for sm_90a \(it knows sm_75, sm_80\)", each.one_line()), each.one_line()


# ---------------------------------------------------------------------------------------------
# CCCL


@needs_cccl
def test_done_when_an_sm_90a_kernel_with_cccl_compiles_and_the_lock_lists_every_cccl_header(tmp_path, capsys):
    path = hopper_repo(tmp_path)
    code, out, err = run_cli(["plan", "check", path], capsys)
    assert code == 0, err
    assert f"CCCL {nvrtc.cccl_version()}" in " ".join(out.split())
    assert run_cli(["plan", "freeze", path], capsys)[0] == 0
    frozen = {rel for rel in lock_files(path) if rel.startswith("<cccl>/")}
    assert {"<cccl>/cuda/std/limits", "<cccl>/cuda/barrier"} <= frozen
    read = set()
    for compiled in check_plan(path).compiled.values():
        for name, digest in compiled.headers:
            if digest != header_reads.BUILTIN and Path(name).resolve().is_relative_to(CCCL.resolve()):
                read.add(header_reads.cccl_key(CCCL.resolve(), Path(name).resolve()))
    assert read == frozen  # every CCCL header NVRTC read, and only those


@needs_cccl
def test_a_changed_cccl_header_is_refused_until_refrozen(tmp_path, capsys, monkeypatch):
    copy = tmp_path / "cccl"
    for part in ("cuda", "nv"):
        shutil.copytree(CCCL / part, copy / part)
    monkeypatch.setenv("QUALIFY_CCCL_DIR", str(copy))
    path = hopper_repo(tmp_path / "repo")
    assert run_cli(["plan", "freeze", path], capsys)[0] == 0
    assert run_cli(["plan", "check", path], capsys)[0] == 0
    with open(copy / "cuda" / "std" / "limits", "a") as f:
        f.write("// an upgrade\n")
    refused(capsys, ["plan", "check", path], 3, "<cccl>/cuda/std/limits", "changed after freezing")
    refused(capsys, ["plan", "check", "--no-compile", path], 3, "<cccl>/cuda/std/limits")
    path.with_name("plan.lock.json").unlink()
    assert run_cli(["plan", "freeze", path], capsys)[0] == 0
    assert run_cli(["plan", "check", path], capsys)[0] == 0


@needs_cccl
def test_a_cccl_include_wrapper_with_a_built_name_is_refused(tmp_path, capsys):
    kernel = HOPPER.replace(
        '#include "common.cuh"\n',
        '#include "common.cuh"\n#define S(x) #x\n#define F(a,b) S(a/b)\n#if _CCCL_HAS_INCLUDE(F(/etc,hostname))\n#endif\n',
    )
    refused(capsys, ["plan", "check", hopper_repo(tmp_path, kernel=kernel)], 2, "k.cu", "_CCCL_HAS_INCLUDE")


# ---------------------------------------------------------------------------------------------
# messages


def build_refused(capsys, argv, *fragments: str, log: bool = True) -> None:
    """Exit 4; the first line is the one-line error with every fragment, NVRTC's lines below it."""
    code, out, err = run_cli(argv, capsys)
    assert code == 4 and "Traceback" not in out + err, err
    first, *rest = err.splitlines()
    assert first.startswith("qualify: error: ") and all(f in first for f in fragments), first
    # every arm NVRTC refuses is an error line (both here: one source), then the stage not reached
    assert rest[-2] == "qualify: not checked: kernels: they need the stages that failed (compile) to pass first", err
    assert re.fullmatch(r"qualify: [12] errors? in 1 stage \(compile\); 1 stage not checked", rest[-1]), err
    assert bool([line for line in rest if not line.startswith("qualify: ")]) == log, err


@pytest.mark.parametrize("header, alternative", [("cfloat", "cuda/std/cfloat"), ("float.h", "cuda/std/cfloat")])
@needs_cccl
def test_a_host_header_names_its_cuda_std_alternative(tmp_path, capsys, header, alternative):
    path = hopper_repo(tmp_path, kernel=f"#include <{header}>\n" + KERNEL)
    build_refused(capsys, ["plan", "check", path], "NVRTC has no host C++ headers", f"<{alternative}>")


def test_a_header_under_include_points_at_include_dirs(tmp_path, capsys):
    kernel = KERNEL.replace('#include "common.cuh"', '#include "common.cuh"\n#include "tile.cuh"')
    path = make_repo(tmp_path, files={"kernels/k.cu": kernel, "kernels/common.cuh": HEADER, "include/tile.cuh": ""})
    build_refused(capsys, ["plan", "check", path], "tile.cuh", "include/", "include_dirs")


def test_a_template_named_without_arguments_gets_a_hint(tmp_path, capsys):
    plan = plan_copy()
    plan["arms"]["base"]["kernel"] = "axpy"
    path = make_repo(tmp_path, plan)
    build_refused(capsys, ["plan", "check", path], "axpy is a template", '"axpy<256>"', log=False)


# ---------------------------------------------------------------------------------------------
# run: the target a device compiles, and the device that cannot run it


def _frozen_small_plan(tmp_path, archs, devices=None):
    from test_engine import small_plan

    from qualify.cli import main
    from qualify.commands.pipeline import load_frozen

    plan = small_plan()
    plan["hardware"]["architectures"] = archs
    if devices is not None:
        plan["hardware"]["devices"] = devices
    path = make_repo(tmp_path, plan)
    with pytest.raises(SystemExit):
        main(["plan", "freeze", str(path)])
    return load_frozen(path)


def test_an_sm_90a_plan_runs_on_a_9_0_device_and_its_record_names_the_target(tmp_path, capsys):
    import fakes

    from qualify.commands.pipeline import run_plan
    from qualify.run.fake import FakeDevice, FakeTelemetry

    loaded = _frozen_small_plan(tmp_path, ["sm_90a"])
    device = FakeDevice({"axpy": fakes.axpy}, durations={"base": 10_000.0, "candidate": 8_000.0})
    assert device.info.arch == "sm_90"
    record = tmp_path / "records" / "tiny"
    outcome = run_plan(loaded, record, lambda: device, lambda uuid: FakeTelemetry(), trials=1)
    (trial,) = outcome.trials
    assert trial.code is not None and trial.code.arch == "sm_90a"
    assert trial.provenance.cccl_version == nvrtc.cccl_version()
    assert trial.provenance.compile_sandbox == nvrtc.compile_sandbox()
    assert run_cli(["report", "--check", record], capsys)[0] == 0


def test_a_device_that_cannot_run_the_plans_arch_specific_code_is_refused_before_any_trial(tmp_path):
    import fakes

    from qualify.commands.pipeline import run_plan
    from qualify.errors import DeviceError
    from qualify.run.fake import FakeDevice, FakeTelemetry

    # a name `plan check` cannot place (a device of 9.0 in the plan is refused before any run:
    # tests/test_plan_stages.py), so the device met at run time is the one that refuses
    loaded = _frozen_small_plan(tmp_path, ["sm_100a"], devices=[{"name": "NVIDIA H200 (fake)"}])
    with pytest.raises(DeviceError) as exc:
        run_plan(
            loaded, tmp_path / "records" / "tiny", lambda: FakeDevice({"axpy": fakes.axpy}), lambda u: FakeTelemetry()
        )
    assert exc.value.one_line() == (
        "this device is compute capability 9.0 (sm_90) and the plan lists sm_100a: "
        "sm_100a code runs only on compute capability 10.0"
    )
    assert not (tmp_path / "records" / "tiny").exists()
