"""The CUBINs a shared library embeds, read from its `.nv_fatbin` section without loading it.

nvcc places one fat binary per translation unit (and one for the device link) in `.nv_fatbin`,
back to back. The layout is not documented by NVIDIA; the facts used here are those `cuobjdump`
agrees with, checked against nvcc 13.0's output in tests/fixtures/fatbin (make.sh re-makes it):

- a container: magic 0xBA55ED50 (u32), version (u16), header size (u16), then the size (u64) of
  the entries that follow the header;
- an entry: kind (u16: 1 PTX, 2 ELF), version (u16), header size (u32), payload size padded to
  8 bytes (u64), stored payload size (u32; 0 when stored as is), ..., the SM number (u32 at 28),
  flags (u64 at 40), then (u64 at 56) the payload's size once decompressed; the payload follows
  the entry's header, whose size grows with the optional object name nvcc 13 writes;
- flag 0x2000: the payload is an LZ4 block (nvcc `-Xfatbin -compress-all`, `--compress-mode=speed`),
  flag 0x8000: a zstd frame (`--compress-mode=size`, and the default for large entries).

LZ4 blocks are decoded here (the format is small and public); zstd needs the `zstandard` package
(`pip install 'qualify[fatbin]'`), and without it a zstd entry is refused with that sentence.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from qualify.build.elf import ElfProblem, parse

FATBIN_MAGIC = 0xBA55ED50
CONTAINER_HEADER = struct.Struct("<IHHQ")
ENTRY_HEADER = struct.Struct("<HHIQIIHHIIIQQQ")  # the fixed 64 bytes; nvcc may write more
KIND_PTX, KIND_ELF = 1, 2
FLAG_LZ4, FLAG_ZSTD = 0x2000, 0x8000
# A library's fat binaries decompress to at most this much (a guard against a hostile size field).
MAX_ENTRY_BYTES = 1 << 30


class FatbinProblem(ElfProblem):
    """The library's embedded device code cannot be read; the message says why."""


@dataclass(frozen=True)
class Entry:
    kind: int  # KIND_PTX or KIND_ELF
    arch: int  # 90 for sm_90 / compute_90
    flags: int
    compression: str  # "none", "lz4" or "zstd"
    payload: bytes  # decompressed


def fatbin_of(library: bytes) -> bytes:
    """The `.nv_fatbin` section of a host ELF file."""
    elf = parse(library)
    section = elf.section(".nv_fatbin")
    if section is None:
        raise FatbinProblem("the library has no .nv_fatbin section (no device code embedded by nvcc)")
    return elf.contents(section)


def entries(fatbin: bytes) -> list[Entry]:
    """Every entry of every container in a `.nv_fatbin` section, in file order."""
    out: list[Entry] = []
    at = 0
    while at < len(fatbin):
        if fatbin[at] == 0:  # padding between containers (a magic never starts with a zero byte)
            rest = fatbin[at:].lstrip(b"\0")
            at = len(fatbin) - len(rest)
            continue
        if at + CONTAINER_HEADER.size > len(fatbin):
            raise FatbinProblem(f"a truncated fat binary header at byte {at}")
        magic, _, header_size, size = CONTAINER_HEADER.unpack_from(fatbin, at)
        if magic != FATBIN_MAGIC:
            raise FatbinProblem(f"no fat binary at byte {at} (magic {magic:#010x})")
        end = at + header_size + size
        if header_size < CONTAINER_HEADER.size or end > len(fatbin):
            raise FatbinProblem(f"the fat binary at byte {at} runs past its section")
        entry_at = at + header_size
        while entry_at < end:
            out.append(_entry(fatbin, entry_at, end))
            entry_at += _entry_span(fatbin, entry_at)
        at = end
    return out


def _entry_span(data: bytes, at: int) -> int:
    _, _, header_size, padded = struct.unpack_from("<HHIQ", data, at)
    return header_size + padded


def _entry(data: bytes, at: int, end: int) -> Entry:
    if at + ENTRY_HEADER.size > end:
        raise FatbinProblem(f"a truncated entry header at byte {at}")
    (kind, _, header_size, padded, stored, _, _, _, arch, _, _, flags, _, raw_size) = ENTRY_HEADER.unpack_from(data, at)
    start = at + header_size
    if header_size < ENTRY_HEADER.size or start + padded > end or stored > padded:
        raise FatbinProblem(f"the entry at byte {at} runs past its fat binary")
    if flags & FLAG_ZSTD:
        compression = "zstd"
    elif flags & FLAG_LZ4:
        compression = "lz4"
    else:
        compression = "none"
    if compression == "none":
        payload = data[start : start + padded]
    else:
        if not 0 < raw_size <= MAX_ENTRY_BYTES:
            raise FatbinProblem(f"the compressed entry at byte {at} declares {raw_size} bytes")
        body = data[start : start + (stored or padded)]
        payload = lz4_block(body, raw_size) if compression == "lz4" else _zstd(body, raw_size)
    return Entry(kind=kind, arch=arch, flags=flags, compression=compression, payload=payload)


def lz4_block(src: bytes, size: int) -> bytes:
    """Decode one LZ4 block (no frame) that must yield exactly `size` bytes.

    A sequence is a token (literal length in the high nibble, match length - 4 in the low one,
    15 meaning "more bytes follow, each added, until one is below 255"), the literals, then a
    little-endian u16 offset back into the output; the last sequence has literals only.
    """
    out = bytearray()
    i, n = 0, len(src)
    try:
        while i < n:
            token = src[i]
            i += 1
            literals, i = _length(src, i, token >> 4)
            out += src[i : i + literals]
            i += literals
            if len(out) > size or i > n:
                raise FatbinProblem("an LZ4 block runs past its declared size")
            if i >= n:
                break
            offset = src[i] | src[i + 1] << 8
            i += 2
            match, i = _length(src, i, token & 0xF)
            match += 4
            if offset == 0 or offset > len(out) or len(out) + match > size:
                raise FatbinProblem("an LZ4 block refers outside its output")
            start = len(out) - offset
            if offset >= match:
                out += out[start : start + match]
            else:  # the match overlaps what it writes: a repeated pattern
                for k in range(match):
                    out.append(out[start + k])
    except IndexError:
        raise FatbinProblem("a truncated LZ4 block") from None
    if len(out) != size:
        raise FatbinProblem(f"an LZ4 block gave {len(out)} bytes, its entry declares {size}")
    return bytes(out)


def _length(src: bytes, i: int, nibble: int) -> tuple[int, int]:
    length = nibble
    if nibble == 15:
        while True:
            extra = src[i]
            i += 1
            length += extra
            if extra != 255:
                break
    return length, i


def _zstd(body: bytes, size: int) -> bytes:
    try:
        import zstandard
    except ImportError:
        raise FatbinProblem(
            "the library's device code is zstd-compressed; reading it needs the "
            "zstandard package (pip install 'qualify[fatbin]')"
        ) from None
    try:
        out = zstandard.ZstdDecompressor().decompress(body, max_output_size=size)
    except zstandard.ZstdError as exc:
        raise FatbinProblem(f"a zstd entry does not decompress: {exc}") from None
    if len(out) != size:
        raise FatbinProblem(f"a zstd entry gave {len(out)} bytes, its entry declares {size}")
    return out


def cubins(library: bytes, arch: int) -> list[bytes]:
    """The CUBINs (ELF entries) for SM `arch` embedded in a shared library, in file order."""
    return [e.payload for e in entries(fatbin_of(library)) if e.kind == KIND_ELF and e.arch == arch]


def architectures(library: bytes) -> list[int]:
    return sorted({e.arch for e in entries(fatbin_of(library)) if e.kind == KIND_ELF})


def read_cubins(path: Path, arch: int) -> list[bytes]:
    return cubins(Path(path).read_bytes(), arch)
