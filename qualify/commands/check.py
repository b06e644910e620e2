"""`qualify plan check`: everything qualify can establish about a plan without a GPU.

Validates and resolves the plan, computes its digest, compares it with the lock when frozen, and
compiles both arms for every declared architecture. Returns data; `qualify.render.terminal` shows it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from qualify.build.arch_use import unused_targets
from qualify.build.arms import FitRow, compile_arms, headers_read, shared_memory_fit
from qualify.build.kernel_match import check_compiled_kernels
from qualify.build.libcheck import check_plan_libraries
from qualify.build.nvrtc import CompiledKernel, cccl_version, compile_sandbox, nvrtc_version
from qualify.build.params import check_launches
from qualify.errors import BuildError, FrozenInputChanged, PlanError, QualifyError, all_of
from qualify.plan.digest import compute_freeze, freeze, verify_frozen
from qualify.plan.files import PlanFiles
from qualify.plan.generators import generator_problems
from qualify.plan.golden import load_golden
from qualify.plan.load import LoadedPlan, load_plan
from qualify.plan.promises import check_promises
from qualify.plan.stages import Stage, load_in_stages, run_stage, skipped, staged_error, stages_of


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
    notes: tuple[str, ...] = ()  # what is worth knowing and refuses nothing (an unused arch-specific target)

    @property
    def ok(self) -> bool:
        return all(row.fits for row in self.fits)

    def problems(self) -> list[QualifyError]:
        """What the check refuses once the plan is read and compiled: each arm and architecture
        whose launch needs more shared memory than a block may have (exit 4), one line each."""
        worst: dict[tuple[str, str], list[FitRow]] = {}
        for row in self.fits:
            if not row.fits:
                worst.setdefault((row.side, row.arch), []).append(row)
        out: list[QualifyError] = []
        for (side, arch), rows in worst.items():
            big = max(rows, key=lambda r: r.total_shared_bytes)
            cases = ", ".join(r.case for r in rows)
            out.append(
                BuildError(
                    f"the {side} arm's launch does not fit on {arch}: {big.total_shared_bytes:,} bytes of shared "
                    f"memory per block (dynamic {big.dynamic_shared_bytes:,} plus static) exceed the "
                    f"{big.limit_bytes:,} a block may have, in case(s) {cases}; lower shared_bytes or the "
                    "kernel's static shared memory",
                    file=self.loaded.path,
                    field="workload.launch.shared_bytes",
                )
            )
        return out


def check_plan(path: str | Path, archs: list[str] | None = None, compile: bool = True) -> PlanCheck:
    """`qualify plan check`: every stage's problems at once (`staged_error`: a lone error as
    itself, several as StagedProblems; both name the stages that could not run). A frozen plan that
    changed since its lock is reported after the plan's own problems (so an edit's real error is
    never hidden by "changed")."""
    from qualify.plan.digest import with_remedy

    loaded, stages = load_in_stages(path)
    if loaded is None:
        rest = [skipped(name, stages) for name in ("inputs", "compile", "kernels")]
        raise staged_error([*stages, *(s for s in rest if s is not None)])
    lock_problem: FrozenInputChanged | None = None
    if loaded.lock is not None:
        try:
            verify_frozen(loaded.path, loaded.freeze, loaded.lock)
        except FrozenInputChanged as exc:
            lock_problem = with_remedy(exc)
    lock = [Stage("lock", (lock_problem,))] if lock_problem else []
    try:
        try:
            # a plan that no longer matches its lock is checked as it stands, unlocked
            result = check_loaded(loaded if lock_problem is None else replace(loaded, lock=None), archs, compile)
        except FrozenInputChanged as exc:
            if lock_problem is not None or loaded.lock is None:
                raise
            lock = [Stage("lock", (with_remedy(exc),))]  # NVRTC read a header other than the frozen one
            result = check_loaded(replace(loaded, lock=None), archs, compile)
    except QualifyError as exc:
        later = stages_of(exc)
        if later is None and all(s.passed for s in stages):
            raise all_of([*exc.each(), *(s.problems[0] for s in lock)]) from None
        if later is None:  # an --arch the plan does not list, after a selector the plan got wrong
            later = [Stage("compile", tuple(exc.each()))]
        raise staged_error([*stages, *later, *lock]) from None
    if lock or not all(s.passed for s in stages):
        raise staged_error([*stages, Stage("kernels", tuple(result.problems())), *lock])
    return result


def _input_problems(loaded: LoadedPlan) -> None:
    """What is checked of the inputs on the CPU: the golden's provenance and tensors, the promises,
    and what each generator makes of its dtype."""
    problems: list[QualifyError] = []
    if loaded.plan.acceptance.fidelity.golden is not None:
        try:
            load_golden(loaded.plan, loaded.path, loaded.files.root, loaded.cases)
        except QualifyError as exc:
            problems.extend(exc.each())
    try:
        check_promises(loaded)
    except QualifyError as exc:
        problems.extend(exc.each())
    problems.extend(generator_problems(loaded.plan, loaded.path))
    if problems:
        raise all_of(problems)


def _kernel_problems(loaded: LoadedPlan, compiled, compile: bool) -> None:
    problems: list[QualifyError] = []
    for check in (
        lambda: check_launches(loaded, compiled),
        lambda: check_compiled_kernels(loaded, compiled),
        *([lambda: check_plan_libraries(loaded)] if compile else []),
    ):
        try:
            check()
        except FrozenInputChanged:
            raise
        except QualifyError as exc:
            # an argument whose size the compiled kernel refuses is one error, not also a kind's
            sized = {p.field for p in problems}
            problems.extend(e for e in exc.each() if e.field not in sized)
    if problems:
        raise all_of(problems)


def check_loaded(loaded: LoadedPlan, archs: list[str] | None = None, compile: bool = True) -> PlanCheck:
    """Every check of `plan check` but the lock's, on a loaded plan: raises `staged_error` with
    every refusal of every stage that ran; launches that do not fit are returned in the PlanCheck
    (`problems()`), so the check can show them in its table first."""
    declared = loaded.plan.hardware.architectures
    chosen = archs or declared
    for arch in chosen:
        if arch not in declared:
            raise PlanError(
                f"--arch {arch} is not among the plan's architectures ({', '.join(declared)})",
                file=loaded.path,
                field="hardware.architectures",
            )
    stages: list[Stage] = []
    stage, _ = run_stage("inputs", lambda: _input_problems(loaded))
    stages.append(stage)
    if compile:
        stage, compiled = run_stage("compile", lambda: compile_arms(loaded, chosen), passes=(FrozenInputChanged,))
    else:
        stage, compiled = Stage("compile", skipped="--no-compile"), {}
    stages.append(stage)
    if compiled is None:
        stages.append(skipped("kernels", stages) or Stage("kernels", skipped="needs the compile stage to pass"))
        raise staged_error(stages)
    stage, _ = run_stage("kernels", lambda: _kernel_problems(loaded, compiled, compile), passes=(FrozenInputChanged,))
    stages.append(stage)
    fits = shared_memory_fit(loaded, compiled)
    if not all(s.passed or s.skipped for s in stages):
        check = PlanCheck(loaded=loaded, frozen=False, archs=chosen, nvrtc=None, compiled=compiled, fits=fits)
        stages[-1] = Stage("kernels", (*stages[-1].problems, *check.problems()))
        raise staged_error(stages)
    return PlanCheck(
        loaded=loaded,
        frozen=loaded.lock is not None,
        archs=chosen,
        nvrtc=nvrtc_version() if compile else None,
        compiled=compiled,
        fits=fits,
        cccl=cccl_version() if compile else None,
        sandbox=compile_sandbox() if compile else None,
        notes=tuple(unused_targets(compiled)) if compile else (),
    )


def refuse_unchecked(loaded: LoadedPlan) -> None:
    """Refuse a plan that `plan check` would refuse (the lock aside): `plan freeze` and
    `--replace` before they write a lock, `run` and `compare` before any trial counts."""
    problems = check_loaded(loaded).problems()
    if problems:
        raise all_of(problems)


def freeze_plan(path: str | Path) -> tuple[LoadedPlan, Path, bool, str]:
    """`qualify plan freeze`: write the lock; returns (loaded, lock path, written, digest).

    Only a plan that passes every check of `plan check` is frozen: the checks run first, as on
    the repository (unlocked), and an existing lock is verified after them. The lock binds what
    NVRTC reads, not what a scan of the sources guesses: every CUDA arm is compiled for every
    declared architecture (and the candidate under each build control) and each header NVRTC
    reports inside the repository joins the plan's files. An existing lock is verified, never
    overwritten.
    """
    loaded = load_plan(path)
    refuse_unchecked(replace(loaded, lock=None))
    if loaded.lock is not None:
        lock_file, written = freeze(loaded.path, loaded.freeze)
        return loaded, lock_file, written, loaded.digest
    every = {**loaded.files.files, **headers_read(loaded)}
    files = PlanFiles(root=loaded.files.root, files=dict(sorted(every.items())))
    current = compute_freeze(loaded.plan, files)
    lock_file, written = freeze(loaded.path, current)
    return loaded, lock_file, written, current.digest
