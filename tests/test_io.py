"""Atomic file writes: a crash at any step leaves the previous file whole and no stray file.

A crash is simulated by making one step of a write raise (the rename, the write itself, the
fsync).
"""

from __future__ import annotations

import os
import stat
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


@pytest.mark.parametrize("step", ["replace", "fsync", "write", "fchmod"])
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
