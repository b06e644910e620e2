"""Case setup: a case's inputs generated on the host (ahead of the case, in the background), its pool of buffer
placements allocated (each shared between the arms), the inputs uploaded into every placement and
each arm's arguments bound.

Every buffer a case allocates belongs to its `CaseMemory`, freed together when the case ends
however it ends. `CaseSetup` is what the later stages launch: one `ArmExec` per side over the
first placement (fidelity, controls, warm-up and trace run there), and `arms_at(p)` for the
placement a timed block draws.
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
from qualify.run.device_protocol import Device
from qualify.run.inputs import InputStore
from qualify.run.placement import PlacementPool, layout_rng

HostInputs = Mapping[str, Mapping[str, np.ndarray]]  # side -> buffer name -> flat uint8 bytes


class InputPrefetch:
    """Each case's inputs per arm, generated in the background ahead of the case that needs them.

    As many cases ahead as `ahead_bytes` of inputs allow (always at least the next), each in a
    thread of its own: numpy's generators and hashlib release the GIL while they fill, so a run of
    large cases waits on its slowest input rather than on their sum (vecload's first trial waited
    2.2 s on one-case-ahead generation on an H200, its preflight workers longer)."""

    AHEAD_BYTES = 1 << 30  # inputs generated ahead of their case, at most (beyond the next case)
    WORKERS = 4

    def __init__(
        self,
        plan: Plan,
        golden: Golden | None,
        cases: list[ResolvedCase],
        store: InputStore | None = None,
        *,
        sides: tuple[str, ...] = ARM_SIDES,
        hashed: bool = True,
        ahead_bytes: int = AHEAD_BYTES,
        workers: int = WORKERS,
    ):
        self._plan = plan
        self._golden = golden
        self._cases = cases
        self._store = store
        self._sides = sides
        self._hashed = hashed
        self._ahead_bytes = ahead_bytes
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers))
        self._pending: dict[str, Future] = {}

    def start(self, case: ResolvedCase) -> None:
        if case.id not in self._pending:
            self._pending[case.id] = self._pool.submit(self._generate, case)

    def take(self, case: ResolvedCase) -> Prefetched:
        """The case's inputs and their digests (waiting for them if need be), with the following
        cases started as far as the budget allows."""
        self.start(case)
        ahead = 0
        for n, following in enumerate(self._cases[self._cases.index(case) + 1 :]):
            ahead += self._input_bytes(following)
            if n > 0 and ahead > self._ahead_bytes:
                break
            self.start(following)
        return self._pending.pop(case.id).result()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _input_bytes(self, case: ResolvedCase) -> int:
        names = {s.name for s in self._plan.workload.buffers if s.role == "input"}
        return sum(case.arms[side].buffer(name).nbytes for side in self._sides[:1] for name in names)

    def _generate(self, case: ResolvedCase) -> Prefetched:
        plan, golden = self._plan, self._golden
        inputs: dict[str, dict[str, np.ndarray]] = {
            side: golden_stage.case_inputs(plan, golden, case.id, case.arms[side], self._store) for side in self._sides
        }
        return Prefetched(inputs, digests(inputs) if self._hashed else {})


@dataclass(frozen=True)
class Prefetched:
    inputs: dict[str, dict[str, np.ndarray]]  # side -> input name -> bytes
    sha256: dict[str, str]  # input name -> sha256 of its bytes


def digests(inputs: HostInputs) -> dict[str, str]:
    """Each input's sha256, once per name (both arms upload the same bytes under one name).
    Taken with the inputs, in the background, so the case's set-up does not wait for it: hashing
    the 268 MB inputs of a 64 Mi-element case takes a third of a second."""
    out: dict[str, str] = {}
    for side in ARM_SIDES:
        for name, data in inputs.get(side, {}).items():
            if name not in out:
                out[name] = hashlib.sha256(data.data).hexdigest()
    return out


class CaseMemory:
    """The device buffers of one case; all are freed, in the order they were allocated, on exit."""

    def __init__(self, device: Device):
        self._device = device
        self._buffers: list[DeviceBuffer] = []
        self._pools: list[PlacementPool] = []

    def adopt(self, pool: PlacementPool) -> PlacementPool:
        """The pool is closed with the case, before the buffers allocated here after it."""
        self._pools.append(pool)
        return pool

    def alloc(self, nbytes: int) -> DeviceBuffer:
        buf = self._device.alloc(nbytes)
        self._buffers.append(buf)
        return buf

    def __enter__(self) -> CaseMemory:
        return self

    def __exit__(self, *exc) -> None:
        pools, self._pools = self._pools, []
        for pool in pools:
            pool.close()
        buffers, self._buffers = self._buffers, []
        for buf in buffers:
            self._device.free(buf)


@dataclass(frozen=True)
class CaseSetup:
    arms: Mapping[str, ArmExec]  # side -> the arm over the first placement's buffers
    host_inputs: HostInputs  # what was uploaded (the controls mutate copies of it)
    input_sha256: Mapping[str, str]  # buffer name -> sha256 of the (base arm's) input bytes
    pool: PlacementPool

    @property
    def placements(self) -> int:
        return self.pool.count

    def arms_at(self, placement: int) -> Mapping[str, ArmExec]:
        """Both arms bound to one placement's buffers (the first placement's arms are `arms`)."""
        if placement == 0:
            return self.arms
        out = {}
        for side, ex in self.arms.items():
            at = ArmExec(side, ex.kernel, ex.resolved, self.pool.buffers(placement, side), ex.outputs)
            at.bind_args()
            out[side] = at
        return out


@dataclass(frozen=True)
class Placing:
    """How a case draws its placements: how many, from which seed, at what offset granularity."""

    count: int
    seed: int
    trial: int
    granularity: int


def set_up(
    case: ResolvedCase,
    inputs: HostInputs,
    kernels: Mapping[str, object],
    memory: CaseMemory,
    device,
    placing: Placing,
    input_digests: Mapping[str, str] | None = None,
) -> CaseSetup:
    """Allocate the case's pool of placements in `memory`, upload the inputs into each and bind
    each arm's arguments to the first.

    Within a placement both arms use the same device buffers wherever their buffers agree in name,
    type and shape: two allocations of one size can run measurably apart (their placement in
    memory differs), which would be read as a difference between the arms. Measured on the H200 by
    benchmarks/calibration (identical kernels on separate buffers: 0.3-0.6 % apart).
    """
    rng = layout_rng(placing.seed, placing.trial, case.id)
    arms_buffers = {side: case.arms[side].buffers for side in ARM_SIDES}
    host_inputs = {side: dict(inputs[side]) for side in ARM_SIDES}
    pool = memory.adopt(
        PlacementPool(device, arms_buffers, host_inputs, placing.count, rng, placing.granularity, digests=input_digests)
    )
    arms: dict[str, ArmExec] = {}
    for side in ARM_SIDES:
        arm = case.arms[side]
        outputs = [b.name for b in arm.buffers if b.role == "output"]
        arms[side] = ArmExec(side, kernels[side], arm, pool.buffers(0, side), outputs)
        arms[side].bind_args()
    return CaseSetup(arms, host_inputs, dict(pool.facts.inputs_sha256), pool)
