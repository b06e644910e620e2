"""Freezing: the plan digest and the lock file that binds results to a plan and its files.

digest = sha256 of the canonical JSON of {plan, files}, where plan is the validated plan with its
defaults filled in (a change of a default is a change of protocol) and files maps every used file,
relative to the repository root, to its sha256. `plan.lock.json` beside the plan stores both, so a
later change names the file that moved.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qualify import strict_json
from qualify.errors import FrozenInputChanged, PlanError
from qualify.io import (
    MAX_LIBRARY_BYTES,
    MAX_LOCK_BYTES,
    UnreadableFile,
    atomic_write_text,
    read_text_limited,
    sha256_limited,
)
from qualify.plan.files import PlanFiles
from qualify.plan.model import Plan

LOCK_VERSION = 1
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def canonical_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path, *, limit: int = MAX_LIBRARY_BYTES, root: Path | None = None) -> str:
    """sha256 of a regular file, streamed (qualify.io.sha256_limited): a file over `limit`, a
    device or a FIFO is refused (UnreadableFile); the default cap is a shared library's."""
    return sha256_limited(path, limit, root=root)


# Fields whose defaults changed how a plan is measured after plans were frozen (issue 24: buffer
# placements rotate and each block's order is drawn). A plan frozen before them hashes as the plan
# without them; it is refused like any changed plan, but the message says what changed and why.
MEASUREMENT_V3 = ("placement", "order")


@dataclass(frozen=True)
class Freeze:
    plan_sha256: str
    files: dict[str, str]  # repository-relative path -> sha256
    digest: str
    plan_sha256_before_v3: str = ""  # the plan hashed without MEASUREMENT_V3's schedule fields
    digest_before_v3: str = ""  # and the digest of that plan with the files

    def frozen_before_v3(self, lock: dict[str, Any]) -> bool:
        """The lock binds this plan as it hashed before MEASUREMENT_V3's fields existed."""
        return bool(lock["plan_sha256"] == self.plan_sha256_before_v3 and lock["digest"] == self.digest_before_v3)

    def to_json(self, plan_name: str) -> dict[str, Any]:
        return {
            "lock_version": LOCK_VERSION,
            "plan": plan_name,
            "plan_sha256": self.plan_sha256,
            "files": self.files,
            "digest": self.digest,
        }


def compute_freeze(plan: Plan, files: PlanFiles) -> Freeze:
    return freeze_from_hashes(plan, {rel: sha256_file(path) for rel, path in files.files.items()})


def freeze_from_hashes(plan: Plan, hashes: dict[str, str]) -> Freeze:
    """The digest from file hashes alone: what a record folder (which holds no sources) can check."""
    plan_json = plan.model_dump(mode="json")
    schedule = plan_json.get("schedule")
    before = (
        plan_json
        if not isinstance(schedule, dict)
        else {**plan_json, "schedule": {k: v for k, v in schedule.items() if k not in MEASUREMENT_V3}}
    )
    return Freeze(
        plan_sha256=sha256_bytes(canonical_json(plan_json).encode()),
        files=hashes,
        digest=sha256_bytes(canonical_json({"plan": plan_json, "files": hashes}).encode()),
        plan_sha256_before_v3=sha256_bytes(canonical_json(before).encode()),
        digest_before_v3=sha256_bytes(canonical_json({"plan": before, "files": hashes}).encode()),
    )


def lock_path(plan_path: Path) -> Path:
    return plan_path.with_name(plan_path.stem + ".lock.json")


def read_lock(plan_path: Path, *, root: Path | None = None) -> dict[str, Any] | None:
    path = lock_path(plan_path)
    if not os.path.lexists(path):
        return None
    try:
        data = strict_json.parse(read_text_limited(path, MAX_LOCK_BYTES, root=root))
    except strict_json.JSONProblem as exc:
        raise PlanError(f"unreadable lock file: {exc.message}", file=path, field=exc.field) from None
    except UnreadableFile as exc:
        raise PlanError(f"unreadable lock file: {exc.message}", file=path) from None
    # `type(...) is int`: true and 1.0 equal 1 in Python but are not what qualify writes
    if not isinstance(data, dict) or type(data.get("lock_version")) is not int or data["lock_version"] != LOCK_VERSION:
        raise PlanError(f"not a version-{LOCK_VERSION} lock file", file=path, field="lock_version")
    for key, kind in (("plan_sha256", str), ("files", dict), ("digest", str)):
        if not isinstance(data.get(key), kind):
            raise PlanError(f"missing or malformed {key}", file=path, field=key)
    for rel, digest in data["files"].items():
        # a lock names files by repository path; anything else (absolute, '..', a hash that is
        # no sha256) was not written by qualify
        if rel.startswith("/") or ".." in Path(rel).parts or not rel.isprintable() or not _SHA256.match(str(digest)):
            raise PlanError(
                "not a repository path with its sha256", file=path, field=strict_json.join_field("files", rel)
            )
    return data


def verify_frozen(plan_path: Path, current: Freeze, lock: dict[str, Any]) -> None:
    """Refuse any difference between what was frozen and what is on disk now, naming the file."""
    if lock["plan_sha256"] != current.plan_sha256:
        if lock["plan_sha256"] == current.plan_sha256_before_v3:
            raise FrozenInputChanged(
                "frozen before schedule.placement and schedule.order existed: this qualify rotates where "
                "the buffers sit and draws each block's order, a different protocol than the lock binds",
                file=plan_path,
                field="schedule",
            )
        raise FrozenInputChanged("changed after freezing (plan content differs from its lock)", file=plan_path)
    for rel, digest in lock["files"].items():
        now = current.files.get(rel)
        if now is None:
            raise FrozenInputChanged("frozen file is no longer used by the plan or is missing", file=rel)
        if now != digest:
            raise FrozenInputChanged("changed after freezing (sha256 differs from the lock)", file=rel)
    for rel in current.files:
        if rel not in lock["files"]:
            raise FrozenInputChanged("used by the plan but not frozen in its lock", file=rel)
    if lock["digest"] != current.digest:
        raise FrozenInputChanged("digest differs from the lock", file=lock_path(plan_path))


def freeze(plan_path: Path, current: Freeze) -> tuple[Path, bool]:
    """Write the lock. Returns (path, written). An existing lock is verified, never overwritten."""
    path = lock_path(plan_path)
    lock = read_lock(plan_path)
    if lock is not None:
        verify_frozen(plan_path, current, lock)
        return path, False
    atomic_write_text(path, json.dumps(current.to_json(plan_path.name), indent=2) + "\n")
    return path, True


# What to do about a frozen plan that changed (plan check, plan freeze, run and compare say it)
NEW_PLAN = "save the changed plan as a new plan file with a new name and freeze that (its trials go to a new record)"
REMEDY = (
    "`qualify plan freeze --replace` re-freezes it while no record holds a trial under the old "
    f"lock; once one does, {NEW_PLAN}"
)


def with_remedy(exc: FrozenInputChanged) -> FrozenInputChanged:
    """The same refusal, saying what to do about it (plan check and plan freeze)."""
    if REMEDY in exc.message:
        return exc
    return FrozenInputChanged(f"{exc.message}; {REMEDY}", file=exc.file, field=exc.field)
