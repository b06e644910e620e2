"""Whether a device is one the plan's hardware section names (name pattern and compute capability),
and how a trial's device is labelled wherever trials are grouped by device."""

from __future__ import annotations

import fnmatch

from qualify.plan.model import DeviceSpec
from qualify.results.model import DeviceInfo, Trial


def device_matches(info: DeviceInfo, specs: list[DeviceSpec]) -> bool:
    for spec in specs:
        if spec.name is not None and not fnmatch.fnmatchcase(info.name, spec.name):
            continue
        if spec.compute_capability is not None and spec.compute_capability != info.compute_capability:
            continue
        return True
    return False


def device_label(trial: Trial) -> str:
    """One GPU as trials are grouped by it: its name and the start of its UUID."""
    d = trial.provenance.device
    return f"{d.name} ({d.uuid[:12]})"
