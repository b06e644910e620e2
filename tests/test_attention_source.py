"""CPU test: kernels/attention/attention.cu compiles with NVRTC for every target architecture.

No GPU is needed (NVRTC and ptxas run on the host). For sm_89, sm_90 and sm_120 the source is
compiled once with both tile instantiations as name expressions; the test asserts a CUBIN came
back and that ptxas reports no spills for either instantiation. Standalone on purpose: it uses
cuda.bindings.nvrtc and cuda.pathfinder directly, not the qualify package.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "kernels" / "attention" / "attention.cu"
ARCHS = ["sm_89", "sm_90", "sm_120"]
NAME_EXPRESSIONS = ["attention_gated_fwd<64>", "attention_gated_fwd<128>"]


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
        from cuda.pathfinder import find_nvidia_header_directory
    except ImportError as exc:  # pragma: no cover - depends on the environment
        pytest.fail(f"cuda.bindings / cuda.pathfinder missing: {exc}")
    return nvrtc, find_nvidia_header_directory


def _ok(nvrtc, result, what):
    err, *values = result
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise AssertionError(f"{what} failed: {err.name}")
    return values[0] if len(values) == 1 else values


def _compile(arch: str) -> tuple[bytes, str, dict[str, str]]:
    """Returns (cubin, ptxas/NVRTC log, {name expression: lowered name})."""
    nvrtc, find_headers = _nvrtc()
    include = find_headers("cudart")
    if include is None:
        pytest.fail("CUDA headers (cuda_bf16.h) not found: install nvidia-cuda-runtime")
    try:
        prog = _ok(nvrtc, nvrtc.nvrtcCreateProgram(SOURCE.read_bytes(), b"attention.cu", 0, [], []), "create")
    except RuntimeError as exc:  # the NVRTC library itself is missing
        pytest.fail(f"NVRTC unavailable: {exc}")
    try:
        for name in NAME_EXPRESSIONS:
            _ok(nvrtc, nvrtc.nvrtcAddNameExpression(prog, name.encode()), f"add {name}")
        opts = [
            f"--gpu-architecture={arch}".encode(),
            b"--std=c++17",
            b"-lineinfo",
            b"--ptxas-options=-v",
            f"--include-path={include}".encode(),
        ]
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        size = _ok(nvrtc, nvrtc.nvrtcGetProgramLogSize(prog), "log size")
        log = b" " * size
        _ok(nvrtc, nvrtc.nvrtcGetProgramLog(prog, log), "log")
        log_text = log.rstrip(b"\0").decode(errors="replace")
        assert result == nvrtc.nvrtcResult.NVRTC_SUCCESS, f"{arch}: compile failed:\n{log_text}"
        lowered = {}
        for name in NAME_EXPRESSIONS:
            raw = _ok(nvrtc, nvrtc.nvrtcGetLoweredName(prog, name.encode()), f"lowered {name}")
            lowered[name] = raw.decode() if isinstance(raw, bytes) else str(raw)
        cubin_size = _ok(nvrtc, nvrtc.nvrtcGetCUBINSize(prog), "cubin size")
        cubin = b" " * cubin_size
        if cubin_size:
            _ok(nvrtc, nvrtc.nvrtcGetCUBIN(prog, cubin), "cubin")
        return cubin, log_text, lowered
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _ptxas_report(log: str, mangled: str) -> str:
    """The log lines ptxas printed for one entry function (its 'Compiling entry function' block)."""
    blocks = re.split(r"(?=ptxas info\s*: Compiling entry function)", log)
    for block in blocks:
        if f"'{mangled}'" in block:
            return block
    raise AssertionError(f"ptxas printed nothing for {mangled}:\n{log}")


@pytest.mark.parametrize("arch", ARCHS)
def test_attention_compiles_without_spills(arch):
    cubin, log, lowered = _compile(arch)
    assert len(cubin) > 0, f"{arch}: NVRTC returned no CUBIN"
    assert cubin[:4] == b"\x7fELF", f"{arch}: CUBIN is not an ELF image"
    for name, mangled in lowered.items():
        report = _ptxas_report(log, mangled)
        stores = re.search(r"(\d+) bytes spill stores", report)
        loads = re.search(r"(\d+) bytes spill loads", report)
        regs = re.search(r"Used (\d+) registers", report)
        assert stores and loads and regs, f"{arch} {name}: unexpected ptxas report:\n{report}"
        assert int(stores.group(1)) == 0, f"{arch} {name}: spill stores\n{report}"
        assert int(loads.group(1)) == 0, f"{arch} {name}: spill loads\n{report}"
        assert int(regs.group(1)) <= 255
