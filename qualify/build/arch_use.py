"""Whether an arch-specific target (`sm_90a`, `sm_100f`) is used for anything its base lacks.

An 'a' target runs only on its exact compute capability ('f' on its family): choosing one narrows
the devices a plan can run on, which pays only when the kernel uses what the target adds (wgmma,
setmaxnreg, tcgen05 ...). NVRTC keeps no PTX to search for those instructions, so the test is the
outcome: each kernel is compiled again for the base architecture (`sm_90`), and when every kernel
compiles there to the same instructions and attributes (`qualify.build.machine_code`), nothing
arch-specific reached the machine code. A source that fails to compile for the base, or compiles
to other code (a feature behind `__CUDA_ARCH_FEAT_SM90_ALL`), uses the target.
"""

from __future__ import annotations

from dataclasses import replace

from qualify.build.elf import ElfProblem
from qualify.build.machine_code import machine_code
from qualify.build.nvrtc import CompiledKernel, compile_kernel
from qualify.errors import BuildError


def _same_code(kernel: CompiledKernel, base_arch: str) -> bool:
    try:
        plain = compile_kernel(replace(kernel.spec, arch=base_arch))
        specific = machine_code(kernel.cubin).functions.get(kernel.lowered_name)
        general = machine_code(plain.cubin).functions.get(plain.lowered_name)
    except (BuildError, ElfProblem):
        return False
    return (
        specific is not None
        and general is not None
        and (specific.text, specific.facts)
        == (
            general.text,
            general.facts,
        )
    )


def unused_targets(compiled: dict[tuple[str, str], CompiledKernel]) -> list[str]:
    """One note per arch-specific target of `compiled` ({(label, arch): kernel}) whose every
    kernel compiles to the same machine code for the base architecture."""
    by_arch: dict[str, list[CompiledKernel]] = {}
    for (_, arch), kernel in sorted(compiled.items()):
        if arch[-1] in "af":
            by_arch.setdefault(arch, []).append(kernel)
    notes = []
    for arch, kernels in by_arch.items():
        base = arch[:-1]
        if all(_same_code(kernel, base) for kernel in kernels):
            names = ", ".join(sorted({k.spec.kernel for k in kernels}))
            notes.append(
                f"{arch}: {names} compile to the same machine code for {base}; nothing arch-specific "
                f"(wgmma, setmaxnreg, tcgen05) is used, and {arch} code runs on fewer devices than {base}"
            )
    return notes
