"""Code identity per launched function, on CUBINs NVRTC compiles here (no GPU needed).

Issue 32: records/softmax said "Identical machine code" although its arms launch a block-per-row
and a warp-per-row kernel: both live in one module, and the module's digest was compared. Now
the functions each launch executes are compared; the free A/A must survive a byte-different
rebuild of the same kernel (another unrelated kernel in the module, other line information).
"""

from __future__ import annotations

from pathlib import Path

from test_machine_code import SOURCE, cubin

from qualify.build.machine_code import launched, machine_code, sequence_digest
from qualify.build.nvrtc import CompiledKernel
from qualify.results.model import KernelActivity, TracedCall

ROOT = Path(__file__).resolve().parents[1]
UNRELATED = """
extern "C" __global__ void unrelated(float* y, int n) {
    __shared__ float s[128];
    s[threadIdx.x] = y[threadIdx.x] * n;
    __syncthreads();
    y[threadIdx.x] = s[127 - threadIdx.x];
}
"""


def compiled(tmp_path: Path, source: str, kernel: str, name: str) -> CompiledKernel:
    data, lowered = cubin(tmp_path, source, kernel=kernel, name=name)
    return CompiledKernel(spec=None, lowered_name=lowered, cubin=data, log="", resources=None)  # type: ignore[arg-type]


def test_softmax_arms_in_one_module_differ_by_the_functions_they_launch():
    from qualify.build.arms import kernel_spec
    from qualify.build.nvrtc import compile_kernel
    from qualify.plan.load import load_plan
    from qualify.run.code_identity import nvrtc

    loaded = load_plan(ROOT / "protocols" / "softmax" / "plan.json")
    base, cand = (compile_kernel(kernel_spec(loaded, side, "sm_90")) for side in ("base", "candidate"))
    # the old comparison: one module, both kernels, the same digest
    assert machine_code(base.cubin).digest == machine_code(cand.cubin).digest
    code = nvrtc(base, cand, loaded.cases, "sm_90")
    assert code.status == "differs" and code.scope == "launched" and not code.free_aa
    assert code.digests["base"] != code.digests["candidate"]
    assert [f.name for f in code.launched["base"]] == [base.lowered_name]
    assert [f.name for f in code.launched["candidate"]] == [cand.lowered_name]
    assert [f.shown for side in ("base", "candidate") for f in code.launched[side]] == [
        "softmax_block<256>",
        "softmax_warp<8>",
    ]
    first = code.differences[0]
    assert first.startswith("the launched function: base softmax_block<256>") and "candidate softmax_warp<8>" in first
    assert "different functions, instructions " in first


def test_a_byte_different_rebuild_of_the_same_kernel_is_still_a_free_aa(tmp_path):
    from qualify.run.code_identity import nvrtc

    base = compiled(tmp_path, SOURCE, "scale<64>", "a.cu")
    # a comment moves every line (other line info), and the module gains an unrelated kernel
    cand = compiled(tmp_path, "// rebuilt\n\n" + SOURCE + UNRELATED, "scale<64>", "b.cu")
    assert base.cubin != cand.cubin
    assert machine_code(base.cubin).digest != machine_code(cand.cubin).digest  # the modules differ
    code = nvrtc(base, cand, [], "sm_90")
    assert code.status == "identical" and code.launches_match and code.free_aa
    assert code.differences == [] and code.launched["base"] == code.launched["candidate"]
    assert "unrelated" not in code.launched["candidate"][0].functions


def test_a_change_to_the_launched_kernel_alone_is_found(tmp_path):
    from qualify.run.code_identity import nvrtc

    base = compiled(tmp_path, SOURCE, "scale<64>", "a.cu")
    cand = compiled(tmp_path, SOURCE.replace("2.f * tile", "3.f * tile"), "scale<64>", "b.cu")
    code = nvrtc(base, cand, [], "sm_90")
    assert code.status == "differs" and not code.free_aa
    assert code.differences[0].startswith("the launched function: scale<64>: instructions")


def test_a_device_function_is_held_by_every_kernel_that_may_call_it():
    # separate compilation keeps device functions as functions of their own: one the kernel calls
    # (reached by a relocation) and one nothing calls (held too: the cautious side)
    def module(f_body: str, g_body: str) -> bytes:
        return _nvrtc_cubin(
            f"__device__ __noinline__ float f(float v) {{ {f_body} }}\n"
            f"__device__ float g(float v) {{ {g_body} }}\n"
            'extern "C" __global__ void k(float* y) { y[threadIdx.x] = f(y[threadIdx.x]); }\n' + UNRELATED,
            b"-rdc=true",
        )

    base = machine_code(module("return v * v + 1.f;", "return v - 1.f;"))
    held = launched(base, "k")
    assert held.functions[0] == "k" and "unrelated" not in held.functions
    assert {"_Z1ff", "_Z1gf"} <= set(held.functions)
    callee = machine_code(module("return v * v + 2.f;", "return v - 1.f;"))
    uncalled = machine_code(module("return v * v + 1.f;", "return v - 2.f;"))
    assert callee.functions["k"].digest == base.functions["k"].digest  # the kernel's own code is the same
    assert launched(callee, "k").digest != held.digest
    assert launched(uncalled, "k").digest != held.digest
    assert launched(machine_code(module("return v * v + 1.f;", "return v - 1.f;")), "k").digest == held.digest


def test_arms_with_their_own_launches_are_compared_launch_by_launch(tmp_path):
    from qualify.run.code_identity import nvrtc

    scale = compiled(tmp_path, SOURCE, "scale<64>", "a.cu")
    other = compiled(tmp_path, SOURCE, "other", "b.cu")
    code = nvrtc((scale, other), (scale, other), [], "sm_90")
    assert code.status == "identical" and code.free_aa and len(code.launched["base"]) == 2
    assert code.digests["base"] == sequence_digest([f.digest for f in code.launched["base"]])
    swapped = nvrtc((scale, other), (other, scale), [], "sm_90")
    assert swapped.status == "differs" and not swapped.launches_match
    assert swapped.differences[0].startswith("launch 1: base scale<64> ↔ candidate other: different functions")
    fewer = nvrtc((scale, other), (scale,), [], "sm_90")
    assert fewer.status == "differs" and fewer.differences == ["launch 2: only the base arm launches other"]


def _trial_with(code, names: dict[str, list[str]]):
    from types import SimpleNamespace

    def call(name: str) -> TracedCall:
        k = KernelActivity(
            name=name, start_ns=0, end_ns=10, grid=(1, 1, 1), block=(64, 1, 1), registers_per_thread=8,
            static_shared_bytes=0, dynamic_shared_bytes=0, local_bytes_per_thread=0, stream_id=7, correlation_id=1,
        )  # fmt: skip
        return TracedCall(event_ns=20.0, kernels=[k])

    case = SimpleNamespace(trace={side: [call(n) for n in ns] for side, ns in names.items()})
    return SimpleNamespace(code=code, cases=[case])


def test_report_check_holds_the_launched_fact_to_its_digests_and_the_trace(tmp_path):
    from qualify.record.code_facts import _code_problems
    from qualify.run.code_identity import nvrtc

    base = compiled(tmp_path, SOURCE, "scale<64>", "a.cu")
    other = compiled(tmp_path, SOURCE, "other", "b.cu")
    code = nvrtc(base, other, [], "sm_90")
    assert _code_problems(_trial_with(code, {"base": ["s"], "candidate": ["o"]})) == []
    # a launch's digest edited to the other arm's: the arm's digest no longer follows
    edited = code.launched["base"][0].model_copy(update={"digest": code.launched["candidate"][0].digest})
    forged = code.model_copy(update={"launched": {**code.launched, "base": [edited]}})
    assert any(
        "code.digests.base is" in p for p in _code_problems(_trial_with(forged, {"base": ["s"], "candidate": ["o"]}))
    )
    # the trace saw both arms launch one kernel: a fact naming two different ones is refused
    problems = _code_problems(_trial_with(code, {"base": ["s"], "candidate": ["s"]}))
    assert problems == ["code.launched names the arms' kernels as different, but the trace saw the same kernels"]
    problems = _code_problems(_trial_with(code, {"base": ["s", "t"], "candidate": ["o"]}))
    assert problems == ["code.launched.base names 1 distinct kernels, but the trace saw the base arm launch 2"]


def _nvrtc_cubin(source: str, *options: bytes) -> bytes:
    """A CUBIN straight from NVRTC with exactly these options (qualify's own build always adds line
    information, so this is how a build without it is made)."""
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"k.cu", 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    opts = [b"--gpu-architecture=sm_90", *options]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    _, size = nvrtc.nvrtcGetCUBINSize(prog)
    data = b" " * size
    nvrtc.nvrtcGetCUBIN(prog, data)
    nvrtc.nvrtcDestroyProgram(prog)
    return data


def test_line_information_alone_moves_the_elf_flags_and_not_the_launched_identity():
    source = 'extern "C" __global__ void k(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] *= 2.f; }\n'
    plain, lined = machine_code(_nvrtc_cubin(source)), machine_code(_nvrtc_cubin(source, b"-lineinfo"))
    assert plain.functions["k"].digest == lined.functions["k"].digest  # the same instructions and facts
    assert dict(plain.module)["elf header"] != dict(lined.module)["elf header"]  # the flags' high byte moved
    assert launched(plain, "k").digest == launched(lined, "k").digest


def test_a_kernel_another_launch_can_reach_by_a_relocation_is_held_too():
    # a kernel whose code takes another kernel's address (how a device-side launch names it)
    def module(k2_body: str) -> bytes:
        return _nvrtc_cubin(
            f'extern "C" __global__ void k2(float* y) {{ {k2_body} }}\n'
            'extern "C" __global__ void k(unsigned long long* y) { y[threadIdx.x] = (unsigned long long)(void*)&k2; }\n'
            + UNRELATED,
            b"-rdc=true",
        )

    base, other = machine_code(module("y[0] = 1.f;")), machine_code(module("y[0] = 2.f;"))
    assert launched(base, "k").functions == ("k", "k2")  # reached; the unrelated kernel is not
    assert launched(base, "k").digest != launched(other, "k").digest
    assert launched(base, "unrelated").digest == launched(other, "unrelated").digest
