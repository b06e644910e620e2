"""Which files a compile read, held to the plan: NVRTC reports every header it opened with the
sha256 of its bytes; a header outside the repository (the CUDA toolkit's and CCCL's aside) is a bad
plan, and with a lock every file read must be one the lock froze, byte for byte."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from qualify import generation
from qualify.errors import FrozenInputChanged, PlanError

if TYPE_CHECKING:
    from qualify.build.nvrtc import KernelSpec

BUILTIN = "builtin"  # the sha256 slot of a header NVRTC holds in memory (no file was read)


def _inside(root: Path, path: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def check_reads(
    spec: KernelSpec, source: bytes, headers: tuple[tuple[str, str], ...], toolkit: Path, cccl: Path | None
) -> None:
    """Refuse a compile that read anything the plan does not bind.

    A header outside the repository (other than the toolkit's, whose version is provenance) is a
    bad plan (exit 2); with a lock, a header the lock does not list, or whose bytes differ from
    the lock, is a frozen input that changed (exit 3), and so is the source itself.
    """
    if spec.root is None:  # qualify's own helper kernels
        return
    root = spec.root.resolve()
    toolkit = toolkit.resolve()
    cccl = cccl.resolve() if cccl is not None else None
    frozen = dict(spec.frozen)
    if spec.locked:
        _check_frozen(spec, root, frozen, spec.source.resolve(), hashlib.sha256(source).hexdigest())
    for name, digest in headers:
        if digest == BUILTIN:
            if Path(name).exists() and not name.startswith("__nv"):
                raise PlanError(f"NVRTC read {name!r} from the working directory", file=spec.source)
            continue
        path = Path(name).resolve()
        if cccl is not None and _inside(cccl, path):
            # CCCL is code the kernel compiles, so its headers are frozen like the repository's
            if spec.locked:
                _check_frozen_key(spec, frozen, cccl_key(cccl, path), digest)
            continue
        if _inside(toolkit, path):
            continue
        if not _inside(root, path):
            raise PlanError(f"NVRTC read {path}, which is outside the repository {root}", file=spec.source)
        if spec.locked:
            _check_frozen(spec, root, frozen, path, digest)


def cccl_key(cccl: Path, path: Path) -> str:
    """How the lock names a CCCL header: CCCL_PREFIX and its path inside the CCCL folder."""
    return generation.CCCL_PREFIX + path.relative_to(cccl).as_posix()


def _check_frozen(spec: KernelSpec, root: Path, frozen: dict[str, str], path: Path, digest: str) -> None:
    _check_frozen_key(spec, frozen, path.relative_to(root).as_posix(), digest)


def _check_frozen_key(spec: KernelSpec, frozen: dict[str, str], rel: str, digest: str) -> None:
    if rel not in frozen:
        raise FrozenInputChanged(
            f"NVRTC reads this file compiling {spec.source.name}, but the lock does not freeze it (re-freeze the plan)",
            file=rel,
        )
    if frozen[rel] != digest:
        raise FrozenInputChanged("changed after freezing (the bytes NVRTC read differ from the lock)", file=rel)
