"""Bounded reads and safe writes.

Reads: every reader refuses what is not a regular file within its cap (/dev/zero behind a link, a
FIFO, a socket, a folder, a 20 GiB sparse file) before reading a byte, and with a root refuses a
link that leaves it. Writes: a crash at any step leaves the previous file whole and no stray file
(simulated by making one step raise: the rename, the write itself, the fsync); under a root, no
link is ever written through.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import time
from pathlib import Path

import pytest

from qualify import io as qio


class Crash(Exception):
    """Stands for the process dying at this point."""


def crash(*args, **kwargs):
    raise Crash


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()


# ---------------------------------------------------------------------------------------------
# atomic_write_bytes


@pytest.mark.parametrize("step", ["replace", "fsync", "write"])
def test_a_crash_mid_write_keeps_the_previous_file_whole(tmp_path, monkeypatch, step):
    path = tmp_path / "results.json"
    qio.atomic_write_bytes(path, b'{"old": true}\n')
    fds = _open_fds()
    if step == "write":
        real_fdopen = os.fdopen

        def fdopen(fd, mode="r", *a, **kw):
            f = real_fdopen(fd, mode, *a, **kw)

            class Half:
                def __getattr__(self, name):
                    return getattr(f, name)

                def __enter__(self):
                    return self

                def __exit__(self, *exc):
                    return f.__exit__(*exc)

                def write(self, data):
                    f.write(data[: len(data) // 2])  # half the bytes reach the temp file, then death
                    raise Crash

            return Half()

        monkeypatch.setattr(qio.os, "fdopen", fdopen)
    else:
        monkeypatch.setattr(qio.os, step, crash)
    with pytest.raises(Crash):
        qio.atomic_write_bytes(path, b'{"new": true, "padding": "' + b"x" * 100_000 + b'"}\n')
    monkeypatch.undo()
    assert path.read_bytes() == b'{"old": true}\n'
    assert leftovers(tmp_path) == []
    assert _open_fds() == fds  # the temporary file's descriptor was closed too


def test_a_crash_before_the_first_write_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(qio.os, "replace", crash)
    with pytest.raises(Crash):
        qio.atomic_write_text(tmp_path / "README.md", "# record\n")
    assert list(tmp_path.iterdir()) == []


def test_the_rename_is_synced_through_its_folder(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        real_fsync(fd)

    monkeypatch.setattr(qio.os, "fsync", fsync)
    qio.atomic_write_bytes(tmp_path / "trial-1.json", b"{}")
    assert synced == [False, True]  # the data, then the folder that holds the new name


def test_written_files_follow_the_umask_not_mkstemps_0600(tmp_path):
    old = os.umask(0o022)
    try:
        qio.atomic_write_bytes(tmp_path / "shared.json", b"{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "shared.json").stat().st_mode) == 0o644


# ---------------------------------------------------------------------------------------------
# bounded reads


def _read_whole(path, limit, **kw):
    return qio.read_limited(path, limit, **kw)


def _hash(path, limit, **kw):
    return qio.sha256_limited(path, limit, **kw)


def _open(path, limit, **kw):
    with qio.open_limited(path, limit, **kw) as f:
        return f.read(16)


def _map(path, limit, **kw):
    with qio.map_limited(path, limit, **kw) as data:
        return bytes(data[:16])


READERS = [_read_whole, _hash, _open, _map]


def _hostile(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / kind
    if kind == "dev-zero-link":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "sparse-20-gib":
        with open(path, "wb") as f:
            f.truncate(20 << 30)
    return path


@pytest.mark.parametrize("reader", READERS, ids=lambda r: r.__name__[1:])
@pytest.mark.parametrize(
    "kind, fragment",
    [
        ("dev-zero-link", "not a regular file"),
        ("fifo", "not a regular file"),
        ("folder", "a folder"),
        ("sparse-20-gib", "more than the"),
    ],
)
def test_every_reader_refuses_before_reading(tmp_path, reader, kind, fragment):
    path = _hostile(tmp_path, kind)
    start = time.monotonic()
    with pytest.raises(qio.UnreadableFile, match=fragment) as info:
        reader(path, qio.MAX_LIBRARY_BYTES)
    assert time.monotonic() - start < 2  # refused at the descriptor, not after reading
    assert info.value.file == str(path)


@pytest.mark.parametrize("reader", READERS, ids=lambda r: r.__name__[1:])
def test_a_socket_is_refused(tmp_path, reader):
    path = tmp_path / "s"
    with contextlib.closing(socket.socket(socket.AF_UNIX)) as sock:
        sock.bind(str(path))
        with pytest.raises(qio.UnreadableFile, match="not a regular file|No such device"):
            reader(path, 1 << 20)


@pytest.mark.parametrize("reader", READERS, ids=lambda r: r.__name__[1:])
def test_with_a_root_a_link_must_resolve_inside_it(tmp_path, reader):
    root, outside = tmp_path / "record", tmp_path / "secret"
    root.mkdir()
    outside.write_bytes(b"outside the record")
    (root / "inside").write_bytes(b"inside the record")
    (root / "out").symlink_to(outside)
    (root / "in").symlink_to("inside")
    with pytest.raises(qio.UnreadableFile, match="resolves to .*secret, outside"):
        reader(root / "out", 1 << 20, root=root)
    assert reader(root / "in", 1 << 20, root=root) == reader(root / "inside", 1 << 20, root=root)
    assert reader(root / "out", 1 << 20) == reader(outside, 1 << 20)  # no root: the user named it


def test_the_streamed_hash_is_the_hash_of_the_bytes(tmp_path):
    import hashlib

    path = tmp_path / "f"
    path.write_bytes(os.urandom(3 << 20))
    assert qio.sha256_limited(path, 4 << 20) == hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(qio.UnreadableFile, match="more than the"):
        qio.sha256_limited(path, 2 << 20)


# ---------------------------------------------------------------------------------------------
# writes under a root: never through a link


def test_a_link_where_a_record_file_is_written_is_refused(tmp_path):
    root, target = tmp_path / "record", tmp_path / "outside.json"
    root.mkdir()
    target.write_bytes(b"keep")
    (root / "results.json").symlink_to(target)
    with pytest.raises(qio.LinkRefused, match="symbolic link"):
        qio.atomic_write_bytes(root / "results.json", b"{}", root=root)
    (root / "dangling.json").symlink_to(tmp_path / "created.json")
    with pytest.raises(qio.LinkRefused):
        qio.atomic_write_bytes(root / "dangling.json", b"{}", replace=False, root=root)
    assert target.read_bytes() == b"keep" and not (tmp_path / "created.json").exists()
    assert leftovers(root) == []


def test_a_linked_folder_on_the_way_is_refused(tmp_path):
    root, elsewhere = tmp_path / "record", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    (root / "trials").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(qio.LinkRefused) as info:
        qio.atomic_write_bytes(root / "trials" / "trial-1.json", b"{}", root=root)
    assert info.value.file == str(root / "trials")
    with pytest.raises(qio.LinkRefused):
        qio.open_in_record(root / "trials" / "x", root)
    assert list(elsewhere.iterdir()) == []
    qio.atomic_write_bytes(root / "plots" / "a.svg", b"<svg/>", root=root)  # missing folders are made
    assert (root / "plots" / "a.svg").read_bytes() == b"<svg/>"


def test_an_appended_file_that_is_a_link_is_refused(tmp_path):
    root, target = tmp_path / "record", tmp_path / "ledger"
    root.mkdir()
    target.write_bytes(b"")
    (root / "ledger.jsonl").symlink_to(target)
    with pytest.raises(qio.LinkRefused):
        qio.open_in_record(root / "ledger.jsonl", root, append=True)
    fd = qio.open_in_record(root / "own.jsonl", root, append=True)
    os.close(fd)
    assert (root / "own.jsonl").is_file() and target.read_bytes() == b""


def test_a_folder_swapped_for_a_link_after_the_check_is_refused_by_what_was_opened(tmp_path, monkeypatch):
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("no /proc: the descriptor's path cannot be read back")
    root, elsewhere = tmp_path / "record", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    (elsewhere / "trial-1.json").write_bytes(b"{}")
    (root / "trials").symlink_to(elsewhere, target_is_directory=True)
    # the resolution sees the folder as it was; the open finds the link put there since
    monkeypatch.setattr(qio.os.path, "realpath", os.path.abspath)
    with pytest.raises(qio.UnreadableFile, match="resolves to .*elsewhere/trial-1.json, outside"):
        qio.read_limited(root / "trials" / "trial-1.json", 1 << 20, root=root)
