"""The device session: the only module that talks to the CUDA driver (through cuda.bindings).

Everything the run stage needs from a GPU goes through `CudaDevice`'s small surface — load a
kernel eagerly, allocate, copy, poison, launch on qualify's own stream, and time one sample — so
the schedule, statistics and records are tested on the CPU against `qualify.run.fake.FakeDevice`,
which implements the same surface and records every call.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from qualify import generation
from qualify.build.nvrtc import CompiledKernel, KernelSpec, compile_kernel
from qualify.errors import BuildError, DeviceError
from qualify.results.model import ArmResources, DeviceInfo, DeviceLimits, TracedCall
from qualify.run.cabi import C_TYPES

HELPERS = Path(__file__).with_name("helpers.cu")
BLOCK_TIMEOUT_NS = 10_000_000_000  # a batch's launches must be queued within 10 s
SAMPLE_TIMEOUT_S = 60.0  # no sample of a real plan takes a minute; a hung launch does
# Samples queued behind one blocking kernel. Each sample is about six stream entries (poison, flush,
# two events, the launch); a blocked stream accepts on the order of a thousand before the host's
# next launch call itself blocks, which would deadlock behind the blocking kernel.
MAX_BATCH = 32
# One byte read per 64 KiB of each buffer after a cold flush: the flush evicts the buffers'
# translations along with their lines; this brings the translations back while leaving L2
# practically empty of the buffers (under 0.1 % of their lines).
TOUCH_STRIDE = 64 * 1024
# A one-thread pause between a cold flush and the start event (benchmarks/timer decides it).
SETTLE_NS = 0
# Flush buffers a trial may rotate through (prepare_flush_slots): where the flush buffer sits
# decides what it leaves in L2, so a trial draws it per block like the case's buffers. Slot 0 is
# allocated with the helpers; slot s >= 1 follows a spacer of its own size, so each slot starts
# after a different amount of memory.
FLUSH_SLOTS = 4
# The guard after an output or scratch buffer (alloc_guarded): compute-sanitizer's memcheck only
# sees writes outside every allocation, and cuMemAlloc rounds sizes up, so a write a few bytes past
# a buffer's declared size lands in memory the driver gave us and passes unseen. The guard is part
# of the allocation, filled with GUARD_BYTE; any byte of it changed after a launch is a write past
# the declared size. 4 KiB holds a whole 256-thread block of 16-byte stores one step too far.
GUARD_BYTES = 4096
GUARD_BYTE = 0xA5  # neither the poison (0xFF) nor zero, nor a byte of a small float or int


def flush_spacer_bytes(slot: int) -> int:
    """The spacer allocated before flush slot `slot` (>= 1): s x 3 MiB + s x 64 KiB."""
    return slot * (3 << 20) + slot * (64 << 10)


# Errors after which the context is unusable: only a new process recovers.
STICKY = {
    700: "illegal address",
    702: "launch timeout",
    710: "device-side assert",
    714: "hardware stack error",
    715: "illegal instruction",
    716: "misaligned address",
    717: "invalid address space",
    718: "invalid pc",
    719: "launch failure",
}


class KernelFault(DeviceError):
    """A kernel faulted; the CUDA context of this process can no longer be used."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


class LaunchHang(KernelFault):
    """A sample did not finish within its deadline; the kernel cannot be cancelled, only the
    process's exit frees the GPU."""

    def __init__(self, message: str):
        super().__init__(message, 702)


@dataclass
class DeviceBuffer:
    ptr: int
    nbytes: int


@dataclass
class Kernel:
    label: str
    function: object
    module: object
    compiled: CompiledKernel


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as exc:  # installed without an extra (qualify[cu13] or qualify[cu12])
        raise generation.missing_extra("cuda-bindings", f"not installed ({exc.name or exc})") from None
    return driver


def driver_cuda_version() -> str | None:
    """The CUDA version the driver supports ("13.0"), as nvidia-smi prints it; None without a
    driver. cuDriverGetVersion needs no cuInit and no device."""
    driver = _driver()
    try:
        err, version = driver.cuDriverGetVersion()
    except RuntimeError:  # libcuda.so is not there at all
        return None
    if err != driver.CUresult.CUDA_SUCCESS:
        return None
    return str(generation.CudaVersion.from_int(int(version)))


def _check(result, what: str):
    """Unwrap a cuda.bindings result tuple; raise a typed error on failure."""
    driver = _driver()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        code = int(err)
        _, name = driver.cuGetErrorName(err)
        name = name.decode() if isinstance(name, bytes) else str(name)
        if code in STICKY:
            raise KernelFault(f"{what}: {name} ({STICKY[code]}); the CUDA context is lost", code)
        raise DeviceError(f"{what}: {name} ({code})")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _uuid_string(raw) -> str:
    data = raw if isinstance(raw, (bytes, bytearray)) else bytes(ord(c) & 0xFF for c in raw)
    h = data[:16].hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def device_count() -> int:
    """How many CUDA devices the driver sees (for `--devices all`); no context is created."""
    driver = _driver()
    try:
        (err,) = driver.cuInit(0)
    except RuntimeError as exc:
        raise DeviceError(f"no NVIDIA driver on this machine ({exc.__class__.__name__})") from None
    if int(err) == 100:
        return 0
    _check((err,), "cuInit")
    return int(_check(driver.cuDeviceGetCount(), "cuDeviceGetCount"))


def _device_handle(ordinal: int):
    """The driver initialised and device `ordinal` found (no context yet), or a one-line DeviceError."""
    driver = _driver()
    try:
        (err,) = driver.cuInit(0)
    except RuntimeError:  # libcuda.so is not there at all
        raise DeviceError(
            "not found: no NVIDIA driver on this machine; run, compare and probe need a GPU host (plan check does not)",
            file="libcuda.so.1",
            field="driver",
        ) from None
    if int(err) == 100:
        raise DeviceError("the NVIDIA driver reports no CUDA device")
    _check((err,), "cuInit")
    count = _check(driver.cuDeviceGetCount(), "cuDeviceGetCount")
    if ordinal >= count:
        raise DeviceError(f"device {ordinal} requested, {count} present")
    return driver, _check(driver.cuDeviceGet(ordinal), "cuDeviceGet")


def device_uuid(ordinal: int) -> str:
    """Which GPU `ordinal` is, without opening it: no context, no stream, no module loaded. The
    parent of a run's trial processes needs only this (each trial opens the device itself)."""
    driver, device = _device_handle(ordinal)
    return _uuid_string(_check(driver.cuDeviceGetUuid(device), "cuDeviceGetUuid").bytes)


class CudaDevice:
    """One GPU, its primary context, qualify's stream, and the timing machinery."""

    def __init__(self, ordinal: int = 0):
        driver, self.device = _device_handle(ordinal)
        self._driver = driver
        self.context = _check(driver.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain")
        _check(driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        self.info = self._read_info(ordinal)
        try:
            self._check_loadable()
        except Exception:  # a refusal, or NVRTC missing: no context is left retained
            driver.cuDevicePrimaryCtxRelease(self.device)
            raise
        self.stream = _check(driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
        self.stream_handle = int(self.stream)
        self._start = _check(driver.cuEventCreate(0), "cuEventCreate")
        self._stop = _check(driver.cuEventCreate(0), "cuEventCreate")
        self._pairs: list[tuple[object, object]] = []  # event pairs of a batch, created on first use
        self._buffers: list[DeviceBuffer] = []
        self._guards: dict[int, int] = {}  # ptr -> guard bytes after the declared size (alloc_guarded)
        self._kernels: list[Kernel] = []
        self._host_flag = None
        self._flush_bufs: list[DeviceBuffer] = []  # slot -> flush buffer; slot 0 made with the helpers
        self._helpers_ready = False
        self._lost = False

    # -- identity ---------------------------------------------------------------------------

    def _attr(self, name: str) -> int:
        attr = getattr(self._driver.CUdevice_attribute, name)
        return int(_check(self._driver.cuDeviceGetAttribute(attr, self.device), name))

    def _read_info(self, ordinal: int) -> DeviceInfo:
        d = self._driver
        name = _check(d.cuDeviceGetName(256, self.device), "cuDeviceGetName")
        name = name.split(b"\x00", 1)[0].decode() if isinstance(name, bytes) else str(name)
        uuid = _check(d.cuDeviceGetUuid(self.device), "cuDeviceGetUuid")
        major = self._attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR")
        minor = self._attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")
        version = int(_check(d.cuDriverGetVersion(), "cuDriverGetVersion"))
        try:
            pci = _check(d.cuDeviceGetPCIBusId(32, self.device), "cuDeviceGetPCIBusId")
            pci = pci.split(b"\x00", 1)[0].decode() if isinstance(pci, bytes) else str(pci)
        except DeviceError:
            pci = None
        from qualify.run.telemetry import driver_version

        return DeviceInfo(
            name=name,
            uuid=_uuid_string(uuid.bytes),
            ordinal=ordinal,
            compute_capability=f"{major}.{minor}",
            arch=f"sm_{major}{minor}",
            sm_count=self._attr("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
            l2_bytes=self._attr("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"),
            max_shared_per_block_optin=self._attr("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
            sm_clock_max_mhz=self._attr("CU_DEVICE_ATTRIBUTE_CLOCK_RATE") // 1000 or None,
            mem_clock_max_mhz=self._attr("CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE") // 1000 or None,
            memory_bus_width_bits=self._attr("CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH") or None,
            driver_version=driver_version() or "unknown",
            cuda_driver_version=f"{version // 1000}.{version % 1000 // 10}",
            pci_bus_id=pci,
        )

    def _check_loadable(self) -> None:
        """The start-up check: the driver loads what the installed NVRTC writes for this device.

        A mismatch (NVRTC 13 on a CUDA 12 driver: CUDA_ERROR_UNSUPPORTED_PTX_VERSION or an invalid
        image) would otherwise surface at the first kernel of a trial, mid-run, as if the kernel
        were at fault. One of qualify's own helpers is compiled (cached after the first time) and
        loaded; the refusal names both versions and the extra to install."""
        from qualify.build.nvrtc import nvrtc_version

        nvrtc = generation.CudaVersion.parse(nvrtc_version())
        cuda = generation.CudaVersion.parse(self.info.cuda_driver_version)
        try:
            compiled = compile_kernel(KernelSpec(source=HELPERS, kernel="qualify_settle", arch=self.info.arch))
        except BuildError as exc:
            raise DeviceError(
                f"NVRTC {nvrtc} cannot compile for this device's {self.info.arch} ({exc.message}); "
                f"{generation.install_advice(cuda)}"
            ) from None
        err, module = self._driver.cuModuleLoadData(compiled.cubin)
        if err != self._driver.CUresult.CUDA_SUCCESS:
            _, name = self._driver.cuGetErrorName(err)
            name = name.decode() if isinstance(name, bytes) else str(name)
            raise DeviceError(generation.load_refusal(nvrtc, cuda, f"{name}, {int(err)}"))
        self._driver.cuModuleUnload(module)

    # -- kernels ----------------------------------------------------------------------------

    def load_kernel(self, label: str, compiled: CompiledKernel, dynamic_shared_bytes: int) -> Kernel:
        """Load a CUBIN now (never lazily inside a timed sample) and raise its shared-memory limit."""
        d = self._driver
        module = _check(d.cuModuleLoadData(compiled.cubin), f"cuModuleLoadData({label})")
        function = _check(
            d.cuModuleGetFunction(module, compiled.lowered_name.encode()), f"cuModuleGetFunction({label})"
        )
        if dynamic_shared_bytes > 48 * 1024:
            attr = d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            _check(d.cuFuncSetAttribute(function, attr, dynamic_shared_bytes), f"raise shared memory of {label}")
        kernel = Kernel(label, function, module, compiled)
        self._kernels.append(kernel)
        return kernel

    def unload_kernel(self, kernel: Kernel) -> None:
        _check(self._driver.cuModuleUnload(kernel.module), "cuModuleUnload")
        self._kernels.remove(kernel)

    def resources(self, kernel: Kernel, threads_per_block: int, dynamic_shared_bytes: int) -> ArmResources:
        d = self._driver
        A = d.CUfunction_attribute

        def attr(name):
            return int(_check(d.cuFuncGetAttribute(getattr(A, name), kernel.function), name))

        blocks = int(
            _check(
                d.cuOccupancyMaxActiveBlocksPerMultiprocessor(kernel.function, threads_per_block, dynamic_shared_bytes),
                "cuOccupancyMaxActiveBlocksPerMultiprocessor",
            )
        )
        return ArmResources(
            registers=attr("CU_FUNC_ATTRIBUTE_NUM_REGS"),
            static_shared_bytes=attr("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES"),
            dynamic_shared_bytes=dynamic_shared_bytes,
            local_bytes=attr("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"),
            max_threads_per_block=attr("CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
            threads_per_block=threads_per_block,
            blocks_per_sm=blocks,
            warps_per_sm=blocks * -(-threads_per_block // 32),
        )

    def launch(
        self,
        kernel: Kernel,
        grid,
        block,
        shared_bytes: int,
        args: list[tuple[str, int | float]],
        stream: int | None = None,
    ) -> None:
        """Queue one launch on qualify's stream (or another, by handle, for peer timers).

        args: (ctype name, value) pairs; pointers as 'ptr'. The argument array is built here with
        ctypes and handed over by address: the driver copies the values at launch.
        """
        values = [C_TYPES[kind](value) for kind, value in args]
        pointers = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
        target = self.stream if stream is None else self._driver.CUstream(stream)
        _check(
            self._driver.cuLaunchKernel(
                kernel.function, *grid, *block, shared_bytes, target, ctypes.addressof(pointers), 0
            ),
            f"launch {kernel.label}",
        )

    # -- memory -----------------------------------------------------------------------------

    def alloc(self, nbytes: int) -> DeviceBuffer:
        ptr = _check(self._driver.cuMemAlloc(max(nbytes, 1)), f"cuMemAlloc({nbytes:,} bytes)")
        buf = DeviceBuffer(int(ptr), nbytes)
        self._buffers.append(buf)
        return buf

    def free(self, buf: DeviceBuffer) -> None:
        _check(self._driver.cuMemFree(buf.ptr), "cuMemFree")
        self._buffers.remove(buf)
        self._guards.pop(buf.ptr, None)

    def alloc_guarded(self, nbytes: int, guard: int = GUARD_BYTES) -> DeviceBuffer:
        """A buffer of `nbytes` followed, in the same allocation, by `guard` bytes of GUARD_BYTE
        (guard_overrun reads them back). The buffer's nbytes is the declared size only."""
        ptr = int(_check(self._driver.cuMemAlloc(nbytes + guard), f"cuMemAlloc({nbytes + guard:,} bytes)"))
        buf = DeviceBuffer(ptr, nbytes)
        self._buffers.append(buf)
        self._guards[ptr] = guard
        _check(self._driver.cuMemsetD8Async(ptr + nbytes, GUARD_BYTE, guard, self.stream), "cuMemsetD8Async")
        self.synchronize()
        return buf

    def guard_overrun(self, buf: DeviceBuffer) -> int:
        """How far past its declared size a buffer was written: the offset after the last guard
        byte that is no longer GUARD_BYTE (0: the guard is intact). The guard is filled again."""
        guard = self._guards[buf.ptr]  # a buffer alloc_guarded did not make has none: KeyError
        self.synchronize()
        region = np.empty(guard, dtype=np.uint8)
        _check(self._driver.cuMemcpyDtoH(region, buf.ptr + buf.nbytes, guard), "cuMemcpyDtoH")
        changed = np.flatnonzero(region != GUARD_BYTE)
        if changed.size:
            _check(
                self._driver.cuMemsetD8Async(buf.ptr + buf.nbytes, GUARD_BYTE, guard, self.stream), "cuMemsetD8Async"
            )
            self.synchronize()
        return int(changed[-1]) + 1 if changed.size else 0

    def guard_bytes(self, buf: DeviceBuffer) -> int:
        """The guard after a buffer (0 for one alloc made)."""
        return self._guards.get(buf.ptr, 0)

    def free_memory(self) -> int:
        """Bytes of device memory free now (cuMemGetInfo), for sizing allocations up front."""
        free, _total = _check(self._driver.cuMemGetInfo(), "cuMemGetInfo")
        return int(free)

    def upload(self, buf: DeviceBuffer, data: np.ndarray) -> None:
        data = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        assert data.nbytes == buf.nbytes, (data.nbytes, buf.nbytes)
        self.synchronize()
        _check(self._driver.cuMemcpyHtoD(buf.ptr, data, data.nbytes), "cuMemcpyHtoD")

    def download(self, buf: DeviceBuffer) -> np.ndarray:
        self.synchronize()
        out = np.empty(buf.nbytes, dtype=np.uint8)
        _check(self._driver.cuMemcpyDtoH(out, buf.ptr, buf.nbytes), "cuMemcpyDtoH")
        return out

    def poison(self, buf: DeviceBuffer) -> None:
        """Fill with 0xFF bytes (NaN for every float type, -1 for ints): an unwritten element cannot pass."""
        _check(self._driver.cuMemsetD8Async(buf.ptr, 0xFF, buf.nbytes, self.stream), "cuMemsetD8Async")

    def synchronize(self) -> None:
        _check(self._driver.cuStreamSynchronize(self.stream), "cuStreamSynchronize")

    def check_idle(self) -> None:
        """A device-wide synchronisation: surfaces faults of work queued anywhere."""
        _check(self._driver.cuCtxSynchronize(), "cuCtxSynchronize")

    # -- timing -----------------------------------------------------------------------------

    def _prepare_helpers(self) -> None:
        if self._helpers_ready:
            return
        d = self._driver
        compiled = {
            name: compile_kernel(KernelSpec(source=HELPERS, kernel=name, arch=self.info.arch))
            for name in (
                "qualify_block_stream",
                "qualify_flush_l2",
                "qualify_touch_pages",
                "qualify_settle",
                "qualify_bytes_differ",
            )
        }
        self._blocker = self.load_kernel("qualify_block_stream", compiled["qualify_block_stream"], 0)
        self._flusher = self.load_kernel("qualify_flush_l2", compiled["qualify_flush_l2"], 0)
        self._toucher = self.load_kernel("qualify_touch_pages", compiled["qualify_touch_pages"], 0)
        self._settler = self.load_kernel("qualify_settle", compiled["qualify_settle"], 0)
        self._differ = self.load_kernel("qualify_bytes_differ", compiled["qualify_bytes_differ"], 0)
        # Host-mapped words: [0] the release flag the host sets, [1] the blocking kernel's "timed
        # out" mark, [2] the "bytes differ" mark. Mapped, so reading a mark costs no copy.
        flags = d.CU_MEMHOSTALLOC_DEVICEMAP | d.CU_MEMHOSTALLOC_PORTABLE
        self._host_flag = int(_check(d.cuMemHostAlloc(16, flags), "cuMemHostAlloc"))
        self._flag_dev = int(_check(d.cuMemHostGetDevicePointer(self._host_flag, 0), "cuMemHostGetDevicePointer"))
        self._flush_bufs = [self._new_flush_buffer()]
        self._sink = self.alloc(4)
        self._helpers_ready = True

    def _new_flush_buffer(self) -> DeviceBuffer:
        # at least 2 x L2, in 16-byte elements
        buf = self.alloc(2 * self.info.l2_bytes + (1 << 20))
        _check(self._driver.cuMemsetD8(buf.ptr, 0x5A, buf.nbytes), "cuMemsetD8")
        return buf

    def prepare_flush_slots(self, count: int = FLUSH_SLOTS) -> int:
        """Make flush slots 0..count-1 ready (each a flush buffer after its spacer, kept until
        close); returns how many are ready. Call once, before the cases' buffers are allocated;
        a sample may name only a prepared slot. Slot 0 alone is what every sample used before."""
        self._prepare_helpers()
        while len(self._flush_bufs) < count:
            self.alloc(flush_spacer_bytes(len(self._flush_bufs)))  # freed at close with the rest
            self._flush_bufs.append(self._new_flush_buffer())
        return len(self._flush_bufs)

    def _flush_buffer(self, slot: int) -> DeviceBuffer:
        if not 0 <= slot < len(self._flush_bufs):
            raise ValueError(f"flush slot {slot}: {len(self._flush_bufs)} prepared (prepare_flush_slots)")
        return self._flush_bufs[slot]

    def _flag(self) -> ctypes.c_int32:
        return ctypes.c_int32.from_address(self._host_flag)

    def _timed_out_mark(self) -> ctypes.c_int32:
        return ctypes.c_int32.from_address(self._host_flag + 4)

    def _hold_stream(self) -> None:
        """Queue the blocking kernel: the stream waits until _release_stream()."""
        self._flag().value = 0
        self._timed_out_mark().value = 0
        self.launch(
            self._blocker,
            (1, 1, 1),
            (1, 1, 1),
            0,
            [("ptr", self._flag_dev), ("u64", BLOCK_TIMEOUT_NS), ("ptr", self._flag_dev + 4)],
        )

    def _release_stream(self) -> None:
        self._flag().value = 1

    def copy(self, dst: DeviceBuffer, src: DeviceBuffer) -> None:
        """Device-to-device copy on qualify's stream."""
        assert dst.nbytes == src.nbytes, (dst.nbytes, src.nbytes)
        _check(self._driver.cuMemcpyDtoDAsync(dst.ptr, src.ptr, src.nbytes, self.stream), "cuMemcpyDtoDAsync")

    def differs(self, a: DeviceBuffer, b: DeviceBuffer) -> bool:
        """Whether two device buffers hold different bytes, compared on the device."""
        self._prepare_helpers()
        mark = ctypes.c_int32.from_address(self._host_flag + 8)
        mark.value = 0
        self.launch(
            self._differ,
            (self.info.sm_count * 4, 1, 1),
            (256, 1, 1),
            0,
            [("ptr", a.ptr), ("ptr", b.ptr), ("u64", a.nbytes), ("ptr", self._flag_dev + 8)],
        )
        self.synchronize()
        return bool(mark.value)

    def _launch_flush(self, slot: int = 0) -> None:
        """Leave L2 holding clean, unrelated lines (the persisting lines are reset by the caller)."""
        buf = self._flush_buffer(slot)
        self.launch(
            self._flusher,
            (self.info.sm_count * 8, 1, 1),
            (512, 1, 1),
            0,
            [("ptr", buf.ptr), ("u64", buf.nbytes // 16), ("ptr", self._sink.ptr)],
        )

    def _touch(self, buffers) -> None:
        for buf in buffers:
            pages = -(-buf.nbytes // TOUCH_STRIDE)
            self.launch(
                self._toucher,
                (-(-pages // 256), 1, 1),
                (256, 1, 1),
                0,
                [("ptr", buf.ptr), ("u64", buf.nbytes), ("u64", TOUCH_STRIDE), ("ptr", self._sink.ptr)],
            )

    def _wait(self, event, timeout_s: float) -> None:
        """cuEventSynchronize with a deadline: the watchdog against a launch that never ends.

        Spins briefly (most samples end within milliseconds), then polls every millisecond.
        """
        d = self._driver
        start = time.monotonic()
        while True:
            (err,) = d.cuEventQuery(event)
            if err == d.CUresult.CUDA_SUCCESS:
                return
            if err != d.CUresult.CUDA_ERROR_NOT_READY:
                _check((err,), "cuEventQuery")
            waited = time.monotonic() - start
            if waited > timeout_s:
                self._lost = True
                raise LaunchHang(f"a sample did not finish within {timeout_s:g} s: the launch hangs")
            if waited > 0.002:
                time.sleep(0.0002)

    def time_sample(
        self,
        enqueue: Callable[[], None],
        cold: bool,
        block_stream: bool = True,
        timeout_s: float = SAMPLE_TIMEOUT_S,
        reset: bool = True,
        flush_slot: int = 0,
    ) -> float:
        """Nanoseconds between two events around enqueue()'s launches.

        Order: [flush L2] → blocking kernel → start event → launches → stop event → release. The flush
        and the blocking kernel are before the start event, hence outside the window; the window
        still holds the event pair's own floor, measured with `enqueue` = nothing and subtracted
        in the statistics.
        """
        self._prepare_helpers()
        d = self._driver
        if cold:
            self._launch_flush(flush_slot)
            if reset:
                _check(d.cuCtxResetPersistingL2Cache(), "cuCtxResetPersistingL2Cache")
        if block_stream:
            self._hold_stream()
        _check(d.cuEventRecord(self._start, self.stream), "cuEventRecord")
        try:
            enqueue()
        finally:
            _check(d.cuEventRecord(self._stop, self.stream), "cuEventRecord")
            if block_stream:
                self._release_stream()
        self._wait(self._stop, timeout_s)
        ms = float(_check(d.cuEventElapsedTime(self._start, self._stop), "cuEventElapsedTime"))
        if block_stream and self._timed_out_mark().value:
            raise DeviceError("the blocking kernel timed out before the sample was queued")
        return ms * 1e6

    def _event_pairs(self, count: int) -> list[tuple[object, object]]:
        d = self._driver
        while len(self._pairs) < count:
            self._pairs.append(
                (_check(d.cuEventCreate(0), "cuEventCreate"), _check(d.cuEventCreate(0), "cuEventCreate"))
            )
        return self._pairs[:count]

    def time_samples(
        self,
        enqueue: Callable[[], None],
        count: int,
        cold: bool,
        before_each: Callable[[], None] | None = None,
        touch=(),
        settle_ns: int = SETTLE_NS,
        reset_each: bool = False,
        settle_after_ns: int = 0,
        max_batch: int = MAX_BATCH,
        timeout_s: float = SAMPLE_TIMEOUT_S,
        flush_slot: int = 0,
    ) -> list[float]:
        """`count` samples, queued in batches behind one blocking kernel each and read once per batch.

        Per batch: [reset persisting L2] → blocking kernel → per sample: before_each() →
        [L2 flush → touch] → start event → enqueue() → stop event; then release, one wait, and the
        event pairs read back. Everything but enqueue() sits outside its sample's window; each
        sample's launches are queued before the GPU reaches them, so host launch latency never
        enters a window, and the GPU runs the batch back to back instead of waiting on the host
        after every sample. Every flush of the call uses flush buffer `flush_slot`.
        """
        self._prepare_helpers()
        self._flush_buffer(flush_slot)  # refused before anything is queued
        d = self._driver
        out: list[float] = []
        while len(out) < count:
            n = min(max_batch, count - len(out))
            pairs = self._event_pairs(n)
            if cold:
                _check(d.cuCtxResetPersistingL2Cache(), "cuCtxResetPersistingL2Cache")
            self._hold_stream()
            try:
                for start, stop in pairs:
                    if before_each is not None:
                        before_each()
                    if cold:
                        self._launch_flush(flush_slot)
                        if reset_each:
                            _check(d.cuCtxResetPersistingL2Cache(), "cuCtxResetPersistingL2Cache")
                        self._touch(touch)
                        if settle_ns:
                            self.launch(self._settler, (1, 1, 1), (1, 1, 1), 0, [("u64", settle_ns)])
                    _check(d.cuEventRecord(start, self.stream), "cuEventRecord")
                    enqueue()
                    _check(d.cuEventRecord(stop, self.stream), "cuEventRecord")
                    if settle_after_ns:
                        self.launch(self._settler, (1, 1, 1), (1, 1, 1), 0, [("u64", settle_after_ns)])
            finally:
                self._release_stream()
            self._wait(pairs[-1][1], timeout_s * n)
            if self._timed_out_mark().value:
                raise DeviceError("the blocking kernel timed out before the batch was queued")
            for start, stop in pairs:
                out.append(float(_check(d.cuEventElapsedTime(start, stop), "cuEventElapsedTime")) * 1e6)
        return out

    # -- kernel trace (CUPTI, through qualify.run.cupti_tracer) ------------------------------------

    def python_runtime(self):
        """What a Python arm's call sees: torch tensors over qualify's buffers and qualify's stream
        as torch's (qualify/run/torch_bridge.py, imported here and only here)."""
        try:
            from qualify.run.torch_bridge import TorchRuntime
        except ImportError as exc:
            raise DeviceError(
                f"Python arms need torch: {exc}; pip install 'qualify[triton]'", field="arms.*.callable"
            ) from None
        return TorchRuntime(self.info.ordinal, self.stream_handle)

    def limits(self) -> DeviceLimits:
        """The limits occupancy is computed from (qualify.evaluate.occupancy)."""
        from qualify.evaluate.occupancy import REGISTER_UNIT, SHARED_UNIT, SUB_PARTITIONS

        a = self._attr
        return DeviceLimits(
            warp_size=a("CU_DEVICE_ATTRIBUTE_WARP_SIZE"),
            max_threads_per_sm=a("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR"),
            max_blocks_per_sm=a("CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR"),
            max_threads_per_block=a("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
            registers_per_sm=a("CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR"),
            registers_per_block=a("CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK"),
            shared_per_sm=a("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
            shared_per_block_optin=a("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
            reserved_shared_per_block=a("CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK"),
            register_unit=REGISTER_UNIT,
            shared_unit=SHARED_UNIT,
            sub_partitions=SUB_PARTITIONS,
        )

    def trace_missing(self) -> str | None:
        """Why kernels cannot be traced here (cupti-python missing or broken), or None."""
        from qualify.run import cupti_tracer

        return cupti_tracer.missing()

    def trace_tool(self) -> str:
        from qualify.run import cupti_tracer

        return cupti_tracer.version()

    def trace_calls(
        self,
        enqueue: Callable[[], None],
        calls: int,
        label: str,
        cold: bool,
        timeout_s: float = SAMPLE_TIMEOUT_S,
        flush_slot: int = 0,
        before_each: Callable[[], None] | None = None,
    ) -> list[TracedCall]:
        """`calls` calls of enqueue() with CUPTI kernel activity on, each inside its own event pair.

        Each call is queued exactly as a timed sample is (time_samples, a batch of one: [reset
        persisting L2] → blocking kernel → before_each() → [flush L2 with `flush_slot`] → start →
        enqueue() → stop → release), then waited for and its activity flushed, so every call's
        kernels are its own. qualify's helper kernels (the flush, the blocking kernel) are dropped
        from the records.
        """
        return self._traced(enqueue, calls, cold, self._helper_names(), timeout_s, flush_slot, before_each)

    def trace_null_calls(self, calls: int, cold: bool, timeout_s: float = SAMPLE_TIMEOUT_S) -> list[TracedCall]:
        """`calls` traced calls of qualify's one-thread settle kernel (asked to wait 0 ns), queued
        exactly as trace_calls queues an arm's call: what a traced window holds beyond its kernels."""

        def null() -> None:
            self.launch(self._settler, (1, 1, 1), (1, 1, 1), 0, [("u64", 0)])

        helpers = self._helper_names() - {self._settler.compiled.lowered_name}  # the settle kernel is kept
        return self._traced(null, calls, cold, helpers, timeout_s)

    def _helper_names(self) -> set[str]:
        """Names of qualify's own kernels, dropped from an arm's trace."""
        self._prepare_helpers()
        return {
            k.compiled.lowered_name for k in (self._blocker, self._flusher, self._toucher, self._settler, self._differ)
        }

    def _traced(
        self,
        enqueue: Callable[[], None],
        calls: int,
        cold: bool,
        helpers: set[str],
        timeout_s: float,
        flush_slot: int = 0,
        before_each: Callable[[], None] | None = None,
    ) -> list[TracedCall]:
        from qualify.run.cupti_tracer import Tracer

        out: list[TracedCall] = []
        self.synchronize()
        with Tracer() as tracer:
            for _ in range(calls):
                # queued as a timed sample is
                (event_ns,) = self.time_samples(
                    enqueue, 1, cold, before_each=before_each, timeout_s=timeout_s, flush_slot=flush_slot
                )
                self.check_idle()  # work the call sent elsewhere finishes before the flush
                kernels = [k for k in tracer.take() if k.name not in helpers]
                out.append(TracedCall(event_ns=event_ns, kernels=kernels))
        return out

    def close(self) -> None:
        d = self._driver
        if self._lost:
            return  # a hung kernel never lets a synchronisation return; the process exit frees it
        try:
            self.synchronize()
        except DeviceError:
            return  # a lost context cannot be cleaned; the process exit releases it
        for buf in list(self._buffers):
            self.free(buf)
        for kernel in list(self._kernels):
            self.unload_kernel(kernel)
        if self._host_flag is not None:
            d.cuMemFreeHost(self._host_flag)
        d.cuEventDestroy(self._start)
        d.cuEventDestroy(self._stop)
        for start, stop in self._pairs:
            d.cuEventDestroy(start)
            d.cuEventDestroy(stop)
        d.cuStreamDestroy(self.stream)
        d.cuDevicePrimaryCtxRelease(self.device)

    def __enter__(self) -> CudaDevice:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
