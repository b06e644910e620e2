"""Negative controls: declared mutations of the candidate's input that the fidelity gate must catch."""

from __future__ import annotations

import numpy as np

from qualify import expr
from qualify.plan.model import Mutation
from qualify.evaluate.fidelity import ITEMSIZE
from qualify.run.inputs import NUMPY_DTYPES, bf16_bits_to_f32, to_bf16_bits

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


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
        if mutation.bit >= 8 * size:
            raise ValueError(f"bit {mutation.bit} outside a {8 * size}-bit element")
        words = out.view(_UINT[size])
        words[index] ^= _UINT[size](1) << _UINT[size](mutation.bit)
        return out
    values = _floats(out, dtype)
    values[index] = mutation.value if mutation.op == "set" else values[index] * mutation.value
    return _from_floats(values, dtype)


def _swap(out: np.ndarray, size: int, n: int, mutation: Mutation, params: dict) -> np.ndarray:
    """Exchange two equal, non-overlapping slices of elements (two heads of a head-major buffer)."""
    first, second = (expr.evaluate_int(e, params) for e in (mutation.index, mutation.other))
    length = expr.evaluate_int(mutation.length, params)
    first, second = sorted((first, second))
    if length < 1 or first < 0 or second + length > n or first + length > second:
        raise ValueError(f"swap of {length} elements at {first} and {second} does not fit {n} elements")
    words = out.view(_UINT[size])
    a, b = words[first:first + length].copy(), words[second:second + length].copy()
    words[first:first + length], words[second:second + length] = b, a
    return out


def _floats(data: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bf16":
        return bf16_bits_to_f32(data.view(np.uint16)).astype(np.float64)
    return data.view(NUMPY_DTYPES[dtype]).astype(np.float64)


def _from_floats(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bf16":
        return to_bf16_bits(values).view(np.uint8)
    return values.astype(NUMPY_DTYPES[dtype]).view(np.uint8)
