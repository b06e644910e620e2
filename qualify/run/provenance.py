"""Who, what and where: versions, the git revision with its dirty flag, the host."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np

from qualify import __version__
from qualify.results.model import DeviceInfo, Provenance


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


MAX_DIRTY_PATHS = 50  # a record lists this many changed paths, then says how many more


def _porcelain_paths(status: str) -> list[str]:
    """The paths of `git status --porcelain` lines (a rename's new path)."""
    out = []
    for line in status.splitlines():
        # "XY path": the status is one or two letters (a leading space may have been stripped)
        path = line.strip().split(maxsplit=1)[-1]
        if " -> " in path:
            path = path.split(" -> ", 1)[1]
        out.append(path.strip('"'))
    return out


def _relative(root: Path, paths) -> list[str] | None:
    """`paths` relative to the work tree; None when one lies outside it."""
    rels = []
    for p in paths:
        try:
            rels.append(Path(p).resolve().relative_to(root.resolve()).as_posix())
        except ValueError:
            return None
    return rels


def frozen_dirty(root: Path, paths) -> list[str] | None:
    """Those of `paths` (the plan, its lock and every file they bind) that differ from the
    checked-out revision: modified, staged, untracked or ignored. None: not a git work tree.

    Untracked and ignored files count here: a plan that was never committed is not in the revision
    the record names, so "clean" would claim a provenance it does not have. A file outside the work
    tree cannot be in its revision: it is listed as it was given.
    """
    rels = _relative(root, paths)
    if rels is None:
        return [str(p) for p in paths]
    if not rels:
        return None
    status = _git(root, "status", "--porcelain", "--untracked-files=all", "--ignored=matching", "--", *rels)
    if status is None:
        return None
    return _porcelain_paths(status)


def plan_files_dirty(root: Path, paths) -> bool | None:
    """Whether any of `paths` differs from the checked-out revision (see `frozen_dirty`)."""
    found = frozen_dirty(root, paths)
    return None if found is None else bool(found)


def _program(argv0: str) -> str:
    """The command a user types: `python -m qualify` runs as `__main__.py`."""
    name = Path(argv0).name
    return "qualify" if name == "__main__.py" else name


def collect(device: DeviceInfo, root: Path, planned: bool, nvrtc: str, argv: list[str], paths=None) -> Provenance:
    """`paths`: the files the plan uses (give them: without them only tracked changes are seen,
    and an uncommitted plan reads as clean)."""
    try:
        from cuda import bindings

        bindings_version = bindings.__version__
    except Exception:  # noqa: BLE001
        bindings_version = "unknown"
    from qualify.build.nvrtc import cccl_version, compile_sandbox

    revision = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    dirty = None if status is None else bool(status)
    changed = None if status is None else _porcelain_paths(status)
    frozen = None
    if paths is not None and status is not None:
        frozen = frozen_dirty(root, paths)
        if frozen is not None:
            changed = list(dict.fromkeys([*changed, *frozen]))
            dirty = dirty or bool(frozen)
    if revision is None:
        # An exported tree (no .git): take the revision the exporter states, as CI runners do
        # (GITHUB_SHA and the like); whether that tree was dirty is then unknown.
        revision = os.environ.get("QUALIFY_SOURCE_REVISION") or None
    return Provenance(
        device=device,
        planned=planned,
        nvrtc_version=nvrtc,
        cuda_bindings_version=bindings_version,
        cccl_version=cccl_version(),
        compile_sandbox=compile_sandbox(),
        qualify_version=__version__,
        python_version=platform.python_version(),
        numpy_version=np.__version__,
        git_revision=revision,
        git_dirty=dirty,
        dirty_paths=None if changed is None else changed[:MAX_DIRTY_PATHS],
        dirty_frozen=frozen,
        host=socket.gethostname(),
        command=[_program(sys.argv[0]), *argv],
    )
