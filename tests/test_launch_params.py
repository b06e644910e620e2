"""The kernel's compiled parameter list (from the CUBIN) against the plan's launch arguments."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from plans import make_repo, plan_copy

from qualify.build.elf import ElfProblem
from qualify.build.nvrtc import KernelSpec, compile_kernel
from qualify.build.params import _records, kernel_params, params_from_info
from qualify.cli import main
from qualify.commands.check import check_plan
from qualify.errors import PlanError

SIZES = """\
struct Pair { double a; float b; };
extern "C" __global__ void sizes(const float* x, char c, short s, int i, long long l, double d, Pair p, float* y) {
    if (threadIdx.x == 0) y[0] = x[0] + c + s + i + l + d + p.a + p.b;
}
"""


def compiled(tmp_path: Path, source: str, kernel: str, arch: str = "sm_90"):
    path = tmp_path / "k.cu"
    path.write_text(source)
    return compile_kernel(KernelSpec(path, kernel, arch))


def test_sizes_and_offsets_decoded_from_the_cubin(tmp_path):
    k = compiled(tmp_path, SIZES, "sizes")
    params = kernel_params(k.cubin, k.lowered_name)
    assert [p.size for p in params] == [8, 1, 2, 4, 8, 8, 16, 8]
    assert [p.offset for p in params] == [0, 8, 10, 12, 16, 24, 32, 48]


def test_template_instantiation_is_found_by_its_lowered_name(tmp_path):
    k = compiled(tmp_path, "template <int B> __global__ void t(float* y, unsigned n) { y[n] = B; }\n", "t<64>")
    assert [p.size for p in kernel_params(k.cubin, k.lowered_name)] == [8, 4]


def test_a_kernel_without_parameters(tmp_path):
    k = compiled(tmp_path, 'extern "C" __global__ void none() {}\n', "none")
    assert kernel_params(k.cubin, k.lowered_name) == []


def test_unreadable_attributes_are_refused_not_guessed():
    with pytest.raises(ElfProblem, match="unknown attribute format"):
        list(_records(bytes([9, 0x17, 0, 0])))
    with pytest.raises(ElfProblem, match="runs past"):
        list(_records(bytes([4, 0x17, 12, 0]) + b"\0" * 4))
    with pytest.raises(ElfProblem, match="not an ELF"):
        kernel_params(b"not a cubin", "k")


def kparam(ordinal: int, offset: int, size: int) -> bytes:
    return struct.pack("<BBHIHHI", 4, 0x17, 12, 0, ordinal, offset, size << 18)


def test_inconsistent_parameter_records_are_refused():
    assert [p.size for p in params_from_info(kparam(1, 8, 4) + kparam(0, 0, 8))] == [8, 4]
    with pytest.raises(ElfProblem, match="described twice"):
        params_from_info(kparam(0, 0, 8) * 2)
    with pytest.raises(ElfProblem, match="not 0..1"):
        params_from_info(kparam(0, 0, 8) + kparam(2, 8, 8))
    block = struct.pack("<BBH", 3, 0x19, 12)  # a 12-byte parameter block
    with pytest.raises(ElfProblem, match="outside the 12-byte parameter block"):
        params_from_info(kparam(0, 0, 8) + kparam(1, 8, 8) + block)


def test_the_committed_tiny_plan_matches(tmp_path):
    assert check_plan(make_repo(tmp_path)).ok


def check_error(tmp_path, plan) -> PlanError:
    with pytest.raises(PlanError) as exc:
        check_plan(make_repo(tmp_path, plan))
    return exc.value


def test_a_missing_argument_is_refused_with_both_lists(tmp_path):
    plan = plan_copy()
    del plan["workload"]["launch"]["args"][3]  # the float a
    err = check_error(tmp_path, plan)
    assert err.field == "workload.launch.args"
    assert "4 arguments for 5 parameters of axpy<1> (base arm, sm_90)" in err.message
    assert "[8, 8, 8, 8]" in err.message and "[8, 8, 8, 4, 8]" in err.message


def test_a_narrower_scalar_is_refused_at_its_index(tmp_path):
    plan = plan_copy()
    plan["workload"]["launch"]["args"][4] = {"kind": "i32", "value": "N"}  # the kernel takes long long
    err = check_error(tmp_path, plan)
    assert err.field == "workload.launch.args[4]"
    assert "[8, 8, 8, 4, 4]" in err.message and "[8, 8, 8, 4, 8]" in err.message


ARCH_DEPENDENT = """\
#if __CUDA_ARCH__ >= 900
typedef long long count_t;
#else
typedef int count_t;
#endif
template <int VEC>
__global__ void axpy(const float* x, const float* y, float* out, float a, count_t n) {
    const long long i = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
    for (int k = 0; k < VEC; ++k) if (i + k < n) out[i + k] = a * x[i + k] + y[i + k];
}
"""


def test_each_architecture_is_checked(tmp_path):
    plan = plan_copy()
    plan["hardware"]["architectures"] = ["sm_90", "sm_89"]
    plan["hardware"]["devices"] = [{"compute_capability": "9.0"}]
    path = make_repo(tmp_path, plan, files={"kernels/k.cu": ARCH_DEPENDENT})
    assert check_plan(path, ["sm_90"]).ok  # i64 matches the sm_90 build
    with pytest.raises(PlanError, match=r"sm_89\): .*\[8, 8, 8, 4, 8\].*\[8, 8, 8, 4, 4\]"):
        check_plan(path)


def test_the_cli_exits_2_with_one_line(tmp_path, capsys):
    plan = plan_copy()
    plan["workload"]["launch"]["args"].append({"kind": "i32", "value": 1})
    path = make_repo(tmp_path, plan)
    with pytest.raises(SystemExit) as exc:
        main(["plan", "check", str(path)])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.count("qualify: error:") == 1 and "workload.launch.args: 6 arguments for 5 parameters" in err
