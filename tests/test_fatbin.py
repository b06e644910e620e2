"""Fat binaries embedded in shared libraries: nvcc 13.0 output (tests/fixtures/fatbin/make.sh)."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from qualify.build import fatbin
from qualify.build.fatbin import FatbinProblem, lz4_block
from qualify.build.machine_code import compare, machine_code, merged

FIXTURES = Path(__file__).parent / "fixtures" / "fatbin"


def lib(name: str) -> bytes:
    return (FIXTURES / f"{name}.so").read_bytes()


def code(name: str, arch: int = 90):
    return merged([machine_code(c) for c in fatbin.cubins(lib(name), arch)])


def test_entries_of_an_uncompressed_library():
    found = fatbin.entries(fatbin.fatbin_of(lib("base")))
    # the device link's module and k.cu's, each for sm_89 and sm_90, then k.cu's compute_90 PTX
    assert [(e.kind, e.arch, e.compression) for e in found] == [
        (2, 89, "none"),
        (2, 90, "none"),
        (2, 89, "none"),
        (2, 90, "none"),
        (1, 90, "none"),
    ]
    assert fatbin.architectures(lib("base")) == [89, 90]
    assert all(e.payload[:4] == b"\x7fELF" for e in found if e.kind == fatbin.KIND_ELF)
    assert b".version" in found[-1].payload  # PTX text
    assert sorted(code("base").functions) == ["_Z5scalePfi", "_Z7add_onePfi"]


@pytest.mark.parametrize("compressed", ["zstd", "lz4"])
def test_compressed_entries_decompress_to_the_uncompressed_cubins(compressed):
    assert {e.compression for e in fatbin.entries(fatbin.fatbin_of(lib(compressed)))} == {compressed}
    for arch in (89, 90):
        assert fatbin.cubins(lib(compressed), arch) == fatbin.cubins(lib("base"), arch)


def test_a_comment_and_another_build_id_leave_the_machine_code_identical():
    assert lib("comment") != lib("base")
    assert fatbin.cubins(lib("comment"), 90) != fatbin.cubins(lib("base"), 90)  # the line tables moved
    diff = compare(code("base"), code("comment"))
    assert diff.identical and code("base").digest == code("comment").digest


def test_a_real_change_names_the_kernel_that_changed():
    for arch in (89, 90):
        diff = compare(code("base", arch), code("change", arch))
        assert [(d.name, d.status) for d in diff.functions] == [("_Z5scalePfi", "differs")]
        assert "instructions" in diff.functions[0].parts


def test_an_architecture_the_library_lacks_has_no_cubins():
    assert fatbin.cubins(lib("base"), 80) == []


def test_zstd_without_the_package_is_refused_with_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "zstandard", None)
    with pytest.raises(FatbinProblem, match=r"zstandard package \(pip install 'qualify\[fatbin\]'\)"):
        fatbin.cubins(lib("zstd"), 90)
    assert fatbin.cubins(lib("lz4"), 90)  # LZ4 needs no package


def test_a_library_without_device_code():
    host_only = Path(sys.executable).resolve().read_bytes()
    with pytest.raises(FatbinProblem, match="no .nv_fatbin"):
        fatbin.cubins(host_only, 90)


def test_lz4_blocks():
    # a literal, then an overlapping match (offset 1, length 4 + 2) and literals to close
    assert lz4_block(bytes([0x12]) + b"a" + b"\x01\x00" + bytes([0x20]) + b"bc", 9) == b"aaaaaaabc"
    # literal length 15 + 255 + 3 = 273, carried in extra bytes
    long = bytes(range(256)) + bytes(17)
    assert lz4_block(bytes([0xF0, 255, 3]) + long, 273) == long
    # match length 4 + 15 + 1 = 20 from offset 2
    assert lz4_block(bytes([0x2F]) + b"xy" + b"\x02\x00" + bytes([1]) + bytes([0x00]), 22) == b"xy" * 11
    with pytest.raises(FatbinProblem, match="declares 10"):
        lz4_block(bytes([0x20]) + b"bc", 10)
    with pytest.raises(FatbinProblem, match="refers outside"):
        lz4_block(bytes([0x10]) + b"a" + b"\x05\x00" + bytes([0x00]), 10)
    with pytest.raises(FatbinProblem, match="truncated"):
        lz4_block(bytes([0xF0]), 10)


def _container(entry_header: bytes, payload: bytes) -> bytes:
    body = entry_header + payload
    return struct.pack("<IHHQ", fatbin.FATBIN_MAGIC, 1, 16, len(body)) + body


def _entry(kind=2, arch=90, flags=0x11, payload=b"", stored=0, raw=0, header=64) -> bytes:
    fixed = struct.pack(
        "<HHIQIIHHIIIQQQ", kind, 0x101, header, len(payload), stored, 0, 8, 1, arch, 0, 0, flags, 0, raw
    )
    return fixed + bytes(header - 64)


def test_malformed_fat_binaries_are_refused():
    with pytest.raises(FatbinProblem, match="no fat binary at byte 0"):
        fatbin.entries(b"\x01" * 32)
    ok = _container(_entry(payload=b"\x7fELF1234"), b"\x7fELF1234")
    assert [e.payload for e in fatbin.entries(ok)] == [b"\x7fELF1234"]
    assert [e.payload for e in fatbin.entries(ok + bytes(8) + ok)] == [b"\x7fELF1234"] * 2
    assert [e.payload for e in fatbin.entries(ok + bytes(4) + ok + bytes(3))] == [b"\x7fELF1234"] * 2
    with pytest.raises(FatbinProblem, match="runs past its section"):
        fatbin.entries(ok[:-1])
    with pytest.raises(FatbinProblem, match="runs past its fat binary"):
        fatbin.entries(_container(_entry(payload=bytes(16)), bytes(8)))
    with pytest.raises(FatbinProblem, match="declares 0 bytes"):
        fatbin.entries(_container(_entry(flags=0x2011, payload=bytes(8), stored=8, raw=0), bytes(8)))
    with pytest.raises(FatbinProblem, match="truncated entry header"):
        fatbin.entries(struct.pack("<IHHQ", fatbin.FATBIN_MAGIC, 1, 16, 8) + bytes([1]) * 8)
