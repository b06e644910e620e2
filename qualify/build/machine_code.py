"""The machine-code identity of a CUBIN: what the GPU executes, without what merely describes it.

Two builds that differ only in comments, in a flag with no effect or in a build id produce CUBINs
whose bytes differ (line tables, notes, symbol order) but whose instructions do not. This module
reduces a CUBIN to the parts that decide execution, per function (each `.text.<name>` section):

- the instruction bytes of `.text.<name>` and the section's flags;
- the function's attributes from `.nv.info.<name>` (parameter layout, max threads, exit offsets,
  ...) and its entries in the module's `.nv.info` (register count, stack and frame sizes), symbol
  indices replaced by symbol names where the record's layout is known (the per-symbol records and
  the parameter bank); other records are kept as bytes, so a symbol index inside one can only make
  identical code look different, never different code look identical;
- its relocations (offset, type, target symbol by name, addend), sorted by offset;
- the sizes of its `.nv.shared.<name>` (static shared memory), `.nv.local.<name>` and
  `.nv.constant0.<name>` (parameter bank) sections, and the bytes of any other constant bank;
- the symbol's size and its `st_other` byte (entry point or device function);

and, once per CUBIN, the ELF header's class, machine and `e_flags` (the SM version), the
`.nv.compat` attributes, module constant banks and initialised globals. It ignores the rest:
section and symbol-table order, `.debug_*` and `.nv_debug_*` (line info), `.note.*` (toolkit
notes), `.nv.callgraph` (its effect is the stack sizes already kept) and the ELF header's
identification padding and ABI version.

The comparison is on bytes and needs no tool: CPU CI has neither `nvdisasm` nor `cuobjdump`, and
two identical byte strings need no disassembly to be called identical. `nvdisasm`, when it is on
the PATH, only renders the first differing instruction of a summary for a human
(`first_instructions`).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from qualify.build.elf import SHT_NOBITS, Elf, ElfProblem, parse
from qualify.build.params import _records

# .nv.info attributes whose value starts with a symbol index (u32): rewritten to the symbol's name.
EIATTR_PARAM_CBANK = 0x0A
# Module-level .nv.info records of 8 bytes are (symbol index, value) pairs: register count (0x2f),
# frame size (0x11), min/max stack size (0x12, 0x23) ... each belongs to the function it names.
PER_SYMBOL_RECORD_BYTES = 8
EM_CUDA = 190
# Volta and later encode one instruction in 16 bytes; earlier GPUs in 8.
INSTRUCTION_BYTES_SM70 = 16
_CONSTANT_BANK = re.compile(r"^\.nv\.constant(\d+)(?:\.(.+))?$")
_RELOCATIONS = re.compile(r"^\.rela?\.text\.(.+)$")
# relocations of sections that only describe the code (line tables, frames)
_DESCRIPTIVE = re.compile(r"^\.rela?\.(debug|nv_debug)")
SHT_RELA, SHT_REL = 4, 9


@dataclass(frozen=True)
class FunctionCode:
    """One function's machine code and what changes its execution, canonical and order-free."""

    name: str
    text: bytes
    facts: tuple[tuple[str, str], ...]  # (what, value) pairs other than the instruction bytes

    @property
    def digest(self) -> str:
        h = hashlib.sha256(self.text)
        h.update(json.dumps(self.facts).encode())
        return h.hexdigest()


@dataclass(frozen=True)
class CubinCode:
    sm: int | None  # from e_flags; None when the header does not say
    functions: dict[str, FunctionCode]
    module: tuple[tuple[str, str], ...]  # facts shared by all functions

    @property
    def digest(self) -> str:
        h = hashlib.sha256(json.dumps(self.module).encode())
        for name in sorted(self.functions):
            h.update(f"\n{name}\0{self.functions[name].digest}".encode())
        return h.hexdigest()

    def digests(self) -> dict[str, str]:
        return {name: fn.digest for name, fn in sorted(self.functions.items())}


@dataclass(frozen=True)
class FunctionDifference:
    name: str
    status: str  # "differs", or "only in <label>"
    parts: tuple[str, ...] = ()  # which facts differ ("instructions", "attribute 0x2f", ...)
    first_offset: int | None = None  # byte offset of the first differing instruction

    def describe(self) -> str:
        if self.status != "differs":
            return f"{self.name}: {self.status}"
        where = f", first at instruction offset {self.first_offset:#06x}" if self.first_offset is not None else ""
        return f"{self.name}: {', '.join(self.parts)} differ{where}"


@dataclass(frozen=True)
class CodeDiff:
    identical: bool
    functions: tuple[FunctionDifference, ...]
    module: tuple[str, ...] = ()  # module facts that differ

    def summary(self) -> str:
        if self.identical:
            return "identical machine code"
        parts = [d.describe() for d in self.functions] + [f"module {m} differs" for m in self.module]
        return "; ".join(parts)


def machine_code(cubin: bytes) -> CubinCode:
    """The identity of a CUBIN. ElfProblem when the bytes are not a CUBIN this reader understands."""
    elf = parse(cubin)
    if elf.machine != EM_CUDA:
        raise ElfProblem(f"not a CUBIN (ELF machine {elf.machine})")
    symbols = elf.symbols()
    names = [s.name for s in symbols]

    def symbol_name(index: int) -> str:
        if not 0 <= index < len(names):
            raise ElfProblem(f"symbol index {index} outside the symbol table")
        return names[index]

    functions: dict[str, list[tuple[str, str]]] = {}
    texts: dict[str, bytes] = {}
    for section in elf.sections:
        if section.name.startswith(".text."):
            name = section.name[len(".text.") :]
            texts[name] = elf.contents(section)
            # sh_info's low bits index the symbol table (order, not code); its top byte held the
            # register count in older CUBINs.
            functions[name] = [("section flags", f"{section.flags:#x}"), ("info registers", str(section.info >> 24))]
    module: list[tuple[str, str]] = [_header(elf)]
    for symbol in symbols:
        if symbol.name in functions:
            functions[symbol.name] += [("symbol size", str(symbol.size)), ("symbol other", f"{symbol.other:#x}")]
    for section in elf.sections:
        name = section.name
        if name == ".nv.info":
            for attr, value in _records(elf.contents(section)):
                if len(value) == PER_SYMBOL_RECORD_BYTES:
                    index, amount = struct.unpack("<II", value)
                    target = symbol_name(index)
                    facts = functions.get(target, module)
                    facts.append((f"attribute {attr:#04x}", f"{target}={amount}"))
                else:
                    module.append((f"attribute {attr:#04x}", value.hex()))
        elif name.startswith(".nv.info."):
            owner = functions.setdefault(name[len(".nv.info.") :], [])
            for attr, value in _records(elf.contents(section)):
                if attr == EIATTR_PARAM_CBANK and len(value) >= 4:
                    (index,) = struct.unpack_from("<I", value)
                    value_text = f"{symbol_name(index)}+{value[4:].hex()}"
                else:
                    value_text = value.hex()
                owner.append((f"attribute {attr:#04x}", value_text))
        elif name == ".nv.compat":
            module += [(f"compat {attr:#04x}", value.hex()) for attr, value in _records(elf.contents(section))]
        elif section.type in (SHT_RELA, SHT_REL) and not _DESCRIPTIVE.match(name):
            # relocations patch the code (.rela.text.<name>) or a constant bank's address table
            # (.rela.nv.constant4): both decide which symbol an instruction reaches
            m = _RELOCATIONS.match(name)
            owner = functions.setdefault(m.group(1), []) if m is not None else module
            what = "relocation" if m is not None else f"relocation in {name.split('.', 2)[-1]}"
            owner += [(what, r) for r in _relocations(elf, section, symbol_name)]
        elif (m := _CONSTANT_BANK.match(name)) is not None:
            bank, fn = m.group(1), m.group(2)
            owner = module if fn is None else functions.setdefault(fn, [])
            # bank 0 is the parameter bank the driver fills: its size is the layout
            keep_bytes = bank != "0" and section.type != SHT_NOBITS
            owner.append(
                (f"constant bank {bank}", elf.contents(section).hex() if keep_bytes else f"{section.size} bytes")
            )
        elif name.startswith((".nv.shared.", ".nv.local.")) and not name.startswith(".nv.shared.reserved"):
            kind, fn = name[len(".nv.") :].split(".", 1)
            functions.setdefault(fn, []).append((f"{kind} memory", f"{section.size} bytes"))
        elif name in (".nv.global.init", ".nv.global"):
            contents = elf.contents(section).hex() if section.type != SHT_NOBITS else ""
            module.append((name, f"{section.size} bytes {contents}"))
    code = {
        name: FunctionCode(name, texts.get(name, b""), tuple(sorted(facts)))
        for name, facts in functions.items()
        if name in texts  # a .nv.info or relocation section of a function without code is no function
    }
    return CubinCode(sm=_sm(elf), functions=code, module=tuple(sorted(module)))


# st_other bit of a kernel (an entry point the driver launches), CUDA's STO_CUDA_ENTRY
ENTRY = 0x10
# e_flags bits 24-31 changed with -lineinfo alone (0x06 -> 0x09 under NVRTC 13) while every
# instruction stayed the same; the SM, the virtual SM and the address-size flags are below them
FLAGS_THAT_DESCRIBE = 0xFF000000
_TARGET = re.compile(r"^0x[0-9a-f]+ type \d+ (.+?)[+-]\d+$")


@dataclass(frozen=True)
class LaunchedFunction:
    """What one launch executes: the kernel and every function its identity holds."""

    name: str  # the kernel as launched (its lowered name)
    digest: str
    functions: tuple[str, ...]  # the kernel first, then the others, by name


def launched(code: CubinCode, name: str) -> LaunchedFunction:
    """The identity of what launching `name` can execute, not of the whole module: the kernel's
    own code and facts, every function its relocations reach (transitively), every function of the
    module that is not a kernel (a device function may be called without a relocation left in the
    CUBIN, so any of them counts), and the module's facts (constant banks, globals, compat
    attributes, the ELF header less FLAGS_THAT_DESCRIBE). Other kernels of the module are left
    out: a kernel cannot call another kernel except by a launch, which is a relocation. So the
    free A/A survives a module with different unrelated kernels or line information, and two
    different kernels of one module are never "identical". ElfProblem when the module lacks it."""
    if name not in code.functions:
        raise ElfProblem(f"the CUBIN defines no function {name!r}")
    held, todo = {name}, [name]
    while todo:
        for what, value in code.functions[todo.pop()].facts:
            m = _TARGET.match(value) if what == "relocation" else None
            if m is not None and m.group(1) in code.functions and m.group(1) not in held:
                held.add(m.group(1))
                todo.append(m.group(1))
    held |= {n for n, fn in code.functions.items() if not _is_entry(fn)}
    ordered = (name, *sorted(held - {name}))
    module = [(w, _described(v) if w == "elf header" else v) for w, v in code.module]
    body = {"module": module, "functions": [[n, code.functions[n].digest] for n in ordered]}
    return LaunchedFunction(name, hashlib.sha256(json.dumps(body).encode()).hexdigest(), ordered)


def sequence_digest(digests: list[str]) -> str:
    """One arm's digest of what it launches, launch by launch in order: equal for two arms exactly
    when they launch the same number of functions and each pair is identical."""
    return hashlib.sha256(json.dumps(digests).encode()).hexdigest()


def _is_entry(fn: FunctionCode) -> bool:
    return any(w == "symbol other" and int(v, 16) & ENTRY for w, v in fn.facts)


def _described(header: str) -> str:
    return re.sub(r"flags 0x([0-9a-f]+)", lambda m: f"flags {int(m.group(1), 16) & ~FLAGS_THAT_DESCRIBE:#x}", header)


def merged(codes: list[CubinCode]) -> CubinCode:
    """The CUBINs of one library for one architecture as one identity: nvcc embeds one per
    translation unit plus the device link's. A name defined in two of them (a `static` function
    in two files) is told apart by the order of appearance."""
    functions: dict[str, FunctionCode] = {}
    module: list[tuple[str, str]] = []
    for code in codes:
        module += code.module
        for name, fn in code.functions.items():
            key, n = name, 1
            while key in functions:
                n += 1
                key = f"{name} ({n})"
            functions[key] = fn
    sms = {c.sm for c in codes}
    return CubinCode(sm=sms.pop() if len(sms) == 1 else None, functions=functions, module=tuple(sorted(module)))


def _header(elf: Elf) -> tuple[str, str]:
    return ("elf header", f"class {64 if elf.is64 else 32} machine {elf.machine} flags {_e_flags(elf):#x}")


def _e_flags(elf: Elf) -> int:
    (flags,) = struct.unpack_from(elf.endian + "I", elf.data, 48 if elf.is64 else 36)
    return flags


def _sm(elf: Elf) -> int | None:
    """The SM version the CUBIN targets. CUDA 12.8+ headers keep it in e_flags bits 8-15; older
    ones in bits 0-7."""
    flags = _e_flags(elf)
    for sm in ((flags >> 8) & 0xFF, flags & 0xFF):
        if 20 <= sm <= 200:
            return sm
    return None


def _relocations(elf: Elf, section, symbol_name) -> list[str]:
    rela = section.name.startswith(".rela")
    if elf.is64:
        fmt = elf.endian + ("QQq" if rela else "QQ")
    else:
        fmt = elf.endian + ("IIi" if rela else "II")
    size = struct.calcsize(fmt)
    data = elf.contents(section)
    if len(data) % size:
        raise ElfProblem(f"{section.name} is not a whole number of relocations")
    out = []
    for start in range(0, len(data), size):
        fields = struct.unpack_from(fmt, data, start)
        offset, info = fields[0], fields[1]
        addend = fields[2] if rela else 0
        sym, kind = (info >> 32, info & 0xFFFFFFFF) if elf.is64 else (info >> 8, info & 0xFF)
        out.append((offset, f"{offset:#x} type {kind} {symbol_name(sym)}{addend:+d}"))
    return [text for _, text in sorted(out)]


def compare(a: CubinCode, b: CubinCode, labels: tuple[str, str] = ("a", "b")) -> CodeDiff:
    diffs = []
    for name in sorted(set(a.functions) | set(b.functions)):
        fa, fb = a.functions.get(name), b.functions.get(name)
        if fa is None or fb is None:
            diffs.append(FunctionDifference(name, f"only in {labels[1] if fa is None else labels[0]}"))
            continue
        if fa.digest == fb.digest:
            continue
        parts = []
        first = None
        if fa.text != fb.text:
            parts.append("instructions")
            first = first_difference(fa.text, fb.text, a.sm)
        da, db = dict(_grouped(fa.facts)), dict(_grouped(fb.facts))
        parts += sorted(k for k in set(da) | set(db) if da.get(k) != db.get(k))
        diffs.append(FunctionDifference(name, "differs", tuple(parts), first))
    ma, mb = dict(_grouped(a.module)), dict(_grouped(b.module))
    module = tuple(sorted(k for k in set(ma) | set(mb) if ma.get(k) != mb.get(k)))
    return CodeDiff(identical=not diffs and not module, functions=tuple(diffs), module=module)


def _grouped(facts) -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for what, value in facts:
        out.setdefault(what, []).append(value)
    return {k: tuple(v) for k, v in out.items()}


def first_difference(a: bytes, b: bytes, sm: int | None) -> int:
    """Byte offset of the first instruction whose bytes differ (or where the shorter one ends)."""
    width = INSTRUCTION_BYTES_SM70 if sm is None or sm >= 70 else 8
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return at - at % width


_NVDISASM_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def _text_section(listing: str, function: str) -> str:
    """The part of an nvdisasm listing under the `.text.<function>` header, up to the next header."""
    header = re.compile(r"^//-+ \.text\." + re.escape(function) + r"\s+-+$", re.M)
    found = header.search(listing)
    if found is None:
        return ""
    following = re.compile(r"^//-+ ", re.M).search(listing, found.end())
    return listing[found.end() : following.start() if following else len(listing)]


def first_instructions(cubin: bytes, function: str, offset: int, tool: str | None = None) -> str | None:
    """The instruction at `offset` of `function` as `nvdisasm` prints it; None without the tool
    or when it cannot say (the comparison itself never depends on this)."""
    tool = tool or shutil.which("nvdisasm")
    if tool is None:
        return None
    with tempfile.TemporaryDirectory(prefix="qualify-sass-") as folder:
        path = Path(folder) / "code.cubin"
        path.write_bytes(cubin)
        try:
            # nvdisasm's -fun takes symbol indices, not names: the whole CUBIN is listed and only
            # the function's own .text section is read
            done = subprocess.run([tool, str(path)], capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
    if done.returncode != 0:
        return None
    for m in _NVDISASM_LINE.finditer(_text_section(done.stdout, function)):
        if int(m.group(1), 16) == offset:
            return " ".join(m.group(2).split())
    return None
