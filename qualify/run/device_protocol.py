"""What the run layer asks of a device: the surface `CudaDevice` (qualify/run/device.py) and its CPU
twin `FakeDevice` (qualify/run/fake.py) share, as a typing.Protocol.

The stages, the engine and the arms take a `Device`, never one of the two classes: a stage that
calls a method only the real device has would pass every CPU test and fail on the GPU. mypy checks
that both classes satisfy the protocol (`_both_devices_conform` below, never called); a method
added here and to one device only, or a signature that drifts between them, fails the type check.

Kernel handles are each device's own (`Kernel`, `FakeKernel`): opaque to everything above, so the
protocol types them `Any` (what load_kernel returns is handed back to launch, resources, unload).
Only the parameters the run layer passes are declared; a device may take more, with defaults.
Past the first few, they are keyword-only here: the two devices order their optional parameters
differently, and a caller that passed them by position would bind a different one on each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from qualify.build.nvrtc import CompiledKernel
from qualify.results.model import ArmResources, DeviceInfo, DeviceLimits, TracedCall

if TYPE_CHECKING:
    from qualify.run.device import CudaDevice, DeviceBuffer
    from qualify.run.fake import FakeDevice


@runtime_checkable
class Device(Protocol):
    """One GPU (or its fake) with qualify's stream: kernels, buffers, timing and tracing."""

    info: DeviceInfo
    stream_handle: int  # the stream a shared library's call is enqueued on

    # kernels
    def load_kernel(self, label: str, compiled: CompiledKernel, dynamic_shared_bytes: int) -> Any: ...
    def unload_kernel(self, kernel: Any) -> None: ...
    def resources(self, kernel: Any, threads_per_block: int, dynamic_shared_bytes: int) -> ArmResources: ...
    def launch(
        self,
        kernel: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        args: list[tuple[str, int | float]],
    ) -> None: ...

    # memory
    def alloc(self, nbytes: int) -> DeviceBuffer: ...
    def free(self, buf: DeviceBuffer) -> None: ...
    def alloc_guarded(self, nbytes: int, guard: int = ...) -> DeviceBuffer: ...
    def guard_overrun(self, buf: DeviceBuffer) -> int: ...
    def guard_bytes(self, buf: DeviceBuffer) -> int: ...
    def free_memory(self) -> int: ...
    def upload(self, buf: DeviceBuffer, data: np.ndarray) -> None: ...
    def download(self, buf: DeviceBuffer) -> np.ndarray: ...
    def copy(self, dst: DeviceBuffer, src: DeviceBuffer) -> None: ...
    def poison(self, buf: DeviceBuffer) -> None: ...
    def differs(self, a: DeviceBuffer, b: DeviceBuffer) -> bool: ...
    def synchronize(self) -> None: ...
    def check_idle(self) -> None: ...

    # timing
    def prepare_flush_slots(self, count: int = ...) -> int: ...
    def time_sample(
        self,
        enqueue: Callable[[], None],
        cold: bool,
        *,
        block_stream: bool = ...,
        timeout_s: float = ...,
        flush_slot: int = ...,
    ) -> float: ...
    def time_samples(
        self,
        enqueue: Callable[[], None],
        count: int,
        cold: bool,
        *,
        before_each: Callable[[], None] | None = ...,
        touch: Sequence[DeviceBuffer] = ...,
        max_batch: int = ...,
        timeout_s: float = ...,
        flush_slot: int = ...,
    ) -> list[float]: ...
    def limits(self) -> DeviceLimits: ...

    # the kernel inventory (CUPTI)
    def trace_missing(self) -> str | None: ...
    def trace_tool(self) -> str: ...
    def trace_calls(
        self,
        enqueue: Callable[[], None],
        calls: int,
        label: str,
        cold: bool,
        *,
        timeout_s: float = ...,
        flush_slot: int = ...,
        before_each: Callable[[], None] | None = ...,
    ) -> list[TracedCall]: ...
    def trace_null_calls(self, calls: int, cold: bool, timeout_s: float = ...) -> list[TracedCall]: ...

    # Python arms: tensors over qualify's buffers and its stream (torch_bridge; NumPy on the fake)
    def python_runtime(self) -> Any: ...

    def close(self) -> None: ...


if TYPE_CHECKING:  # read by mypy only: both devices are Devices, or the type check fails

    def _both_devices_conform(cuda: CudaDevice, fake: FakeDevice) -> None:
        real: Device = cuda
        twin: Device = fake
        del real, twin
