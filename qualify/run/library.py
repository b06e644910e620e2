"""Shared-library arms: a public C entry point loaded from its own path and called with ctypes.

Base and candidate often export the same symbols. Each is opened with the default RTLD_LOCAL mode
(never RTLD_GLOBAL, which makes one library's internal calls resolve into the other) and every
symbol is looked up through its own handle; the same file given twice is copied first, since the
loader would otherwise hand back the first handle.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from qualify.errors import DeviceError, PlanError
from qualify.plan.digest import sha256_file
from qualify.plan.files import shared_object_problem
from qualify.plan.model import LibraryArm
from qualify.run.cabi import C_TYPES


class EntryPointFailed(DeviceError):
    """The entry point returned a non-zero status."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


@dataclass
class LibraryEntry:
    """One loaded entry point; `call` queues its work on the given stream."""

    label: str
    path: Path  # the path given (the record names it)
    sha256: str
    handle: ctypes.CDLL
    function: object
    error_function: object | None
    abi_version: int | None

    def call(self, args: list[tuple[str, int | float]], stream_handle: int) -> None:
        status = self.function(*[value for _, value in args], ctypes.c_void_p(stream_handle))
        if status != 0:
            message = ""
            if self.error_function is not None:
                raw = self.error_function(status)
                message = f": {raw.decode(errors='replace')}" if raw else ""
            raise EntryPointFailed(f"{self.label} returned {status}{message}", status)


_opened: dict[str, Path] = {}  # real path of every library opened in this process


def load_library(label: str, path: Path, arm: LibraryArm, field: str) -> LibraryEntry:
    path = Path(path)
    if not path.is_file():
        raise PlanError("no such library", file=path, field=field)
    problem = shared_object_problem(path)
    if problem:
        raise PlanError(f"not a shared library: {problem}", file=path, field=field)
    real = os.path.realpath(path)
    load_from = Path(real)
    if real in _opened:
        # the loader returns the handle it already has for a path: a second copy needs a new path
        folder = Path(tempfile.mkdtemp(prefix="qualify-lib-"))
        load_from = folder / f"{label}-{path.name}"
        shutil.copyfile(real, load_from)
    try:
        handle = ctypes.CDLL(str(load_from))  # RTLD_LOCAL
    except OSError as exc:
        raise PlanError(f"cannot load as a shared library: {exc}", file=path, field=field) from None
    _opened[os.path.realpath(load_from)] = path
    _opened.setdefault(real, path)
    try:
        function = getattr(handle, arm.symbol)
    except AttributeError:
        raise PlanError(
            f"the library exports no symbol {arm.symbol!r}", file=path, field=f"{field.rsplit('.', 1)[0]}.symbol"
        ) from None
    function.restype = ctypes.c_int
    function.argtypes = [C_TYPES[t] for t in arm.signature] + [ctypes.c_void_p]
    abi = None
    if arm.abi_symbol is not None:
        try:
            abi_fn = getattr(handle, arm.abi_symbol)
        except AttributeError:
            raise PlanError(
                f"the library exports no ABI symbol {arm.abi_symbol!r}",
                file=path,
                field=f"{field.rsplit('.', 1)[0]}.abi_symbol",
            ) from None
        abi_fn.restype, abi_fn.argtypes = ctypes.c_int, []
        abi = int(abi_fn())
        if abi != arm.abi_version:
            raise PlanError(
                f"ABI version {abi}, the plan requires {arm.abi_version}",
                file=path,
                field=f"{field.rsplit('.', 1)[0]}.abi_version",
            )
    error_fn = None
    if arm.error_symbol is not None:
        error_fn = getattr(handle, arm.error_symbol, None)
        if error_fn is not None:
            error_fn.restype, error_fn.argtypes = ctypes.c_char_p, [ctypes.c_int]
    return LibraryEntry(label, path, sha256_file(path), handle, function, error_fn, abi)
