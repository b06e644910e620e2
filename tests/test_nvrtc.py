"""NVRTC compiles without a GPU; ptxas resource figures are parsed per architecture."""

from __future__ import annotations

from pathlib import Path

import pytest

from qualify.build.nvrtc import KernelSpec, compile_kernel
from qualify.build.resources import error_lines, parse_ptxas_log
from qualify.errors import BuildError

SPILLY = """
__global__ void big(float* out, int n) {
    float acc[64];
    #pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = out[(threadIdx.x * 64 + i) % n];
    __shared__ float tile[512];
    tile[threadIdx.x] = acc[threadIdx.x % 64];
    __syncthreads();
    out[threadIdx.x] = tile[(threadIdx.x + 1) % 512] + acc[(threadIdx.x * 7) % 64];
}
"""


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "big.cu"
    path.write_text(SPILLY)
    return path


@pytest.mark.parametrize("arch, elf_machine", [("sm_89", 190), ("sm_90", 190), ("sm_120", 190)])
def test_compiles_cubin_and_reports_resources(source, arch, elf_machine):
    kernel = compile_kernel(KernelSpec(source=source, kernel="big", arch=arch))
    assert kernel.cubin[:4] == b"\x7fELF"
    assert int.from_bytes(kernel.cubin[18:20], "little") == elf_machine  # EM_CUDA
    assert kernel.lowered_name == "_Z3bigPfi"
    r = kernel.resources
    assert r.static_shared_bytes == 2048
    assert 8 <= r.registers <= 255
    assert r.barriers == 1
    assert f"for '{arch}'" in kernel.log


def test_dynamically_indexed_array_reports_a_stack_frame(source):
    kernel = compile_kernel(KernelSpec(source=source, kernel="big", arch="sm_90"))
    assert kernel.resources.stack_bytes == 64 * 4  # acc[] indexed at run time lives in local memory


def test_compile_error_keeps_the_lines_that_matter(tmp_path):
    path = tmp_path / "bad.cu"
    path.write_text("__global__ void k(int* x) {\n  x[0] = undefined_symbol;\n}\n")
    with pytest.raises(BuildError) as exc:
        compile_kernel(KernelSpec(source=path, kernel="k", arch="sm_90"))
    assert exc.value.exit_code == 4
    assert 'identifier "undefined_symbol" is undefined' in exc.value.log
    assert "x[0] = undefined_symbol" in exc.value.log


def test_defines_reach_the_source(tmp_path):
    path = tmp_path / "d.cu"
    path.write_text("#ifndef WIDTH\n#error WIDTH missing\n#endif\n__global__ void k(int* x) { x[0] = WIDTH; }\n")
    with pytest.raises(BuildError, match="could not compile"):
        compile_kernel(KernelSpec(source=path, kernel="k", arch="sm_90"))
    compile_kernel(KernelSpec(source=path, kernel="k", arch="sm_90", defines=(("WIDTH", "4"),)))


def test_parse_ptxas_log_keeps_each_entry_apart():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z1aPf' for 'sm_90'
ptxas info    : Function properties for _Z1aPf
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function '_Z1bPf' for 'sm_90'
ptxas info    : Function properties for _Z1bPf
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, 360 bytes cmem[0]
"""
    found = parse_ptxas_log(log)
    assert found["_Z1aPf"].registers == 40 and found["_Z1aPf"].spill_store_bytes == 8
    assert found["_Z1aPf"].stack_bytes == 16 and found["_Z1aPf"].static_shared_bytes == 1024
    assert found["_Z1bPf"].registers == 12 and found["_Z1bPf"].static_shared_bytes == 0


def test_error_lines_fall_back_to_the_tail():
    assert error_lines("a\nb\n\nc") == "a\nb\nc"
