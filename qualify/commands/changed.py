"""Which protocols a change touches: the list a CI job qualifies on a pull request.

A protocol is touched when a changed path is its plan, its lock, a file its lock froze, or a file
the plan uses now (a header newly included is not in the lock yet, and is exactly what a reviewer
wants qualified). Shared-library arms that `qualify compare` receives on the command line name no
file in the plan, so the caller may add source paths per protocol (`extra`); CI keeps them in
`.github/qualify-ci.json` beside the commands that build the libraries.

Library code: it returns data and raises `QualifyError`s; `qualify changed` prints.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from qualify.errors import PlanError, ToolError, UsageError
from qualify.io import MAX_LOCK_BYTES, UnreadableFile, read_text_limited
from qualify.plan.digest import lock_path

# History of the --json shape (bump on any incompatible change and say what changed):
#   1 — {"changed_version", "base", "head", "protocols": [{"name", "plan", "reasons", "problem"}]}
CHANGED_VERSION: Final = 1


class Touched(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="the protocol's folder name under protocols/")
    plan: str = Field(description="repository-relative path of its plan.json")
    reasons: list[str] = Field(description="the changed paths that touch it, sorted")
    problem: str | None = Field(default=None, description="why the plan does not load now (qualify run exits 2)")


class ChangedReport(BaseModel):
    """The document `qualify changed --json` prints (version CHANGED_VERSION)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    changed_version: Literal[1] = CHANGED_VERSION
    base: str | None
    head: str | None
    protocols: list[Touched]


def find_plans(root: Path, protocols: str = "protocols") -> list[Path]:
    """Every protocols/<name>/plan.json, sorted: one protocol per folder, as the repository keeps them."""
    return sorted((root / protocols).glob("*/plan.json"))


def protocol_paths(plan_path: Path, root: Path) -> tuple[set[str], str | None]:
    """The repository-relative paths a protocol depends on, and why the plan failed to load (if it did).

    The lock is read as JSON without validating the plan, so a plan broken by the change still
    counts as touched by its own edits and its frozen files. A plan or lock that is a symbolic link
    is named by its own path and not read (qualify reads plans and locks as regular files only):
    the protocol is still listed when the link itself changes, with the link as its problem.
    """
    from qualify import strict_json
    from qualify.plan.load import load_plan

    lock = lock_path(plan_path)
    paths = {_relative(plan_path, root), _relative(lock, root)}
    linked = [p for p in (plan_path, lock) if p.is_symlink()]
    if linked:
        return (
            paths,
            f"{_relative(linked[0], root)}: a symbolic link; a plan and its lock are read only as regular files",
        )
    if lock.is_file():
        try:
            data = strict_json.parse(read_text_limited(lock, MAX_LOCK_BYTES))
            if isinstance(data, dict) and isinstance(data.get("files"), dict):
                paths.update(str(rel) for rel in data["files"])
        except (strict_json.JSONProblem, UnreadableFile):
            pass  # the plan's own loading below reports an unreadable lock
    problem = None
    try:
        loaded = load_plan(plan_path)
        paths.update(loaded.files.files)
    except PlanError as exc:
        problem = exc.one_line()
    return paths, problem


def touched_protocols(
    root: Path, changed: list[str], extra: dict[str, list[str]] | None = None, protocols: str = "protocols"
) -> list[Touched]:
    """The protocols under root/protocols that any of `changed` (repository-relative) touches.

    extra maps a protocol name to more paths it depends on; a path ending in "/" is a folder and
    matches everything under it.
    """
    root = root.resolve()
    extra = extra or {}
    known = {p.parent.name for p in find_plans(root, protocols)}
    for name in extra:
        if name not in known:
            raise UsageError(f"no protocol named {name!r} under {protocols}/", field="--sources")
    changed_set = {_normalise(c) for c in changed if c.strip()}
    touched = []
    for plan_path in find_plans(root, protocols):
        name = plan_path.parent.name
        paths, problem = protocol_paths(plan_path, root)
        reasons = {c for c in changed_set if c in paths}
        reasons |= {c for c in changed_set for prefix in extra.get(name, []) if _under(c, prefix)}
        if reasons:
            touched.append(
                Touched(name=name, plan=_relative(plan_path, root), reasons=sorted(reasons), problem=problem)
            )
    return touched


def changed_paths(root: Path, base: str, head: str = "HEAD") -> list[str]:
    """Paths that differ between the merge base of `base` and `head`, and `head` (what a pull
    request changes, as GitHub shows it). Renames count as a deletion and an addition, so moving a
    header away from a kernel touches the protocols that used it."""
    for option, rev in (("--base", base), ("--head", head)):
        if not rev or rev.startswith("-"):
            raise UsageError(f"{rev!r} is not a git revision (a revision never starts with '-')", field=option)
    # --end-of-options: whatever the revisions say, git reads them as revisions, never as options
    # (`--output=F` would make git write a file)
    cmd = [
        "git",
        "-C",
        str(root),
        "diff",
        "--name-only",
        "--no-renames",
        "-z",
        "--end-of-options",
        f"{base}...{head}",
        "--",
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=120)
    except FileNotFoundError:
        raise ToolError("git not found on PATH; qualify changed needs it to list a diff") from None
    except subprocess.TimeoutExpired:
        raise ToolError("git diff did not finish within 120 s") from None
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip().splitlines()
        reason = message[-1] if message else f"exit {done.returncode}"
        raise UsageError(f"git cannot diff {base}...{head}: {reason}", field="--base")
    return sorted(p for p in done.stdout.decode(errors="surrogateescape").split("\0") if p)


def git_root(start: Path) -> Path:
    try:
        done = subprocess.run(
            ["git", "-C", str(start), "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=60
        )
    except FileNotFoundError:
        raise ToolError("git not found on PATH; qualify changed needs it to list a diff") from None
    if done.returncode != 0:
        raise UsageError(f"{start} is not inside a git repository", field="--base")
    return Path(done.stdout.strip())


def parse_sources(items: list[str]) -> dict[str, list[str]]:
    """NAME=PATH options into {name: [path, ...]}."""
    extra: dict[str, list[str]] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise UsageError(f"expected NAME=PATH, got {item!r}", field="--sources")
        extra.setdefault(name, []).append(path)
    return extra


def _relative(path: Path, root: Path) -> str:
    """The path as found under root, links not followed (a link's target may lie anywhere)."""
    return path.relative_to(root).as_posix()


def _normalise(path: str) -> str:
    return Path(path.strip()).as_posix().removeprefix("./")


def _under(path: str, prefix: str) -> bool:
    prefix = _normalise(prefix)
    return path == prefix.rstrip("/") or path.startswith(prefix.rstrip("/") + "/")
