"""File access with limits: bounded reads of regular files, and durable writes (a crash in the
middle of a write leaves the previous file whole).

Every file qualify reads goes through `open_regular` (directly, or through `read_limited`,
`read_text_limited`, `sha256_limited`, `open_limited` or `map_limited`): the path is opened without
blocking, checked through the descriptor it opened (fstat, never stat-then-open) and refused unless
it is a regular file within its kind's cap; with a `root` (a record folder, the repository) a path
whose symbolic links resolve outside the root is refused, and the resolved file is opened with
O_NOFOLLOW so a link swapped in after the check is refused too. No reader keeps more than its cap
of any input in memory: a folder, /dev/zero, a FIFO, a socket or a 20 GiB sparse file is refused
before a byte is read.

Writes into a record pass `root`: every folder from the root down is opened with O_NOFOLLOW, and
the file is created, renamed or appended to relative to that folder's descriptor, so a symbolic
link planted inside the record (a `.lock`, `ledger.jsonl`, `plan.json`, `trials/`, `plots/`) is
refused, never written through.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import mmap
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from qualify.errors import EnvironmentProblem, QualifyError

# Caps per kind of file qualify reads. Each is far above any real file of the kind and far below
# what would exhaust memory; a file over its cap is refused before it is read.
MAX_PLAN_BYTES = 4 * 2**20
MAX_LOCK_BYTES = 4 * 2**20
MAX_SOURCE_BYTES = 16 * 2**20  # a CUDA source or header
MAX_JSON_BYTES = 64 * 2**20  # results.json, a trial file, a ledger
MAX_TEXT_BYTES = 16 * 2**20  # a record's README
MAX_PLOT_BYTES = 64 * 2**20  # one of a record's SVG plots (a few hundred KB in practice)
# A trial's raw samples as stored (.npz, compressed; a few hundred KB in practice): streamed
# through sha256 and zipfile (only `report --merge` holds one whole, to hash and copy the same
# bytes); members are capped once expanded by qualify.results.samples.MAX_SAMPLES_BYTES.
MAX_NPZ_BYTES = 256 << 20
# A shared library: mapped, never read whole (cuBLAS-sized libraries are under 1 GiB); only the
# sections a reader asks for are touched, each under qualify.build.elf's section cap.
MAX_LIBRARY_BYTES = 4 << 30

_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class UnreadableFile(QualifyError):
    """A file qualify must read is not a regular file, is too large, or cannot be opened (exit 2)."""


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _outside(target: str, root: Path) -> str:
    return f"refused: resolves to {target}, outside {root} (qualify follows no link out of it)"


def _opened_path(fd: int) -> str | None:
    """Where the descriptor's file is, as the kernel names it (Linux); None where unknown."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def open_regular(path: Path, limit: int, *, root: Path | None = None, field: str | None = None) -> int:
    """A descriptor of the regular file at `path`, at most `limit` bytes long, or UnreadableFile.

    The file is opened without blocking and checked through its descriptor before any byte is
    read: a FIFO (which would block forever), a device such as /dev/zero (which never ends), a
    socket, a folder or a file over `limit` is refused at once. With `root`, the path must resolve
    inside it (a symbolic link pointing elsewhere is refused) and the resolved path is opened with
    O_NOFOLLOW, so nothing that replaces it between the check and the open can slip in.
    """
    path = Path(path)
    target = os.fspath(path)
    flags = _READ_FLAGS
    real_root = None
    if root is not None:
        target, real_root = os.path.realpath(path), os.path.realpath(root)
        if not _inside(target, real_root):
            raise UnreadableFile(_outside(target, root), file=path, field=field)
        flags |= _NOFOLLOW
    try:
        fd = os.open(target, flags)
    except FileNotFoundError:
        raise UnreadableFile("no such file", file=path, field=field) from None
    except IsADirectoryError:
        raise UnreadableFile("cannot read: a folder, not a file", file=path, field=field) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnreadableFile(
                "refused: replaced by a symbolic link while it was read", file=path, field=field
            ) from None
        raise UnreadableFile(f"cannot read: {exc.strerror or exc}", file=path, field=field) from None
    try:
        opened = _opened_path(fd)
        if real_root is not None and opened is not None and not _inside(opened, real_root):
            # a folder on the way was swapped for a link after the path was resolved
            raise UnreadableFile(_outside(opened, root), file=path, field=field)
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise UnreadableFile("cannot read: a folder, not a file", file=path, field=field)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableFile("cannot read: not a regular file (a device, FIFO or socket)", file=path, field=field)
        if info.st_size > limit:
            raise UnreadableFile(
                f"cannot read: {info.st_size} bytes, more than the {limit} allowed", file=path, field=field
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def _chunks(fd: int, path: Path, limit: int, field: str | None) -> Iterator[bytes]:
    """The file's bytes in chunks of at most 1 MiB; refused once more than `limit` arrive (a file
    that grows while it is read)."""
    size = 0
    while True:
        try:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
        except OSError as exc:
            raise UnreadableFile(f"cannot read: {exc.strerror or exc}", file=path, field=field) from None
        if not chunk:
            return
        size += len(chunk)
        if size > limit:
            raise UnreadableFile(f"cannot read: grew past the {limit} bytes allowed", file=path, field=field)
        yield chunk


def read_limited(path: Path, limit: int, *, root: Path | None = None, field: str | None = None) -> bytes:
    """The bytes of the regular file at `path`, at most `limit` of them, or UnreadableFile
    (`open_regular` says what is refused)."""
    path = Path(path)
    fd = open_regular(path, limit, root=root, field=field)
    try:
        return b"".join(_chunks(fd, path, limit, field))
    finally:
        os.close(fd)


def sha256_limited(path: Path, limit: int, *, root: Path | None = None, field: str | None = None) -> str:
    """sha256 of the regular file at `path`, streamed 1 MiB at a time: memory stays at one chunk
    whatever the file's size, and a file over `limit` is refused before it is hashed."""
    path = Path(path)
    fd = open_regular(path, limit, root=root, field=field)
    h = hashlib.sha256()
    try:
        for chunk in _chunks(fd, path, limit, field):
            h.update(chunk)
    finally:
        os.close(fd)
    return h.hexdigest()


@contextlib.contextmanager
def open_limited(path: Path, limit: int, *, root: Path | None = None, field: str | None = None) -> Iterator[BinaryIO]:
    """The checked file opened for reading (for a reader that seeks, such as zipfile); its size
    was at most `limit` when opened."""
    fd = open_regular(Path(path), limit, root=root, field=field)
    with os.fdopen(fd, "rb") as f:
        yield f


@contextlib.contextmanager
def map_limited(path: Path, limit: int, *, root: Path | None = None, field: str | None = None) -> Iterator[bytes]:
    """The checked file mapped read-only (b"" when empty): its bytes are paged in only where a
    reader looks, so a large library costs address space, not memory."""
    fd = open_regular(Path(path), limit, root=root, field=field)
    try:
        if os.fstat(fd).st_size == 0:
            yield b""
            return
        try:
            mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            raise UnreadableFile(f"cannot map: {exc}", file=path, field=field) from None
        try:
            yield mapped
        finally:
            with contextlib.suppress(BufferError):  # a view still held elsewhere: freed with it
                mapped.close()
    finally:
        os.close(fd)


def read_text_limited(path: Path, limit: int, *, root: Path | None = None, field: str | None = None) -> str:
    """`read_limited` decoded as UTF-8; other bytes are refused with the file named."""
    data = read_limited(path, limit, root=root, field=field)
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


class LinkRefused(UnreadableFile):
    """A symbolic link where qualify writes into a record: refused, never written through (exit 2)."""


def atomic_write_bytes(
    path: Path, data: bytes | memoryview, *, replace: bool = True, root: Path | None = None, durable: bool = True
) -> None:
    """Write `path` whole or not at all. replace=False refuses an existing file (FileExistsError)
    without a window between the check and the write: the file is linked in, never renamed over.

    With `root` (a record folder; `path` lies under it), every folder from `root` down is opened
    with O_NOFOLLOW (created where missing) and a symbolic link in the way, the file's own name
    included, is refused (LinkRefused), never written through.

    durable=False skips the fsyncs: for scratch files that die with the run (a run's shared
    inputs), where a crash loses nothing and a flush of hundreds of MB would cost seconds.
    """
    path = Path(path)
    if root is None and path.is_dir():
        raise UnreadableFile("is a folder; give a file path", file=path)
    try:
        folder = _folder_fd(path, root)
        try:
            _write(folder, path, data, replace, durable)
        finally:
            os.close(folder)
    except FileExistsError:
        raise  # the caller's "would overwrite" (exit 3) is more precise than a write failure
    except OSError as exc:
        raise write_problem(path, exc) from None


def open_in_record(path: Path, root: Path, *, append: bool = False) -> int:
    """A read-write descriptor of the regular file `path` under `root`, created if missing, opened
    without following a link at any step (LinkRefused otherwise); O_APPEND with `append`."""
    path = Path(path)
    try:
        folder = _folder_fd(path, root)
        try:
            flags = os.O_RDWR | os.O_CREAT | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | (os.O_APPEND if append else 0)
            try:
                fd = os.open(path.name, flags, 0o666, dir_fd=folder)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise LinkRefused(_LINK_REFUSED, file=path) from None
                raise
        finally:
            os.close(folder)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UnreadableFile("cannot write: not a regular file (a device, FIFO or socket)", file=path)
    except OSError as exc:
        raise write_problem(path, exc) from None
    return fd


def append_text(path: Path, text: str) -> None:
    """Append `text` to the regular file `path` (created if missing) in one write, through no link:
    a link in its place is refused (LinkRefused), a FIFO or device too."""
    path = Path(os.path.abspath(path))
    fd = open_in_record(path, path.parent, append=True)
    try:
        with os.fdopen(fd, "ab") as f:
            f.write(text.encode("utf-8"))
    except OSError as exc:
        raise write_problem(path, exc) from None


def remove_in_record(path: Path, root: Path) -> None:
    """Remove the file `path` under `root` (a link is removed itself; no folder on the way may be one)."""
    path = Path(path)
    try:
        folder = _folder_fd(path, root, create=False)
        try:
            os.unlink(path.name, dir_fd=folder)
        finally:
            os.close(folder)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise write_problem(path, exc) from None


_LINK_REFUSED = "refused: a symbolic link where qualify writes; qualify never writes through one"


def _folder_fd(path: Path, root: Path | None, *, create: bool = True) -> int:
    """A descriptor of `path`'s folder. With `root`, reached from it one component at a time with
    O_NOFOLLOW, each created where missing (`create`); a link among them is refused."""
    dir_flags = os.O_RDONLY | _DIRECTORY | getattr(os, "O_CLOEXEC", 0)
    if root is None:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path.parent, dir_flags)
    root = Path(root)
    if not path.is_relative_to(root) or ".." in path.relative_to(root).parts:
        raise LinkRefused(f"refused: outside {root}, the folder qualify writes into", file=path)
    parts = path.relative_to(root).parts[:-1]
    if create:
        root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, dir_flags)
    try:
        for i, part in enumerate(parts):
            if part in ("", ".", ".."):
                raise LinkRefused("refused: a path that leaves the record", file=path)
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=fd)
            try:
                inner = os.open(part, dir_flags | _NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and stat.S_ISLNK(
                    os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode
                ):
                    raise LinkRefused(_LINK_REFUSED, file=root.joinpath(*parts[: i + 1])) from None
                raise
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write(folder: int, path: Path, data: bytes | memoryview, replace: bool, durable: bool = True) -> None:
    name = path.name
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    # created by name relative to the folder's descriptor, O_EXCL | O_NOFOLLOW: a fresh file, never
    # a link; mode 0666 less the umask (records are shared files)
    fd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o666, dir_fd=folder
    )
    try:
        with os.fdopen(fd, "wb") as f:  # owns fd from here: closed whatever fails below
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        with contextlib.suppress(FileNotFoundError):  # a link in the file's place is refused, never replaced
            if stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
                raise LinkRefused(_LINK_REFUSED, file=path)
        if replace:
            os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
        else:
            os.link(tmp, name, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False)  # fails if it exists
            os.unlink(tmp, dir_fd=folder)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):  # never mask the failure that got us here
            os.unlink(tmp, dir_fd=folder)
        raise
    if durable:
        with contextlib.suppress(OSError):  # some filesystems refuse fsync on a folder; the data is synced
            os.fsync(folder)


def atomic_write_text(path: Path, text: str, *, replace: bool = True, root: Path | None = None) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), replace=replace, root=root)
