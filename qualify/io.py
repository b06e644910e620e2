"""Durable file writes: a crash in the middle of a write leaves the previous file whole."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def atomic_write_bytes(path: Path, data: bytes, *, replace: bool = True) -> None:
    """Write `path` whole or not at all. replace=False refuses an existing file (FileExistsError)
    without a window between the check and the write: the file is linked in, never renamed over."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:  # owns fd from here: closed whatever fails below
            os.fchmod(f.fileno(), 0o666 & ~_umask())  # mkstemp makes 0600; records are shared files
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails if path exists, atomically
            os.unlink(tmp)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):  # never mask the failure that got us here
            os.unlink(tmp)
        raise
    _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable: until its folder is synced, a power cut may undo it."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on a folder; the data itself is synced
        pass
    finally:
        os.close(fd)


def _read_umask() -> int:
    # os.umask can only be read by setting it; done once, at import, before any thread writes.
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def _umask() -> int:
    return _UMASK


def atomic_write_text(path: Path, text: str, *, replace: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), replace=replace)
