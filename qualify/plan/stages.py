"""`plan check` in stages, every stage's problems in one run.

A plan is read in stages that depend on one another: the schema (nothing else can be read without
it), the structure the cases resolve through (parameters, buffers, launch references), the
selectors (gates, tolerances, controls, budget), the arguments (every case's sizes and values),
the files, then what needs a loaded plan (inputs, compile, the compiled kernels). Each stage runs
when the stages it needs passed; one that cannot run says which stage it waits on, so a user
fixing four errors does so in one round rather than four, and is never left to think a stage
passed that did not run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

from qualify.errors import Problems, QualifyError
from qualify.plan.checks import selector_problems, structure_problems
from qualify.plan.digest import compute_freeze, read_lock
from qualify.plan.files import PlanFiles, collect_files
from qualify.plan.load import LoadedPlan, read_plan_json, schema_plan
from qualify.plan.model import Plan
from qualify.plan.resolve import ResolvedCase, resolve_cases

# what each stage needs to have passed, and what it checks, in the order they run
NEEDS = {
    "schema": (),
    "structure": ("schema",),
    "selectors": ("schema",),
    "arguments": ("structure",),
    "files": ("schema",),
    "inputs": ("arguments", "files"),
    "compile": ("arguments", "files"),
    "kernels": ("compile",),
}


@dataclass(frozen=True)
class Stage:
    name: str
    problems: tuple[QualifyError, ...] = ()
    skipped: str | None = None  # why the stage did not run; None when it ran

    @property
    def passed(self) -> bool:
        return self.skipped is None and not self.problems


T = TypeVar("T")


def run_stage(name: str, work: Callable[[], T], passes: tuple[type[QualifyError], ...] = ()) -> tuple[Stage, T | None]:
    """(the stage, what `work` returned or None): a QualifyError it raises is the stage's
    problems, every one of them, but for those of a `passes` type, which are raised on (a compile
    that read a header other than the frozen one: the caller checks the plan again, unlocked)."""
    try:
        return Stage(name), work()
    except passes:
        raise
    except QualifyError as exc:
        return Stage(name, tuple(exc.each())), None


def skipped(name: str, stages: list[Stage]) -> Stage | None:
    """The skipped stage `name` if a stage it needs did not pass (or did not run), else None."""
    by_name = {s.name: s for s in stages}
    waiting = [need for need in NEEDS[name] if need not in by_name or not by_name[need].passed]
    if not waiting:
        return None
    return Stage(name, skipped=f"needs the {' and '.join(waiting)} stage{'s' if len(waiting) > 1 else ''} to pass")


class StagedProblems(Problems):
    """Every problem of every stage that ran, and the stages that could not run."""

    def __init__(self, stages: list[Stage]):
        # a field a later stage refuses again (a selector the promises read) is listed once, where
        # it was first found; within a stage every error stays (each arm's, for one field)
        seen: set[tuple[str | None, str | None]] = set()
        kept = []
        for stage in stages:

            def key(e: QualifyError) -> tuple[str | None, str | None]:
                return (e.file, e.field) if e.field else (e.file, e.message)

            fresh = [error for error in stage.problems if key(error) not in seen]  # both arms' stay
            seen.update(key(error) for error in stage.problems)
            kept.append(Stage(stage.name, tuple(fresh), stage.skipped))
        super().__init__([e for stage in kept for e in stage.problems])
        self.kept: list[Stage] = kept
        self.stages = kept

    def notes(self) -> list[str]:
        """A line naming the stages that could not run and why, then the summary ('4 errors in
        3 stages')."""
        failed = [s for s in self.kept if s.problems]
        waiting = [s.name for s in self.kept if s.skipped and s.skipped.startswith("needs")]
        lines = []
        if waiting:
            lines.append(
                f"not checked: {', '.join(waiting)}: they need the stages that failed "
                f"({', '.join(s.name for s in failed)}) to pass first"
            )
        count = sum(len(s.problems) for s in failed)
        summary = (
            f"{count} error{'s' if count != 1 else ''} in {len(failed)} stage{'s' if len(failed) != 1 else ''} "
            f"({', '.join(s.name for s in failed)})"
        )
        if waiting:
            summary += f"; {len(waiting)} stage{'s' if len(waiting) != 1 else ''} not checked"
        # one error with every stage checked needs no summary: its line says it all
        return [*lines, summary] if count > 1 or waiting else []


def load_in_stages(path: str | Path) -> tuple[LoadedPlan | None, list[Stage]]:
    """The loaded plan (None when a stage the later ones need failed) and the loading stages,
    run or skipped."""
    path = Path(path)
    stages: list[Stage] = []
    plan: Plan | None
    stage, plan = run_stage("schema", lambda: schema_plan(read_plan_json(path), path))
    stages.append(stage)
    if plan is None:
        later = [skipped(name, stages) for name in list(NEEDS)[1:5]]
        return None, [*stages, *(s for s in later if s is not None)]
    file = str(path)
    stages.append(Stage("structure", tuple(structure_problems(plan, file))))
    stages.append(Stage("selectors", tuple(selector_problems(plan, file))))
    cases: list[ResolvedCase] | None = None
    waiting = skipped("arguments", stages)
    if waiting is None:
        stage, cases = run_stage("arguments", lambda: resolve_cases(plan, file))
        stages.append(stage)
    else:
        stages.append(waiting)
    lock: dict[str, Any] | None = None

    def files_of() -> PlanFiles:
        nonlocal lock
        lock = read_lock(path.resolve())
        return collect_files(plan, path, tuple(lock["files"]) if lock else ())

    files: PlanFiles | None
    stage, files = run_stage("files", files_of)
    stages.append(stage)
    if cases is None or files is None:
        return None, stages
    # a plan whose selectors failed still loads: nothing later reads them
    loaded = LoadedPlan(
        path=path.resolve(), plan=plan, files=files, cases=cases, freeze=compute_freeze(plan, files), lock=lock
    )
    return loaded, stages


def staged_error(stages: list[Stage]) -> QualifyError:
    """What a check that ran `stages` raises: a lone error as itself (its type is what callers
    and their tests catch: a BuildError stays one), several as StagedProblems; either carries the
    stages (`stages`) and the lines to print after the errors (`stage_notes`)."""
    problems = StagedProblems(stages)
    errors = problems.each()
    if len(errors) != 1:
        problems.stage_notes = problems.notes()
        return problems
    one = errors[0]
    one.stages = problems.stages
    one.stage_notes = problems.notes()
    return one


def stages_of(error: QualifyError) -> list[Stage] | None:
    """The stages a check that raised `error` ran, or None when it did not come from one."""
    return error.stages
