"""Where a case's buffers sit in device memory, drawn K times per case: the placement pool.

Where the buffers sit moves a short, memory-bound kernel's time by several percent, and not
equally for both arms (measured on the H200 with benchmarks/placement/probe.py). A trial that
times one set of buffers samples one placement and its interval describes that placement only.
The pool allocates K placements up front; the timing stage gives each block one of them
(qualify.plan.schedule.block_plan), both arms of a block the same one.

Rules of a pool:
- Placement 0 is today's layout: one plain allocation per shared buffer, offset 0, no spacer,
  allocated and uploaded in the order the case set-up always used. K=1 is exactly that.
- Placement p >= 1 first allocates a spacer of random size (kept alive for the pool's life, so the
  next allocations land elsewhere), then over-allocates every buffer by a random offset and uses
  the view at that offset. Offsets are multiples of `granularity` (a multiple of 256 bytes, which
  keeps every alignment cuMemAlloc guarantees) below OFFSET_LIMIT. The granularity is recorded:
  the sub-page offsets themselves move the mean (~0.7 point at vecload 4 Mi on the H200).
- Within every placement both arms share one buffer per (name, dtype, shape), as they always have.
- The same host inputs are uploaded into every placement; their sha256 is taken once.
- The pool (spacers included) stays within `memory_fraction` of the device's free memory at the
  start; placements that do not fit are not allocated, and the facts say why fewer were used.
- The pool owns every raw allocation and frees them all on close (a context manager); views at an
  offset are never handed to device.free.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

import numpy as np

from qualify.errors import DeviceError
from qualify.run.device import DeviceBuffer, KernelFault

ALIGNMENT = 256  # what cuMemAlloc guarantees of every allocation; offsets keep it
OFFSET_LIMIT = 2 << 20  # offsets stay below one 2 MiB page
SPACER_LIMIT = 64 << 20  # a spacer is 256 B .. 64 MiB
DEFAULT_GRANULARITY = 256
DEFAULT_MEMORY_FRACTION = 0.25


class BufferSpec(Protocol):
    """What the pool needs of a buffer (qualify.plan.resolve.ResolvedBuffer has it)."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int: ...


BufferKey = tuple[str, str, tuple[int, ...]]  # (name, dtype, shape): one device buffer per key


@dataclass(frozen=True)
class BufferPlacement:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    offset_bytes: int  # where the buffer starts inside its raw allocation

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "nbytes": self.nbytes,
            "offset_bytes": self.offset_bytes,
        }


@dataclass(frozen=True)
class PlacementLayout:
    """One placement as drawn: its spacer and each shared buffer's offset."""

    index: int
    spacer_bytes: int  # 0 for placement 0 (no spacer is allocated)
    buffers: tuple[BufferPlacement, ...]

    @property
    def total_bytes(self) -> int:
        return self.spacer_bytes + sum(b.nbytes + b.offset_bytes for b in self.buffers)

    def to_json(self) -> dict:
        return {"index": self.index, "spacer_bytes": self.spacer_bytes, "buffers": [b.to_json() for b in self.buffers]}


@dataclass(frozen=True)
class PoolFacts:
    """What a record states about a case's placements."""

    requested: int
    used: int
    granularity: int
    memory_fraction: float
    free_bytes: int  # the device's free memory when the pool was drawn
    pool_bytes: int  # everything the pool allocated, spacers included
    placements: tuple[PlacementLayout, ...]
    inputs_sha256: Mapping[str, str]  # input name -> sha256 of its bytes (identical in every placement)
    fewer_because: str | None  # why used < requested; None when all fit

    def to_json(self) -> dict:
        return {
            "requested": self.requested,
            "used": self.used,
            "granularity": self.granularity,
            "memory_fraction": self.memory_fraction,
            "free_bytes": self.free_bytes,
            "pool_bytes": self.pool_bytes,
            "placements": [p.to_json() for p in self.placements],
            "inputs_sha256": dict(self.inputs_sha256),
            "fewer_because": self.fewer_because,
        }


def shared_keys(arms: Mapping[str, Sequence[BufferSpec]]) -> dict[BufferKey, int]:
    """Each shared buffer's key and size, in first-use order (arm by arm, buffer by buffer)."""
    out: dict[BufferKey, int] = {}
    for specs in arms.values():
        for b in specs:
            out.setdefault((b.name, b.dtype, tuple(b.shape)), b.nbytes)
    return out


def layout_rng(seed: int, trial: int, case_id: str) -> np.random.Generator:
    """The generator a case's placements are drawn from in one trial: keyed by the plan's seed,
    the trial index and the case id (its own stream, apart from the inputs' and the schedule's)."""
    key = (zlib.crc32(b"placement layout"), trial, zlib.crc32(case_id.encode()))
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))


def check_granularity(granularity: int) -> None:
    if granularity <= 0 or granularity % ALIGNMENT or granularity >= OFFSET_LIMIT:
        raise ValueError(
            f"placement granularity {granularity} bytes: must be a positive multiple of "
            f"{ALIGNMENT} below {OFFSET_LIMIT:,}"
        )


def draw_layouts(
    sizes: Mapping[BufferKey, int], count: int, rng: np.random.Generator, granularity: int = DEFAULT_GRANULARITY
) -> list[PlacementLayout]:
    """`count` layouts: placement 0 plain, each further one a spacer and per-buffer offsets.

    Draws from `rng` in a fixed order (per placement: spacer, then each buffer's offset), so a
    seed gives the same layouts whatever the memory cap later keeps.
    """
    check_granularity(granularity)
    if count < 1:
        raise ValueError(f"a placement pool holds at least one placement, not {count}")
    steps = OFFSET_LIMIT // granularity
    layouts = [PlacementLayout(0, 0, tuple(BufferPlacement(*k, n, 0) for k, n in sizes.items()))]
    for p in range(1, count):
        spacer = int(rng.integers(1, SPACER_LIMIT // ALIGNMENT)) * ALIGNMENT
        buffers = tuple(BufferPlacement(*k, n, int(rng.integers(0, steps)) * granularity) for k, n in sizes.items())
        layouts.append(PlacementLayout(p, spacer, buffers))
    return layouts


def fitting(layouts: Sequence[PlacementLayout], cap_bytes: int) -> tuple[int, str | None]:
    """How many leading layouts fit in `cap_bytes` together (placement 0 always: it is what a case
    needs anyway), and why not all when fewer."""
    total = layouts[0].total_bytes
    for p, layout in enumerate(layouts[1:], start=1):
        if total + layout.total_bytes > cap_bytes:
            return p, (
                f"{len(layouts)} placements requested, {p} fit within the pool's memory cap of "
                f"{cap_bytes:,} bytes (placement {p} would bring the pool to "
                f"{total + layout.total_bytes:,} bytes)"
            )
        total += layout.total_bytes
    return len(layouts), None


class _NoRoom(Exception):
    """A further placement's allocation failed: free memory can shrink between the reading and
    the allocation (another process), and the placements allocated so far stand."""


class PlacementPool:
    """A case's K placements on one device, inputs uploaded, owning every allocation.

    device: a Device (qualify.run.device_protocol): alloc, free, upload, free_memory.
    arms: side -> the arm's buffer specs; buffers of equal (name, dtype, shape) are one device
        buffer per placement, shared by both arms.
    inputs: side -> {input name: host bytes}, uploaded into every placement.
    count: placements requested (K); fewer are used when the memory cap says so.
    rng: the generator the spacers and offsets are drawn from (seeded by the caller).
    digests: input name -> sha256 of exactly the bytes in `inputs`, where the caller has them.

    The constructor allocates and uploads; if that fails, what it allocated is freed before the
    error propagates. Use it as a context manager (or call close()) to free the rest.
    """

    def __init__(
        self,
        device,
        arms: Mapping[str, Sequence[BufferSpec]],
        inputs: Mapping[str, Mapping[str, np.ndarray]],
        count: int,
        rng: np.random.Generator,
        granularity: int = DEFAULT_GRANULARITY,
        memory_fraction: float = DEFAULT_MEMORY_FRACTION,
        digests: Mapping[str, str] | None = None,
    ):
        if not 0 < memory_fraction <= 1:
            raise ValueError(f"memory fraction {memory_fraction}: must be in (0, 1]")
        self._device = device
        self._raw: list[DeviceBuffer] = []  # every allocation, spacers included, in allocation order
        self._views: list[dict[BufferKey, DeviceBuffer]] = []
        self._arms = {side: [(b.name, b.dtype, tuple(b.shape)) for b in specs] for side, specs in arms.items()}
        layouts = draw_layouts(shared_keys(arms), count, rng, granularity)
        free = int(device.free_memory())
        used, fewer = fitting(layouts, int(free * memory_fraction))
        # the inputs' sha256 where the caller took them already (off the critical path, while the
        # case before was timed), else taken here, once per input
        hashes: dict[str, str] = dict(digests or {})
        try:
            for layout in layouts[:used]:
                try:
                    self._allocate(layout, inputs, hashes)
                except _NoRoom as exc:
                    used = layout.index
                    fewer = f"{count} placements requested, {used} allocated: placement {used} failed ({exc})"
                    break
        except BaseException:
            self.close()
            raise
        self.facts = PoolFacts(
            requested=count,
            used=used,
            granularity=granularity,
            memory_fraction=memory_fraction,
            free_bytes=free,
            pool_bytes=sum(b.nbytes for b in self._raw),
            placements=tuple(layouts[:used]),
            inputs_sha256=hashes,
            fewer_because=fewer,
        )

    def _allocate(self, layout: PlacementLayout, inputs, hashes: dict[str, str]) -> None:
        """One placement: [spacer] then, arm by arm, its new buffers and that arm's inputs (for
        placement 0 exactly the case set-up's allocations and uploads of one fixed layout)."""
        dev = self._device
        mine: list[DeviceBuffer] = []

        def alloc(nbytes: int) -> DeviceBuffer:
            try:
                buf = dev.alloc(nbytes)
            except KernelFault:
                raise
            except DeviceError as exc:
                if layout.index == 0:
                    raise
                raise _NoRoom(exc.message) from exc
            mine.append(buf)
            return buf

        try:
            if layout.spacer_bytes:
                alloc(layout.spacer_bytes)
            where = {(b.name, b.dtype, b.shape): (b.nbytes, b.offset_bytes) for b in layout.buffers}
            views: dict[BufferKey, DeviceBuffer] = {}
            # a buffer both arms share holds the bytes the first arm put there: the second arm's
            # input, the very same array (the input cache hands both arms one), is not sent again
            # (two 268 MB uploads of vecload's largest case cost 0.2 s of every trial)
            written: dict[BufferKey, np.ndarray] = {}
            for side, keys in self._arms.items():
                for k in keys:
                    if k in views:
                        continue
                    nbytes, offset = where[k]
                    raw = alloc(nbytes + offset)
                    views[k] = raw if offset == 0 else DeviceBuffer(raw.ptr + offset, nbytes)
                by_name = {k[0]: views[k] for k in keys}
                key_of = {k[0]: k for k in keys}
                first = {k[0]: self._views[0][k] for k in keys} if self._views else None
                for name, data in inputs.get(side, {}).items():
                    if written.get(key_of[name]) is data:
                        continue
                    written[key_of[name]] = data
                    if first is None:
                        dev.upload(by_name[name], data)
                    else:  # the same bytes, copied on the device: a host upload per placement costs seconds
                        dev.copy(by_name[name], first[name])
                    if name not in hashes:  # once per input: hashing 268 MB takes a third of a second
                        hashes[name] = hashlib.sha256(data).hexdigest()
        except BaseException:
            for buf in reversed(mine):
                dev.free(buf)
            raise
        self._raw.extend(mine)
        self._views.append(views)

    @property
    def count(self) -> int:
        """Placements in use (K used)."""
        return len(self._views)

    def buffers(self, placement: int, side: str) -> dict[str, DeviceBuffer]:
        """The arm's buffers in one placement: name -> buffer (.ptr, .nbytes), ready for ArmExec."""
        views = self._views[placement]
        return {k[0]: views[k] for k in self._arms[side]}

    def differing_inputs(self) -> list[tuple[int, str]]:
        """(placement, input name) wherever an uploaded input's bytes differ from placement 0's,
        compared on the device; empty when every placement holds the same inputs."""
        dev = self._device
        out = []
        for side, keys in self._arms.items():
            for p in range(1, self.count):
                for k in keys:
                    if k[0] in self.facts.inputs_sha256 and dev.differs(self._views[0][k], self._views[p][k]):
                        out.append((p, k[0]))
        return sorted(set(out))

    def close(self) -> None:
        """Free every allocation, spacers included, in allocation order; safe to call twice."""
        raw, self._raw, self._views = self._raw, [], []
        for buf in raw:
            self._device.free(buf)

    def __enter__(self) -> PlacementPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
