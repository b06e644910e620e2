"""Do both arms run the same machine code? Decided once per trial, before anything is timed.

NVRTC arms: the two CUBINs qualify compiled for the device. Identical code *and* identical
launches (the same kernel, grid, block, shared memory, buffers and arguments in every case) make
the candidate the base by construction: the trial is a free A/A, and the verdict does not claim
a difference (qualify.evaluate.verdict). Timing still runs: its spread is the A/A evidence that
the timer resolves the case, and a trial without samples would leave every statistic and
`report --check` without data.

Library arms: the CUBINs both shared objects embed for the device's architecture. Identical
embedded code is stated, but what an entry point launches (which kernels, which grid) is decided
by host code this comparison does not see. The kernel inventory (CUPTI, after timing) supplies it:
when every traced call of both arms launched the same kernels in the same order with the same
grid, block, registers and shared memory, and both arms wrote the same bytes in every case, the
trial is a free A/A too (`with_traced_launches`). Without a trace the timing is judged as measured.
Host-side work that launches no kernel (a copy, a synchronisation) is not compared: a library
whose change lies only there should not be qualified by this rule, and the record says which
evidence the free A/A rests on.

A comparison that cannot be made (unreadable ELF, zstd without its package) is recorded as
"unknown" with the reason; it never fails the trial.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from qualify.build import machine_code as mc
from qualify.build.elf import ElfProblem
from qualify.build.fatbin import read_cubins
from qualify.build.machine_code import CubinCode, compare, first_instructions, machine_code, merged
from qualify.build.nvrtc import CompiledKernel
from qualify.evaluate.kernels import template_name, traced_launches_match
from qualify.io import UnreadableFile
from qualify.plan.model import ARM_SIDES
from qualify.plan.resolve import ResolvedCase
from qualify.results.model import CodeIdentity, LaunchedCode
from qualify.run.demangle import demangle_all

# nvdisasm only renders the first differing instruction for a reader; the CUDA toolkit's usual home
# is searched when it is not on the PATH (the GPU machine's case).
TOOLKIT_BINS = (Path("/usr/local/cuda/bin/nvdisasm"),)
MAX_DIFFERENCES = 20  # per record: the summary names the first functions, then counts the rest


Arms = CompiledKernel | tuple[CompiledKernel, ...]  # one kernel, or an arm's own launches in order


def _launches(arm: Arms) -> tuple[CompiledKernel, ...]:
    return arm if isinstance(arm, tuple) else (arm,)


def launches_match(base: Arms, candidate: Arms, cases: list[ResolvedCase]) -> bool:
    """Both arms launch the same functions, launch by launch, with the same geometry and arguments
    in every case."""
    if [k.lowered_name for k in _launches(base)] != [k.lowered_name for k in _launches(candidate)]:
        return False
    return all(replace(c.arms["base"], side="") == replace(c.arms["candidate"], side="") for c in cases)


def nvrtc(base: Arms, candidate: Arms, cases: list[ResolvedCase], arch: str) -> CodeIdentity:
    """NVRTC arms compared by the functions each launch executes (machine_code.launched), per
    launch for arms with their own launches: "identical" only when both arms launch as many
    functions and each pair's code is the same, whatever else their modules hold. The modules'
    own differences are listed after the launches' for a reader, and decide nothing."""
    arms: dict[str, tuple[CompiledKernel, ...]] = {"base": _launches(base), "candidate": _launches(candidate)}
    try:
        codes: dict[str, list[CubinCode]] = {side: [machine_code(k.cubin) for k in arms[side]] for side in ARM_SIDES}
        launched: dict[str, list[mc.LaunchedFunction]] = {
            side: [mc.launched(code, k.lowered_name) for code, k in zip(codes[side], arms[side])] for side in ARM_SIDES
        }
    except ElfProblem as exc:
        return CodeIdentity(status="unknown", arms="nvrtc", arch=arch, reason=f"a CUBIN is unreadable: {exc}")
    digests = {side: mc.sequence_digest([f.digest for f in launched[side]]) for side in ARM_SIDES}
    identical = digests["base"] == digests["candidate"]
    lines: list[str] = []
    if not identical:
        lines = _launch_differences(launched, codes)
        if len(arms["base"]) == len(arms["candidate"]) == 1:  # the modules' own differences, for a reader
            raw = ([arms["base"][0].cubin], [arms["candidate"][0].cubin])
            module = _identity(codes["base"][0], codes["candidate"][0], "nvrtc", arch, None, raw)
            lines += [d for d in module.differences if d not in lines]
        lines = _capped(lines)
    held = {n for side in ARM_SIDES for f in launched[side] for n in f.functions}
    _, shown = demangle_all([f.name for side in ARM_SIDES for f in launched[side]])
    return CodeIdentity(
        status="identical" if identical else "differs",
        arms="nvrtc",
        arch=arch,
        digests=digests,
        scope="launched",
        launched={
            side: [
                LaunchedCode(name=f.name, shown=shown.get(f.name), digest=f.digest, functions=list(f.functions))
                for f in launched[side]
            ]
            for side in ARM_SIDES
        },
        functions=len(held),
        differences=lines,
        launches_match=launches_match(base, candidate, cases),
        free_aa=identical and launches_match(base, candidate, cases),
    )


def _launch_differences(launched: Mapping[str, list], codes: Mapping[str, list[CubinCode]]) -> list[str]:
    """Per launch whose code differs: both functions by name and what differs between them."""
    b, c = launched["base"], launched["candidate"]
    _, names = demangle_all([f.name for f in b + c])
    out = []
    for i in range(max(len(b), len(c))):
        where = f"launch {i + 1}" if max(len(b), len(c)) > 1 else "the launched function"
        if i >= len(b) or i >= len(c):
            side, f = ("candidate", c[i]) if i >= len(b) else ("base", b[i])
            out.append(f"{where}: only the {side} arm launches {names[f.name]}")
            continue
        if b[i].digest == c[i].digest:
            continue
        fb, fc = codes["base"][i].functions[b[i].name], codes["candidate"][i].functions[c[i].name]
        nb, nc = len(fb.text) // INSTRUCTION_BYTES, len(fc.text) // INSTRUCTION_BYTES
        if b[i].name != c[i].name:
            out.append(
                f"{where}: base {names[b[i].name]} ↔ candidate {names[c[i].name]}: different functions, "
                f"instructions {nb:,} ↔ {nc:,}"
            )
        elif fb.digest != fc.digest:
            one = mc.CubinCode(None, {fb.name: fb}, ()), mc.CubinCode(None, {fc.name: fc}, ())
            (d,) = compare(*one, labels=ARM_SIDES).functions
            out.append(f"{where}: {names[b[i].name]}: {d.describe().split(': ', 1)[1]}")
        else:
            out.append(
                f"{where}: {names[b[i].name]}: its own code is the same; a function it may call or the module differs"
            )
    return out


def _capped(lines: list[str]) -> list[str]:
    if len(lines) > MAX_DIFFERENCES:
        return lines[:MAX_DIFFERENCES] + [f"... and {len(lines) - MAX_DIFFERENCES} more"]
    return lines


def library(base: Path, candidate: Path, arch: str) -> CodeIdentity:
    """The embedded code of both libraries compared; whether their launches match is left unknown
    here, for the kernel inventory to answer once the trial has traced them (with_traced_launches)."""
    sm = _sm_number(arch)
    codes, raw = [], []
    for side, path in (("base", base), ("candidate", candidate)):
        try:
            found = read_cubins(Path(path), sm)  # mapped, only this arch's entries decoded
        except (ElfProblem, UnreadableFile) as exc:
            why = exc.message if isinstance(exc, UnreadableFile) else str(exc)
            return CodeIdentity(
                status="unknown", arms="library", arch=arch, reason=f"the {side} library's device code: {why}"
            )
        if not found:
            return CodeIdentity(
                status="unknown",
                arms="library",
                arch=arch,
                reason=f"the {side} library embeds no {arch} code (PTX only, or none)",
            )
        raw.append(found)
        try:
            codes.append(merged([machine_code(c) for c in found]))
        except ElfProblem as exc:
            return CodeIdentity(
                status="unknown",
                arms="library",
                arch=arch,
                reason=f"a CUBIN of the {side} library is unreadable: {exc}",
            )
    return _identity(codes[0], codes[1], "library", arch, None, (raw[0], raw[1]))


def python(base: list[bytes], candidate: list[bytes], arch: str) -> CodeIdentity:
    """The cubins two Python arms' JIT wrote (Triton's cache, one folder per arm), compared as a
    library's are: what the Python host code launches, and how, is the inventory's to say."""
    codes = []
    for side, found in (("base", base), ("candidate", candidate)):
        if not found:
            return unknown(
                arch, "python", f"the {side} arm's JIT wrote no cubin to its cache (not Triton, or cached elsewhere)"
            )
        try:
            codes.append(merged([machine_code(c) for c in found]))
        except ElfProblem as exc:
            return unknown(arch, "python", f"a cubin of the {side} arm is unreadable: {exc}")
    return _identity(codes[0], codes[1], "python", arch, None, (base, candidate))


def with_traced_launches(code: CodeIdentity, cases) -> CodeIdentity:
    """Library arms: the inventory's answer to "do the launches match?", where none is given yet."""
    if code.arms not in ("library", "python") or code.launches_match is not None:
        return code
    launches = traced_launches_match(cases)
    if launches is None:
        return code
    return code.model_copy(update={"launches_match": launches, "free_aa": code.status == "identical" and launches})


def unknown(arch: str, arms: str, reason: str) -> CodeIdentity:
    return CodeIdentity(status="unknown", arms=arms, arch=arch, reason=reason)


def _identity(
    a: CubinCode, b: CubinCode, arms: str, arch: str, launches: bool | None, raw: tuple[list[bytes], list[bytes]]
) -> CodeIdentity:
    diff = compare(a, b, labels=ARM_SIDES)
    lines = [d.describe() for d in diff.functions] + [f"module {m} differs" for m in diff.module]
    first = next((d for d in diff.functions if d.first_offset is not None), None)
    if first is not None and first.first_offset is not None:
        offset = first.first_offset
        shown = [_instruction(cubins_, first.name, offset) for cubins_ in raw]
        if all(shown):
            lines.insert(0, f"{first.name} at {offset:#06x}: base {shown[0]} / candidate {shown[1]}")
    lines = _capped(template_pairs(a, b, diff) + lines)
    return CodeIdentity(
        status="identical" if diff.identical else "differs",
        arms=arms,
        arch=arch,
        digests={"base": a.digest, "candidate": b.digest},
        functions=len(set(a.functions) | set(b.functions)),
        differences=lines,
        launches_match=launches,
        free_aa=diff.identical and launches is True,
    )


PAIR = "pair "  # a differences line pairing a template's two instantiations (render.why_text reads it)
INSTRUCTION_BYTES = 16  # every SASS instruction from sm_70 on is 128 bits


def template_pairs(a: CubinCode, b: CubinCode, diff) -> list[str]:
    """Functions only in one arm whose names differ only in template arguments (`fwd<64>` only in
    base, `fwd<128>` only in candidate), paired, with their instruction counts and how many of the
    instructions differ where the counts agree."""
    only = {side: [d.name for d in diff.functions if d.status == f"only in {side}"] for side in ARM_SIDES}
    if not only["base"] or not only["candidate"]:
        return []
    _, names = demangle_all(only["base"] + only["candidate"])
    out = []
    for x in only["base"]:
        y = next((y for y in only["candidate"] if template_name(names[y]) == template_name(names[x])), None)
        if y is None or names[x] == x:
            continue
        tx, ty = a.functions[x].text, b.functions[y].text
        nx, ny = len(tx) // INSTRUCTION_BYTES, len(ty) // INSTRUCTION_BYTES
        text = f"{PAIR}{names[x]} ↔ {names[y]}: instructions {nx:,} ↔ {ny:,}"
        if nx == ny:
            words = range(0, len(tx), INSTRUCTION_BYTES)
            differ = sum(tx[i : i + INSTRUCTION_BYTES] != ty[i : i + INSTRUCTION_BYTES] for i in words)
            text += f", {differ:,} of them different"
        out.append(text)
    return out


def _instruction(found: list[bytes], function: str, offset: int) -> str | None:
    """The instruction nvdisasm prints at `offset` of `function` in whichever CUBIN defines it."""
    for cubin in found:
        try:
            if function in machine_code(cubin).functions:
                return first_instructions(cubin, function, offset, tool=nvdisasm_tool())
        except ElfProblem:
            return None
    return None


def nvdisasm_tool() -> str | None:
    return shutil.which("nvdisasm") or next((str(p) for p in TOOLKIT_BINS if p.is_file()), None)


def _sm_number(arch: str) -> int:
    digits = "".join(ch for ch in arch.removeprefix("sm_") if ch.isdigit())
    return int(digits) if digits else -1
