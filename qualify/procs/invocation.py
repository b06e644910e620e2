"""The invocation: what `run` and `compare` resolve once, in the process the user started, and
every process they start reads instead of the command line.

The process the user started loads the frozen plan and refuses it unless `plan check` passes,
binds the libraries `compare` names and checks them, and finds the record folder: `resolve`.
A device worker of `--devices` and each trial process start from that value, so none of it is
done again (nor can come out otherwise: a plan edited while the run goes on is not what the
children run; a build the plan refuses cannot reach one by another path).

It travels as a file in the parent's private temporary folder (mode 0700, removed when the run
ends), as strict JSON with a version (`invocation_version`), never as a pickle: reading a file
must not be able to run code, whoever wrote it. The file holds the plan as its validated model
dumps it and the sha256 of each file the digest covers, never the cases or the digest's other
parts: a child re-validates the plan from the file alone (no plan file is read again, no check
of `plan check` runs again), recomputes the digest from it and the hashes and refuses the file
unless that is the digest the parent froze, then resolves the cases from the plan (pure). So a
damaged file cannot hand a child a plan its parent did not check. Anything else wrong with the
file (not JSON, another version, a field missing, unknown or of the wrong kind) is refused in
one line naming the file and the field, exit 6 (`read`).
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from qualify import strict_json
from qualify.commands import pipeline
from qualify.errors import DeviceError, PlanError, ToolError
from qualify.io import MAX_LOCK_BYTES, MAX_PLAN_BYTES, UnreadableFile, read_text_limited
from qualify.plan.digest import freeze_from_hashes
from qualify.plan.files import PlanFiles
from qualify.plan.load import LoadedPlan, schema_plan
from qualify.plan.model import ARM_SIDES
from qualify.plan.resolve import resolve_cases

FILE = "invocation.json"
INVOCATION_VERSION = 1
# the plan and its lock at their own caps, and room for the paths and the command line
MAX_INVOCATION_BYTES = MAX_PLAN_BYTES + MAX_LOCK_BYTES + 2**20
_SHA256 = re.compile(r"[0-9a-f]{64}")


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
    added: str | None = None  # `qualify gate`: one trial beyond the plan's schedule.trials, and why

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
    text = json.dumps(_document(invocation), allow_nan=False)  # ASCII: a path's odd bytes escaped
    with open(path, "x", encoding="ascii") as f:  # a fresh private folder: a file already there is not ours
        f.write(text)
    return path


def read(path: Path) -> Invocation:
    """The invocation a parent wrote for this process: refused unless this user owns the file and
    its folder, and no one else can write into that folder (what `write`'s temporary folder is);
    then refused (ToolError, exit 6, one line) unless it is a version-1 invocation whose plan
    hashes to the digest it names."""
    path = Path(path)
    try:
        private(path)
        data = strict_json.parse(read_text_limited(path, MAX_INVOCATION_BYTES))
    except (OSError, UnreadableFile) as exc:
        why = exc.message if isinstance(exc, UnreadableFile) else str(exc)
        raise ToolError(f"cannot read the invocation its parent wrote: {why}", file=path) from None
    except strict_json.JSONProblem as exc:
        raise ToolError(f"not an invocation: {exc.message}", file=path, field=exc.field) from None
    return _from_document(data, path)


def _document(invocation: Invocation) -> dict[str, Any]:
    loaded = invocation.loaded
    return {
        "invocation_version": INVOCATION_VERSION,
        "plan_path": str(loaded.path),
        "plan": loaded.plan.model_dump(mode="json"),
        "repository": str(loaded.files.root),
        "files": {rel: str(p) for rel, p in loaded.files.files.items()},
        "file_sha256": loaded.freeze.files,
        "digest": loaded.digest,
        "lock": loaded.lock,
        "record": str(invocation.folder),
        "exploratory": invocation.exploratory,
        "libraries": {side: str(p) for side, p in invocation.libraries.items()},
        "trials": invocation.trials,
        "argv": list(invocation.argv),
        "ordinal": invocation.ordinal,
        "device_uuid": invocation.device_uuid,
        "workdir": None if invocation.workdir is None else str(invocation.workdir),
        "added": invocation.added,
    }


class _Fields:
    """The document's fields, each taken once and checked for its kind; any problem is one
    ToolError naming the file and the field."""

    def __init__(self, data: object, path: Path):
        self.path = path
        if not isinstance(data, dict):
            raise self.refuse(f"a JSON {type(data).__name__}, not an object")
        self.data = data
        version = data.get("invocation_version")
        if type(version) is not int or version != INVOCATION_VERSION:  # true and 1.0 equal 1 in Python
            raise self.refuse(f"not a version-{INVOCATION_VERSION} invocation", "invocation_version")
        expected = _KEYS
        unknown, missing = sorted(set(data) - expected), sorted(expected - set(data))
        if unknown:
            raise self.refuse("unknown field", unknown[0])
        if missing:
            raise self.refuse("required field is missing", missing[0])

    def refuse(self, why: str, key: str | None = None) -> ToolError:
        return ToolError(f"not an invocation its parent wrote: {why}", file=self.path, field=key)

    def get(self, key: str, kind: type, *, optional: bool = False) -> Any:
        value = self.data[key]
        if value is None and optional:
            return None
        # bool is an int to Python, never to this file
        ok = type(value) is kind if kind in (int, bool) else isinstance(value, kind)
        if not ok:
            raise self.refuse(f"expected {'null or ' if optional else ''}{kind.__name__}", key)
        return value

    def text(self, key: str, *, optional: bool = False) -> str | None:
        value = self.get(key, str, optional=optional)
        if value is not None and (not value or "\0" in value):
            raise self.refuse("an empty string, or one holding a NUL", key)
        return value

    def strings(self, key: str) -> dict[str, str]:
        value = self.get(key, dict)
        for k, v in value.items():
            if not isinstance(v, str) or not v or "\0" in v or not k:
                raise self.refuse("expected an object of non-empty strings", strict_json.join_field(key, k))
        return value


_KEYS = frozenset(
    (
        "invocation_version",
        "plan_path",
        "plan",
        "repository",
        "files",
        "file_sha256",
        "digest",
        "lock",
        "record",
        "exploratory",
        "libraries",
        "trials",
        "argv",
        "ordinal",
        "device_uuid",
        "workdir",
        "added",
    )
)


def _from_document(data: object, path: Path) -> Invocation:
    fields = _Fields(data, path)
    plan_path = Path(str(fields.text("plan_path")))
    files = fields.strings("files")
    hashes = fields.strings("file_sha256")
    if set(files) != set(hashes):
        raise fields.refuse("names other files than `files`", "file_sha256")
    for rel, sha in hashes.items():
        if not _SHA256.fullmatch(sha):
            raise fields.refuse("not a sha256", strict_json.join_field("file_sha256", rel))
    libraries = fields.strings("libraries")
    for side in libraries:
        if side not in ARM_SIDES:
            raise fields.refuse(f"not a side ({' or '.join(ARM_SIDES)})", strict_json.join_field("libraries", side))
    argv = fields.get("argv", list)
    for i, word in enumerate(argv):
        if not isinstance(word, str):
            raise fields.refuse("expected a string", f"argv[{i}]")
    trials, ordinal = fields.get("trials", int, optional=True), fields.get("ordinal", int, optional=True)
    if trials is not None and trials < 1:
        raise fields.refuse("at least 1", "trials")
    if ordinal is not None and ordinal < 0:
        raise fields.refuse("a device ordinal is not negative", "ordinal")
    lock = fields.get("lock", dict, optional=True)
    try:
        plan = schema_plan(fields.get("plan", dict), plan_path)
    except PlanError as exc:
        where = "plan" if exc.field is None else f"plan.{exc.field}"
        raise fields.refuse(exc.message, where) from None
    freeze = freeze_from_hashes(plan, hashes)
    if freeze.digest != fields.text("digest"):
        raise fields.refuse("the plan and file hashes it holds do not make the digest it names", "digest")
    try:
        cases = resolve_cases(plan, str(plan_path))
    except PlanError as exc:  # the plan its parent checked resolved: this one is not that plan
        raise fields.refuse(exc.message, "plan") from None
    loaded = LoadedPlan(
        path=plan_path,
        plan=plan,
        files=PlanFiles(root=Path(str(fields.text("repository"))), files={k: Path(v) for k, v in files.items()}),
        cases=cases,
        freeze=freeze,
        lock=lock,
    )
    workdir = fields.text("workdir", optional=True)
    return Invocation(
        loaded=loaded,
        folder=Path(str(fields.text("record"))),
        exploratory=fields.get("exploratory", bool),
        libraries={side: Path(p) for side, p in libraries.items()},
        trials=trials,
        argv=tuple(argv),
        ordinal=ordinal,
        device_uuid=fields.text("device_uuid", optional=True),
        workdir=None if workdir is None else Path(workdir),
        added=fields.text("added", optional=True),
    )


def private(path: Path) -> None:
    """Refuse (PermissionError) an invocation file another user could have written or replaced."""
    uid = os.getuid()
    folder = os.stat(path.parent)
    if folder.st_uid != uid or folder.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PermissionError(f"{path.parent} is not a folder only this user can write to")
    if os.lstat(path).st_uid != uid or path.is_symlink():
        raise PermissionError(f"{path.name} is not a file of this user's")
