"""Merge records of one plan run separately (other devices, other hosts) into one record.

Trials are renumbered 1..n in source order, then by their index within the source; their files
and raw samples are copied unchanged except for the index and the samples file name (the samples'
sha256 stays, since the bytes do). Ledger events follow their trial with the new index and a
`merged_from` field naming the source, so a trial's origin stays traceable. A trial seen twice
(same device UUID and start time: the same record listed twice, or a copy) is taken once.

Only evidence that checks out is merged: each source must pass the evidence half of `report
--check` (plan, lock, ledger, trial files, raw samples; not its derived results.json and README),
and the merged record must pass it too before it is renamed into place (two records of one device
together may exceed the plan's trial budget). A copied trial file is rewritten (new index, new
samples name), so its end event in the merged ledger records the new file's sha256; the samples
keep theirs.

The merged record is built in a hidden folder beside the destination and renamed into place, so a
failure part way leaves no half-merged record behind.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from qualify.errors import FrozenInputChanged, PlanError, UsageError
from qualify.io import (
    MAX_LOCK_BYTES,
    MAX_NPZ_BYTES,
    MAX_PLAN_BYTES,
    atomic_write_bytes,
    atomic_write_text,
    read_limited,
)
from qualify.plan.digest import sha256_bytes
from qualify.record.assemble import LOCK_FILE, PLAN_FILE, read_record_plan, write_record
from qualify.record.check import check_evidence
from qualify.record.evidence import Problem
from qualify.results.model import Results, Trial
from qualify.results.store import LEDGER, Record


def _identity(record: Record, index: int, trial: Trial | None, started: dict | None) -> tuple:
    """What makes a trial the same trial wherever it was copied."""
    if trial is not None:
        return ("trial", trial.provenance.device.uuid, trial.started_at)
    # a trial started in the ledger that left no trial file (the process died): still a trial,
    # since it counts against the budget, identified by its start event
    at = (started or {}).get("at")
    if at is None:
        return ("ledger", str(record.folder), index)
    return ("ledger", (started or {}).get("device_uuid"), at)


def _trials_of(record: Record) -> list[tuple[int, Trial | None, dict | None]]:
    """(index, trial file or None, trial_started event or None) for every trial the record knows."""
    files = {t.index: t for t in record.trials()}
    started = {e["trial"]: e for e in record.ledger() if e["event"] == "trial_started"}
    return [(i, files.get(i), started.get(i)) for i in sorted(files.keys() | started.keys())]


def merge_records(sources: list[Path], dest: Path) -> Results:
    if not sources:
        raise UsageError("no record to merge")
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise FrozenInputChanged("exists and is not empty; a merge never writes into a record", file=dest)
    records = [Record(Path(s)) for s in sources]
    plan, lock = read_record_plan(records[0].folder)
    for record in records[1:]:
        other = read_record_plan(record.folder)[1]
        if other["digest"] != lock["digest"]:
            raise FrozenInputChanged(
                f"plan digest {other['digest'][:16]}… differs from {records[0].folder}'s "
                f"{lock['digest'][:16]}…; only records of one plan merge",
                file=record.folder / LOCK_FILE,
            )

    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.merge-", dir=dest.parent))
    try:
        out = Record(staging)
        for name, limit in ((PLAN_FILE, MAX_PLAN_BYTES), (LOCK_FILE, MAX_LOCK_BYTES)):
            data = read_limited(records[0].folder / name, limit, root=records[0].folder)
            atomic_write_bytes(staging / name, data, root=staging)
        seen: set[tuple] = set()
        events: list[dict] = []
        new = 0
        for record in records:
            renumber: dict[int, int] = {}
            for index, trial, started in _trials_of(record):
                identity = _identity(record, index, trial, started)
                if identity in seen:
                    continue
                seen.add(identity)
                new += 1
                renumber[index] = new
                if trial is not None:
                    _copy_trial(record, trial, out, new)
            for event in record.ledger():
                if event["trial"] in renumber:
                    origin = {"record": str(record.folder), "trial": event["trial"]}
                    moved = {**event, "trial": renumber[event["trial"]], "merged_from": origin}
                    if event["event"] == "trial_ended":
                        moved.update(out.evidence_hashes(moved["trial"]))
                    events.append(moved)
        for folder in dict.fromkeys(r.folder for r in records):  # a record listed twice is checked once
            _refuse_problems(check_evidence(folder).problems, folder, "")
        # written whole, not through Record.append: the events keep the times they happened at
        atomic_write_text(staging / LEDGER, "".join(json.dumps(e, sort_keys=True) + "\n" for e in events), root=staging)
        _refuse_problems(check_evidence(staging).problems, dest, "the merged record: ")
        results = write_record(out, plan, lock)
        if dest.exists():
            dest.rmdir()  # empty, checked above
        staging.rename(dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return results


def _refuse_problems(problems: list[Problem], where: Path, what: str) -> None:
    if not problems:
        return
    more = f" (and {len(problems) - 1} more; see `qualify report --check`)" if len(problems) > 1 else ""
    error = FrozenInputChanged if any(p.frozen for p in problems) else PlanError
    raise error(f"{what}{problems[0].text}{more}; only evidence that checks out is merged", file=where)


def _copy_trial(source: Record, trial: Trial, out: Record, index: int) -> None:
    samples = source.folder / trial.samples_file
    if not samples.resolve().is_relative_to(source.folder.resolve()):  # as `report --check` refuses it
        raise PlanError(
            f"trial {trial.index}'s samples_file {trial.samples_file!r} lies outside the record",
            file=source.trial_path(trial.index),
            field="samples_file",
        )
    if not samples.is_file():
        raise PlanError(f"trial {trial.index}'s raw samples {trial.samples_file} are missing", file=samples)
    data = read_limited(samples, MAX_NPZ_BYTES, root=source.folder)  # hashed and copied as one read
    if sha256_bytes(data) != trial.samples_sha256:
        # never carry tampered evidence into a new record, where its origin would be harder to see
        raise PlanError(
            f"sha256 differs from trial {trial.index}'s samples_sha256; run `qualify report --check {source.folder}`",
            file=samples,
        )
    target = out.samples_path(index)
    atomic_write_bytes(target, data, root=out.folder)
    moved = trial.model_copy(update={"index": index, "samples_file": target.relative_to(out.folder).as_posix()})
    out.write_trial(moved)
