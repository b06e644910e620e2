"""The record folder: an append-only ledger, one file per trial, and the derived results.json.

    records/<name>/
      plan.json, plan.lock.json   the frozen plan the trials ran under (copied on the first trial)
      ledger.jsonl                append-only: trial_started / trial_ended events; an end event
                                  holds the sha256 of the trial file and of its raw samples
      trials/trial-<k>.json       one Trial each, written when the trial ends (however it ends)
      trials/trial-<k>.npz        its raw samples
      results.json                every trial plus the verdict, derived from the files above
      README.md                   rendered from results.json alone
      .lock, .owner-<device>      not evidence: the record's lock, and who runs trials on a device

One owner per device per record: a run takes `.owner-<device uuid>` (an flock held while it runs,
the file naming the device, process id and host) before its first trial, and a second run on
the same device into the same record is refused naming the owner. The lock dies with its
process, however it dies, so a trial left open by a device without a live owner was left by a
crash and is closed as interrupted (`close_dead_trials`); an owner's trial is never closed by another.

A trial is written whole or not at all (atomic writes), and written as soon as it ends, so a
crash or Ctrl-C later keeps what was gathered. Nothing here is ever overwritten except the two
derived files, results.json and README.md.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from qualify import strict_json
from qualify.errors import DeviceError, FrozenInputChanged, PlanError
from qualify.io import (
    MAX_JSON_BYTES,
    MAX_LOCK_BYTES,
    MAX_NPZ_BYTES,
    MAX_PLAN_BYTES,
    UnreadableFile,
    atomic_write_bytes,
    atomic_write_text,
    open_in_record,
    open_regular,
    read_limited,
    read_text_limited,
    remove_in_record,
)
from qualify.plan.digest import sha256_file
from qualify.results.model import RESULTS_VERSION, Results, Trial

LEDGER = "ledger.jsonl"
# Taken while a trial index is chosen or the record re-rendered; not part of the evidence.
LOCK_FILE = ".lock"
# Held by the run that owns a device's trials in this record (".owner-" + the device's uuid).
OWNER_PREFIX = ".owner-"
MAX_OWNER_BYTES = 4096  # an owner file holds one short JSON object


class DeviceBusy(DeviceError):
    """Another live run owns this device's trials in this record."""


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class LedgerTrial:
    index: int
    device_uuid: str
    digest: str
    status: str | None  # None: started, never ended (a crash)


class Record:
    def __init__(self, folder: Path):
        self.folder = Path(folder)

    # -- ledger -----------------------------------------------------------------------------

    @property
    def ledger_path(self) -> Path:
        return self.folder / LEDGER

    def ledger(self) -> list[dict[str, Any]]:
        if not os.path.lexists(self.ledger_path):
            return []
        try:
            text = read_text_limited(self.ledger_path, MAX_JSON_BYTES, root=self.folder)
        except UnreadableFile as exc:
            raise PlanError(f"unreadable ledger: {exc.message}", file=self.ledger_path) from None
        events = []
        # A line cut short by a crash is refused, not skipped: the ledger is what counts trials
        # against the budget, and a guess about what the lost event said could undercount them.
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                event = strict_json.parse(line)
            except strict_json.JSONProblem as exc:
                raise PlanError(
                    f"line {n} is not JSON ({exc.message}); the ledger was damaged", file=self.ledger_path
                ) from None
            if not (
                isinstance(event, dict)
                and isinstance(event.get("event"), str)
                and type(event.get("trial")) is int
                and event["trial"] >= 1
            ):
                raise PlanError(
                    f"line {n} is not a ledger event (an 'event' name and a 'trial' number)", file=self.ledger_path
                )
            events.append(event)
        return events

    def append(self, event: dict[str, Any]) -> None:
        """Append one event and fsync: the ledger is the part of a record that must survive."""
        if event.get("event") == "trial_ended":
            # Whoever ends a trial, the end event binds the files it left: a trial file or raw
            # samples edited, swapped or replaced later no longer match what the ledger recorded.
            event = {**self.evidence_hashes(event["trial"]), **event}
        line = (json.dumps({**event, "at": now_iso()}, sort_keys=True, allow_nan=False) + "\n").encode()
        fd = open_in_record(self.ledger_path, self.folder, append=True)  # a link there is refused
        with os.fdopen(fd, "a+b") as f:  # O_APPEND: the line goes at the end in one write
            if f.seek(0, os.SEEK_END) > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":  # the last append was cut short: this event must not join it
                    raise PlanError("the last line is incomplete; the ledger was damaged", file=self.ledger_path)
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def trials_in_ledger(self) -> list[LedgerTrial]:
        started: dict[int, dict[str, Any]] = {}
        ended: dict[int, str] = {}
        for e in self.ledger():
            if e["event"] == "trial_started":
                started[e["trial"]] = e
            elif e["event"] == "trial_ended":
                ended[e["trial"]] = e.get("status", "failed")
        return [
            LedgerTrial(i, s.get("device_uuid", ""), s.get("digest", ""), ended.get(i))
            for i, s in sorted(started.items())
        ]

    def evidence_hashes(self, index: int) -> dict[str, str]:
        """sha256 of trial `index`'s file and raw samples, those that exist."""
        found = {}
        for name, path, limit in (
            ("trial_sha256", self.trial_path(index), MAX_JSON_BYTES),
            ("samples_sha256", self.samples_path(index), MAX_NPZ_BYTES),
        ):
            if path.is_file():
                found[name] = sha256_file(path, limit=limit, root=self.folder)
        return found

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive use of the record among processes (one worker per GPU may share a record):
        taking a trial index, closing dangling trials and re-rendering happen under it."""
        fd = open_in_record(self.folder / LOCK_FILE, self.folder)  # a link there is refused
        with os.fdopen(fd, "a+b") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    # -- owners: one run per device per record ---------------------------------------------------

    def owner_path(self, device_uuid: str) -> Path:
        return self.folder / (OWNER_PREFIX + re.sub(r"[^A-Za-z0-9._-]", "_", device_uuid))

    @contextmanager
    def owned(self, device_uuid: str) -> Iterator[int | None]:
        """This process owns `device_uuid`'s trials in the record while the block runs.

        Refused (DeviceBusy, naming the owner) while another live run owns them; a process started
        by the owner (a trial process of the same `qualify run`) runs under its parent's ownership.
        Yields the descriptor that holds the lock (None under a parent's ownership): handed to the
        processes the owner starts, it keeps the device owned while any of them lives, so a trial
        process that outlives a killed parent is never taken for dead."""
        path = self.owner_path(device_uuid)
        fd = open_in_record(path, self.folder)  # a link planted there is refused, never written through
        with os.fdopen(fd, "r+b") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _read_owner(path)
                here = socket.gethostname()
                if owner.get("host") == here and owner.get("pid") in (os.getpid(), os.getppid()):
                    yield None  # the owning run itself, or one of its trial processes
                    return
                raise DeviceBusy(
                    f"device {device_uuid} is running trials into this record in another process "
                    f"(pid {owner.get('pid', '?')} on {owner.get('host', '?')}, since {owner.get('since', '?')}); "
                    "one run per device per record",
                    file=self.folder,
                ) from None
            try:
                f.seek(0)
                f.truncate()
                owner = {
                    "device_uuid": device_uuid,
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "since": now_iso(),
                }
                f.write((json.dumps(owner, sort_keys=True) + "\n").encode())
                f.flush()
                yield f.fileno()
            finally:
                if not self.ledger_path.exists():  # no trial started: a refused run leaves no record behind
                    remove_in_record(path, self.folder)
                    with suppress(OSError):
                        self.folder.rmdir()  # only if nothing else is in it
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def has_live_owner(self, device_uuid: str) -> bool:
        """Whether a process other than this one holds the device's ownership now."""
        path = self.owner_path(device_uuid)
        try:
            fd = open_regular(path, MAX_OWNER_BYTES, root=self.folder)
        except UnreadableFile:
            return False  # missing, or not a regular file inside the record: nobody owns through it
        with os.fdopen(fd, "rb") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return (
                    _read_owner(path).get("pid") != os.getpid() or _read_owner(path).get("host") != socket.gethostname()
                )
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        return False

    def close_dead_trials(self) -> list[int]:
        """Close, as interrupted, every open trial whose device no other live process owns: its
        run died (a fleet worker killed, a trial process gone). Taken under the record's lock."""
        with self.locked():
            open_devices = {t.device_uuid for t in self.trials_in_ledger() if t.status is None}
            dead = sorted(d for d in open_devices if not self.has_live_owner(d))
            return [i for d in dead for i in self.close_dangling(d)]

    def close_dangling(self, device_uuid: str | None = None) -> list[int]:
        """Trials started but never ended (the process died) are marked interrupted, not dropped.

        A trial whose file was written before the process died keeps the status its file holds:
        the file is written whole, only the end event was lost. With `device_uuid`, only that
        device's trials: another device's open trial may be running right now in another worker.
        """
        dangling = [
            t.index
            for t in self.trials_in_ledger()
            if t.status is None and (device_uuid is None or t.device_uuid == device_uuid)
        ]
        for index in dangling:
            status = "interrupted"
            if self.trial_path(index).is_file():
                status = load_model(Trial, self.trial_path(index), root=self.folder).status
            self.append(
                {
                    "event": "trial_ended",
                    "trial": index,
                    "status": status,
                    "note": "found without an end event (the process died)",
                }
            )
        return dangling

    # -- binding to the plan ----------------------------------------------------------------

    def bind(self, plan_path: Path, digest: str) -> None:
        """Copy the frozen plan in on first use; afterwards refuse a plan with another digest."""
        for t in self.trials_in_ledger():
            if t.digest != digest:
                raise FrozenInputChanged(
                    f"the record's trials ran under plan digest {t.digest[:16]}…, this plan is "
                    f"{digest[:16]}…; a changed plan needs a new record",
                    file=self.folder,
                )
        for src, limit in (
            (plan_path, MAX_PLAN_BYTES),
            (plan_path.with_name(plan_path.stem + ".lock.json"), MAX_LOCK_BYTES),
        ):
            dst = self.folder / src.name
            if src.exists() and not dst.exists():
                # written without following a link: a plan.json planted as a link is refused
                atomic_write_bytes(dst, read_limited(src, limit), replace=False, root=self.folder)

    def next_trial_index(self) -> int:
        indices = [t.index for t in self.trials_in_ledger()]
        return max(indices, default=0) + 1

    def trials_on_device(self, uuid: str) -> list[LedgerTrial]:
        return [t for t in self.trials_in_ledger() if t.device_uuid == uuid]

    # -- trials and results -----------------------------------------------------------------

    def trial_path(self, index: int) -> Path:
        return self.folder / "trials" / f"trial-{index}.json"

    def samples_path(self, index: int) -> Path:
        return self.folder / "trials" / f"trial-{index}.npz"

    def write_trial(self, trial: Trial) -> None:
        path = self.trial_path(trial.index)
        try:
            atomic_write_text(path, trial.model_dump_json(indent=1) + "\n", replace=False, root=self.folder)
        except FileExistsError:
            raise FrozenInputChanged("trial file exists; records are never overwritten", file=path) from None

    def trials(self) -> list[Trial]:
        out = []
        folder = self.folder / "trials"
        paths = [p for p in folder.glob("trial-*.json") if p.stem[6:].isdigit()] if folder.exists() else []
        paths.sort(key=lambda p: int(p.stem[6:]))
        for path in paths:
            trial = load_model(Trial, path, root=self.folder)
            if path.name != self.trial_path(trial.index).name:  # trial-01.json, or a renamed file
                raise PlanError(f"holds trial {trial.index}; its name says otherwise", file=path, field="index")
            out.append(trial)
        return out

    def write_results(self, results: Results) -> None:
        atomic_write_text(self.folder / "results.json", results_json(results), root=self.folder)

    def results(self) -> Results:
        return load_model(Results, self.folder / "results.json", root=self.folder)


_M = TypeVar("_M", bound=BaseModel)


def _read_owner(path: Path) -> dict[str, Any]:
    """What an owner file says (empty when it says nothing readable: the owner is still named
    as unknown, never guessed)."""
    try:
        data = json.loads(read_limited(path, MAX_OWNER_BYTES, root=path.parent).decode("utf-8"))
    except (OSError, ValueError, RecursionError, UnreadableFile):
        return {}
    return data if isinstance(data, dict) else {}


def results_json(results: Results) -> str:
    """The exact text of results.json; `report --check` compares the file with it byte for byte.

    Trials are written as their files hold them (`exclude_unset`): a trial file written before a
    field with a default was added (stream_escape_ns, libraries) must not gain that field in
    results.json each time the record is re-rendered, or re-rendering would change a committed
    record. results_version is always written, set or not.
    """
    versioned = results.model_copy(update={"results_version": RESULTS_VERSION})
    return versioned.model_dump_json(indent=1, exclude_unset=True) + "\n"


def load_model(model: type[_M], path: Path, *, root: Path | None = None) -> _M:
    """Load a versioned JSON file (at most MAX_JSON_BYTES; with `root`, a link must stay inside
    it); errors name the file and the field."""
    text = read_text_limited(path, MAX_JSON_BYTES, root=root)
    try:
        data = strict_json.parse(text)
    except strict_json.JSONProblem as exc:
        raise PlanError(exc.message, file=path, field=exc.field) from None
    if not isinstance(data, dict):
        raise PlanError(f"expected a JSON object, got {type(data).__name__}", file=path)
    version = data.get("results_version")
    if model is Results and version != RESULTS_VERSION:
        raise PlanError(
            f"results_version {version!r} is not {RESULTS_VERSION}; this qualify cannot read it",
            file=path,
            field="results_version",
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        from qualify.plan.load import plan_error_from_validation

        raise plan_error_from_validation(exc, data, path) from None
