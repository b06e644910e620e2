"""qsa.cu on the GPU against kernels/qsa/emulate.py and the golden, case by case.

The plan's bounds were derived on the CPU from the emulation (protocols/qsa-keyload/calibrate.py);
this is the check that the emulation speaks for the GPU: both arms write the same bytes, they sit
within each case's bound of the golden with the margin calibrate.py promised (worst bound fraction
below 1, and the short cases bit-exact), and they differ from the emulation in few elements (the
emulation's float32 exp against CUDA's expf). It runs each arm once per case: seconds, not a trial.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from qualify.build.arms import kernel_spec
from qualify.build.nvrtc import compile_kernel
from qualify.evaluate.tolerance_gate import judge_case, passes
from qualify.plan.golden import load_golden
from qualify.plan.load import load_plan
from qualify.run.arms import ArmExec
from qualify.run.golden_stage import case_inputs

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
PLAN = ROOT / "protocols/qsa-keyload/plan.json"
SHORT = ("R=8,S=8", "R=10,S=10")


def _calibrate():
    spec = importlib.util.spec_from_file_location("qsa_calibrate_gpu", ROOT / "protocols/qsa-keyload/calibrate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gpu_outputs():
    """{case id: {side: {output: bytes}}} from one launch of each arm per case."""
    from qualify.run.device import CudaDevice

    loaded = load_plan(PLAN)
    golden = load_golden(loaded.plan, loaded.path, loaded.files.root, loaded.cases)
    out = {}
    with CudaDevice(0) as dev:
        for case in loaded.cases:
            out[case.id] = {}
            for side in ("base", "candidate"):
                arm = case.arms[side]
                compiled = compile_kernel(kernel_spec(loaded, side, dev.info.arch))
                kernel = dev.load_kernel(f"{side}@{case.id}", compiled, arm.launch.shared_bytes)
                buffers = {b.name: dev.alloc(b.nbytes) for b in arm.buffers}
                for name, data in case_inputs(loaded.plan, golden, case.id, arm).items():
                    dev.upload(buffers[name], data)
                outputs = [b.name for b in arm.buffers if b.role == "output"]
                exe = ArmExec(side, kernel, arm, buffers, outputs)
                exe.bind_args()
                out[case.id][side] = exe.run_once(dev)
                for b in buffers.values():
                    dev.free(b)
                dev.unload_kernel(kernel)
    return loaded, golden, out


def test_both_arms_write_the_same_bytes(gpu_outputs):
    _, _, out = gpu_outputs
    for case, sides in out.items():
        for name in sides["base"]:
            assert np.array_equal(sides["base"][name], sides["candidate"][name]), (case, name)


def test_gpu_within_each_cases_bound_of_the_golden(gpu_outputs):
    loaded, golden, out = gpu_outputs
    for case in loaded.cases:
        actual = out[case.id]["candidate"]
        expected = {n: golden.expected(case.id, n) for n in actual}
        params = {**loaded.plan.workload.params, **case.values}
        for c in judge_case(
            loaded.plan.acceptance.fidelity, case.id, params, {n: "bf16" for n in actual}, expected, actual
        ):
            print(
                f"{case.id} {c.output}: {c.identical}/{c.elements} bit-identical, worst bound fraction "
                f"{c.worst_bound_fraction}"
            )
            assert passes(c), (case.id, c)
            if case.id in SHORT:
                assert c.identical == c.elements, (case.id, c.output)


def test_emulation_predicts_the_gpu(gpu_outputs):
    """The emulation and the GPU agree bit for bit on all but a few elements, and never by more
    than a couple of quanta: what the plan's margin was set aside for."""
    loaded, golden, out = gpu_outputs
    cal = _calibrate()
    for case in loaded.cases:
        raw = case_inputs(loaded.plan, golden, case.id, case.arms["candidate"])
        emulated = cal.emulated_outputs(loaded, case, raw)
        for name, gpu in out[case.id]["candidate"].items():
            a, b = gpu.view(np.uint16).astype(np.int32), emulated[name].view(np.uint16).astype(np.int32)
            differ = int((a != b).sum())
            print(f"{case.id} {name}: {differ} of {a.size} elements differ from the emulation")
            assert differ <= max(1, a.size // 100), (case.id, name, differ)  # under 1 %
            if case.id in SHORT:
                assert differ == 0, (case.id, name)
