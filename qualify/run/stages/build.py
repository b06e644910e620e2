"""Build and load: each arm compiled by NVRTC (or its shared library opened) and loaded on the
device, then both arms' machine code compared."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from qualify.build.nvrtc import CompiledKernel
from qualify.plan.load import LoadedPlan
from qualify.plan.model import ARM_SIDES, LibraryArm, PythonArm
from qualify.plan.model.hardware import target_for
from qualify.results.model import CodeIdentity, LibraryInfo
from qualify.run import code_identity, python_arm
from qualify.run.arms import compile_and_load
from qualify.run.stages import libraries
from qualify.run.stages.where import watch


@dataclass(frozen=True)
class Built:
    kernels: Mapping[str, object]  # side -> the device's kernel or a library's entry point
    code: CodeIdentity  # both arms' machine code compared


def build_and_load(
    loaded: LoadedPlan,
    device,
    given_libraries: Mapping[str, Path],
    found_libraries: dict[str, LibraryInfo],
    found_python: dict | None = None,
) -> Built:
    """Both arms ready to launch. A library arm's facts go into `found_libraries` as soon as it is
    open, so a trial that fails on the other arm still records which build it compared; a Python
    arm's entry goes into `found_python` (its facts are read when the trial is written: what its
    JIT compiles is known only once it has been called)."""
    arch = device.info.arch
    kernels: dict[str, object] = {}
    compiled: dict[str, CompiledKernel | tuple[CompiledKernel, ...]] = {}
    for side in ARM_SIDES:
        arm = loaded.plan.arm(side)
        with watch(side=side):
            if isinstance(arm, LibraryArm):
                kernels[side], found_libraries[side] = libraries.load(loaded, side, arm, given_libraries)
                continue
            if isinstance(arm, PythonArm):
                kernels[side] = python_arm.load(loaded, side, device.python_runtime())
                if found_python is not None:
                    found_python[side] = kernels[side]
                continue
            compiled[side], kernels[side] = compile_and_load(device, loaded, side, loaded.cases)
    return Built(kernels, _code_identity(loaded, compiled, found_libraries, arch))


def _code_identity(
    loaded: LoadedPlan,
    compiled: Mapping[str, CompiledKernel | tuple[CompiledKernel, ...]],
    found_libraries: Mapping[str, LibraryInfo],
    arch: str,
) -> CodeIdentity:
    """Both arms' machine code compared once the arms are built and loaded; never fatal."""
    # NVRTC arms' code is the plan's exact target for this device (sm_90a where the plan asks for
    # it), never the device's name; a library's is the fat binary's entry for the device
    target = target_for(loaded.plan.hardware.architectures, arch) or arch
    if any(isinstance(loaded.plan.arm(side), PythonArm) for side in ARM_SIDES):
        # compared when the trial is written (stages/finish.py): a JIT compiles on the first call
        return code_identity.unknown(arch, "python", "a Python arm's code is known once its JIT has run")
    try:
        if len(compiled) == len(ARM_SIDES):
            # an arm with its own launches is compared launch by launch; its code is the target's
            # whichever launch names it
            first = compiled["base"][0] if isinstance(compiled["base"], tuple) else compiled["base"]
            return code_identity.nvrtc(compiled["base"], compiled["candidate"], loaded.cases, first.spec.arch)
        if len(found_libraries) == len(ARM_SIDES):
            paths = [Path(found_libraries[side].path) for side in ARM_SIDES]
            return code_identity.library(*paths, arch)
        return code_identity.unknown(arch, "library", "one arm is a library and the other compiled by NVRTC")
    except (ValueError, struct.error) as exc:  # a malformed binary this reader did not foresee
        return code_identity.unknown(
            target if compiled else arch, "nvrtc" if compiled else "library", f"unreadable device code: {exc}"
        )
