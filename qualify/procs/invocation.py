"""The invocation: what `run` and `compare` resolve once, in the process the user started, and
every process they start reads instead of the command line.

The process the user started loads the frozen plan and refuses it unless `plan check` passes,
binds the libraries `compare` names and checks them, and finds the record folder: `resolve`.
A device worker of `--devices` and each trial process start from that value, so none of it is
done again (nor can come out otherwise: a plan edited while the run goes on is not what the
children run; a build the plan refuses cannot reach one by another path).

It travels as a file in the parent's private temporary folder (mode 0700, removed when the run
ends), written with pickle: the resolved plan is validated models and resolved cases, and
re-validating them is what a child must not repeat. A pickle runs code as it loads, so a child
reads one only from the path its parent gave it, in a folder only this user can write to, and
refuses a file that holds anything but an `Invocation` (`read`).
"""

from __future__ import annotations

import os
import pickle
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path

from qualify.commands import pipeline
from qualify.errors import DeviceError, ToolError
from qualify.plan.load import LoadedPlan

FILE = "invocation.pickle"


@dataclass(frozen=True)
class Invocation:
    """`run` or `compare` as resolved once; the device fields are set where the device is known."""

    loaded: LoadedPlan  # the frozen plan, its lock verified and `plan check` passed
    folder: Path  # the record folder
    exploratory: bool
    libraries: dict[str, Path]  # side -> the build `compare` named, bound to the plan and checked
    trials: int | None  # --trials: at most this many of the planned trials now
    argv: tuple[str, ...]  # the command line the user typed, kept in each trial's provenance
    ordinal: int | None = None
    device_uuid: str | None = None  # the GPU at `ordinal`, as its parent identified it
    workdir: Path | None = field(default=None, compare=False)  # shared by one device's trial processes

    def library(self, side: str) -> Path | None:
        """The .so the side loads in every process of this invocation (`LoadedPlan.library`)."""
        return self.loaded.library(side, self.libraries)

    def on_device(self, ordinal: int) -> Invocation:
        """The same invocation on GPU `ordinal`, identified without opening it (no context)."""
        from qualify.run.device import device_uuid

        return replace(self, ordinal=ordinal, device_uuid=device_uuid(ordinal))

    def device(self) -> tuple[int, str]:
        """The ordinal and UUID of the GPU this invocation runs on (`on_device` set them)."""
        if self.ordinal is None or self.device_uuid is None:
            raise ValueError("an invocation not yet on a device has no GPU to run on")
        return self.ordinal, self.device_uuid

    def check_device(self, uuid: str) -> None:
        """A trial process must run on the GPU its parent identified: device ordinals can name
        another GPU in another process (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER)."""
        if uuid != self.device_uuid:
            raise DeviceError(
                f"device {self.ordinal} is {uuid} in this trial process, {self.device_uuid} in its parent",
                field="--device",
            )


def resolve(
    plan_path: Path,
    record_dir: Path | None,
    exploratory: bool,
    libraries: dict[str, Path] | None,
    trials: int | None,
    argv: list[str],
) -> Invocation:
    """Each refusal of `run` and `compare` that needs no GPU, in order, once per invocation."""
    loaded = pipeline.load_frozen(plan_path)
    bound = pipeline.bind_libraries(loaded, libraries) if libraries is not None else {}
    pipeline.check_libraries(loaded, bound)  # before the driver: a wrong file is named as such
    folder = pipeline.record_folder(loaded, record_dir)
    return Invocation(loaded, folder, exploratory, bound, trials, tuple(argv))


def write(invocation: Invocation, folder: Path) -> Path:
    path = Path(folder) / FILE
    with open(path, "xb") as f:  # a fresh private folder: a file already there is not ours
        pickle.dump(invocation, f, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def read(path: Path) -> Invocation:
    """The invocation a parent wrote for this process: refused unless this user owns the file and
    its folder, and no one else can write into that folder (what `write`'s temporary folder is)."""
    path = Path(path)
    try:
        private(path)
        with open(path, "rb") as f:
            value = pickle.load(f)  # noqa: S301 - written by this user's parent process, see above
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
        raise ToolError(f"cannot read the invocation its parent wrote: {exc}", file=path) from None
    if not isinstance(value, Invocation):
        raise ToolError(f"not an invocation: a {type(value).__name__}", file=path)
    return value


def private(path: Path) -> None:
    """Refuse (PermissionError) an invocation file another user could have written or replaced."""
    uid = os.getuid()
    folder = os.stat(path.parent)
    if folder.st_uid != uid or folder.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PermissionError(f"{path.parent} is not a folder only this user can write to")
    if os.lstat(path).st_uid != uid or path.is_symlink():
        raise PermissionError(f"{path.name} is not a file of this user's")
