"""The files a plan uses: where they are, that they stay inside the repository, what they include.

Every path in a plan is relative to the plan file and must resolve inside the repository that holds
the plan (see `repository_root`), so a plan can neither read nor bind itself to files elsewhere on
the host.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from qualify.errors import PlanError
from qualify.plan.model import CudaArm, LibraryArm, Plan

_INCLUDE = re.compile(r'^\s*#\s*include\s*(?:"([^"\n]+)"|<([^>\n]+)>)', re.MULTILINE)
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
MAX_INCLUDE_DEPTH = 32


@dataclass(frozen=True)
class PlanFiles:
    root: Path  # repository root; keys of `files` are relative to it
    files: dict[str, Path]  # every file the plan's digest covers, sources' local headers included


def repository_root(plan_path: Path) -> Path:
    """The nearest ancestor with a `.git`; in an exported tree without one (a CI artifact, a copy
    sent to a GPU host), the nearest with a `pyproject.toml`; else the plan's own folder."""
    folders = (plan_path.parent, *plan_path.parent.parents)
    for marker in (".git", "pyproject.toml"):
        for folder in folders:
            if (folder / marker).exists():
                return folder
    return plan_path.parent


def inside(root: Path, path: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def _resolve(plan_path: Path, root: Path, relative: str, field: str) -> Path:
    path = (plan_path.parent / relative).resolve()
    if not inside(root, path):
        raise PlanError(f"{relative!r} resolves outside the repository {root}", file=plan_path, field=field)
    if not path.exists():
        raise PlanError(f"{relative!r}: no such file", file=plan_path, field=field)
    if not path.is_file():
        raise PlanError(f"{relative!r} is not a regular file", file=plan_path, field=field)
    return path


def _read_text(path: Path, plan_path: Path, field: str) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise PlanError(f"cannot read {path.name}: {exc.strerror}", file=plan_path, field=field) from None


ELF_MAGIC = b"\x7fELF"
ET_DYN = 3


def shared_object_problem(path: Path) -> str | None:
    """Why `path` is not an ELF shared object (None when it is one), read from its header alone.

    A text file, an archive or an executable named .so would otherwise reach the dynamic loader
    only at run time, on the GPU host, as an opaque dlopen error.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(18)
    except OSError as exc:
        return f"cannot read: {exc.strerror}"
    if head[:4] != ELF_MAGIC:
        return "not an ELF file"
    if len(head) < 18 or head[5] not in (1, 2):
        return "a truncated ELF header"
    e_type = int.from_bytes(head[16:18], "little" if head[5] == 1 else "big")
    if e_type != ET_DYN:
        return f"an ELF file of type {e_type}, not a shared object (type {ET_DYN})"
    return None


def collect_files(plan: Plan, plan_path: Path) -> PlanFiles:
    """Resolve and check every file the plan names, plus the local headers sources include."""
    plan_path = plan_path.resolve()
    root = repository_root(plan_path).resolve()
    found: dict[str, Path] = {}

    def add(path: Path) -> None:
        found[path.relative_to(root).as_posix()] = path

    for side in ("base", "candidate"):
        arm = plan.arm(side)
        if isinstance(arm, CudaArm):
            source = _resolve(plan_path, root, arm.source, f"arms.{side}.source")
            include_dirs = []
            for j, d in enumerate(arm.include_dirs):
                folder = (plan_path.parent / d).resolve()
                if not inside(root, folder) or not folder.is_dir():
                    raise PlanError(
                        f"{d!r} is not a folder inside the repository",
                        file=plan_path,
                        field=f"arms.{side}.include_dirs[{j}]",
                    )
                include_dirs.append(folder)
            for path in local_includes(source, include_dirs, root, plan_path, f"arms.{side}.source"):
                add(path)
            check_kernel_declared(source, arm.kernel, plan_path, f"arms.{side}.kernel", include_dirs)
        elif isinstance(arm, LibraryArm) and arm.library is not None:
            library = _resolve(plan_path, root, arm.library, f"arms.{side}.library")
            problem = shared_object_problem(library)
            if problem:
                raise PlanError(f"{arm.library!r}: {problem}", file=plan_path, field=f"arms.{side}.library")
            add(library)
    fid = plan.acceptance.fidelity
    if fid.golden is not None:
        add(_resolve(plan_path, root, fid.golden, "acceptance.fidelity.golden"))
    if fid.golden_script is not None:
        add(_resolve(plan_path, root, fid.golden_script, "acceptance.fidelity.golden_script"))
    if fid.reference is not None:
        script = fid.reference.split(":", 1)[0]
        add(_resolve(plan_path, root, script, "acceptance.fidelity.reference"))
    return PlanFiles(root=root, files=dict(sorted(found.items())))


def local_includes(source: Path, include_dirs, root: Path, plan_path: Path, field: str) -> list[Path]:
    """The source and, transitively, every header it includes that resolves inside the repository.

    The search follows NVRTC's, which qualify gives the source's folder and include_dirs as
    include paths: `#include "..."` looks next to the including file, then in those paths;
    `#include <...>` in those paths only. A header found there is frozen whichever brackets name
    it; one found nowhere is a toolkit header (its version is recorded as provenance instead).
    Each file is read once, so include cycles end.
    """
    search = (source.parent, *include_dirs)
    seen: list[Path] = []
    stack = [(source, 0)]
    while stack:
        path, depth = stack.pop()
        if path in seen:
            continue
        if depth > MAX_INCLUDE_DEPTH:
            raise PlanError(f"includes nest deeper than {MAX_INCLUDE_DEPTH}", file=plan_path, field=field)
        seen.append(path)
        for quoted, angled in _INCLUDE.findall(_COMMENTS.sub("", _read_text(path, plan_path, field))):
            name = quoted or angled
            for folder in ((path.parent, *search) if quoted else search):
                candidate = (folder / name).resolve()
                if candidate.is_file():
                    if not inside(root, candidate):
                        raise PlanError(
                            f"{path.name} includes {name!r}, which is outside the repository",
                            file=plan_path,
                            field=field,
                        )
                    stack.append((candidate, depth + 1))
                    break
    return seen


def check_kernel_declared(source: Path, kernel: str, plan_path: Path, field: str, include_dirs=()) -> None:
    """Refuse a kernel name that no `__global__` declaration in the source (or its headers) has.

    NVRTC would also fail, but later and with a compiler message; a plan error names the field.
    """
    base = kernel.split("<", 1)[0].split("::")[-1]
    pattern = re.compile(r"__global__[^;{}]*?\b" + re.escape(base) + r"\s*\(")
    root = repository_root(plan_path.resolve())
    for path in local_includes(source, list(include_dirs), root, plan_path, field):
        if pattern.search(_COMMENTS.sub("", _read_text(path, plan_path, field))):
            return
    raise PlanError(f"no __global__ function {base!r} in {source.name}", file=plan_path, field=field)
