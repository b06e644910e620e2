"""Seeded inputs, bit-reproducible from the plan: one generator per (case, buffer).

The stream of each input is keyed by the plan's base seed and stable hashes of the case id and the
buffer name, so adding a case or a buffer never changes the bytes of the others.
"""

from __future__ import annotations

import hashlib
import os
import threading
import zlib
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from qualify import io

# the bf16 pair stays importable from here: golden scripts frozen in plan locks import it so
from qualify.dtypes import bf16_bits_to_f32, from_float64, to_bf16_bits  # noqa: F401
from qualify.plan.model import Buffer, ConstantInit, NormalInit, Seeds, UniformInit, ZerosInit
from qualify.plan.resolve import ResolvedBuffer


def generator(seeds: Seeds, case_id: str, buffer_name: str) -> np.random.Generator:
    key = (zlib.crc32(case_id.encode()), zlib.crc32(buffer_name.encode()))
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seeds.base, spawn_key=key)))


def generate(seeds: Seeds, case_id: str, spec: Buffer, resolved: ResolvedBuffer) -> np.ndarray:
    """The input's bytes as a flat uint8 array."""
    rng = generator(seeds, case_id, spec.name)
    n = resolved.elements
    init = spec.init
    if isinstance(init, NormalInit):
        values = rng.normal(init.mean, init.std, n)
    elif isinstance(init, UniformInit):
        values = rng.uniform(init.low, init.high, n)
    elif isinstance(init, ConstantInit):
        values = np.full(n, init.value)
    elif isinstance(init, ZerosInit):
        values = np.zeros(n)
    else:  # pragma: no cover - the model admits no other kind
        raise AssertionError(init)
    return from_float64(values, resolved.dtype, spec.overflow or "nonfinite")


# Inputs already generated in this process, by everything that determines their bytes: a second
# trial of the same plan (and the arm that shares an input with the other) reuses them. Bounded:
# the least recently used go first.
CACHE_BYTES = 2 << 30
_cache: OrderedDict[tuple, np.ndarray] = OrderedDict()
_cache_lock = threading.Lock()
# the bytes _cache holds, kept as entries come and go: summing the entries at every insert made a
# rehearsal of many small cases quadratic (every case's inputs stay cached under the bound)
_cache_bytes = 0


def clear_cache() -> None:
    """Forget every input generated so far (a benchmark's sizes each start from nothing)."""
    global _cache_bytes
    with _cache_lock:
        _cache.clear()
        _cache_bytes = 0


def _cache_key(seeds: Seeds, case_id: str, spec: Buffer, resolved: ResolvedBuffer) -> tuple:
    return (seeds.model_dump_json(), case_id, spec.model_dump_json(), resolved.dtype, resolved.shape)


class InputStore:
    """Inputs one trial process generated, kept for the later trial processes of the same run.

    Each trial runs in a fresh process (qualify.procs.trials), so the in-process cache above
    helps only within a trial; a 64 Mi-element normal input costs about a second of float64
    generation, paid again by every trial. The store is the run's own scratch folder (created
    0700 by the parent, removed when the run ends): the first process writes each input's bytes
    under a digest of everything that determines them, the later ones read them back. A file of
    the wrong size, a link or anything unreadable is ignored and the input generated again; the
    bytes that were uploaded are hashed into every trial's `input_sha256` as before, so the
    record shows whether every trial timed the same inputs.
    """

    BUDGET_BYTES = 4 << 30  # beyond this, further inputs are generated in each process again

    def __init__(self, folder: Path, budget: int = BUDGET_BYTES):
        self.folder = Path(folder)
        self.budget = budget
        self._held: int | None = None  # bytes stored: counted once (earlier processes'), then kept

    def path(self, key: tuple) -> Path:
        return self.folder / f"input-{hashlib.sha256(repr(key).encode()).hexdigest()[:40]}.bin"

    def load(self, key: tuple, nbytes: int) -> np.ndarray | None:
        path = self.path(key)
        if not path.exists():
            return None
        try:
            with io.open_limited(path, nbytes, root=self.folder) as f:
                data = np.fromfile(f, dtype=np.uint8)
        except (OSError, io.UnreadableFile, ValueError):
            return None
        return data if data.nbytes == nbytes else None

    def save(self, key: tuple, data: np.ndarray) -> None:
        try:
            if self._held is None:  # one scan per process, not per input: a plan may have 100k cases
                self._held = sum(e.stat().st_size for e in os.scandir(self.folder) if e.name.startswith("input-"))
            if self._held + data.nbytes > self.budget:
                return
            io.atomic_write_bytes(self.path(key), data.data, root=self.folder, durable=False)
            self._held += data.nbytes
        except (OSError, io.UnreadableFile):
            return  # a store that cannot be written only costs the next process the generation


def cached(
    seeds: Seeds, case_id: str, spec: Buffer, resolved: ResolvedBuffer, store: InputStore | None = None
) -> np.ndarray:
    """generate(), remembered in this process and, with a store, for the run's later processes;
    the array is read-only so no caller can change what others get."""
    global _cache_bytes
    key = _cache_key(seeds, case_id, spec, resolved)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    data = store.load(key, resolved.nbytes) if store is not None else None
    if data is None:
        data = generate(seeds, case_id, spec, resolved)
        if store is not None:
            store.save(key, data)
    data.flags.writeable = False
    with _cache_lock:
        replaced = _cache.get(key)  # another thread generated the same input meanwhile
        _cache_bytes -= 0 if replaced is None else replaced.nbytes
        _cache[key] = data
        _cache_bytes += data.nbytes
        while _cache_bytes > CACHE_BYTES and len(_cache) > 1:
            _cache_bytes -= _cache.popitem(last=False)[1].nbytes
    return data


# Below this many elements in all, a case's inputs are generated one after another: starting a pool
# of threads costs more than filling them (a rehearsal of many small cases started one per case).
SERIAL_ELEMENTS = 1 << 18


def generate_case(
    seeds: Seeds,
    case_id: str,
    buffers: list[tuple[Buffer, ResolvedBuffer]],
    workers: int = 4,
    store: InputStore | None = None,
) -> list[np.ndarray]:
    """Several inputs of one case at once (numpy's generators release the GIL while they fill)."""
    if len(buffers) <= 1 or sum(resolved.elements for _, resolved in buffers) < SERIAL_ELEMENTS:
        return [cached(seeds, case_id, spec, resolved, store) for spec, resolved in buffers]
    with ThreadPoolExecutor(max_workers=min(workers, len(buffers))) as pool:
        return list(pool.map(lambda b: cached(seeds, case_id, b[0], b[1], store), buffers))
