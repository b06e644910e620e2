"""Shared-library arms: which build each side uses, that a record keeps comparing one pair of
builds, and loading an entry point with what the trial records about it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from qualify.errors import FrozenInputChanged, UsageError
from qualify.plan.digest import sha256_file
from qualify.plan.load import LoadedPlan
from qualify.plan.model import ARM_SIDES, LibraryArm
from qualify.results.model import LibraryInfo
from qualify.results.store import Record
from qualify.run.library import LibraryEntry, load_library


def check_binding(loaded: LoadedPlan, record: Record, given: Mapping[str, Path]) -> None:
    """A record compares one pair of builds: another build is refused before the ledger moves."""
    for side in ARM_SIDES:
        if not isinstance(loaded.plan.arm(side), LibraryArm):
            continue
        path = _required_path(loaded, side, given)
        if not path.is_file():
            continue  # reported with its field when the library is loaded
        digest = sha256_file(path)
        for t in record.trials():
            info = t.libraries.get(side)
            if info is not None and info.sha256 != digest:
                raise FrozenInputChanged(
                    f"the record's trials compared another {side} library; a different build needs a new record",
                    file=path,
                )


def load(loaded: LoadedPlan, side: str, arm: LibraryArm, given: Mapping[str, Path]) -> tuple[LibraryEntry, LibraryInfo]:
    """The side's entry point, opened and its ABI called, and the facts the trial keeps of it."""
    path = _required_path(loaded, side, given)
    entry = load_library(side, path, arm, f"arms.{side}.library")
    info = LibraryInfo(path=str(path), sha256=entry.sha256, symbol=arm.symbol, abi_version=entry.abi_version)
    return entry, info


def _required_path(loaded: LoadedPlan, side: str, given: Mapping[str, Path]) -> Path:
    path = loaded.library(side, given)
    if path is None:
        raise UsageError(
            f"the {side} arm names no library: give it to `qualify compare`",
            file=loaded.path,
            field=f"arms.{side}.library",
        )
    return path
