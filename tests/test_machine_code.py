"""The machine-code identity of CUBINs compiled by NVRTC here: what it keeps and what it ignores."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from qualify.build.elf import ElfProblem, parse
from qualify.build.machine_code import compare, first_difference, first_instructions, machine_code
from qualify.build.nvrtc import KernelSpec, compile_kernel

SOURCE = """\
template <int B>
__global__ void scale(float* y, const float* x, unsigned n) {
    __shared__ float tile[B];
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x & 63] = i < n ? x[i] : 0.f;
    __syncthreads();
    if (i < n) y[i] = 2.f * tile[threadIdx.x & 63];
}
extern "C" __global__ void other(float* y) { y[threadIdx.x] += 1.f; }
"""


def cubin(tmp_path: Path, source: str, kernel: str = "scale<64>", name: str = "k.cu") -> tuple[bytes, str]:
    folder = tmp_path / name.replace(".", "_")
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(source)
    compiled = compile_kernel(KernelSpec(path, kernel, "sm_90"))
    return compiled.cubin, compiled.lowered_name


def test_the_same_source_twice_is_identical(tmp_path):
    a, name = cubin(tmp_path, SOURCE, name="a.cu")
    b, _ = cubin(tmp_path, SOURCE, name="b.cu")
    ca, cb = machine_code(a), machine_code(b)
    assert ca.sm == 90 and name in ca.functions
    assert ca.digest == cb.digest and compare(ca, cb).identical


def test_a_comment_moves_the_line_info_but_not_the_code(tmp_path):
    a, _ = cubin(tmp_path, SOURCE, name="a.cu")
    b, _ = cubin(tmp_path, "// a comment that moves every line below it\n\n" + SOURCE, name="b.cu")
    assert a != b  # the line table (NVRTC always compiles with line info) differs
    diff = compare(machine_code(a), machine_code(b))
    assert diff.identical, diff.summary()
    assert diff.summary() == "identical machine code"


def test_a_real_change_names_the_function_and_its_first_instruction(tmp_path):
    a, name = cubin(tmp_path, SOURCE, name="a.cu")
    b, _ = cubin(tmp_path, SOURCE.replace("2.f *", "3.f *"), name="b.cu")
    ca, cb = machine_code(a), machine_code(b)
    diff = compare(ca, cb)
    assert not diff.identical
    assert [d.name for d in diff.functions] == [name]  # `other` is unchanged
    (d,) = diff.functions
    assert "instructions" in d.parts
    ta, tb = ca.functions[name].text, cb.functions[name].text
    assert d.first_offset % 16 == 0
    assert ta[: d.first_offset] == tb[: d.first_offset]
    assert ta[d.first_offset : d.first_offset + 16] != tb[d.first_offset : d.first_offset + 16]
    assert f"{name}: instructions" in diff.summary() and f"{d.first_offset:#06x}" in diff.summary()


def test_static_shared_memory_alone_is_a_difference(tmp_path):
    # tile[64] and tile[128]: same instructions (the index is masked to 64), more shared memory
    a, name = cubin(tmp_path, SOURCE, name="a.cu")
    b, name_b = cubin(tmp_path, SOURCE, kernel="scale<128>", name="b.cu")
    fa, fb = machine_code(a).functions[name], machine_code(b).functions[name_b]
    assert fa.text == fb.text
    assert fa.digest != fb.digest
    assert dict(fa.facts)["shared memory"] != dict(fb.facts)["shared memory"]


def _section(data: bytes, name: str):
    section = parse(data).section(name)
    assert section is not None, name
    return section


def _patched(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


@pytest.mark.parametrize("what", [".debug_line", ".note.nv.tkinfo", ".nv_debug_ptx_txt", "abi version"])
def test_bytes_that_describe_the_code_are_ignored(tmp_path, what):
    data, _ = cubin(tmp_path, SOURCE)
    at = 8 if what == "abi version" else _section(data, what).offset + 4
    assert compare(machine_code(data), machine_code(_patched(data, at))).identical


def test_bytes_that_change_execution_are_not_ignored(tmp_path):
    data, name = cubin(tmp_path, SOURCE)
    base = machine_code(data)
    text = _patched(data, _section(data, f".text.{name}").offset + 0x20)
    assert compare(base, machine_code(text)).functions[0].parts == ("instructions",)
    # the register count: the module .nv.info record (format, attr 0x2f, size 8, symbol, count)
    info = _section(data, ".nv.info")
    raw = data[info.offset : info.offset + info.size]
    at = info.offset + raw.index(bytes([4, 0x2F, 8, 0])) + 8
    regs = data[:at] + struct.pack("<I", 200) + data[at + 4 :]
    diff = compare(base, machine_code(regs))
    # the first record belongs to one of the two kernels; only that one differs, only there
    assert [d.parts for d in diff.functions] == [("attribute 0x2f",)]
    assert diff.functions[0].name in machine_code(data).functions
    flags = _patched(data, 48)  # e_flags: the SM version
    assert compare(base, machine_code(flags)).module == ("elf header",)


def test_a_function_present_on_one_side_only(tmp_path):
    a, _ = cubin(tmp_path, SOURCE, name="a.cu")
    b, _ = cubin(
        tmp_path, SOURCE.replace('extern "C" __global__ void other', 'extern "C" __global__ void renamed'), name="b.cu"
    )
    diff = compare(machine_code(a), machine_code(b))
    assert {(d.name, d.status) for d in diff.functions} == {("other", "only in a"), ("renamed", "only in b")}


def test_not_a_cubin():
    with pytest.raises(ElfProblem):
        machine_code(b"\x7fELF" + b"\0" * 10)
    with pytest.raises(ElfProblem, match="not a CUBIN"):
        machine_code(Path("/bin/sh").read_bytes() if Path("/bin/sh").exists() else b"")


def test_first_difference_is_instruction_aligned():
    a = bytes(64)
    b = bytes(37) + b"\1" + bytes(26)
    assert first_difference(a, b, 90) == 32
    assert first_difference(a, b, 61) == 32
    assert first_difference(a, a + bytes(16), 90) == 64
    assert first_difference(bytes(8) + b"\1", bytes(9), 61) == 8


def test_rendering_needs_the_tool_and_never_the_comparison(tmp_path):
    data, name = cubin(tmp_path, SOURCE)
    assert first_instructions(data, name, 0, tool=str(tmp_path / "no-nvdisasm")) is None


GLOBALS = """\
__device__ float first[4];
__device__ float second[4];
extern "C" __global__ void k(float* y) { y[threadIdx.x] = first[threadIdx.x & 3] + 1.f; }
"""


def test_which_global_an_address_table_entry_reaches_is_code(tmp_path):
    # the kernel reads `first` through an address in constant bank 4, which a relocation fills
    data, _ = cubin(tmp_path, GLOBALS, kernel="k")
    elf = parse(data)
    names = [s.name for s in elf.symbols()]
    table = _section(data, ".rela.nv.constant4")
    entries = [struct.unpack_from("<QQq", data, at) for at in range(table.offset, table.offset + table.size, 24)]
    at = next(i for i, (_, info, _) in enumerate(entries) if names[info >> 32] == "first")
    offset, info, addend = entries[at]
    retargeted = struct.pack("<QQq", offset, names.index("second") << 32 | (info & 0xFFFFFFFF), addend)
    start = table.offset + 24 * at
    patched = data[:start] + retargeted + data[start + 24 :]
    diff = compare(machine_code(data), machine_code(patched))
    assert diff.module == ("relocation in nv.constant4",) and diff.functions == ()
    # the debug sections' relocations are not code
    debug = _section(data, ".rela.debug_line")
    assert compare(machine_code(data), machine_code(_patched(data, debug.offset))).identical


CONSTANTS = """\
__constant__ float table[2] = {1.f, VALUE};
extern "C" __global__ void k(float* y) { y[threadIdx.x] *= table[threadIdx.x & 1]; }
"""


def test_constant_data_is_code(tmp_path):
    a, _ = cubin(tmp_path, CONSTANTS.replace("VALUE", "2.f"), kernel="k", name="a.cu")
    b, _ = cubin(tmp_path, CONSTANTS.replace("VALUE", "3.f"), kernel="k", name="b.cu")
    ca, cb = machine_code(a), machine_code(b)
    assert ca.functions["k"].text == cb.functions["k"].text  # the same loads from the bank
    diff = compare(ca, cb)
    assert not diff.identical and diff.functions == ()
    assert [m for m in diff.module if m.startswith("constant bank")] == list(diff.module) != []


def test_the_sm_version_from_either_header_layout(tmp_path):
    data, _ = cubin(tmp_path, SOURCE)
    assert machine_code(data).sm == 90  # CUDA 12.8+: bits 8-15
    older = data[:48] + struct.pack("<I", 0x00500550) + data[52:]  # before 12.8: bits 0-7
    assert machine_code(older).sm == 80
    assert machine_code(data[:48] + struct.pack("<I", 0) + data[52:]).sm is None


def test_the_rendered_instruction_is_read_from_the_functions_own_section(tmp_path):
    # a stand-in printing nvdisasm's whole-CUBIN layout (it takes no function names): section
    # headers, then offset comment, instruction; another function's section comes first
    data, name = cubin(tmp_path, SOURCE)
    listing = [
        "//--------------------- .text.other               --------------------------",
        "        /*0010*/                   IADD3 R0, R0, 0x1, RZ ;",
        "",
        f"//--------------------- .text.{name}                   --------------------------",
        f".text.{name}:",
        "        /*0000*/                   LDC R1, c[0x0][0x28] ;",
        "        /*0010*/              @!P0 FMUL R2, R2, 3 ;",
        "",
        "//--------------------- .nv.shared.reserved.0     --------------------------",
        "        /*0020*/ \t.byte\t0x00 ;",
    ]
    tool = tmp_path / "nvdisasm"
    tool.write_text("#!/bin/sh\ncat <<'EOF'\n" + "\n".join(listing) + "\nEOF\n")
    tool.chmod(0o755)
    assert first_instructions(data, name, 0x10, tool=str(tool)) == "@!P0 FMUL R2, R2, 3"
    assert first_instructions(data, name, 0x20, tool=str(tool)) is None  # past the section's end
    assert first_instructions(data, "absent", 0x10, tool=str(tool)) is None
