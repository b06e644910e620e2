"""One arm of one case on a device: its buffers, its launch, and how a sample enqueues it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from qualify.build.arms import kernel_spec
from qualify.build.nvrtc import CompiledKernel, compile_kernel
from qualify.dtypes import ITEMSIZE
from qualify.plan.model import CudaArm
from qualify.plan.resolve import ResolvedArg, ResolvedArm
from qualify.run.device import DeviceBuffer
from qualify.run.device_protocol import Device
from qualify.run.python_arm import Bound, PythonEntry


@dataclass(frozen=True)
class LaunchSequence:
    """The loaded kernels of an arm that declares its own launches, one per launch, in order (a
    kernel launched twice is loaded once and appears twice)."""

    kernels: tuple[object, ...]  # device.Kernel (or the fake's)
    compiled: tuple[CompiledKernel, ...]


def compile_and_load(
    device: Device, loaded, side: str, cases, extra_defines: dict | None = None, label: str | None = None
):
    """(compiled, loaded kernel) of a CUDA arm for this device: one kernel for an arm launched by
    workload.launch, a LaunchSequence for an arm with its own launches. Each kernel is loaded with
    the most dynamic shared memory any of `cases` asks of it."""
    arch = device.info.arch
    arm = loaded.plan.arm(side)
    assert isinstance(arm, CudaArm)
    label = label or side
    if arm.launches is None:
        compiled = compile_kernel(kernel_spec(loaded, side, arch, extra_defines))
        smem = max(c.arms[side].launch.shared_bytes for c in cases)
        return compiled, device.load_kernel(label, compiled, smem)
    by_name: dict[str, tuple[CompiledKernel, object]] = {}
    for name in dict.fromkeys(arm.kernels):
        compiled = compile_kernel(kernel_spec(loaded, side, arch, extra_defines, kernel=name))
        smem = max(s.launch.shared_bytes for c in cases for s in c.arms[side].steps if s.kernel == name)
        by_name[name] = (compiled, device.load_kernel(f"{label}:{name}", compiled, smem))
    pairs = [by_name[name] for name in arm.kernels]
    return tuple(p[0] for p in pairs), LaunchSequence(tuple(p[1] for p in pairs), tuple(p[0] for p in pairs))


def unload(device: Device, kernel) -> None:
    """Unload what compile_and_load loaded (each kernel of a sequence once)."""
    if isinstance(kernel, LaunchSequence):
        for k in {id(k): k for k in kernel.kernels}.values():
            device.unload_kernel(k)
    else:
        device.unload_kernel(kernel)


@dataclass
class ArmExec:
    side: str
    kernel: object  # device.Kernel (or the fake's), a LaunchSequence, or a library entry point
    resolved: ResolvedArm
    buffers: dict[str, DeviceBuffer]
    outputs: list[str]
    args: list[tuple[str, int | float]] = field(default_factory=list)
    step_args: list[list[tuple[str, int | float]]] = field(default_factory=list)  # per own launch
    bound: Bound | None = None  # a Python arm's call bound to these buffers

    def _bind(self, args: tuple[ResolvedArg, ...]) -> list[tuple[str, int | float]]:
        bound: list[tuple[str, int | float]] = []
        for a in args:
            if a.kind == "buffer":
                assert a.buffer is not None  # the resolver names the buffer of every buffer argument
                dtype = self.resolved.buffer(a.buffer).dtype
                bound.append(("ptr", self.buffers[a.buffer].ptr + a.offset * ITEMSIZE[dtype]))
            else:
                assert a.value is not None  # and the value of every scalar one
                bound.append((a.kind, a.value))
        return bound

    def bind_args(self) -> None:
        if isinstance(self.kernel, PythonEntry):
            self.bound = self.kernel.bind(self.resolved, self.buffers)
            return
        self.args = self._bind(self.resolved.args)
        self.step_args = [self._bind(step.args) for step in self.resolved.steps]

    def enqueue(self, device: Device, iterations: int = 1) -> None:
        """One call of the arm, `iterations` times: every launch of its sequence, in order, on
        qualify's stream, so a timed window around it holds the whole sequence."""
        if self.resolved.steps:
            assert isinstance(self.kernel, LaunchSequence)
            for _ in range(iterations):
                for kernel, step, args in zip(self.kernel.kernels, self.resolved.steps, self.step_args):
                    device.launch(kernel, step.launch.grid, step.launch.block, step.launch.shared_bytes, args)
            return
        launch = self.resolved.launch
        if isinstance(self.kernel, PythonEntry):  # a Python callable: its work goes on our stream too
            assert self.bound is not None  # bind_args binds a Python arm before any call
            for _ in range(iterations):
                self.kernel.call(self.bound)
            return
        if launch is None:  # a shared-library entry point: it queues its own work on our stream
            for _ in range(iterations):
                self.kernel.call(self.args, device.stream_handle)
            return
        for _ in range(iterations):
            device.launch(self.kernel, launch.grid, launch.block, launch.shared_bytes, self.args)

    def poison_outputs(self, device: Device) -> None:
        for name in self.outputs:
            device.poison(self.buffers[name])

    def run_on_device(self, device: Device) -> None:
        """Poison (outputs, and the scratch of an arm's own sequence: a later launch must read
        only what an earlier one wrote), launch once and wait: the outputs stay on the device."""
        self.poison_outputs(device)
        if self.resolved.steps:
            for b in self.resolved.buffers:
                if b.role == "scratch":
                    device.poison(self.buffers[b.name])
        self.enqueue(device)
        device.synchronize()

    def run_once(self, device: Device) -> dict[str, np.ndarray]:
        """`run_on_device`, then every output's bytes."""
        self.run_on_device(device)
        return {name: device.download(self.buffers[name]) for name in self.outputs}
