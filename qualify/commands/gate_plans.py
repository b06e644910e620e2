"""The plans a regression gate measures: one per arm the protocol names, the arm at the base
revision as the plan's base and the same arm in the working tree as its candidate.

A derived plan is the working tree's plan (its workload, schedule, seeds, fidelity and gate
policy) with the two arms replaced, its speed gates, sanitizer checks and negative controls left
out (they judge the protocol's own comparison, not a revision against its base) and a fidelity miss
not stopping the trial (changed bytes are one case's finding), written beside
the working tree's plan in the gate's private tree and frozen there like any plan. The arms
therefore run under the same machinery as any protocol: ABBA blocks, placements, trials as
processes, one runner.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from qualify.errors import PlanError
from qualify.io import atomic_write_text
from qualify.plan.load import LoadedPlan, load_plan
from qualify.plan.model import ARM_SIDES, CudaArm, LibraryArm, Plan, PythonArm

GATE_PLAN = "gate-{side}.plan.json"


@dataclass(frozen=True)
class DerivedPlan:
    side: str
    path: Path
    library: bool  # library arms: the builds are given to the run, as `compare` takes them


def _rebase(path: str, plan_dir: Path, derived_dir: Path) -> str:
    """A path relative to `plan_dir`, made relative to `derived_dir` (lexically; the derived plan's
    own loading confines and resolves it)."""
    return os.path.relpath(os.path.normpath(plan_dir / path), derived_dir)


def _arm_at(plan: Plan, side: str, plan_dir: Path, derived_dir: Path) -> dict:
    arm = plan.arm(side)
    data = arm.model_dump(mode="json")
    if isinstance(arm, CudaArm):
        data["source"] = _rebase(arm.source, plan_dir, derived_dir)
        data["include_dirs"] = [_rebase(d, plan_dir, derived_dir) for d in arm.include_dirs]
    elif isinstance(arm, LibraryArm):
        data["library"] = None  # built by the CI command in each tree and given to the run
    elif isinstance(arm, PythonArm):
        data["callable"] = f"{_rebase(arm.file, plan_dir, derived_dir)}:{arm.function}"
    return data


def derive(rev_plan: Plan, now_plan: Plan, rev_dir: Path, now_dir: Path, side: str, base_label: str) -> dict:
    """The derived plan's JSON: `side` at the base revision against `side` in the working tree."""
    rev_arm, now_arm = rev_plan.arm(side), now_plan.arm(side)
    if type(rev_arm) is not type(now_arm):
        raise PlanError(
            f"the {side} arm is a {rev_arm.kind} arm at the base and a {now_arm.kind} arm now: nothing to compare",
            field=f"arms.{side}.kind",
        )
    data = now_plan.model_dump(mode="json")
    data["name"] = f"{now_plan.name}.gate-{side}"[:80]
    data["revisions"] = {"base": f"{side} arm at {base_label}"[:200], "candidate": f"{side} arm in the working tree"}
    data["arms"] = {
        "base": _arm_at(rev_plan, side, rev_dir, now_dir),
        "candidate": _arm_at(now_plan, side, now_dir, now_dir),
    }
    data["acceptance"] = {**data["acceptance"], "gates": [], "sanitizer": []}
    data["controls"] = {**data["controls"], "negative": []}
    # changed bytes are a finding of each case, not the end of the trial: every case is measured
    data["stop"] = {**data["stop"], "fail_fast": [f for f in data["stop"]["fail_fast"] if f != "fidelity"]}
    return data


def write_derived(
    rev_plan_path: Path, now_plan_path: Path, base_label: str
) -> tuple[list[DerivedPlan], LoadedPlan, LoadedPlan]:
    """One frozen plan per arm beside the working tree's plan; PlanError, BuildError as freezing
    raises them (the protocol cannot be gated as it stands)."""
    from qualify.commands.check import freeze_plan

    rev, now = load_plan(rev_plan_path), load_plan(now_plan_path)
    out = []
    for side in ARM_SIDES:
        data = derive(rev.plan, now.plan, rev_plan_path.parent, now_plan_path.parent, side, base_label)
        path = now_plan_path.parent / GATE_PLAN.format(side=side)
        atomic_write_text(path, json.dumps(data, indent=2) + "\n", root=now_plan_path.parent)
        freeze_plan(path)
        out.append(DerivedPlan(side, path, isinstance(now.plan.arm(side), LibraryArm)))
    return out, rev, now


def cuda_code_identical(loaded: LoadedPlan) -> tuple[bool, str]:
    """Whether a derived plan's two CUDA arms compile to identical machine code with identical
    launches, for every declared architecture; and the reason, in words."""
    from qualify.build.arms import arm_kernels, compile_arms, parse_label
    from qualify.build.elf import ElfProblem
    from qualify.build.machine_code import compare, machine_code

    plan = loaded.plan
    base, cand = plan.arm("base"), plan.arm("candidate")
    assert isinstance(base, CudaArm) and isinstance(cand, CudaArm)
    if base.kernels != cand.kernels:
        return False, f"the kernels differ ({', '.join(base.kernels)} against {', '.join(cand.kernels)})"
    for case in loaded.cases:
        if replace(case.arms["base"], side="") != replace(case.arms["candidate"], side=""):
            return False, f"case {case.id} launches the arms differently (geometry or arguments)"
    archs = list(plan.hardware.architectures)
    compiled = compile_arms(loaded, archs)
    labels = arm_kernels(loaded)
    for arch in archs:
        for label, _ in labels:
            side, index = parse_label(label)
            if side != "base":
                continue
            other = "candidate" if index is None else f"candidate.launches[{index}]"
            a, b = compiled[(label, arch)], compiled[(other, arch)]
            if a.lowered_name != b.lowered_name:
                return False, f"{label} on {arch}: another kernel ({a.lowered_name} against {b.lowered_name})"
            try:
                diff = compare(machine_code(a.cubin), machine_code(b.cubin), ("base", "candidate"))
            except ElfProblem as exc:
                return False, f"{label} on {arch}: a CUBIN is unreadable ({exc})"
            if not diff.identical:
                return False, f"{label} on {arch}: {diff.summary()}"
    return True, f"identical machine code on {', '.join(archs)}"
