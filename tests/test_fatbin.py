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
    assert fatbin.cubins(lib("lz4"), 90)  # LZ4 needs only lz4, a dependency


def test_a_library_without_device_code():
    host_only = Path(sys.executable).resolve().read_bytes()
    with pytest.raises(FatbinProblem, match="no .nv_fatbin"):
        fatbin.cubins(host_only, 90)


def test_lz4_blocks_decode_with_the_c_decoder_to_exactly_their_declared_size():
    import lz4.block

    text = b"aaaaaaaaaaaaaaaaaaaaaaaabcabcabcabcabcabcabcabcabcxyz" * 40
    block = lz4.block.compress(text, store_size=False)
    assert lz4_block(block, len(text)) == text
    with pytest.raises(FatbinProblem, match="declares 10"):  # fewer bytes than declared
        lz4_block(bytes([0x20]) + b"bc", 10)
    with pytest.raises(FatbinProblem, match="more than the 100 bytes its entry declares"):
        lz4_block(block, 100)
    with pytest.raises(FatbinProblem, match="damaged"):  # an offset back past the start
        lz4_block(bytes([0x10]) + b"a" + b"\x05\x00" + bytes([0x00]), 10)
    with pytest.raises(FatbinProblem, match="damaged"):
        lz4_block(bytes([0xF0]), 10)


def test_lz4_without_the_package_is_refused_with_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "lz4", None)
    monkeypatch.setitem(sys.modules, "lz4.block", None)
    with pytest.raises(FatbinProblem, match=r"lz4 package \(pip install lz4\)"):
        fatbin.cubins(lib("lz4"), 90)


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


# --- bounds (issue 25, item 3) -------------------------------------------------------------------


def test_only_the_requested_architecture_is_decoded(monkeypatch):
    # without zstandard, an entry that needed it would be refused: none of sm_80's is decoded
    monkeypatch.setitem(sys.modules, "zstandard", None)
    assert fatbin.cubins(lib("zstd"), 80) == []
    assert fatbin.architectures(lib("zstd")) == [89, 90]  # from the headers alone
    with pytest.raises(FatbinProblem, match="zstandard package"):
        fatbin.cubins(lib("zstd"), 90)


def test_other_architectures_are_never_decompressed():
    garbage = bytes(range(1, 41))  # not a zstd frame: decoding it would fail
    fb = _container(_entry(arch=89, flags=0x8011, payload=garbage, stored=40, raw=4096), garbage)
    fb += _container(_entry(arch=90, payload=b"\x7fELF1234"), b"\x7fELF1234")
    assert [e.payload for e in fatbin.entries(fb, arch=90, kind=fatbin.KIND_ELF)] == [b"\x7fELF1234"]


def test_decoded_entries_are_bounded_in_all_not_only_each():
    # three entries, each under the per-entry cap, declaring 3 x 400 MiB: refused before the
    # third is decompressed (its body is not even a zstd frame)
    declared = 400 << 20
    one = _container(_entry(flags=0x8011, payload=bytes(8), stored=8, raw=declared), bytes(8))
    assert declared <= fatbin.MAX_ENTRY_BYTES and 3 * declared > fatbin.MAX_DECODED_BYTES
    with pytest.raises(FatbinProblem, match=r"more than the 1073741824 allowed in all"):
        fatbin.entries(one * 3, arch=90, budget=fatbin.MAX_DECODED_BYTES)
    with pytest.raises(FatbinProblem, match="allowed in all"):  # a real library under a small budget
        fatbin.entries(fatbin.fatbin_of(lib("zstd")), budget=4096)
    assert fatbin.entries(fatbin.fatbin_of(lib("zstd")), arch=90, budget=1 << 20)


def test_a_large_lz4_block_of_repeats_decodes_in_c_time():
    import time

    import lz4.block

    text = b"a" * (64 << 20)  # one long overlapping match: a byte per step for a Python decoder
    block = lz4.block.compress(text, store_size=False)
    start = time.monotonic()
    assert lz4_block(block, len(text)) == text
    assert time.monotonic() - start < 5


_SPARSE_LIBRARY_CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_DATA, (1536 << 20, 1536 << 20))
from pathlib import Path
from qualify.build.libcheck import check_library
from qualify.errors import PlanError
from qualify.plan.files import shared_object_problem
from qualify.run import code_identity
from test_compare import arm

path = Path(sys.argv[1])
print("shared object:", shared_object_problem(path))
try:
    check_library(path, arm(), "arms.base")
except PlanError as exc:
    print("library check:", exc.message)
print("code identity:", code_identity.library(path, path, "sm_90").status)
"""


def test_a_3_gib_sparse_library_is_mapped_not_read(tmp_path):
    import subprocess

    path = tmp_path / "libsparse.so"
    path.write_bytes(lib("base"))
    with open(path, "r+b") as f:
        f.truncate(3 << 30)  # sparse: its sections stay where they were, 3 GiB of zeros follow
    done = subprocess.run(
        [sys.executable, "-c", _SPARSE_LIBRARY_CHILD, str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).parent,
    )
    assert done.returncode == 0, done.stderr  # a 3 GiB read would exceed the child's 1.5 GiB heap
    assert done.stdout.splitlines() == [
        "shared object: None",
        "library check: the library exports no function 'scale'",
        "code identity: identical",
    ]


def test_an_lz4_entry_declaring_more_than_its_block_can_hold_is_refused_before_allocating(monkeypatch):
    """The decoder allocates the declared size first: a 3-byte block declaring 1 MB is refused
    without calling it; the most compressible real block still decodes."""
    import lz4.block

    called = []
    real = lz4.block.decompress
    monkeypatch.setattr(lz4.block, "decompress", lambda *a, **k: called.append(1) or real(*a, **k))
    with pytest.raises(FatbinProblem, match="of 3 bytes cannot decode to the 1000000 bytes"):
        lz4_block(bytes([0x20]) + b"bc", 1_000_000)
    assert called == []
    zeros = bytes(1 << 20)
    block = lz4.block.compress(zeros, store_size=False)  # about 4 KB: within 255 bytes per byte
    assert lz4_block(block, len(zeros)) == zeros
