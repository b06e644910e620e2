"""File access with limits: bounded reads of regular files, and durable writes (a crash in the
middle of a write leaves the previous file whole)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path

from qualify.errors import EnvironmentProblem, QualifyError

# Caps per kind of file qualify reads. Each is far above any real file of the kind and far below
# what would exhaust memory; a file over its cap is refused before it is read.
MAX_PLAN_BYTES = 4 * 2**20
MAX_LOCK_BYTES = 4 * 2**20
MAX_SOURCE_BYTES = 16 * 2**20  # a CUDA source or header
MAX_JSON_BYTES = 64 * 2**20  # results.json, a trial file, a ledger
MAX_TEXT_BYTES = 16 * 2**20  # a record's README


class UnreadableFile(QualifyError):
    """A file qualify must read is not a regular file, is too large, or cannot be opened (exit 2)."""


def read_limited(path: Path, limit: int, *, field: str | None = None) -> bytes:
    """The bytes of the regular file at `path`, at most `limit` of them, or UnreadableFile.

    The file is opened without blocking and checked through its descriptor before any byte is
    read: a FIFO (which would block forever), a device such as /dev/zero (which never ends), a
    folder, or a file that grows past `limit` while it is read is refused at once, and nothing
    that replaces the path between a check and the read can slip in.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UnreadableFile("no such file", file=path, field=field) from None
    except IsADirectoryError:
        raise UnreadableFile("cannot read: a folder, not a file", file=path, field=field) from None
    except OSError as exc:
        raise UnreadableFile(f"cannot read: {exc.strerror or exc}", file=path, field=field) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise UnreadableFile("cannot read: a folder, not a file", file=path, field=field)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableFile("cannot read: not a regular file (a device, FIFO or socket)", file=path, field=field)
        if info.st_size > limit:
            raise UnreadableFile(
                f"cannot read: {info.st_size} bytes, more than the {limit} allowed", file=path, field=field
            )
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise UnreadableFile(f"cannot read: grew past the {limit} bytes allowed", file=path, field=field)
    except OSError as exc:
        raise UnreadableFile(f"cannot read: {exc.strerror or exc}", file=path, field=field) from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_text_limited(path: Path, limit: int, *, field: str | None = None) -> str:
    """`read_limited` decoded as UTF-8; other bytes are refused with the file named."""
    data = read_limited(path, limit, field=field)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(f"cannot read: not UTF-8 text (byte {exc.start})", file=path, field=field) from None


def write_problem(path: Path, exc: OSError) -> QualifyError:
    """The one-line error for a write the system refused, naming the file: exit 5 for the host's
    state (read-only, full, no permission), exit 2 when the path itself is wrong (a folder)."""
    if isinstance(exc, IsADirectoryError) or exc.errno == errno.EISDIR:
        return UnreadableFile("is a folder; give a file path", file=path)
    if isinstance(exc, NotADirectoryError) or exc.errno == errno.ENOTDIR:
        return UnreadableFile("a parent of this path is not a folder", file=path)
    what = {
        errno.ENOSPC: "no space left on the device",
        errno.EDQUOT: "disk quota exceeded",
        errno.EROFS: "read-only file system",
        errno.EACCES: "permission denied",
        errno.EPERM: "operation not permitted",
    }.get(exc.errno, exc.strerror or str(exc))
    return EnvironmentProblem(f"cannot write: {what}", file=path)


def atomic_write_bytes(path: Path, data: bytes, *, replace: bool = True) -> None:
    """Write `path` whole or not at all. replace=False refuses an existing file (FileExistsError)
    without a window between the check and the write: the file is linked in, never renamed over."""
    path = Path(path)
    if path.is_dir():
        raise UnreadableFile("is a folder; give a file path", file=path)
    try:
        _write(path, data, replace)
    except FileExistsError:
        raise  # the caller's "would overwrite" (exit 3) is more precise than a write failure
    except OSError as exc:
        raise write_problem(path, exc) from None


def _write(path: Path, data: bytes, replace: bool) -> None:
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
