"""`qualify plan check`: everything qualify can establish about a plan without a GPU.

Validates and resolves the plan, computes its digest, compares it with the lock when frozen, and
compiles both arms for every declared architecture. Returns data; `qualify.render.terminal` shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from qualify.build.arms import FitRow, compile_arms, headers_read, shared_memory_fit
from qualify.build.nvrtc import CompiledKernel, cccl_version, compile_sandbox, nvrtc_version
from qualify.build.params import check_launches
from qualify.commands.libcheck import check_plan_libraries
from qualify.errors import PlanError
from qualify.plan.digest import compute_freeze, freeze, verify_frozen
from qualify.plan.files import PlanFiles
from qualify.plan.golden import load_golden
from qualify.plan.load import LoadedPlan, load_plan


@dataclass(frozen=True)
class PlanCheck:
    loaded: LoadedPlan
    frozen: bool
    archs: list[str]
    nvrtc: str | None
    compiled: dict[tuple[str, str], CompiledKernel]
    fits: list[FitRow]
    cccl: str | None = None  # the CCCL version kernels compiled against
    sandbox: str | None = None  # how NVRTC was confined (compile_sandbox)

    @property
    def ok(self) -> bool:
        return all(row.fits for row in self.fits)


def check_plan(path: str | Path, archs: list[str] | None = None, compile: bool = True) -> PlanCheck:
    loaded = load_plan(path)
    if loaded.lock is not None:
        verify_frozen(loaded.path, loaded.freeze, loaded.lock)
    if loaded.plan.acceptance.fidelity.golden is not None:
        # provenance and every tensor are checked on the CPU, before any device is involved
        load_golden(loaded.plan, loaded.path, loaded.files.root, loaded.cases)
    declared = loaded.plan.hardware.architectures
    chosen = archs or declared
    for arch in chosen:
        if arch not in declared:
            raise PlanError(
                f"--arch {arch} is not among the plan's architectures ({', '.join(declared)})",
                file=loaded.path,
                field="hardware.architectures",
            )
    compiled = compile_arms(loaded, chosen) if compile else {}
    check_launches(loaded, compiled)
    if compile:  # --no-compile validates the plan alone; the artifacts' checks come with the build
        check_plan_libraries(loaded)
    return PlanCheck(
        loaded=loaded,
        frozen=loaded.lock is not None,
        archs=chosen,
        nvrtc=nvrtc_version() if compile else None,
        compiled=compiled,
        fits=shared_memory_fit(loaded, compiled),
        cccl=cccl_version() if compile else None,
        sandbox=compile_sandbox() if compile else None,
    )


def freeze_plan(path: str | Path) -> tuple[LoadedPlan, Path, bool, str]:
    """`qualify plan freeze`: write the lock; returns (loaded, lock path, written, digest).

    The lock binds what NVRTC reads, not what a scan of the sources guesses: every CUDA arm is
    compiled for every declared architecture (and the candidate under each build control) and
    each header NVRTC reports inside the repository joins the plan's files. An existing lock is
    verified, never overwritten.
    """
    loaded = load_plan(path)
    if loaded.lock is not None:
        lock_file, written = freeze(loaded.path, loaded.freeze)
        return loaded, lock_file, written, loaded.digest
    every = {**loaded.files.files, **headers_read(loaded)}
    files = PlanFiles(root=loaded.files.root, files=dict(sorted(every.items())))
    current = compute_freeze(loaded.plan, files)
    lock_file, written = freeze(loaded.path, current)
    return loaded, lock_file, written, current.digest
