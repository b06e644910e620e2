"""Case setup: a case's inputs generated on the host (one case ahead), its device buffers
allocated and shared between the arms, the inputs uploaded and each arm's arguments bound.

Every buffer a case allocates belongs to its `CaseMemory`, freed together when the case ends
however it ends. `CaseSetup` is what the later stages launch: one `ArmExec` per side over those
buffers. (A case that draws several placements of its buffers would hold them here, and the
timing stage would ask the setup for the arm of each block.)
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from qualify.plan.golden import Golden
from qualify.plan.model import ARM_SIDES, Plan
from qualify.plan.resolve import ResolvedCase
from qualify.run import golden_stage
from qualify.run.arms import ArmExec
from qualify.run.device import DeviceBuffer

HostInputs = Mapping[str, Mapping[str, np.ndarray]]  # side -> buffer name -> flat uint8 bytes


class InputPrefetch:
    """Each case's inputs per arm, generated in the background: the next case's while this one
    is timed (the host only waits on the GPU then)."""

    def __init__(self, plan: Plan, golden: Golden | None, cases: list[ResolvedCase]):
        self._plan = plan
        self._golden = golden
        self._cases = cases
        self._pool = ThreadPoolExecutor(max_workers=1)  # one case ahead, at most
        self._pending: dict[str, Future] = {}

    def start(self, case: ResolvedCase) -> None:
        if case.id not in self._pending:
            self._pending[case.id] = self._pool.submit(self._generate, case)

    def take(self, case: ResolvedCase) -> dict[str, dict[str, np.ndarray]]:
        """The case's inputs (waiting for them if need be), with the next case's started."""
        self.start(case)
        following = self._cases.index(case) + 1
        if following < len(self._cases):
            self.start(self._cases[following])
        return self._pending.pop(case.id).result()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _generate(self, case: ResolvedCase) -> dict[str, dict[str, np.ndarray]]:
        plan, golden = self._plan, self._golden
        return {side: golden_stage.case_inputs(plan, golden, case.id, case.arms[side]) for side in ARM_SIDES}


class CaseMemory:
    """The device buffers of one case; all are freed, in the order they were allocated, on exit."""

    def __init__(self, device):
        self._device = device
        self._buffers: list[DeviceBuffer] = []

    def alloc(self, nbytes: int) -> DeviceBuffer:
        buf = self._device.alloc(nbytes)
        self._buffers.append(buf)
        return buf

    def __enter__(self) -> CaseMemory:
        return self

    def __exit__(self, *exc) -> None:
        buffers, self._buffers = self._buffers, []
        for buf in buffers:
            self._device.free(buf)


@dataclass(frozen=True)
class CaseSetup:
    arms: Mapping[str, ArmExec]  # side -> the arm over the case's device buffers
    host_inputs: HostInputs  # what was uploaded (the controls mutate copies of it)
    input_sha256: Mapping[str, str]  # buffer name -> sha256 of the (base arm's) input bytes


def set_up(
    case: ResolvedCase, inputs: HostInputs, kernels: Mapping[str, object], memory: CaseMemory, device
) -> CaseSetup:
    """Allocate each arm's buffers in `memory`, upload the inputs and bind each arm's arguments.

    Both arms use the same device buffers wherever their buffers agree in name, type and shape:
    two allocations of one size can run measurably apart (their placement in memory differs),
    which would be read as a difference between the arms. Measured on the H200 by
    benchmarks/calibration (identical kernels on separate buffers: 0.3-0.6 % apart).
    """
    arms: dict[str, ArmExec] = {}
    hashes: dict[str, str] = {}
    host_inputs: dict[str, dict[str, np.ndarray]] = {}
    shared: dict[tuple, DeviceBuffer] = {}
    for side in ARM_SIDES:
        arm = case.arms[side]
        buffers: dict[str, DeviceBuffer] = {}
        outputs = [b.name for b in arm.buffers if b.role == "output"]
        arms[side] = ArmExec(side, kernels[side], arm, buffers, outputs)
        for b in arm.buffers:
            shape = (b.name, b.dtype, b.shape)
            if shape not in shared:
                shared[shape] = memory.alloc(b.nbytes)
            buffers[b.name] = shared[shape]
        host_inputs[side] = {}
        for name, data in inputs[side].items():
            device.upload(buffers[name], data)
            host_inputs[side][name] = data
            hashes.setdefault(name, hashlib.sha256(data).hexdigest())
        arms[side].bind_args()
    return CaseSetup(arms, host_inputs, hashes)


def upload_references(
    setup: CaseSetup, reference: Mapping[str, Mapping[str, np.ndarray]], memory: CaseMemory, device
) -> dict[str, dict[str, DeviceBuffer]]:
    """The reference outputs on the device, per arm, for the timed launches' check."""
    refs: dict[str, dict[str, DeviceBuffer]] = {}
    for side, ex in setup.arms.items():
        refs[side] = {}
        for n in ex.outputs:
            refs[side][n] = memory.alloc(reference[side][n].nbytes)
            device.upload(refs[side][n], reference[side][n])
    return refs
