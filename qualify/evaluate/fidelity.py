"""Byte parity of two outputs, with the element counts and distances a reviewer wants.

Equality is decided on bytes. For the elements that differ, three distances are reported: ulp
(how many representable values apart: for floats the distance between the ordered bit patterns,
for integers the difference itself, their quantum being 1), absolute, and relative to the expected
value. A distance with no finite value is None: a NaN or an infinity among the differing elements,
a relative difference from an expected zero, an absolute difference beyond float64. The fidelity
gate reads None as outside every bound, and None survives results.json where an infinity would
not (pydantic writes it as null).
"""

from __future__ import annotations

import math

import numpy as np

from qualify.dtypes import BITS, FLOATS, ITEMSIZE, NUMPY_DTYPES, UNSIGNED, as_float64
from qualify.results.model import BufferParity


def _ordered(bits: np.ndarray, width: int) -> np.ndarray:
    """Float bit patterns of `width` bits (sign bit width - 1) → int64 keys, in the order of the
    values, one apart per ulp (±0 → 0)."""
    unsigned = bits.astype(np.uint64)
    magnitude = (unsigned & np.uint64((1 << (width - 1)) - 1)).astype(np.int64)
    negative = ((unsigned >> np.uint64(width - 1)) & np.uint64(1)) == 1
    keys: np.ndarray = np.where(negative, -magnitude, magnitude)
    return keys


def _distance(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """|p − q| of two int64 or uint64 arrays, exactly, as uint64.

    The difference of two f64 keys (or two i64 values) can exceed int64; taken in uint64, the
    larger minus the smaller is exact because the true difference lies in [0, 2**64).
    """
    pu, qu = p.view(np.uint64), q.view(np.uint64)
    return np.where(p >= q, pu - qu, qu - pu)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _relative(diff: np.ndarray, expected: np.ndarray) -> float | None:
    # an expected zero with an equal actual (+0 against -0) is no relative error at all
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(diff == 0, 0.0, diff / np.abs(expected))
    return _finite(float(rel.max()))


def _distances(dtype: str, size: int, a: np.ndarray, b: np.ndarray) -> tuple[int | None, float | None, float | None]:
    """(max ulp, max abs, max rel) over differing elements `a` (expected) and `b` (actual), as raw bits."""
    if dtype in FLOATS:
        x, y = as_float64(a.view(np.uint8), dtype), as_float64(b.view(np.uint8), dtype)
        if not (np.isfinite(x) & np.isfinite(y)).all():
            return None, None, None
        ulp = int(_distance(_ordered(a, BITS[dtype]), _ordered(b, BITS[dtype])).max())
        with np.errstate(over="ignore"):  # f64 extremes: the difference is infinite, reported as None
            diff = np.abs(x - y)
        return ulp, _finite(float(diff.max())), _relative(diff, x)
    values = NUMPY_DTYPES[dtype]
    x, y = a.view(values), b.view(values)
    wide = np.uint64 if np.dtype(values).kind == "u" else np.int64
    dist = _distance(x.astype(wide), y.astype(wide))
    return int(dist.max()), float(dist.max()), _relative(dist.astype(np.float64), x.astype(np.float64))


def compare(name: str, dtype: str, expected: np.ndarray, actual: np.ndarray) -> BufferParity:
    """Compare two flat uint8 arrays holding elements of `dtype`."""
    size = ITEMSIZE[dtype]
    if expected.nbytes != actual.nbytes or expected.nbytes % size:
        raise ValueError(
            f"{name}: {expected.nbytes} and {actual.nbytes} bytes are not two {dtype} buffers of one length"
        )
    a = expected.view(UNSIGNED[size])
    b = actual.view(UNSIGNED[size])
    differ = np.flatnonzero(a != b)
    n = int(a.size)
    if differ.size == 0:
        return BufferParity(
            buffer=name,
            equal=True,
            elements=n,
            differing_elements=0,
            first_difference=None,
            max_ulp=0,
            max_abs=0.0,
            max_rel=0.0,
        )
    max_ulp, max_abs, max_rel = _distances(dtype, size, a[differ], b[differ])
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
