"""Writes past a buffer's declared size: one arm of one case run once with a guard after every
output and scratch buffer (`Device.alloc_guarded`), the guards read back after each launch.

The preflight worker (and compute-sanitizer, which runs the same worker) and `plan rehearse
--device` call `run_guarded`; a finding names the case, the arm, the launch, the buffer and how
many bytes past its declared size the last changed guard byte lies. memcheck alone cannot see such
a write: the guard (and the driver's rounding of sizes) keeps it inside an allocation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qualify.plan.resolve import ResolvedArm
from qualify.run.arms import ArmExec, LaunchSequence
from qualify.run.device import DeviceBuffer
from qualify.run.device_protocol import Device


@dataclass(frozen=True)
class Overrun:
    case: str
    side: str
    buffer: str
    role: str  # output | scratch
    declared_bytes: int
    past_bytes: int  # the last changed guard byte's offset past the declared end, plus one
    launch: str  # the launch after which the guard was found changed

    def line(self) -> str:
        return (
            f"{self.case}: {self.side}: {self.launch} wrote {self.past_bytes} byte(s) past the end of {self.role} "
            f"buffer {self.buffer!r} (declared {self.declared_bytes:,} bytes)"
        )


def allocate(device: Device, arm: ResolvedArm) -> dict[str, DeviceBuffer]:
    """The arm's buffers: inputs as declared, outputs and scratch each with a guard after it."""
    return {
        b.name: device.alloc(b.nbytes) if b.role == "input" else device.alloc_guarded(b.nbytes) for b in arm.buffers
    }


def layout(device: Device, arm: ResolvedArm, buffers: dict[str, DeviceBuffer]) -> list[dict]:
    """Each buffer's address range, for naming the buffer a sanitizer's faulting address lies in."""
    return [
        {
            "name": b.name,
            "role": b.role,
            "ptr": buffers[b.name].ptr,
            "nbytes": b.nbytes,
            "guard": device.guard_bytes(buffers[b.name]),
        }
        for b in arm.buffers
    ]


def _checked(device: Device, ex: ArmExec, case: str, launch: str) -> list[Overrun]:
    return [
        Overrun(case, ex.side, b.name, b.role, b.nbytes, past, launch)
        for b in ex.resolved.buffers
        if b.role != "input" and (past := device.guard_overrun(ex.buffers[b.name]))
    ]


def run_guarded(
    device: Device,
    side: str,
    kernel,
    case: str,
    arm: ResolvedArm,
    inputs: dict[str, np.ndarray],
    buffers: dict[str, DeviceBuffer],
) -> list[Overrun]:
    """Upload the inputs, poison outputs and scratch, run the arm once and read the guards back:
    after each launch of an arm with its own launches (the first launch that overran is named and
    the rest not run: they would read what it broke), else after the call."""
    for name, data in inputs.items():
        device.upload(buffers[name], data)
    ex = ArmExec(side, kernel, arm, buffers, [b.name for b in arm.buffers if b.role == "output"])
    ex.poison_outputs(device)
    for b in arm.buffers:  # and scratch: a later launch must read only what an earlier one wrote
        if b.role == "scratch":
            device.poison(buffers[b.name])
    ex.bind_args()
    if arm.steps:
        assert isinstance(kernel, LaunchSequence)
        for n, (k, step, args) in enumerate(zip(kernel.kernels, arm.steps, ex.step_args)):
            device.launch(k, step.launch.grid, step.launch.block, step.launch.shared_bytes, args)
            device.synchronize()
            found = _checked(device, ex, case, f"launch {n} ({step.kernel})")
            if found:
                return found
        device.check_idle()
        return []
    ex.enqueue(device)
    device.synchronize()
    device.check_idle()
    return _checked(device, ex, case, "the launch" if arm.launch is not None else "the call")


def free(device: Device, buffers: dict[str, DeviceBuffer]) -> None:
    for buf in buffers.values():
        device.free(buf)
