"""protocols/fp8-rowsum on an H200: both fp8 decoders against ml-dtypes for all 256 bytes, and a
shortened trial of the protocol (byte parity of the fused sm_90a kernel against the two-launch base,
every fp8 control caught, the fused kernel faster). The trial needs sm_90a in the plan model
(issue 28 item 1)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from plans import make_repo

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "kernels" / "fp8_rowsum"
pytestmark = pytest.mark.gpu

DECODE = """\
#include "rowsum_common.cuh"
__global__ void decode_all(float* sw, float* hw) {
    const unsigned char b = static_cast<unsigned char>(threadIdx.x);
    sw[threadIdx.x] = e4m3_to_float(b);
    hw[threadIdx.x] = e4m3_to_float_hw(b);
}
"""


def test_both_e4m3_decoders_give_ml_dtypes_values_for_every_byte(tmp_path):
    from qualify.build.nvrtc import KernelSpec, compile_kernel
    from qualify.run.device import CudaDevice

    source = tmp_path / "decode.cu"
    source.write_text(DECODE)
    with CudaDevice(0) as dev:
        spec = KernelSpec(source=source, kernel="decode_all", arch=dev.info.arch, include_dirs=(KERNELS,))
        kernel = dev.load_kernel("decode", compile_kernel(spec), 0)
        sw, hw = dev.alloc(256 * 4), dev.alloc(256 * 4)
        try:
            dev.launch(kernel, (1, 1, 1), (256, 1, 1), 0, [("ptr", sw.ptr), ("ptr", hw.ptr)])
            dev.synchronize()
            got_sw = dev.download(sw).view(np.float32)
            got_hw = dev.download(hw).view(np.float32)
        finally:
            dev.free(sw)
            dev.free(hw)
            dev.unload_kernel(kernel)
    from qualify.dtypes import as_float64

    expected = as_float64(np.arange(256, dtype=np.uint8), "f8e4m3").astype(np.float32)
    nan = np.isnan(expected)
    assert nan.tolist().count(True) == 2 and np.isnan(got_sw[nan]).all() and np.isnan(got_hw[nan]).all()
    # the finite values bit for bit, signed zeros included
    assert np.array_equal(got_sw[~nan].view(np.uint32), expected[~nan].view(np.uint32))
    assert np.array_equal(got_hw[~nan].view(np.uint32), expected[~nan].view(np.uint32))


def test_fp8_rowsum_trial_on_the_gpu(tmp_path):
    from qualify.commands.pipeline import run_plan
    from qualify.plan.load import load_plan
    from qualify.run.device import CudaDevice
    from qualify.run.telemetry import Telemetry

    plan = json.loads((ROOT / "protocols" / "fp8-rowsum" / "plan.json").read_text())
    plan["workload"]["cases"] = [{"R": 1024, "C": 1000}, {"R": 8192, "C": 8192}]
    plan["schedule"].update(samples_per_block=5, blocks=4, trials=1)
    plan["stop"]["min_blocks"] = 4
    plan["acceptance"]["gates"] = [{"name": "faster", "where": "R >= 8192", "min_speedup_pct": 10.0}]
    plan["acceptance"]["sanitizer"] = []
    files = {f"kernels/fp8_rowsum/{p.name}": p for p in KERNELS.iterdir() if p.suffix in (".cu", ".cuh")}
    repo = tmp_path / "repo"
    loaded = load_plan(make_repo(repo, plan, files=files, freeze=True))
    outcome = run_plan(loaded, repo / "records" / "fp8-rowsum", lambda: CudaDevice(0), Telemetry)
    (trial,) = outcome.trials
    assert trial.status == "complete", trial.failures
    assert all(p.equal for c in trial.cases for p in c.parity)
    assert all(c.timed_outputs_match and all(c.deterministic.values()) for c in trial.cases)
    assert {c.name for c in trial.controls} == {
        "flip_first_q_exponent_bit",
        "flip_last_q_exponent_bit",
        "fused_misreads_fp8",
    }
    assert all(c.caught for c in trial.controls)
    big = next(c for c in trial.cases if c.case == "C=8192,R=8192")
    assert big.stats.ratio < 0.9
