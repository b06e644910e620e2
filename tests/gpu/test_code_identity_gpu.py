"""Machine-code identity on the GPU machine: nvcc-built libraries, a real compare, nvdisasm."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
from plans import make_repo

pytestmark = pytest.mark.gpu
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
from test_compare_gpu import PLAN, nvcc  # noqa: E402


def test_two_builds_of_the_attention_base_hold_identical_code(tmp_path):
    from qualify.run import code_identity

    subprocess.run([str(ROOT / "benchmarks" / "identical-code" / "build_pair.sh"), str(tmp_path)], check=True)
    a, b = tmp_path / "a" / "libattention_base.so", tmp_path / "b" / "libattention_base.so"
    assert a.read_bytes() != b.read_bytes()
    for arch in ("sm_89", "sm_90", "sm_120"):
        code = code_identity.library(a, b, arch)
        assert code.status == "identical", (arch, code.reason, code.differences)
        assert code.functions >= 1 and not code.free_aa


def test_nvdisasm_renders_the_first_differing_instruction(tmp_path):
    from qualify.build.nvrtc import KernelSpec, compile_kernel
    from qualify.run import code_identity

    source = 'extern "C" __global__ void k(float* y) { y[threadIdx.x] *= SCALE; }\n'
    built = []
    for scale in ("2.f", "3.f"):
        path = tmp_path / f"k{scale[0]}.cu"
        path.write_text(f"#define SCALE {scale}\n" + source)
        built.append(compile_kernel(KernelSpec(path, "k", "sm_90")))
    assert code_identity.nvdisasm_tool() is not None, "nvdisasm is on the GPU machine"
    code = code_identity.nvrtc(built[0], built[1], [], "sm_90")
    print(code.differences)
    assert code.status == "differs"
    # the launched function's verdict comes first, nvdisasm's rendering of its first difference after
    assert code.differences[0].startswith("the launched function: k: instructions differ"), code.differences
    assert any(d.startswith("k at 0x") and " / candidate " in d for d in code.differences), code.differences


def build(tmp_path: Path, name: str, comment: bool) -> Path:
    src = tmp_path / f"{name}.cu"
    text = (HERE / "planted" / "escape.cu").read_text()
    src.write_text(("// moves every line, changes no instruction\n" if comment else "") + text)
    out = tmp_path / f"lib{name}.so"
    subprocess.run(
        [
            nvcc(),
            "-O2",
            "-lineinfo",
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "-DESCAPE=0",
            "-Xlinker",
            f"--build-id=0x{1 + comment:02x}",
            "-gencode",
            "arch=compute_90,code=sm_90",
            str(src),
            "-o",
            str(out),
        ],
        check=True,
    )
    return out


def test_compare_of_byte_different_builds_states_identical_code(tmp_path):
    from qualify.commands.pipeline import load_frozen, run_plan
    from qualify.run.device import CudaDevice
    from qualify.run.telemetry import Telemetry

    path = make_repo(tmp_path / "repo", copy.deepcopy(PLAN), files={}, freeze=True)
    base, cand = build(tmp_path, "one", False), build(tmp_path, "two", True)
    assert base.read_bytes() != cand.read_bytes()
    outcome = run_plan(
        load_frozen(path),
        tmp_path / "record",
        lambda: CudaDevice(0),
        Telemetry,
        libraries={"base": base, "candidate": cand},
    )
    (trial,) = outcome.trials
    assert trial.status == "complete", trial.failures
    code = trial.code
    assert code.status == "identical" and code.arms == "library" and code.arch == "sm_90"
    # the kernel inventory saw both entry points launch the same kernel the same way, and the
    # outputs were byte-identical: a free A/A
    assert code.launches_match is True and code.free_aa
    readme = (tmp_path / "record" / "README.md").read_text()
    assert "**Identical machine code: a free A/A.**" in readme and "kernel inventory" in readme
