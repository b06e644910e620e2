"""Shared-library arms checked without a GPU: `plan check`, and `compare` before the driver opens.

A library is read as an ELF file first — a shared object, built for this machine, exporting the
entry point and the ABI and error symbols the plan names — without dlopen: a library built for
another machine, or one whose dependencies are missing here, is still described precisely instead
of surfacing as a loader error (or as "no NVIDIA driver") on the GPU host.

Only the ABI version needs the library loaded, since it is a function's return value. That call
runs in a child process: a library's constructors run on load, and one that crashes or initialises
CUDA must not take `plan check` down with it, nor leave a handle in the process that will later
load both arms side by side (see `qualify.run.library`).
"""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

from qualify.build.elf import ET_DYN, HOST_MACHINES, STT_FUNC, ElfProblem, machine_name, parse
from qualify.errors import PlanError
from qualify.io import MAX_LIBRARY_BYTES, UnreadableFile, map_limited
from qualify.plan.model import ARM_SIDES, LibraryArm

STT_GNU_IFUNC = 10
ABI_TIMEOUT_S = 30

_ABI_CHILD = """
import ctypes, sys
try:
    lib = ctypes.CDLL(sys.argv[1])
except OSError as exc:
    print("load", exc); sys.exit(0)
fn = getattr(lib, sys.argv[2])
fn.restype, fn.argtypes = ctypes.c_int, []
print("abi", int(fn()))
"""


def host_machine() -> int | None:
    return HOST_MACHINES.get(platform.machine().lower())


def check_library(
    path: Path, arm: LibraryArm, field: str, *, shown: str | Path | None = None, need_load: bool = False
) -> None:
    """Refuse `path` as the library of `arm` (PlanError naming `field`, the arm's field prefix).

    need_load: a library that cannot be loaded here is an error (compare, about to call it);
    otherwise (plan check, perhaps on a machine without the library's dependencies) its ABI
    version is left to the run.
    """
    label = shown if shown is not None else path
    if not path.is_file():
        raise PlanError("no such library", file=label, field=f"{field}.library")
    try:
        with map_limited(path, MAX_LIBRARY_BYTES) as data:  # mapped: only the headers and tables read
            elf = parse(data)
            symbols = _exports(elf, label, field)
    except UnreadableFile as exc:
        raise PlanError(exc.message, file=label, field=f"{field}.library") from None
    except ElfProblem as exc:
        raise PlanError(f"not a shared library: {exc}", file=label, field=f"{field}.library") from None
    host = host_machine()
    for key in ("symbol", "abi_symbol", "error_symbol"):
        name = getattr(arm, key)
        if name is None:
            continue
        if name not in symbols:
            raise PlanError(f"the library exports no function {name!r}", file=label, field=f"{field}.{key}")
        if symbols[name] not in (STT_FUNC, STT_GNU_IFUNC):
            raise PlanError(f"{name!r} is exported but is not a function", file=label, field=f"{field}.{key}")
    if arm.abi_symbol is not None and (need_load or host is not None):
        kind, value = _call_abi(path, arm.abi_symbol)
        if kind == "abi" and int(value) != arm.abi_version:
            raise PlanError(
                f"ABI version {value}, the plan requires {arm.abi_version}", file=label, field=f"{field}.abi_version"
            )
        if kind != "abi" and need_load:
            raise PlanError(f"cannot load to read its ABI version: {value}", file=label, field=f"{field}.library")


def _exports(elf, label, field: str) -> dict[str, int]:
    """The dynamic symbols of a shared object built for this machine (PlanError otherwise)."""
    if elf.type != ET_DYN:
        raise PlanError(
            f"not a shared library: an ELF file of type {elf.type}, not a shared object (type {ET_DYN})",
            file=label,
            field=f"{field}.library",
        )
    host = host_machine()
    if host is not None and elf.machine != host:
        raise PlanError(
            f"built for {machine_name(elf.machine)}, this machine is {machine_name(host)}",
            file=label,
            field=f"{field}.library",
        )
    try:
        return elf.dynamic_symbols()
    except ElfProblem as exc:
        raise PlanError(f"unreadable symbol table: {exc}", file=label, field=f"{field}.library") from None


def _call_abi(path: Path, symbol: str) -> tuple[str, str]:
    """("abi", version) or ("load"/"crash", why), from a child process that loads the library."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _ABI_CHILD, str(path.resolve()), symbol],
            capture_output=True,
            text=True,
            timeout=ABI_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return "crash", f"{symbol}() did not return within {ABI_TIMEOUT_S} s"
    kind, _, value = done.stdout.strip().partition(" ")
    if done.returncode != 0 or kind not in ("abi", "load"):
        return "crash", f"{symbol}() ended the process (exit status {done.returncode})"
    return kind, value


def check_plan_libraries(loaded) -> None:
    """`plan check`: every library a plan names itself (arms without one are bound by `compare`)."""
    for side in ARM_SIDES:
        arm = loaded.plan.arm(side)
        if isinstance(arm, LibraryArm) and arm.library is not None:
            path = loaded.library(side).resolve()
            check_library(path, arm, f"arms.{side}", shown=arm.library)


def check_compare_libraries(loaded, libraries: dict[str, Path]) -> None:
    """`compare`: the two .so files given on the command line, before the driver is opened."""
    for side, path in libraries.items():
        arm = loaded.plan.arm(side)
        if isinstance(arm, LibraryArm):
            check_library(Path(path), arm, f"arms.{side}", shown=path, need_load=True)
