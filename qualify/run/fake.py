"""A fake device for CPU tests: the CudaDevice surface over host memory, recording every call.

Kernels are Python functions registered by name (`kernels={"axpy": fn}`); a launch calls
`fn(memory, args)` where `memory.view(ptr, nbytes)` gives writable bytes. Sample durations come
from `durations[label]` (ns per launch) plus seeded noise, so statistics and verdicts can be driven
to any outcome. `calls` lists what happened, in order, so tests assert the exact ABBA order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from qualify.evaluate.occupancy import REGISTER_UNIT, SHARED_UNIT, SUB_PARTITIONS
from qualify.results.model import ArmResources, DeviceInfo, DeviceLimits, KernelActivity, TracedCall
from qualify.run.device import FLUSH_SLOTS, GUARD_BYTE, GUARD_BYTES, MAX_BATCH, DeviceBuffer, KernelFault
from qualify.run.telemetry import Reading

FAKE_INFO = DeviceInfo(
    name="NVIDIA H200 (fake)",
    uuid="GPU-00000000-0000-0000-0000-000000000000",
    ordinal=0,
    compute_capability="9.0",
    arch="sm_90",
    sm_count=132,
    l2_bytes=62_914_560,
    max_shared_per_block_optin=232_448,
    sm_clock_max_mhz=1980,
    mem_clock_max_mhz=3201,
    memory_bus_width_bits=6144,
    driver_version="580.00",
    cuda_driver_version="13.0",
    pci_bus_id="0000:00:00.0",
)

# The H200's occupancy limits as its driver reports them (cuDeviceGetAttribute), with the
# architecture constants CudaDevice.limits adds.
FAKE_LIMITS = DeviceLimits(
    warp_size=32,
    max_threads_per_sm=2048,
    max_blocks_per_sm=32,
    max_threads_per_block=1024,
    registers_per_sm=65536,
    registers_per_block=65536,
    shared_per_sm=233_472,
    shared_per_block_optin=232_448,
    reserved_shared_per_block=1024,
    register_unit=REGISTER_UNIT,
    shared_unit=SHARED_UNIT,
    sub_partitions=SUB_PARTITIONS,
)
TRACE_GAP_NS = 400  # between kernels of one traced call
FAKE_FREE_BYTES = 140 << 30  # device memory free before the fake's first allocation
NULL_NS = 600  # the one-thread kernel of CudaDevice.trace_null_calls


@dataclass
class FakeKernel:
    label: str
    name: str  # the kernel's name expression
    compiled: object


class _Memory:
    """Host buffers at real addresses, so a CPU-only shared library can read and write them the
    way an entry point reads and writes device memory."""

    def __init__(self) -> None:
        self.blocks: dict[int, np.ndarray] = {}

    def alloc(self, nbytes: int) -> int:
        block = np.zeros(max(nbytes, 1), dtype=np.uint8)
        ptr = block.ctypes.data
        self.blocks[ptr] = block
        return ptr

    def view(self, ptr: int, nbytes: int) -> np.ndarray:
        for base, block in self.blocks.items():
            if base <= ptr and ptr + nbytes <= base + block.size:
                return block[ptr - base : ptr - base + nbytes]
        raise KernelFault(f"illegal address {ptr:#x} (+{nbytes})", 700)


def _arm_side(enqueue) -> str | None:
    """The side of the arm an enqueue callable is bound to (the stages bind it as `lambda ex=ex:
    ex.enqueue(...)`), or None: how the fake times a library arm, whose entry point launches
    nothing the fake can see, as long as `activity[side]` says its kernels run."""
    bound = getattr(enqueue, "__defaults__", None) or (None,)
    return getattr(bound[0], "side", None)


def text_bytes_ns(ns_per_byte: float = 10.0, fixed_ns: float = 2000.0) -> Callable[[object], float]:
    """A fake cost model keyed to the compiled code: a launch lasts `fixed_ns` plus `ns_per_byte`
    for each byte of the machine code's instructions (every function's `.text`, as
    `build.machine_code` reads it). Identical machine code lasts the same; a planted slowdown
    that adds instructions lasts longer, in proportion."""
    from qualify.build.machine_code import machine_code

    def duration(compiled) -> float:
        code = machine_code(compiled.cubin)
        return fixed_ns + ns_per_byte * sum(len(f.text) for f in code.functions.values())

    return duration


class FakeDevice:
    def __init__(
        self,
        kernels: dict[str, Callable],
        durations: dict[str, float] | None = None,
        noise: float = 0.002,
        seed: int = 0,
        info: DeviceInfo = FAKE_INFO,
        floor_ns: float = 1300.0,
        busy_after_ns: float = 0.0,
        activity: dict[str, list[dict]] | None = None,
        cupti: bool = True,
        trace_skew_ns: float = 0.0,
        trace_offset_ns: float = 0.0,
        free_bytes: int = FAKE_FREE_BYTES,
        trace_scale: dict[str, float] | None = None,
        code_ns: Callable[[object], float] | None = None,
    ):
        self.info = info
        self.kernels = kernels
        self.durations = durations or {}
        self.noise = noise
        self.rng = np.random.default_rng(seed)
        self.floor = floor_ns
        self.busy_after_ns = busy_after_ns  # simulates work that escaped the stream
        self.memory = _Memory()
        self.calls: list[tuple] = []
        self.stream_handle = 0xF00D
        self._in_sample: list[str] | None = None
        self.live_buffers = 0
        self.free_bytes = free_bytes  # what free_memory() reports before any allocation
        self.live_bytes = 0
        self.guards: dict[int, int] = {}  # ptr -> guard bytes (alloc_guarded)
        self.flush_slots = 1  # prepared flush buffers (CudaDevice.prepare_flush_slots)
        self._batching = False  # inside time_samples, which logs each sample's flush itself
        # label -> the kernels one traced call launches: dicts of KernelActivity's launch fields
        # and `ns` (a library arm's entry point launches nothing the fake can see)
        self.activity = activity or {}
        self.cupti = cupti
        self.trace_skew_ns = trace_skew_ns  # added to every traced event window: a faulty timer
        self.trace_offset_ns = trace_offset_ns  # what tracing costs every traced window, null calls too
        self.trace_scale = trace_scale or {}  # label -> factor on its traced kernels' durations
        self._clock = 1_000_000
        self._trace_rng = np.random.default_rng(seed + 1)  # tracing leaves the samples' noise as it was
        self._kernel_names: dict[str, str] = {}  # label -> name expression of kernels launched
        # compiled kernel -> ns per launch: a duration rule keyed to the code itself, so a change
        # that adds instructions shows as slower and one that leaves the code alone shows nothing,
        # whichever arm label the kernel is loaded under (`text_bytes_ns`)
        self.code_ns = code_ns

    def load_kernel(self, label: str, compiled, dynamic_shared_bytes: int) -> FakeKernel:
        self.calls.append(("load", label, compiled.spec.kernel, dynamic_shared_bytes))
        if self.code_ns is not None:
            self.durations[label] = self.code_ns(compiled)
        return FakeKernel(label, compiled.spec.kernel, compiled)

    def unload_kernel(self, kernel) -> None:
        self.calls.append(("unload", kernel.label))

    def resources(self, kernel, threads_per_block: int, dynamic_shared_bytes: int) -> ArmResources:
        r = kernel.compiled.resources
        assert r is not None
        return ArmResources(
            registers=r.registers,
            static_shared_bytes=r.static_shared_bytes,
            dynamic_shared_bytes=dynamic_shared_bytes,
            local_bytes=r.stack_bytes,
            max_threads_per_block=1024,
            threads_per_block=threads_per_block,
            blocks_per_sm=max(1, 2048 // threads_per_block),
            warps_per_sm=64,
        )

    def launch(self, kernel, grid, block, shared_bytes, args) -> None:
        base = kernel.name.split("<", 1)[0]
        self._kernel_names[kernel.label] = kernel.name
        if self._in_sample is not None:
            self._in_sample.append(kernel.label)
        else:
            self.calls.append(("launch", kernel.label))
        self.kernels[base](self.memory, args, kernel)

    def alloc(self, nbytes: int) -> DeviceBuffer:
        self.live_buffers += 1
        self.live_bytes += nbytes
        return DeviceBuffer(self.memory.alloc(nbytes), nbytes)

    def free(self, buf: DeviceBuffer) -> None:
        self.live_buffers -= 1
        self.live_bytes -= buf.nbytes
        del self.memory.blocks[buf.ptr]  # a view at an offset is not an allocation: KeyError
        self.guards.pop(buf.ptr, None)

    def alloc_guarded(self, nbytes: int, guard: int = GUARD_BYTES) -> DeviceBuffer:
        """CudaDevice.alloc_guarded: `guard` bytes of GUARD_BYTE after the declared size, inside
        the one host block, so a fake kernel's write into them succeeds as on the GPU."""
        self.live_buffers += 1
        self.live_bytes += nbytes
        ptr = self.memory.alloc(nbytes + guard)
        self.memory.view(ptr + nbytes, guard)[:] = GUARD_BYTE
        self.guards[ptr] = guard
        return DeviceBuffer(ptr, nbytes)

    def guard_overrun(self, buf: DeviceBuffer) -> int:
        region = self.memory.view(buf.ptr + buf.nbytes, self.guards[buf.ptr])
        changed = np.flatnonzero(region != GUARD_BYTE)
        region[:] = GUARD_BYTE
        self.calls.append(("guard", buf.ptr))
        return int(changed[-1]) + 1 if changed.size else 0

    def guard_bytes(self, buf: DeviceBuffer) -> int:
        return self.guards.get(buf.ptr, 0)

    def free_memory(self) -> int:
        return self.free_bytes - self.live_bytes

    def prepare_flush_slots(self, count: int = FLUSH_SLOTS) -> int:
        self.calls.append(("flush_slots", count))
        self.flush_slots = max(self.flush_slots, count)
        return self.flush_slots

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.flush_slots:
            raise ValueError(f"flush slot {slot}: {self.flush_slots} prepared (prepare_flush_slots)")

    def upload(self, buf: DeviceBuffer, data: np.ndarray) -> None:
        self.memory.view(buf.ptr, buf.nbytes)[:] = np.ascontiguousarray(data).view(np.uint8).reshape(-1)

    def download(self, buf: DeviceBuffer) -> np.ndarray:
        return self.memory.view(buf.ptr, buf.nbytes).copy()

    def copy(self, dst: DeviceBuffer, src: DeviceBuffer) -> None:
        assert dst.nbytes == src.nbytes, (dst.nbytes, src.nbytes)
        self.calls.append(("copy", dst.ptr, src.ptr))
        self.memory.view(dst.ptr, dst.nbytes)[:] = self.memory.view(src.ptr, src.nbytes)

    def poison(self, buf: DeviceBuffer) -> None:
        self.calls.append(("poison", buf.ptr))
        self.memory.view(buf.ptr, buf.nbytes)[:] = 0xFF

    def synchronize(self) -> None:
        pass

    def differs(self, a: DeviceBuffer, b: DeviceBuffer) -> bool:
        self.calls.append(("differs", a.ptr, b.ptr))
        return not np.array_equal(self.memory.view(a.ptr, a.nbytes), self.memory.view(b.ptr, b.nbytes))

    def check_idle(self) -> None:
        if self.busy_after_ns:
            import time

            time.sleep(self.busy_after_ns / 1e9)

    def time_sample(
        self, enqueue, cold: bool, block_stream: bool = True, timeout_s: float = 60.0, flush_slot: int = 0
    ) -> float:
        if cold and not self._batching:
            self._check_slot(flush_slot)
            self.calls.append(("flush", flush_slot))
        self._in_sample = []
        try:
            enqueue()
        finally:
            launched, self._in_sample = self._in_sample, None
        self.calls.append(("sample", tuple(launched), cold, block_stream))
        ns = self.floor + sum(self.durations.get(label, 1000.0) for label in launched)
        unseen = self.activity.get(_arm_side(enqueue)) if not launched else None
        if unseen:  # a library arm: its kernels last inside a sample as long as in a traced call
            ns += sum(t["ns"] for t in unseen) + TRACE_GAP_NS * (len(unseen) - 1)
        return float(ns * (1.0 + self.noise * self.rng.standard_normal()))

    def time_samples(
        self,
        enqueue,
        count: int,
        cold: bool,
        before_each=None,
        touch=(),
        max_batch: int = MAX_BATCH,
        timeout_s: float = 60.0,
        flush_slot: int = 0,
    ) -> list[float]:
        """CudaDevice.time_samples's order of operations, as calls: hold → per sample [poison…]
        [(flush, slot), touch] sample → release, in batches of at most max_batch."""
        self._check_slot(flush_slot)
        out: list[float] = []
        while len(out) < count:
            n = min(max_batch, count - len(out))
            self.calls.append(("hold", n))
            for _ in range(n):
                if before_each is not None:
                    before_each()
                if cold:
                    self.calls.append(("flush", flush_slot))
                    if touch:
                        self.calls.append(("touch", len(touch)))
                self._batching = True
                try:
                    out.append(self.time_sample(enqueue, cold, True, timeout_s))
                finally:
                    self._batching = False
            self.calls.append(("release",))
        return out

    def limits(self) -> DeviceLimits:
        return FAKE_LIMITS

    def trace_missing(self) -> str | None:
        return None if self.cupti else "cupti-python is not installed (fake); pip install 'qualify[cupti-cu13]'"

    def trace_tool(self) -> str:
        return "cupti-python (fake)"

    def trace_calls(
        self,
        enqueue,
        calls: int,
        label: str,
        cold: bool,
        timeout_s: float = 60.0,
        flush_slot: int = 0,
        before_each=None,
    ) -> list[TracedCall]:
        """CudaDevice.trace_calls: per call [before_each…] [(flush, slot)], then the kernels
        `activity[label]` names (or those the call launched through this device) back to back, and
        an event window around them. `trace_scale[label]` multiplies the traced durations (CUPTI
        reading otherwise than the samples)."""
        self._check_slot(flush_slot)
        out = []
        for _ in range(calls):
            if before_each is not None:
                before_each()
            if cold:
                self.calls.append(("flush", flush_slot))
            self._in_sample = []
            try:
                enqueue()
            finally:
                launched, self._in_sample = self._in_sample, None
            self.calls.append(("trace", label, tuple(launched), cold))
            templates = self.activity.get(label) or [
                {"name": self._kernel_names[lb], "ns": self.durations.get(lb, 1000.0)} for lb in launched
            ]
            kernels, start = [], self._clock
            scale = self.trace_scale.get(label, 1.0)
            for n, t in enumerate(templates):
                ns = int(t["ns"] * scale * (1.0 + self.noise * self._trace_rng.standard_normal()))
                fields = {k: v for k, v in t.items() if k != "ns"}
                fields.setdefault("grid", (1, 1, 1))
                fields.setdefault("block", (128, 1, 1))
                for k in (
                    "registers_per_thread",
                    "static_shared_bytes",
                    "dynamic_shared_bytes",
                    "local_bytes_per_thread",
                ):
                    fields.setdefault(k, 32 if k == "registers_per_thread" else 0)
                kernels.append(
                    KernelActivity(
                        start_ns=self._clock,
                        end_ns=self._clock + ns,
                        correlation_id=len(self.calls) * 100 + n,
                        stream_id=7,
                        **fields,
                    )
                )
                self._clock += ns + TRACE_GAP_NS
            span = (kernels[-1].end_ns - start) if kernels else 0
            out.append(
                TracedCall(event_ns=self.floor + span + self.trace_offset_ns + self.trace_skew_ns, kernels=kernels)
            )
            self._clock += 10_000
        return out

    def trace_null_calls(self, calls: int, cold: bool, timeout_s: float = 60.0) -> list[TracedCall]:
        """CudaDevice.trace_null_calls: a one-thread kernel of NULL_NS, its window `trace_offset_ns`
        longer than floor + span (what tracing costs a real window)."""
        out = []
        for n in range(calls):
            k = KernelActivity(
                name="qualify_settle",
                grid=(1, 1, 1),
                block=(1, 1, 1),
                registers_per_thread=8,
                static_shared_bytes=0,
                dynamic_shared_bytes=0,
                local_bytes_per_thread=0,
                start_ns=self._clock,
                end_ns=self._clock + NULL_NS,
                correlation_id=n,
                stream_id=7,
            )
            out.append(TracedCall(event_ns=self.floor + NULL_NS + self.trace_offset_ns, kernels=[k]))
            self._clock += 10_000
        self.calls.append(("trace_null", calls, cold))
        return out

    def python_runtime(self):
        """CudaDevice.python_runtime's twin: a Python arm gets NumPy arrays over host memory."""
        from qualify.run.python_arm import NumpyRuntime

        self.calls.append(("python_runtime",))
        return NumpyRuntime(self.memory, self.stream_handle)

    def close(self) -> None:
        self.calls.append(("close",))


class FakeTelemetry:
    available = True

    def __init__(self, sm_mhz: float = 1980.0, throttle: int = 0):
        self.reading = Reading(sm_mhz, throttle, 45.0)

    def read(self) -> Reading:
        return self.reading
