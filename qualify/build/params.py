"""A kernel's parameter list as compiled, read from its CUBIN, and the launch check built on it.

NVRTC reports no parameter list, but the CUBIN carries one for the driver: the section
`.nv.info.<lowered name>` holds EIATTR_KPARAM_INFO records (ordinal, offset in the constant bank,
size) and EIATTR_CBANK_PARAM_SIZE (the whole parameter block). `cuobjdump` prints the same records;
reading them here needs no toolkit and no GPU, so `plan check` can refuse a launch whose arguments
do not match the kernel it will call (three arguments for four parameters, an `i64` for an `int`)
before the plan reaches a GPU host, where it would fail or write out of bounds.

The record layout is not documented by NVIDIA. The parser therefore checks what it reads: ordinals
cover 0..n-1 exactly once and every parameter ends inside the parameter block. Anything else is
refused as unreadable rather than guessed; tests/test_launch_params.py compiles kernels with
NVRTC and checks the decoded sizes against their declarations.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from qualify.build.elf import ElfProblem, parse

# .nv.info record formats: the value is absent (NVAL), a byte (BVAL), a half word (HVAL), or
# sized (SVAL: a u16 length, then that many bytes). Non-sized records occupy four bytes in all.
EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4
EIATTR_KPARAM_INFO = 0x17
EIATTR_CBANK_PARAM_SIZE = 0x19

# What each plan argument occupies in the parameter block: pointers are 64-bit on every host
# CUDA 13 supports.
ARG_BYTES = {"buffer": 8, "ptr": 8, "i32": 4, "u32": 4, "f32": 4, "i64": 8, "u64": 8, "f64": 8}


@dataclass(frozen=True)
class KernelParam:
    ordinal: int
    offset: int  # bytes into the parameter block
    size: int  # bytes


def _records(info: bytes):
    at = 0
    while at + 4 <= len(info):
        fmt, attr = info[at], info[at + 1]
        if fmt == EIFMT_SVAL:
            (size,) = struct.unpack_from("<H", info, at + 2)
            if at + 4 + size > len(info):
                raise ElfProblem(f"attribute {attr:#x} runs past the end of its section")
            yield attr, info[at + 4 : at + 4 + size]
            at += 4 + size
        elif fmt in (EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL):
            yield attr, info[at + 2 : at + 4]
            at += 4
        else:
            raise ElfProblem(f"unknown attribute format {fmt:#x} at byte {at}")
    if at != len(info):
        raise ElfProblem("the section ends inside an attribute")


def kernel_params(cubin: bytes, lowered_name: str) -> list[KernelParam]:
    """The compiled parameters of `lowered_name`, in declaration order. ElfProblem if unreadable."""
    elf = parse(cubin)
    section = elf.section(f".nv.info.{lowered_name}")
    if section is None:
        raise ElfProblem(f"the CUBIN has no .nv.info section for {lowered_name}")
    return params_from_info(elf.contents(section))


def params_from_info(info: bytes) -> list[KernelParam]:
    """Decode one kernel's .nv.info section and check that what it says is self-consistent."""
    params: dict[int, KernelParam] = {}
    block_size = None
    for attr, value in _records(info):
        if attr == EIATTR_KPARAM_INFO:
            if len(value) < 12:
                raise ElfProblem("a parameter record shorter than 12 bytes")
            _, ordinal, offset, flags = struct.unpack_from("<IHHI", value)
            size = (flags >> 18) & 0x3FFF  # bits 18-31: the parameter's size in bytes
            if ordinal in params:
                raise ElfProblem(f"parameter {ordinal} is described twice")
            params[ordinal] = KernelParam(ordinal, offset, size)
        elif attr == EIATTR_CBANK_PARAM_SIZE:
            (block_size,) = struct.unpack_from("<H", value)
    ordered = [params[k] for k in sorted(params)]
    if [p.ordinal for p in ordered] != list(range(len(ordered))):
        raise ElfProblem(f"parameter ordinals {sorted(params)} are not 0..{len(params) - 1}")
    for p in ordered:
        if p.size == 0 or (block_size is not None and p.offset + p.size > block_size):
            raise ElfProblem(
                f"parameter {p.ordinal} (offset {p.offset}, size {p.size}) lies outside "
                f"the {block_size}-byte parameter block"
            )
    return ordered


@dataclass(frozen=True)
class LaunchMismatch:
    side: str
    arch: str
    kernel: str
    field: str  # the plan field at fault
    planned: list[int]  # bytes per argument, as the plan gives them
    compiled: list[int]  # bytes per parameter, as compiled

    def message(self) -> str:
        what = (
            f"{len(self.planned)} arguments for {len(self.compiled)} parameters"
            if len(self.planned) != len(self.compiled)
            else "argument sizes differ from the parameters'"
        )
        return (
            f"{what} of {self.kernel} ({self.side} arm, {self.arch}): the plan passes bytes "
            f"[{', '.join(map(str, self.planned))}], the compiled kernel takes "
            f"[{', '.join(map(str, self.compiled))}]"
        )


def planned_sizes(args) -> list[int]:
    return [ARG_BYTES[a.kind] for a in args]


def launch_mismatch(
    side: str, arch: str, kernel: str, args, params: list[KernelParam], field: str = "workload.launch.args"
) -> LaunchMismatch | None:
    """Compare a launch's arguments (the plan's `field`) with the compiled parameters (count,
    then bytes each).

    Only sizes can be compared: the CUBIN does not say whether four bytes hold an int or a float.
    """
    planned = planned_sizes(args)
    compiled = [p.size for p in params]
    if planned == compiled:
        return None
    if len(planned) == len(compiled):
        k = next(i for i, (a, b) in enumerate(zip(planned, compiled)) if a != b)
        field = f"{field}[{k}]"
    return LaunchMismatch(side, arch, kernel, field, planned, compiled)


def check_launches(loaded, compiled) -> None:
    """`plan check`: refuse the first CUDA arm whose launch does not match its compiled kernel.

    Checked per architecture, since a source may declare its kernel differently under
    `__CUDA_ARCH__`. PlanError names the field, the arm, the architecture and both lists.
    """
    from qualify.build.arms import parse_label
    from qualify.errors import PlanError, ToolError

    for (label, arch), kernel in sorted(compiled.items()):
        side, index = parse_label(label)
        if index is None:
            launch, field, kernel_field = loaded.plan.workload.launch, "workload.launch.args", f"arms.{side}.kernel"
        else:
            launch = loaded.plan.arm(side).launches[index]
            field, kernel_field = f"arms.{label}.args", f"arms.{label}.kernel"
        if launch is None:
            continue
        try:
            params = kernel_params(kernel.cubin, kernel.lowered_name)
        except ElfProblem as exc:
            raise ToolError(
                f"cannot read {kernel.spec.kernel}'s parameter list from its {arch} CUBIN: {exc}",
                file=loaded.path,
                field=kernel_field,
            ) from None
        mismatch = launch_mismatch(label, arch, kernel.spec.kernel, launch.args, params, field)
        if mismatch is not None:
            raise PlanError(mismatch.message(), file=loaded.path, field=mismatch.field)
