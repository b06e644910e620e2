"""A small ELF reader: headers, sections and dynamic symbols, from bytes, never through the loader.

Two callers need it without a GPU: the launch check reads a CUBIN's `.nv.info.<kernel>` section
(the kernel's compiled parameter list), and the library check reads a shared object's machine and
exported symbols. Reading the file rather than dlopen-ing it means a library built for another
machine, or one whose dependencies are missing here, is still described precisely.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

ELF_MAGIC = b"\x7fELF"
ET_DYN = 3
SHT_SYMTAB = 2
SHT_NOBITS = 8
SHT_DYNSYM = 11
STT_FUNC = 2
SHN_UNDEF = 0

# e_machine values (System V ABI registry) for the machines qualify runs on, and their names.
MACHINES = {3: "x86", 62: "x86-64", 40: "arm", 183: "aarch64", 21: "ppc64", 190: "cuda", 243: "riscv"}
HOST_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "ppc64le": 21, "riscv64": 243}
# A section copied out of the file (a symbol or string table, a CUBIN's code) is at most this
# large: a library is read mapped, and a hostile section header must not make a reader copy
# gigabytes. The fat binary section is not copied (`Elf.view`); its decoding has its own budget.
MAX_SECTION_BYTES = 256 << 20


class ElfProblem(ValueError):
    """The bytes are not an ELF file qualify can read; the message says why."""


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    offset: int
    size: int
    link: int
    entsize: int
    flags: int = 0
    info: int = 0


@dataclass(frozen=True)
class Symbol:
    name: str
    value: int
    size: int
    info: int  # binding << 4 | type
    other: int
    shndx: int  # the section it is defined in; SHN_UNDEF when imported


@dataclass(frozen=True)
class Elf:
    data: bytes  # or a read-only mapping of the file (qualify.io.map_limited)
    is64: bool
    endian: str  # "<" or ">"
    type: int
    machine: int
    sections: tuple[Section, ...]

    def section(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)

    def contents(self, section: Section) -> bytes:
        """The section's bytes, copied; ElfProblem past MAX_SECTION_BYTES."""
        if section.size > MAX_SECTION_BYTES:
            raise ElfProblem(
                f"section {section.name or '?'} holds {section.size} bytes, more than the {MAX_SECTION_BYTES} read"
            )
        return bytes(self.data[section.offset : section.offset + section.size])

    def view(self, section: Section) -> memoryview:
        """The section's bytes without a copy (paged in from a mapping only where they are read)."""
        return memoryview(self.data)[section.offset : section.offset + section.size]

    def dynamic_symbols(self) -> dict[str, int]:
        """Defined (not imported) dynamic symbols: name → symbol type (STT_FUNC, STT_OBJECT...)."""
        return {s.name: s.info & 0xF for s in self.symbols(SHT_DYNSYM)[1:] if s.shndx != SHN_UNDEF}

    def symbols(self, table_type: int = SHT_SYMTAB) -> list[Symbol]:
        """Every entry of the first symbol table of `table_type`, in table order (entry 0 is the
        null symbol); [] when there is none."""
        table_section = next((s for s in self.sections if s.type == table_type), None)
        if table_section is None:
            return []
        if not 0 <= table_section.link < len(self.sections):
            raise ElfProblem("a symbol table links to no string table")
        strings = self.contents(self.sections[table_section.link])
        fmt = self.endian + ("IBBHQQ" if self.is64 else "IIIBBH")
        size = struct.calcsize(fmt)
        table = self.contents(table_section)
        out = []
        for start in range(0, len(table) - size + 1, size):
            fields = struct.unpack_from(fmt, table, start)
            if self.is64:
                name_at, info, other, shndx, value, sym_size = fields
            else:
                name_at, value, sym_size, info, other, shndx = fields
            end = strings.find(b"\x00", name_at)
            if end < 0:
                raise ElfProblem("a symbol name runs past its string table")
            out.append(Symbol(strings[name_at:end].decode(errors="replace"), value, sym_size, info, other, shndx))
        return out


def parse(data: bytes) -> Elf:
    """The ELF file in `data` (bytes or a mapping), its headers read; no section is copied."""
    if data[:4] != ELF_MAGIC:
        raise ElfProblem("not an ELF file")
    if len(data) < 52 or data[4] not in (1, 2) or data[5] not in (1, 2):
        raise ElfProblem("a truncated or malformed ELF header")
    is64 = data[4] == 2
    endian = "<" if data[5] == 1 else ">"
    if is64:
        if len(data) < 64:
            raise ElfProblem("a truncated ELF header")
        e_type, machine = struct.unpack_from(endian + "HH", data, 16)
        (shoff,) = struct.unpack_from(endian + "Q", data, 40)
        shentsize, shnum, shstrndx = struct.unpack_from(endian + "HHH", data, 58)
        sh_fmt = endian + "IIQQQQIIQQ"
    else:
        e_type, machine = struct.unpack_from(endian + "HH", data, 16)
        (shoff,) = struct.unpack_from(endian + "I", data, 32)
        shentsize, shnum, shstrndx = struct.unpack_from(endian + "HHH", data, 46)
        sh_fmt = endian + "IIIIIIIIII"
    raw = []
    if shoff and shnum:
        if shentsize < struct.calcsize(sh_fmt) or shoff + shnum * shentsize > len(data):
            raise ElfProblem("the section header table lies outside the file")
        for i in range(shnum):
            name, stype, flags, _, offset, size, link, info, _, entsize = struct.unpack_from(
                sh_fmt, data, shoff + i * shentsize
            )
            if stype != SHT_NOBITS and offset + size > len(data):
                raise ElfProblem(f"section {i} lies outside the file")
            raw.append((name, stype, offset, size, link, entsize, flags, info))
    names = b""
    if raw and 0 <= shstrndx < len(raw):
        _, _, off, size, _, _, _, _ = raw[shstrndx]
        if size > MAX_SECTION_BYTES:
            raise ElfProblem(f"the section name table holds {size} bytes, more than the {MAX_SECTION_BYTES} read")
        names = bytes(data[off : off + size])
    sections = []
    for name_at, stype, offset, size, link, entsize, flags, info in raw:
        end = names.find(b"\x00", name_at)
        name = names[name_at:end].decode(errors="replace") if end >= 0 else ""
        sections.append(Section(name, stype, offset, size, link, entsize, flags, info))
    return Elf(data, is64, endian, e_type, machine, tuple(sections))


def machine_name(machine: int) -> str:
    return MACHINES.get(machine, f"machine {machine}")
