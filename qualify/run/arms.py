"""One arm of one case on a device: its buffers, its launch, and how a sample enqueues it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from qualify.plan.resolve import ResolvedArm
from qualify.evaluate.fidelity import ITEMSIZE


@dataclass
class ArmExec:
    side: str
    kernel: object  # device.Kernel (or the fake's)
    resolved: ResolvedArm
    buffers: dict[str, object]  # name -> DeviceBuffer
    outputs: list[str]
    args: list[tuple[str, int | float]] = field(default_factory=list)

    def bind_args(self) -> None:
        args = []
        for a in self.resolved.args:
            if a.kind == "buffer":
                dtype = self.resolved.buffer(a.buffer).dtype
                args.append(("ptr", self.buffers[a.buffer].ptr + a.offset * ITEMSIZE[dtype]))
            else:
                args.append((a.kind, a.value))
        self.args = args

    def enqueue(self, device, iterations: int = 1) -> None:
        launch = self.resolved.launch
        if launch is None:  # a shared-library entry point: it queues its own work on our stream
            for _ in range(iterations):
                self.kernel.call(self.args, device.stream_handle)
            return
        for _ in range(iterations):
            device.launch(self.kernel, launch.grid, launch.block, launch.shared_bytes, self.args)

    def poison_outputs(self, device) -> None:
        for name in self.outputs:
            device.poison(self.buffers[name])

    def run_once(self, device) -> dict[str, np.ndarray]:
        """Poison, launch once, and return every output's bytes."""
        self.poison_outputs(device)
        self.enqueue(device)
        device.synchronize()
        return {name: device.download(self.buffers[name]) for name in self.outputs}
