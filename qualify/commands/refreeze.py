"""`qualify plan freeze --replace`: a sanctioned re-freeze, allowed only before evidence exists.

A lock exists so that results bind to a plan written before any number was seen. Until a trial
has run under a lock, nothing binds to it, and a team that corrects a bound a minute after
freezing is not moving goalposts; refusing them only teaches them to delete lock files. Once any
record holds a trial under the old digest, the plan's content is evidence's premise: changing it
needs a new plan name (hence a new record), never a rewritten lock.

Where trials can be: the record folders under the repository's `records/` (the default of `run`
and `compare`, whatever name the plan had) and any folder given with `--record`. Both the ledger
(`trial_started` events carry the digest) and the trial files (`plan_digest`) are read, so a
record whose ledger was lost still counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from qualify import strict_json
from qualify.errors import FrozenInputChanged, QualifyError, UsageError
from qualify.io import MAX_JSON_BYTES, MAX_LOCK_BYTES, UnreadableFile, read_text_limited
from qualify.plan.digest import NEW_PLAN, lock_path, read_lock
from qualify.plan.load import LoadedPlan
from qualify.results.store import Record


@dataclass(frozen=True)
class Evidence:
    folder: Path
    trial: int


def trials_under(digest: str, folders: list[Path]) -> list[Evidence]:
    """Every trial in these record folders that ran under `digest`."""
    found: set[tuple[Path, int]] = set()
    for folder in folders:
        record = Record(folder)
        try:
            for t in record.trials_in_ledger():
                if t.digest == digest:
                    found.add((folder, t.index))
        except QualifyError:
            pass  # a damaged ledger: the trial files below still speak
        trials = folder / "trials"
        for path in sorted(trials.glob("trial-*.json")) if trials.is_dir() else []:
            try:
                data = strict_json.parse(read_text_limited(path, MAX_JSON_BYTES, root=folder))
            except (UnreadableFile, strict_json.JSONProblem):
                continue
            if isinstance(data, dict) and data.get("plan_digest") == digest and type(data.get("index")) is int:
                found.add((folder, data["index"]))
    return [Evidence(f, i) for f, i in sorted(found)]


def record_folders(loaded: LoadedPlan, extra: list[Path]) -> list[Path]:
    records = loaded.files.root / "records"
    folders = sorted(p for p in records.iterdir() if p.is_dir()) if records.is_dir() else []
    return folders + [Path(p) for p in extra if Path(p).is_dir()]


def shown(path: Path, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return str(path)


def replace_lock(loaded: LoadedPlan, extra_records: Sequence[Path] = ()) -> tuple[Path, str | None]:
    """Rewrite the plan's lock for its current content. Returns (lock path, the old digest, or
    None when there was no lock). Refused (exit 3) once a trial ran under the old digest."""
    for folder in extra_records:  # a record named on the command line that cannot be searched
        if not Path(folder).is_dir():
            raise UsageError("not a record folder: its trials cannot be searched", file=folder, field="--record")
    path = lock_path(loaded.path)
    old = read_lock(loaded.path)
    if old is not None and old["digest"] != loaded.digest:
        evidence = trials_under(old["digest"], record_folders(loaded, list(extra_records)))
        if evidence:
            first = evidence[0]
            where = shown(first.folder, loaded.files.root)
            more = f" (and {len(evidence) - 1} more)" if len(evidence) > 1 else ""
            raise FrozenInputChanged(
                f"cannot replace the lock: {where} holds trial {first.trial}{more} run under digest "
                f"{old['digest'][:16]}…; that evidence binds to the plan as frozen: {NEW_PLAN}",
                file=shown(path, loaded.files.root),
            )
        for folder in record_folders(loaded, list(extra_records)):
            if any(_lock_digest(copy) == old["digest"] for copy in folder.glob("*.lock.json")):
                # a run bound this record to the old lock and died before its trial started: the
                # record would keep that copy beside trials of the new plan
                raise FrozenInputChanged(
                    f"cannot replace the lock: {shown(folder, loaded.files.root)} holds a copy of the old lock "
                    "but no trial; remove that record folder (it holds no evidence) and re-freeze",
                    file=shown(path, loaded.files.root),
                )
    if old is None or old["digest"] != loaded.digest:
        # frozen as `plan freeze` freezes: with the headers NVRTC reports reading
        from qualify.commands.check import freeze_plan

        path.unlink(missing_ok=True)
        _, path, _, _ = freeze_plan(loaded.path)
    return path, (old["digest"] if old is not None else None)


def _lock_digest(path: Path) -> str | None:
    try:
        data = strict_json.parse(read_text_limited(path, MAX_LOCK_BYTES))
    except (UnreadableFile, strict_json.JSONProblem):
        return None
    return data.get("digest") if isinstance(data, dict) else None
