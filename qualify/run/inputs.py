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

from qualify.plan.model import Buffer, ConstantInit, NormalInit, Seeds, UniformInit, ZerosInit
from qualify.plan.resolve import ResolvedBuffer

NUMPY_DTYPES = {
    "f16": np.float16, "f32": np.float32, "f64": np.float64,
    "i8": np.int8, "u8": np.uint8, "i16": np.int16, "u16": np.uint16,
    "i32": np.int32, "u32": np.uint32, "i64": np.int64, "u64": np.uint64,
}  # fmt: skip


def to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """float → bf16 bit patterns (uint16), round to nearest even, NaN kept NaN."""
    f32 = np.asarray(values, dtype=np.float32)
    bits = f32.view(np.uint32)
    # in 32 bits: only NaN patterns (exponent all ones) can wrap, and NaN is overwritten below
    with np.errstate(over="ignore"):
        rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    rounded[np.isnan(f32)] = 0x7FC0
    return rounded


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


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
    if resolved.dtype == "bf16":
        return to_bf16_bits(values).view(np.uint8)
    dtype = np.dtype(NUMPY_DTYPES[resolved.dtype])
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = np.clip(np.rint(values), info.min, info.max)
    return values.astype(dtype).view(np.uint8)


# Inputs already generated in this process, by everything that determines their bytes: a second
# trial of the same plan (and the arm that shares an input with the other) reuses them. Bounded:
# the least recently used go first.
CACHE_BYTES = 2 << 30
_cache: OrderedDict[tuple, np.ndarray] = OrderedDict()
_cache_lock = threading.Lock()


def _cache_key(seeds: Seeds, case_id: str, spec: Buffer, resolved: ResolvedBuffer) -> tuple:
    return (seeds.model_dump_json(), case_id, spec.model_dump_json(), resolved.dtype, resolved.shape)


def cached(seeds: Seeds, case_id: str, spec: Buffer, resolved: ResolvedBuffer) -> np.ndarray:
    """generate(), remembered; the array is read-only so no caller can change what others get."""
    key = _cache_key(seeds, case_id, spec, resolved)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    data = generate(seeds, case_id, spec, resolved)
    data.flags.writeable = False
    with _cache_lock:
        _cache[key] = data
        while sum(a.nbytes for a in _cache.values()) > CACHE_BYTES and len(_cache) > 1:
            _cache.popitem(last=False)
    return data


def generate_case(seeds: Seeds, case_id: str, buffers: list[tuple[Buffer, ResolvedBuffer]],
                  workers: int = 4) -> list[np.ndarray]:
    """Several inputs of one case at once (numpy's generators release the GIL while they fill)."""
    if len(buffers) <= 1:
        return [cached(seeds, case_id, spec, resolved) for spec, resolved in buffers]
    with ThreadPoolExecutor(max_workers=min(workers, len(buffers))) as pool:
        return list(pool.map(lambda b: cached(seeds, case_id, *b), buffers))
