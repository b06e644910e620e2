"""Negative controls: declared mutations of the candidate's input that the fidelity gate must catch."""

from __future__ import annotations

import numpy as np

from qualify import expr
from qualify.dtypes import BITS, FLOATS, ITEMSIZE, NUMPY_DTYPES, UNSIGNED, as_float64, from_float64
from qualify.plan.model import Mutation


def mutate(data: np.ndarray, dtype: str, mutation: Mutation, params: dict) -> np.ndarray:
    """A mutated copy of a flat uint8 input array."""
    out = data.copy()
    size = ITEMSIZE[dtype]
    n = out.size // size
    if mutation.op == "zero":
        out[:] = 0
        return out
    if mutation.op == "fill":
        return _from_floats(np.full(n, mutation.value), dtype)
    if mutation.op == "swap":
        return _swap(out, size, n, mutation, params)
    index = expr.evaluate_int(mutation.index, params)
    if not 0 <= index < n:
        raise ValueError(f"mutation index {index} outside {n} elements")
    if mutation.op == "flip_bit":
        if mutation.bit >= BITS[dtype]:
            raise ValueError(f"bit {mutation.bit} outside a {BITS[dtype]}-bit {dtype} element")
        words = out.view(UNSIGNED[size])
        words[index] ^= words.dtype.type(1) << words.dtype.type(mutation.bit)
        return out
    values = as_float64(out, dtype)
    values[index] = mutation.value if mutation.op == "set" else values[index] * mutation.value
    return _from_floats(values, dtype)


def _swap(out: np.ndarray, size: int, n: int, mutation: Mutation, params: dict) -> np.ndarray:
    """Exchange two equal, non-overlapping slices of elements (two heads of a head-major buffer)."""
    first, second = (expr.evaluate_int(e, params) for e in (mutation.index, mutation.other))
    length = expr.evaluate_int(mutation.length, params)
    first, second = sorted((first, second))
    if length < 1 or first < 0 or second + length > n or first + length > second:
        raise ValueError(f"swap of {length} elements at {first} and {second} does not fit {n} elements")
    words = out.view(UNSIGNED[size])
    a, b = words[first : first + length].copy(), words[second : second + length].copy()
    words[first : first + length], words[second : second + length] = b, a
    return out


def _from_floats(values: np.ndarray, dtype: str) -> np.ndarray:
    """Mutated values back to bytes; integers are cast (truncated toward zero), not rounded as
    `qualify.dtypes.from_float64` rounds generated inputs."""
    if dtype in FLOATS:
        return from_float64(values, dtype)
    return values.astype(NUMPY_DTYPES[dtype]).view(np.uint8)
