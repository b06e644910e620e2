"""The CUDA generation checks on a real driver: the installed stack agrees, the start-up check
loads NVRTC's code, and a CUBIN the driver cannot load is refused in one line (exit 5).

Run on the H200 with the cu13 stack, and with the cu12 stack laid over it (tools/cu12_overlay.sh):
driver 580 is CUDA 13.0, which loads CUDA 12 code, so both must pass there."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.gpu


def installed_stack():
    from qualify.build.nvrtc import nvrtc_version, toolkit_include_dir
    from qualify.generation import CudaStack, CudaVersion, header_version
    from qualify.run.device import driver_cuda_version
    from qualify.run.host import package_version as _package_version

    return CudaStack(
        driver=CudaVersion.parse(driver_cuda_version()),
        bindings=_package_version("cuda-bindings"),
        nvrtc=CudaVersion.parse(nvrtc_version()),
        headers=header_version(toolkit_include_dir()),
    )


def test_the_installed_stack_is_one_generation_the_driver_runs():
    from qualify.generation import refusals

    stack = installed_stack()
    assert stack.driver is not None and stack.generation is not None
    assert refusals(stack) == []


def test_the_start_up_check_passes_and_the_device_works():
    from qualify.run.device import CudaDevice

    with CudaDevice(0) as dev:  # compiles qualify_settle with this NVRTC and loads it before anything else
        floor = dev.time_sample(lambda: None, cold=False)
    assert floor > 0


def test_ptx_loads_exactly_when_the_rule_says(tmp_path):
    """PTX is what an NVRTC newer than the driver breaks; the driver's answer for this NVRTC's PTX
    must be ptx_loads's."""
    from cuda.bindings import driver, nvrtc

    from qualify.generation import ptx_loads
    from qualify.run.device import CudaDevice

    stack = installed_stack()
    with CudaDevice(0) as dev:
        src = b'extern "C" __global__ void ptx_probe(int* p) { if (p) *p = 1; }'
        err, prog = nvrtc.nvrtcCreateProgram(src, b"ptx_probe.cu", 0, [], [])
        cc = dev.info.arch.removeprefix("sm_")
        (err,) = nvrtc.nvrtcCompileProgram(prog, 1, [f"--gpu-architecture=compute_{cc}".encode()])
        assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        ptx = b" " * size
        nvrtc.nvrtcGetPTX(prog, ptx)
        nvrtc.nvrtcDestroyProgram(prog)
        err, module = driver.cuModuleLoadData(ptx)
        loaded = err == driver.CUresult.CUDA_SUCCESS
        if loaded:
            driver.cuModuleUnload(module)
    assert loaded is ptx_loads(stack.nvrtc, stack.driver), (stack, err)


def test_a_cubin_the_driver_cannot_load_is_refused_in_one_line(monkeypatch):
    """The refusal path on the real driver: the start-up kernel compiled for another architecture
    than the device's is what the driver answers with CUDA_ERROR_NO_BINARY_FOR_GPU. The device is
    opened by each trial process, never by `run`'s parent, so the refusal is raised where the
    device opens (the CLI turns it into its one line and exit 5 as for every DeviceError)."""
    import qualify.run.device as device_module
    from qualify.build.nvrtc import compile_kernel
    from qualify.errors import DeviceError, ExitCode

    def other_arch(spec):
        return compile_kernel(replace(spec, arch="sm_120" if spec.arch != "sm_120" else "sm_90"))

    monkeypatch.setattr(device_module, "compile_kernel", other_arch)
    with pytest.raises(DeviceError) as exc:
        device_module.CudaDevice(0)
    assert exc.value.exit_code == ExitCode.DEVICE == 5
    line = exc.value.one_line()
    assert "\n" not in line and "cannot load code compiled by NVRTC" in line, line
    assert "CUDA_ERROR_NO_BINARY_FOR_GPU" in line or "CUDA_ERROR_INVALID_IMAGE" in line, line


def test_doctor_shows_the_generation_on_its_cuda_line():
    from qualify.commands.doctor import DOCTOR_VERSION  # the version the code writes, not a literal

    done = subprocess.run(
        [sys.executable, "-m", "qualify", "doctor", "--json"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    report = json.loads(done.stdout)
    stack = installed_stack()
    assert report["doctor_version"] == DOCTOR_VERSION
    assert report["cuda"]["driver"] == str(stack.driver) and report["cuda"]["generation"] == stack.generation.major
    (cuda,) = [c for c in report["checks"] if c["name"] == "cuda"]
    assert cuda["status"] in ("ok", "warn"), cuda
