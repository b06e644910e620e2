"""Byte parity of two outputs, with the element counts and ulp distances a reviewer wants."""

from __future__ import annotations

import numpy as np

from qualify.results.model import BufferParity
from qualify.run.inputs import NUMPY_DTYPES, bf16_bits_to_f32

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_INT = {2: np.int16, 4: np.int32, 8: np.int64}
ITEMSIZE = {"bf16": 2, **{k: np.dtype(v).itemsize for k, v in NUMPY_DTYPES.items()}}


def _ordered(bits: np.ndarray, size: int) -> np.ndarray:
    """Map float bit patterns to integers whose difference is the distance in ulps."""
    signed = bits.view(_INT[size]).astype(np.int64)
    sign_mask = np.int64(1) << (8 * size - 1)
    return np.where(signed < 0, -(signed & (sign_mask - 1)) if size < 8 else -(signed & 0x7FFFFFFFFFFFFFFF), signed)


def _as_float(data: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bf16":
        return bf16_bits_to_f32(data.view(np.uint16)).astype(np.float64)
    return data.view(NUMPY_DTYPES[dtype]).astype(np.float64)


def compare(name: str, dtype: str, expected: np.ndarray, actual: np.ndarray) -> BufferParity:
    """Compare two flat uint8 arrays holding elements of `dtype`."""
    size = ITEMSIZE[dtype]
    a = expected.view(_UINT[size])
    b = actual.view(_UINT[size])
    differ = np.flatnonzero(a != b)
    n = int(a.size)
    if differ.size == 0:
        return BufferParity(buffer=name, equal=True, elements=n, differing_elements=0,
                            first_difference=None, max_ulp=0, max_abs=0.0, max_rel=0.0)  # fmt: skip
    max_ulp = max_abs = max_rel = None
    if dtype in ("bf16", "f16", "f32", "f64"):
        x, y = _as_float(a[differ].view(np.uint8), dtype), _as_float(b[differ].view(np.uint8), dtype)
        finite = np.isfinite(x) & np.isfinite(y)
        if finite.all():
            ulp = np.abs(_ordered(a[differ], size) - _ordered(b[differ], size))
            max_ulp = int(ulp.max())
            diff = np.abs(x - y)
            max_abs = float(diff.max())
            with np.errstate(divide="ignore", invalid="ignore"):
                rel = np.where(x != 0, diff / np.abs(x), np.inf)
            max_rel = float(rel.max())
    else:
        max_abs = float(np.abs(a[differ].astype(np.float64) - b[differ].astype(np.float64)).max())
    return BufferParity(
        buffer=name,
        equal=False,
        elements=n,
        differing_elements=int(differ.size),
        first_difference=int(differ[0]),
        max_ulp=max_ulp,
        max_abs=max_abs,
        max_rel=max_rel,
    )
