"""The files a plan uses: where they are, that they stay inside the repository, what they include.

Every path in a plan is relative to the plan file and must resolve inside the repository that holds
the plan (see `repository_root`), so a plan can neither read nor bind itself to files elsewhere on
the host.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from qualify import generation
from qualify.cpp_lexer import HEADER_NAME, lex
from qualify.errors import PlanError
from qualify.io import MAX_LIBRARY_BYTES, MAX_SOURCE_BYTES, UnreadableFile, open_limited, read_limited
from qualify.plan import python_source
from qualify.plan.model import ARM_SIDES, CudaArm, LibraryArm, Plan, PythonArm

# The scanner proposes; NVRTC decides. It over-approximates what a source may include: every
# string literal and <...> name on any preprocessor line (so `#define HDR "tune.h"` + `#include HDR`
# is seen through the #define), after the line splicing and digraphs NVRTC's preprocessor applies.
# Whatever it still misses is caught at compile time, where NVRTC reports the headers it opened
# and a header outside the lock is refused (qualify.build.nvrtc).
_TOKENS = re.compile(
    r'"(?:\\.|[^"\\\n])*"'  # string literal (kept)
    r"|'(?:\\.|[^'\\\n])*'"  # character literal (kept)
    r"|//[^\n]*"  # line comment (dropped)
    r"|/\*.*?(?:\*/|\Z)",  # block comment (dropped; an unterminated one runs to the end)
    re.DOTALL,
)
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
    # bounded and regular files only: a FIFO or /dev/zero named as a header must not hang or fill memory
    try:
        data = read_limited(path, MAX_SOURCE_BYTES)
    except UnreadableFile as exc:
        raise PlanError(
            exc.message.replace("cannot read:", f"cannot read {path.name}:", 1), file=plan_path, field=field
        ) from None
    return data.decode("utf-8", errors="replace")


def strip_comments(text: str) -> str:
    """`text` with backslash-newlines spliced and comments replaced by a space, string and
    character literals kept whole (a "/*" inside a string opens no comment)."""
    text = text.replace("\\\r\n", "").replace("\\\n", "")
    return _TOKENS.sub(lambda m: m.group(0) if m.group(0)[0] in "\"'" else " ", text)


def include_candidates(text: str) -> list[tuple[str, bool]]:
    """(name, quoted) for every file name a preprocessor line of `text` could include."""
    out = []
    # the directive lines as NVRTC forms them (qualify.cpp_lexer, the include scanner's lexer too)
    for line in lex(text).lines:
        for quoted, angled in HEADER_NAME.findall(line.text):
            out.append((quoted, True) if quoted else (angled.strip(), False))
    return out


ELF_MAGIC = b"\x7fELF"
ET_DYN = 3


def shared_object_problem(path: Path) -> str | None:
    """Why `path` is not an ELF shared object (None when it is one), read from its header alone.

    A text file, an archive or an executable named .so would otherwise reach the dynamic loader
    only at run time, on the GPU host, as an opaque dlopen error.
    """
    try:
        with open_limited(path, MAX_LIBRARY_BYTES) as f:
            head = f.read(18)
    except UnreadableFile as exc:
        return exc.message
    if head[:4] != ELF_MAGIC:
        return "not an ELF file"
    if len(head) < 18 or head[5] not in (1, 2):
        return "a truncated ELF header"
    e_type = int.from_bytes(head[16:18], "little" if head[5] == 1 else "big")
    if e_type != ET_DYN:
        return f"an ELF file of type {e_type}, not a shared object (type {ET_DYN})"
    return None


def collect_files(plan: Plan, plan_path: Path, frozen: tuple[str, ...] = ()) -> PlanFiles:
    """Resolve and check every file the plan names, plus the local headers sources include.

    `frozen` lists the files of the plan's lock: the headers NVRTC reported when the plan was
    frozen are part of the plan's files from then on, whether or not the scanner sees them. One
    that is gone or no longer a regular file inside the repository is left out here, so the lock
    check names it as missing.
    """
    plan_path = plan_path.resolve()
    root = repository_root(plan_path).resolve()
    found: dict[str, Path] = {}

    def add(path: Path) -> None:
        found[path.relative_to(root).as_posix()] = path

    cccl = None
    for rel in frozen:
        if rel.startswith(generation.CCCL_PREFIX):
            # a CCCL header the compile read: looked up in the installed CCCL of qualify's extra
            cccl = cccl or generation.cccl_dir(generation.installed_major())
            if cccl is not None:
                path = (cccl / rel.removeprefix(generation.CCCL_PREFIX)).resolve()
                if inside(cccl.resolve(), path) and path.is_file():
                    found[rel] = path
            continue
        path = (root / rel).resolve()
        if inside(root, path) and path.is_file():
            add(path)

    for side in ARM_SIDES:
        arm = plan.arm(side)
        if isinstance(arm, CudaArm):
            defined = [
                (name, quoted)
                for value in arm.defines.values()
                if isinstance(value, str)
                for name, quoted in include_candidates(f"#define X {value}")
            ]
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
            for path in local_includes(source, include_dirs, root, plan_path, f"arms.{side}.source", defined):
                add(path)
            if arm.kernel is not None:  # CudaArm's validator: `kernel` exactly when no `launches`
                check_kernel_declared(source, arm.kernel, plan_path, f"arms.{side}.kernel", include_dirs)
            for i, launch in enumerate(arm.launches or []):
                field = f"arms.{side}.launches[{i}].kernel"
                check_kernel_declared(source, launch.kernel, plan_path, field, include_dirs)
        elif isinstance(arm, LibraryArm) and arm.library is not None:
            library = _resolve(plan_path, root, arm.library, f"arms.{side}.library")
            problem = shared_object_problem(library)
            if problem:
                raise PlanError(f"{arm.library!r}: {problem}", file=plan_path, field=f"arms.{side}.library")
            add(library)
        elif isinstance(arm, PythonArm):
            for path in python_arm_files(plan, side, arm, plan_path, root):
                add(path)
    fid = plan.acceptance.fidelity
    if fid.golden is not None:
        add(_resolve(plan_path, root, fid.golden, "acceptance.fidelity.golden"))
    if fid.golden_script is not None:
        add(_resolve(plan_path, root, fid.golden_script, "acceptance.fidelity.golden_script"))
    if fid.reference is not None:
        script = fid.reference.split(":", 1)[0]
        add(_resolve(plan_path, root, script, "acceptance.fidelity.reference"))
    return PlanFiles(root=root, files=dict(sorted(found.items())))


def python_arm_files(plan: Plan, side: str, arm: PythonArm, plan_path: Path, root: Path) -> list[Path]:
    """The callable's file and its local modules, after its function's parameters are checked
    against the buffers and parameters the plan gives it (all by `ast`: nothing is imported)."""
    field = f"arms.{side}.callable"
    source = _resolve(plan_path, root, arm.file, field)
    if source.suffix != ".py":
        raise PlanError(f"{arm.file!r} resolves to {source.name}, not a .py file", file=plan_path, field=field)
    files = python_source.local_modules(source, root, plan_path, field)
    rel = source.relative_to(root).as_posix()
    sig = python_source.signature(
        python_source.parse(source, root, plan_path, field), arm.function, rel, plan_path, field
    )
    buffers = {b.name: b.role for b in plan.workload.buffers}
    params = set(plan.workload.params) | set(arm.params) | set(plan.workload.cases[0])
    needs_control = side == "candidate" and any(c.kind == "callable" for c in plan.controls.negative)
    python_source.check_parameters(sig, arm.function, rel, buffers, params, needs_control, plan_path, field)
    return files


def local_includes(
    source: Path,
    include_dirs: Sequence[Path],
    root: Path,
    plan_path: Path,
    field: str,
    extra: list[tuple[str, bool]] | None = None,
) -> list[Path]:
    """The source and, transitively, every header it includes that resolves inside the repository.

    The search follows NVRTC's, which qualify gives the source's folder and include_dirs as
    include paths: `#include "..."` looks next to the including file, then in those paths;
    `#include <...>` in those paths only. A header found there is frozen whichever brackets name
    it; one found nowhere is a toolkit header (its version is recorded as provenance instead).
    Each file is read once, so include cycles end. `extra` adds names from outside the files
    (a define's value that names a header).

    A name that resolves to something other than a regular file (a FIFO, a device) is refused:
    NVRTC would block on it or read it without end.
    """
    search = (source.parent, *include_dirs)
    seen: dict[Path, None] = {}  # in the order found; a dict, so each lookup is O(1) (a list made the walk quadratic)
    stack = [(source, 0)]
    while stack:
        path, depth = stack.pop()
        if path in seen:
            continue
        if depth > MAX_INCLUDE_DEPTH:
            raise PlanError(f"includes nest deeper than {MAX_INCLUDE_DEPTH}", file=plan_path, field=field)
        seen[path] = None
        names = include_candidates(_read_text(path, plan_path, field))
        if path == source and extra:
            names += extra
        for name, quoted in names:
            for folder in (path.parent, *search) if quoted else search:
                if not inside(root, Path(os.path.normpath(folder / name))):
                    # refused by its spelling, never by whether the file exists: the refusal
                    # must not tell a plan which files exist outside the repository
                    raise PlanError(
                        f"{path.name} includes {name!r}, which is outside the repository",
                        file=plan_path,
                        field=field,
                    )
                try:
                    candidate = (folder / name).resolve()
                    exists = candidate.exists()
                except (OSError, ValueError):  # a name no file system can hold (NUL, too long)
                    continue
                if exists and not candidate.is_file() and not candidate.is_dir():
                    raise PlanError(
                        f"{path.name} may include {name!r}, which is not a regular file "
                        "(a FIFO or device would hang the compiler)",
                        file=plan_path,
                        field=field,
                    )
                if candidate.is_file():
                    if not inside(root, candidate):
                        raise PlanError(
                            f"{path.name} includes {name!r}, which is outside the repository",
                            file=plan_path,
                            field=field,
                        )
                    stack.append((candidate, depth + 1))
                    break
    return list(seen)


def check_kernel_declared(
    source: Path, kernel: str, plan_path: Path, field: str, include_dirs: Sequence[Path] = ()
) -> None:
    """Refuse a kernel name that no `__global__` declaration in the source (or its headers) has.

    NVRTC would also fail, but later and with a compiler message; a plan error names the field.
    """
    base = kernel.split("<", 1)[0].split("::")[-1]
    pattern = re.compile(r"__global__[^;{}]*?\b" + re.escape(base) + r"\s*\(")
    root = repository_root(plan_path.resolve())
    for path in local_includes(source, list(include_dirs), root, plan_path, field):
        if pattern.search(strip_comments(_read_text(path, plan_path, field))):
            return
    raise PlanError(f"no __global__ function {base!r} in {source.name}", file=plan_path, field=field)
