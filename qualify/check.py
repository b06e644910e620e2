"""`qualify plan check`: everything qualify can establish about a plan without a GPU.

Validates and resolves the plan, computes its digest, compares it with the lock when frozen, and
compiles both arms for every declared architecture. Returns data; `qualify.render.terminal` shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from qualify.build.arms import FitRow, compile_arms, shared_memory_fit
from qualify.build.nvrtc import CompiledKernel, nvrtc_version
from qualify.errors import PlanError
from qualify.plan.digest import verify_frozen
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
    return PlanCheck(
        loaded=loaded,
        frozen=loaded.lock is not None,
        archs=chosen,
        nvrtc=nvrtc_version() if compile else None,
        compiled=compiled,
        fits=shared_memory_fit(loaded, compiled),
    )
