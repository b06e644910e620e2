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

Only the entries a caller asks for are decoded (`cubins`: the ELF entries of one architecture, the
device's); the others are walked by their headers and never decompressed. Whatever is decoded by
one call expands to at most MAX_DECODED_BYTES in all, checked against the entries' declared sizes
before any is decompressed (each decoder is held to its entry's declared size), and no entry may
exceed MAX_ENTRY_BYTES. LZ4 blocks are decoded by the
`lz4` package (its C decoder; a dependency of qualify) and zstd frames by the `zstandard` package
(`pip install 'qualify[fatbin]'`); without one, an entry that needs it is refused with that
sentence. A library is read mapped (`read_cubins`), so a large or sparse file is paged in only
where its section headers and the chosen entries lie.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from qualify.build.elf import ElfProblem, parse
from qualify.io import MAX_LIBRARY_BYTES, map_limited

FATBIN_MAGIC = 0xBA55ED50
CONTAINER_HEADER = struct.Struct("<IHHQ")
ENTRY_HEADER = struct.Struct("<HHIQIIHHIIIQQQ")  # the fixed 64 bytes; nvcc may write more
KIND_PTX, KIND_ELF = 1, 2
FLAG_LZ4, FLAG_ZSTD = 0x2000, 0x8000
# One entry decompresses to at most this much (a guard against a hostile size field) ...
MAX_ENTRY_BYTES = 1 << 30
# ... and all the entries one call decodes together to at most this much: the CUBINs of one
# architecture of the largest CUDA libraries are a few hundred MB.
MAX_DECODED_BYTES = 1 << 30
_PADDING_SCAN = 1 << 16


class FatbinProblem(ElfProblem):
    """The library's embedded device code cannot be read; the message says why."""


@dataclass(frozen=True)
class Header:
    """One entry as its header describes it, not yet decoded."""

    at: int  # the entry's offset in the section
    kind: int  # KIND_PTX or KIND_ELF
    arch: int  # 90 for sm_90 / compute_90
    flags: int
    compression: str  # "none", "lz4" or "zstd"
    start: int  # the payload's offset in the section
    stored: int  # the payload's size as stored
    raw_size: int  # its size once decompressed (0 when stored as is)


@dataclass(frozen=True)
class Entry:
    kind: int  # KIND_PTX or KIND_ELF
    arch: int  # 90 for sm_90 / compute_90
    flags: int
    compression: str  # "none", "lz4" or "zstd"
    payload: bytes  # decompressed


def fatbin_of(library) -> memoryview:
    """The `.nv_fatbin` section of a host ELF file (bytes or a mapping), as a view: not copied."""
    elf = parse(library)
    section = elf.section(".nv_fatbin")
    if section is None:
        raise FatbinProblem("the library has no .nv_fatbin section (no device code embedded by nvcc)")
    return elf.view(section)


def headers(fatbin) -> list[Header]:
    """Every entry of every container in a `.nv_fatbin` section, in file order, undecoded."""
    fatbin = memoryview(fatbin)
    out: list[Header] = []
    at = 0
    while at < len(fatbin):
        if fatbin[at] == 0:  # padding between containers (a magic never starts with a zero byte)
            at = _past_zeros(fatbin, at)
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
            out.append(_header(fatbin, entry_at, end))
            entry_at += _entry_span(fatbin, entry_at)
        at = end
    return out


def _past_zeros(view: memoryview, at: int) -> int:
    """The first non-zero byte at or after `at` (or the end), scanned a block at a time."""
    while at < len(view):
        block = bytes(view[at : at + _PADDING_SCAN])
        rest = block.lstrip(b"\0")
        if rest:
            return at + len(block) - len(rest)
        at += len(block)
    return at


def entries(
    fatbin, arch: int | None = None, kind: int | None = None, *, budget: int = MAX_DECODED_BYTES
) -> list[Entry]:
    """The entries of a `.nv_fatbin` section, decoded, in file order; with `arch` or `kind`, only
    those (the rest are never decompressed). FatbinProblem once the decoded entries would
    exceed `budget` bytes in all."""
    fatbin = memoryview(fatbin)
    chosen = [h for h in headers(fatbin) if (arch is None or h.arch == arch) and (kind is None or h.kind == kind)]
    used = 0
    for h in chosen:  # the declared sizes, summed before anything is decompressed
        used += h.stored if h.compression == "none" else h.raw_size
        if used > budget:
            raise FatbinProblem(
                f"the entry at byte {h.at} brings the device code to decode to {used} bytes, "
                f"more than the {budget} allowed in all"
            )
    return [_decode(fatbin, h) for h in chosen]


def _entry_span(data, at: int) -> int:
    _, _, header_size, padded = struct.unpack_from("<HHIQ", data, at)
    return header_size + padded


def _header(data: memoryview, at: int, end: int) -> Header:
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
        return Header(at, kind, arch, flags, compression, start, padded, 0)
    if not 0 < raw_size <= MAX_ENTRY_BYTES:
        raise FatbinProblem(f"the compressed entry at byte {at} declares {raw_size} bytes")
    return Header(at, kind, arch, flags, compression, start, stored or padded, raw_size)


def _decode(data: memoryview, h: Header) -> Entry:
    body = data[h.start : h.start + h.stored]
    if h.compression == "none":
        payload = bytes(body)
    elif h.compression == "lz4":
        payload = lz4_block(body, h.raw_size)
    else:
        payload = _zstd(body, h.raw_size)
    return Entry(kind=h.kind, arch=h.arch, flags=h.flags, compression=h.compression, payload=payload)


LZ4_MAX_RATIO = 255


def lz4_block(src, size: int) -> bytes:
    """Decode one LZ4 block (no frame) that must yield exactly `size` bytes, with the `lz4`
    package's C decoder (bounded: it never writes past `size`)."""
    try:
        import lz4.block
    except ImportError:
        raise FatbinProblem(
            "the library's device code is LZ4-compressed; reading it needs the lz4 package (pip install lz4)"
        ) from None
    # An LZ4 block cannot decode to more than about 255 bytes per byte it holds (a match's length
    # grows by at most 255 per byte), and the decoder allocates the declared size before it reads
    # a byte: a declaration beyond that is refused, not allocated.
    if size > LZ4_MAX_RATIO * len(src) + 64:
        raise FatbinProblem(f"an LZ4 block of {len(src)} bytes cannot decode to the {size} bytes its entry declares")
    try:
        out = lz4.block.decompress(bytes(src), uncompressed_size=size)
    except lz4.block.LZ4BlockError:
        raise FatbinProblem(
            f"an LZ4 block is damaged or decodes to more than the {size} bytes its entry declares"
        ) from None
    if len(out) != size:
        raise FatbinProblem(f"an LZ4 block gave {len(out)} bytes, its entry declares {size}")
    return out


def _zstd(body, size: int) -> bytes:
    try:
        import zstandard
    except ImportError:
        raise FatbinProblem(
            "the library's device code is zstd-compressed; reading it needs the "
            "zstandard package (pip install 'qualify[fatbin]')"
        ) from None
    try:
        out = zstandard.ZstdDecompressor().decompress(bytes(body), max_output_size=size)
    except zstandard.ZstdError as exc:
        raise FatbinProblem(f"a zstd entry does not decompress: {exc}") from None
    if len(out) != size:
        raise FatbinProblem(f"a zstd entry gave {len(out)} bytes, its entry declares {size}")
    return out


def cubins(library, arch: int) -> list[bytes]:
    """The CUBINs (ELF entries) for SM `arch` embedded in a shared library (bytes or a mapping), in
    file order; no other entry is decompressed."""
    return [e.payload for e in entries(fatbin_of(library), arch=arch, kind=KIND_ELF)]


def architectures(library) -> list[int]:
    """The SM numbers a library has CUBINs for, from the entries' headers (nothing decompressed)."""
    return sorted({h.arch for h in headers(fatbin_of(library)) if h.kind == KIND_ELF})


def read_cubins(path: Path, arch: int) -> list[bytes]:
    """`cubins` of the library at `path`, mapped rather than read (at most MAX_LIBRARY_BYTES; a
    device, FIFO or larger file is refused as qualify.io.UnreadableFile)."""
    with map_limited(Path(path), MAX_LIBRARY_BYTES) as data:
        return cubins(data, arch)
