"""Seeded inputs, bit-reproducible from the plan: one generator per (case, buffer).

The stream of each input is keyed by the plan's base seed and stable hashes of the case id and the
buffer name, so adding a case or a buffer never changes the bytes of the others.
"""

from __future__ import annotations

import threading
import zlib
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import numpy as np

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


def cached(seeds: Seeds, case_id: str, spec: Buffer, resolved: ResolvedBuffer) -> np.ndarray:
    """generate(), remembered; the array is read-only so no caller can change what others get."""
    global _cache_bytes
    key = _cache_key(seeds, case_id, spec, resolved)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    data = generate(seeds, case_id, spec, resolved)
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
    seeds: Seeds, case_id: str, buffers: list[tuple[Buffer, ResolvedBuffer]], workers: int = 4
) -> list[np.ndarray]:
    """Several inputs of one case at once (numpy's generators release the GIL while they fill)."""
    if len(buffers) <= 1 or sum(resolved.elements for _, resolved in buffers) < SERIAL_ELEMENTS:
        return [cached(seeds, case_id, spec, resolved) for spec, resolved in buffers]
    with ThreadPoolExecutor(max_workers=min(workers, len(buffers))) as pool:
        return list(pool.map(lambda b: cached(seeds, case_id, *b), buffers))
