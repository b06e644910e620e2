"""Admission: the device is one the plan names, the budget has a trial left, and the trial is
entered in the record's ledger before the GPU is touched."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from qualify.errors import DeviceError, FrozenInputChanged
from qualify.evaluate.device_match import device_matches
from qualify.plan.load import LoadedPlan
from qualify.plan.model.hardware import refusal, target_for
from qualify.results.model import DeviceInfo
from qualify.results.store import Record
from qualify.run.stages import libraries


class BudgetExhausted(FrozenInputChanged):
    """A trial beyond the plan's budget was asked for."""


@dataclass(frozen=True)
class Admission:
    index: int  # the trial's number in the record
    planned: bool  # the device is among the plan's (False: an exploratory run)


def samples_per_trial(loaded: LoadedPlan) -> int:
    s = loaded.plan.schedule
    per_case = s.blocks * 4 * s.samples_per_block * (2 if loaded.plan.controls.aa else 1)
    return per_case * len(loaded.cases)


def admit(
    loaded: LoadedPlan, info: DeviceInfo, record: Record, exploratory: bool, given_libraries: Mapping[str, Path]
) -> Admission:
    plan = loaded.plan
    planned = device_matches(info, plan.hardware.devices)
    if not planned and not exploratory:
        raise DeviceError(
            f"{info.name} (cc {info.compute_capability}) is not among the plan's devices; "
            "pass --exploratory to run anyway (the record is then marked unplanned)"
        )
    declared = plan.hardware.architectures
    if target_for(declared, info.arch) is None and not exploratory:
        raise DeviceError(refusal(declared, info.arch, info.compute_capability))
    libraries.check_binding(loaded, record, given_libraries)  # before anything is written to the record
    # One worker per GPU may share the record (`--devices`): the index is taken, and this
    # device's dangling trials closed, under the record's lock; another device's open trial
    # may be running now and is left alone.
    with record.locked():
        record.close_dangling(info.uuid)
        record.bind(loaded.path, loaded.digest)
        used = record.trials_on_device(info.uuid)
        if len(used) >= plan.budget.max_trials:
            raise BudgetExhausted(
                f"budget spent: {len(used)} of {plan.budget.max_trials} trials already ran on "
                f"{info.name} {info.uuid} (failed and interrupted ones count)",
                file=record.folder,
            )
        index = record.next_trial_index()
        started = {"event": "trial_started", "trial": index, "digest": loaded.digest}
        record.append({**started, "device_uuid": info.uuid, "device": info.name})
    return Admission(index, planned)
