"""Arch-specific targets and CCCL on the GPU (issue 28, items 1-2): an sm_90a plan runs on an H200
(compute capability 9.0) with CCCL headers read, its record names the exact target, and a device
that cannot run the plan's arch-specific code is refused in one line before any trial."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plans import make_repo

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.gpu

WGMMA_FENCE = (
    'extern "C" __global__ void fence(int* x) { asm volatile("wgmma.fence.sync.aligned;"); x[threadIdx.x] = 1; }\n'
)


def _vecload_plan(archs: list[str]) -> dict:
    plan = json.loads((ROOT / "protocols" / "vecload" / "plan.json").read_text())
    plan["workload"]["cases"] = [{"N": 16777216}]
    plan["schedule"].update(samples_per_block=5, blocks=4, trials=1)
    plan["stop"]["min_blocks"] = 4
    plan["acceptance"] = {
        "gates": [{"name": "faster", "min_speedup_pct": 1.0}],
        "fidelity": {"mode": "bytes", "against": "base"},
    }
    plan["controls"]["negative"] = []
    plan["hardware"]["devices"] = [{"name": "*"}]
    plan["hardware"]["architectures"] = archs
    return plan


def _repo(tmp_path: Path, archs: list[str]):
    from qualify.plan.load import load_plan

    source = "#include <cuda/std/limits>\n" + (ROOT / "kernels" / "vecload" / "vecload.cu").read_text()
    repo = tmp_path / "repo"
    path = make_repo(repo, _vecload_plan(archs), files={"kernels/vecload/vecload.cu": source})
    from qualify.commands.check import freeze_plan

    freeze_plan(path)
    return load_plan(path), repo


def test_an_sm_90a_kernel_loads_on_compute_capability_9_0(tmp_path):
    from qualify.build.nvrtc import KernelSpec, compile_kernel
    from qualify.run.device import CudaDevice

    with CudaDevice(0) as dev:
        if dev.info.compute_capability != "9.0":
            pytest.skip("needs a compute capability 9.0 device (H100/H200)")
        path = tmp_path / "fence.cu"
        path.write_text(WGMMA_FENCE)
        compiled = compile_kernel(KernelSpec(path, "fence", "sm_90a", root=tmp_path))
        assert dev.load_kernel("fence", compiled, 0) is not None


def test_an_sm_90a_plan_runs_and_its_record_names_the_target(tmp_path):
    from qualify.commands.pipeline import run_plan
    from qualify.run.device import CudaDevice
    from qualify.run.telemetry import Telemetry

    with CudaDevice(0) as dev:
        if dev.info.compute_capability != "9.0":
            pytest.skip("needs a compute capability 9.0 device (H100/H200)")
    loaded, repo = _repo(tmp_path, ["sm_90a"])
    assert any(rel.startswith("<cccl>/") for rel in loaded.lock["files"])
    outcome = run_plan(loaded, repo / "records" / "vecload", lambda: CudaDevice(0), Telemetry)
    (trial,) = outcome.trials
    assert trial.status == "complete", trial.failures
    assert trial.code is not None and trial.code.arch == "sm_90a"
    assert trial.provenance.device.arch == "sm_90"
    assert trial.provenance.cccl_version and trial.provenance.compile_sandbox


def test_a_device_that_cannot_run_the_arch_specific_code_is_refused_in_one_line(tmp_path):
    from qualify.commands.pipeline import run_plan
    from qualify.errors import DeviceError
    from qualify.run.device import CudaDevice
    from qualify.run.telemetry import Telemetry

    with CudaDevice(0) as dev:
        other = "sm_100a" if dev.info.compute_capability != "10.0" else "sm_90a"
    loaded, repo = _repo(tmp_path, [other])
    with pytest.raises(DeviceError) as exc:
        run_plan(loaded, repo / "records" / "vecload", lambda: CudaDevice(0), Telemetry)
    assert "\n" not in exc.value.message and f"{other} code runs only on compute capability" in exc.value.message
    assert not (repo / "records" / "vecload" / "trials").exists() or not any(
        (repo / "records" / "vecload" / "trials").iterdir()
    )
