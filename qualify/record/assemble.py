"""Assemble a record's derived files from its evidence: trial files -> results.json -> README.md.

The trial files (and their raw samples) are the evidence; results.json and README.md are derived
from them and may be rewritten at any time. The plan a record was run under is the copy inside the
record folder, bound to the trials by the digest in the copied lock.
"""

from __future__ import annotations

from pathlib import Path

from qualify.errors import FrozenInputChanged, PlanError
from qualify.evaluate.machines import machine_terms
from qualify.evaluate.verdict import pooled_cases, verdict
from qualify.io import atomic_write_text
from qualify.plan.digest import freeze_from_hashes, read_lock
from qualify.plan.load import read_plan_json, validate_plan
from qualify.plan.model import Plan
from qualify.render.readme import render_readme
from qualify.results.model import Results, Trial
from qualify.results.store import Record

PLAN_FILE = "plan.json"
LOCK_FILE = "plan.lock.json"
README_FILE = "README.md"


def load_record_plan(folder: Path) -> tuple[Plan, dict]:
    """The plan copied into a record and its lock, as found (see `plan_mismatch`)."""
    path = Path(folder) / PLAN_FILE
    plan = validate_plan(read_plan_json(path, root=folder), path)
    lock = read_lock(path, root=folder)
    if lock is None:
        raise PlanError(f"no {LOCK_FILE} beside it: the record is not bound to a frozen plan", file=path)
    return plan, lock


def plan_mismatch(plan: Plan, lock: dict) -> tuple[str, str] | None:
    """(file, why) when the plan no longer matches its lock, or None.

    The plan edited after the run shows in its own sha256; a lock whose digest alone was
    changed names the lock instead. A record made before schedule.placement and schedule.order
    existed is bound to its plan as it hashed then: it still re-derives (its samples carry no
    placement and no drawn order, so they are read as the fixed design they ran).
    """
    frozen = freeze_from_hashes(plan, lock["files"])
    if frozen.frozen_before_v3(lock):
        return None
    now, locked = frozen.digest, lock["digest"]
    if frozen.plan_sha256 != lock["plan_sha256"]:
        return PLAN_FILE, f"its digest is {now[:16]}…, the lock says {locked[:16]}…: edited after freezing"
    if now != locked:
        return LOCK_FILE, f"digest {locked[:16]}… is not {now[:16]}…, the digest of its plan and files"
    return None


def read_record_plan(folder: Path) -> tuple[Plan, dict]:
    """The record's plan and lock; refuses a plan or lock changed after freezing (exit 3)."""
    plan, lock = load_record_plan(folder)
    mismatch = plan_mismatch(plan, lock)
    if mismatch:
        raise FrozenInputChanged(mismatch[1], file=Path(folder) / mismatch[0])
    return plan, lock


def derive_results(plan: Plan, lock: dict, trials: list[Trial]) -> Results:
    """Results as the trials imply them, without judging whether they belong together."""
    machines = machine_terms(plan, trials)
    return Results(
        plan_name=plan.name,
        plan_digest=lock["digest"],
        files=dict(lock["files"]),
        trials=list(trials),
        verdict=verdict(plan, trials),
        pooled=pooled_cases(plan, trials),
        # set only where there is one: results.json is written with exclude_unset, so a record
        # of one machine stays byte for byte what it was
        **({"machines": machines} if machines else {}),
    )


def assemble_results(plan: Plan, lock: dict, trials: list[Trial]) -> Results:
    for t in trials:
        # results.json binds every trial to one digest; a trial run under another plan must not
        # be folded in silently (Record.bind refuses it at run time; this guards copied files).
        if t.plan_digest != lock["digest"]:
            raise FrozenInputChanged(
                f"trial {t.index} ran under plan digest {t.plan_digest[:16]}…, "
                f"the record's plan is {lock['digest'][:16]}…"
            )
    return derive_results(plan, lock, trials)


def write_record(record: Record, plan: Plan, lock: dict) -> Results:
    """Derive results.json, README.md and the plots from the record's trial files (each written
    atomically)."""
    from qualify.render.plots import write_plots

    results = assemble_results(plan, lock, record.trials())
    record.write_results(results)
    atomic_write_text(record.folder / README_FILE, render_readme(results, plan), root=record.folder)
    write_plots(record.folder, results, plan)
    return results
