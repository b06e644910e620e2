"""`plan check` against what the compiled kernel and its declaration say: argument kinds and the
block size.

The CUBIN gives each parameter's size (`qualify.build.params`, checked before this), not its kind:
an `f32` passed where the kernel takes `int`, an `i32` for an `unsigned`, a `u64` for a pointer
all have the right size. The declaration says the kind; it is read as `plan new` reads it
(`qualify.build.declarations.declared_params`), and a parameter whose type qualify cannot map (a
template parameter, a typedef it does not know) is left to the size check. The block is compared
with the bounds compiled for each architecture (`qualify.build.launch_bounds`). Every mismatch is
reported, naming the argument, the parameter and the arm.

A buffer's dtype is held to the pointee type of the pointer it is passed as (`f8e4m3` to
`const float*` would read four fp8 values as one float, and out of bounds at the end): the element
type, or the element of a CUDA vector type (`float4` -> f32). A kernel that reinterprets bytes on
purpose says so on the argument (`"reinterpret": true`), where a reviewer of the plan sees it;
narrow floats through `unsigned char*`/`uint8_t*` are the byte convention and need no such word.
"""

from __future__ import annotations

import math

from qualify.build.arms import parse_label
from qualify.build.declarations import ELEMENT_TYPES, SCALAR_TYPES, VECTOR_ELEMENT_TYPES, declared_params
from qualify.build.elf import ElfProblem
from qualify.build.launch_bounds import launch_bounds
from qualify.errors import PlanError, ToolError, all_of
from qualify.plan.model import BufferArg, CudaArm


def check_compiled_kernels(loaded, compiled) -> None:
    """Refuse argument kinds that differ from the declared parameters' and blocks the compiled
    launch bounds do not allow; several problems are reported together."""
    problems = kind_problems(loaded) + bounds_problems(loaded, compiled)
    if problems:
        raise all_of(problems)


def _kind(arg) -> str:
    return "buffer" if isinstance(arg, BufferArg) else arg.kind


def _declared_launches(loaded, side: str, arm: CudaArm):
    """(kernel, args, field of the args) of each launch an arm's kernels are declared for."""
    if arm.launches:
        return [(step.kernel, step.args, f"arms.{side}.launches[{i}].args") for i, step in enumerate(arm.launches)]
    launch = loaded.plan.workload.launch
    return [] if launch is None else [(arm.kernel, launch.args, "workload.launch.args")]


def kind_problems(loaded) -> list[PlanError]:
    out: list[PlanError] = []
    for side in ("base", "candidate"):
        arm = loaded.plan.arm(side)
        if not isinstance(arm, CudaArm):
            continue
        try:
            text = (loaded.path.parent / arm.source).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue  # the compile reports an unreadable source
        for kernel, args, field in _declared_launches(loaded, side, arm):
            params = declared_params(text, kernel)
            if params is None or len(params) != len(args):
                continue  # a declaration not found here (a macro, a header) or a count the size check refuses
            dtypes = {b.name: b.dtype for b in (*loaded.plan.workload.buffers, *arm.scratch)}
            for k, (arg, param) in enumerate(zip(args, params)):
                kind = _kind(arg)
                if param.pointer and kind == "buffer":
                    problem = _pointee_problem(arg, param, dtypes.get(arg.name), kernel, side, arm.source)
                    if problem is not None:
                        out.append(PlanError(problem, file=loaded.path, field=f"{field}[{k}]"))
                    continue
                expected: str | None
                if param.pointer:
                    expected = "buffer"
                else:
                    expected = SCALAR_TYPES.get(param.ctype)
                    if expected is None:
                        continue
                if kind != expected:
                    fix = "a buffer argument" if expected == "buffer" else f"kind {expected!r}"
                    out.append(
                        PlanError(
                            f"{kind!r} passed for parameter {param.name!r} ({param.ctype}) of {kernel} "
                            f"({side} arm, declared in {arm.source}); pass {fix}",
                            file=loaded.path,
                            field=f"{field}[{k}]",
                        )
                    )
    return out


def pointee_dtype(ctype: str) -> str | None:
    """The dtype a pointer parameter's elements are declared as (`const float*` -> f32, `float4*`
    -> f32), or None where the declaration does not say (void*, a template parameter, a pointer
    to pointers, a type qualify does not know)."""
    if ctype.count("*") != 1:
        return None
    element = ctype.rstrip("*").strip()
    return ELEMENT_TYPES.get(element) or VECTOR_ELEMENT_TYPES.get(element)


# Byte pointers are how narrow floats travel in code that predates (or avoids) CUDA's fp8/fp6/fp4
# types: one element a byte, as qualify stores them. A one-byte dtype through them is the
# convention, not a reinterpretation.
BYTE_POINTEES = {"u8": ("u8", "f8e4m3", "f8e5m2", "f6e2m3", "f6e3m2", "f4e2m1")}


def _pointee_problem(arg, param, dtype: str | None, kernel: str, side: str, source: str) -> str | None:
    """Why a buffer of `dtype` does not fit the pointer parameter `param`, or None."""
    expected = pointee_dtype(param.ctype)
    if arg.reinterpret or dtype is None or expected is None or expected == dtype:
        return None
    if dtype in BYTE_POINTEES.get(expected, ()):
        return None
    return (
        f"buffer {arg.name!r} is {dtype} but parameter {param.name!r} of {kernel} ({side} arm, declared in "
        f"{source}) points to {param.ctype.rstrip('*').strip()} ({expected}); give the buffer dtype "
        f'{expected!r}, or set "reinterpret": true on this argument if the kernel reads the bytes '
        "as another type on purpose"
    )


def bounds_problems(loaded, compiled) -> list[PlanError]:
    out: list[PlanError] = []
    for (label, arch), kernel in sorted(compiled.items()):
        side, index = parse_label(label)
        try:
            bounds = launch_bounds(kernel.cubin, kernel.lowered_name)
        except ElfProblem as exc:
            raise ToolError(
                f"cannot read {kernel.spec.kernel}'s launch bounds from its {arch} CUBIN: {exc}",
                file=loaded.path,
                field=f"arms.{side}.kernel" if index is None else f"arms.{side}.launches[{index}].kernel",
            ) from None
        for case in loaded.cases:
            arm = case.arms[side]
            launch = arm.launch if index is None else arm.steps[index].launch
            field = "workload.launch.block" if index is None else f"arms.{side}.launches[{index}].block"
            if launch is None:
                continue
            block = tuple(launch.block) + (1,) * (3 - len(launch.block))
            threads = math.prod(block)
            where = f"{kernel.spec.kernel} ({side} arm, {arch})"
            if bounds.max_per_block is not None and threads > bounds.max_per_block:
                out.append(
                    PlanError(
                        f"case {case.id}: a block of {threads} threads exceeds the {bounds.max_per_block} "
                        f"that {where} is compiled for (__launch_bounds__, .maxntid "
                        f"{','.join(map(str, bounds.max_threads))}); the launch would fail",
                        file=loaded.path,
                        field=field,
                    )
                )
                break
            if bounds.required is not None and block != bounds.required:
                out.append(
                    PlanError(
                        f"case {case.id}: block {'x'.join(map(str, block))} is not the "
                        f"{'x'.join(map(str, bounds.required))} that {where} requires (.reqntid)",
                        file=loaded.path,
                        field=field,
                    )
                )
                break
    return out
