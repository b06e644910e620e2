"""Landlock, through raw system calls: a process gives up opening files outside a few folders.

The compile worker (qualify.build.compile_worker) calls `restrict` after NVRTC is loaded and
before it compiles, leaving itself NVRTC's own library folder (NVRTC loads its builtins library
lazily) and one private folder for the time trace. Every source and header reaches NVRTC in
memory, so a file the compile might name (a path a macro built, `/proc/self/environ`) cannot be
opened. Landlock exists since Linux 5.13; where the kernel lacks it (or a seccomp policy hides
it) `support()` says why and the compile runs unconfined, with that reason in its build log.
"""

from __future__ import annotations

import ctypes
import os
import platform
from pathlib import Path

_SYS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}  # create_ruleset, add_rule, restrict_self
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# access rights of Landlock ABI 1 (bits 0-12): execute, write, read file, read dir, remove dir/file,
# make char/dir/reg/sock/fifo/block/sym
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_ALL_V1 = (1 << 13) - 1
_READ = _EXECUTE | _READ_FILE | _READ_DIR


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def support() -> tuple[int, str]:
    """(Landlock ABI version, '') when the kernel enforces it, else (0, the reason)."""
    if platform.system() != "Linux":
        return 0, f"Landlock is Linux's; this is {platform.system()}"
    calls = _SYS.get(platform.machine())
    if calls is None:
        return 0, f"no Landlock system-call numbers known for {platform.machine()}"
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(ctypes.c_long(calls[0]), None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    if abi < 0:
        err = ctypes.get_errno()
        return 0, f"the kernel {platform.release()} refuses Landlock ({os.strerror(err)})"
    return int(abi), ""


def describe() -> str:
    """One line for a build log: how the compile worker is confined on this host."""
    abi, why = support()
    return f"landlock (ABI {abi})" if abi else f"none: {why}"


def restrict(readable: list[Path], writable: list[Path]) -> None:
    """Confine this process for good: files open for reading only under `readable` (and
    `writable`), for writing only under `writable`. Raises OSError when Landlock refuses."""
    calls = _SYS[platform.machine()]
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    handled = ctypes.c_uint64(_ALL_V1)
    ruleset = libc.syscall(ctypes.c_long(calls[0]), ctypes.byref(handled), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        for folder, access in [*((p, _READ) for p in readable), *((p, _ALL_V1) for p in writable)]:
            fd = os.open(folder, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneath(allowed_access=access, parent_fd=fd)
                if libc.syscall(ctypes.c_long(calls[1]), ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) < 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule {folder}")
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(ctypes.c_long(calls[2]), ruleset, 0) < 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)
