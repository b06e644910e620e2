"""Parity counts of one output against its expected values, in the output's own quanta.

The seed's reviewer reads a tolerance gate through counts: how many elements are bit-identical, how
many sit exactly one representable step (one quantum) away, how many more than one or two, the
largest absolute and relative errors, and the worst fraction of the tolerance bound any element
used. A quantum is counted on the output dtype's grid (the distance between the two bit patterns
in representable steps), so "one bf16 quantum" means the same at 1e-3 and at 1e3.

Pure functions over arrays; `qualify.evaluate.fidelity.compare` keeps the byte parity of base against
candidate, this module serves goldens, controls and mutation calibration.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qualify.dtypes import BITS, FLOATS, ITEMSIZE, UNSIGNED, as_float64
from qualify.results.tolerance import ParityCounts


def step_index(data: np.ndarray, dtype: str) -> np.ndarray:
    """Each element's position on the dtype's grid of representable values (int64, monotonic).

    Sign-magnitude bit patterns become a signed count of steps from zero, so the difference of two
    positions is the number of representable values between them; +0 and -0 both sit at 0. The
    sign is bit BITS - 1 (bit 5 of an fp6 byte, bit 3 of an fp4 byte), the magnitude the bits below.
    """
    width = BITS[dtype]
    bits = data.view(UNSIGNED[ITEMSIZE[dtype]])
    magnitude_mask = (1 << (width - 1)) - 1
    magnitude = (bits & bits.dtype.type(magnitude_mask)).astype(np.int64)
    negative = ((bits >> bits.dtype.type(width - 1)) & bits.dtype.type(1)) == 1
    keys: np.ndarray = np.where(negative, -magnitude, magnitude)
    return keys


# Elements judged at once: every temporary of `count` (float64 values, step indices, errors,
# fractions) is a chunk's, not the output's: a 128 MiB output is judged in a few MiB of memory,
# and 64 Ki elements (512 KiB of float64) stay in cache (2.5 times faster than 1 Mi on the dev machine)
# (issue 37: the rehearsal of a 4-case LayerNorm held 2.4 GB in this function alone).
CHUNK_ELEMENTS = 1 << 16


def count(
    output: str,
    dtype: str,
    expected: np.ndarray,
    actual: np.ndarray,
    *,
    atol: float = 0.0,
    rtol: float = 0.0,
    rel_floor: float = 1e-6,
    chunk: int = CHUNK_ELEMENTS,
) -> ParityCounts:
    """Counts of `actual` against `expected` (flat uint8 arrays of the same float dtype).

    An element is within the bound when |err| <= atol + rtol·|expected|; with atol = rtol = 0 that
    is exact equality of values (the bit-exact mode). Relative error is reported only where
    |expected| >= rel_floor: near zero it measures the magnitude of the expectation, not the error.
    Judged `chunk` elements at a time; the counts are those of the whole (the worst element is the
    first of the largest fraction, as over the whole array).
    """
    if dtype not in FLOATS:
        raise ValueError(f"parity counts need a float dtype, not {dtype!r}")
    if expected.nbytes != actual.nbytes:
        raise ValueError(f"{output}: {expected.nbytes} expected bytes against {actual.nbytes}")
    size = ITEMSIZE[dtype]
    n = expected.nbytes // size
    totals = dict.fromkeys(("identical", "one_quantum", "over_one_quantum", "over_two_quanta", "non_finite"), 0)
    max_abs, max_rel = 0.0, None
    worst, worst_value, first_offending = None, -1.0, None
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        part = _chunk(dtype, expected[lo * size : hi * size], actual[lo * size : hi * size], atol, rtol, rel_floor)
        for k in totals:
            totals[k] += part[k]
        max_abs = max(max_abs, part["max_abs"])
        if part["max_rel"] is not None:
            max_rel = part["max_rel"] if max_rel is None else max(max_rel, part["max_rel"])
        if part["worst_value"] > worst_value:  # strictly: the first element of the largest fraction
            worst, worst_value = lo + part["worst"], part["worst_value"]
        if first_offending is None and part["first_offending"] is not None:
            first_offending = lo + part["first_offending"]
    return ParityCounts(
        output=output,
        dtype=dtype,
        elements=n,
        **totals,
        max_abs=max_abs,
        max_rel=max_rel,
        rel_floor=rel_floor,
        atol=atol,
        rtol=rtol,
        worst_bound_fraction=(worst_value if np.isfinite(worst_value) else None) if n else 0.0,
        worst_index=worst if n and worst_value > 0 else None,
        first_offending=first_offending,
        within=first_offending is None,
    )


def _chunk(
    dtype: str, expected: np.ndarray, actual: np.ndarray, atol: float, rtol: float, rel_floor: float
) -> dict[str, Any]:
    """`count`'s sums, extremes and first indices over one chunk of elements."""
    unsigned = UNSIGNED[ITEMSIZE[dtype]]
    identical = expected.view(unsigned) == actual.view(unsigned)
    exp, act = as_float64(expected, dtype), as_float64(actual, dtype)
    finite = np.isfinite(act) & np.isfinite(exp)
    quanta = np.abs(step_index(actual, dtype) - step_index(expected, dtype))
    quanta = np.where(finite, quanta, np.iinfo(np.int64).max)
    err = np.where(finite, np.abs(act - exp), 0.0)
    bound = atol + rtol * np.abs(exp)
    with np.errstate(divide="ignore", invalid="ignore"):
        fraction = np.where(err == 0, 0.0, err / bound)  # err > 0 over a zero bound: inf
    fraction = np.where(finite, fraction, np.inf)
    offending = np.flatnonzero(fraction > 1.0)
    big = np.abs(exp) >= rel_floor
    rel = err[big] / np.abs(exp[big])
    worst = int(np.argmax(fraction))
    return {
        "identical": int(identical.sum()),
        "one_quantum": int((finite & (quanta == 1)).sum()),
        "over_one_quantum": int((quanta > 1).sum()),
        "over_two_quanta": int((quanta > 2).sum()),
        "non_finite": int((~finite).sum()),
        "max_abs": float(err.max()),
        "max_rel": float(rel.max()) if rel.size else None,
        "worst": worst,
        "worst_value": float(fraction[worst]),
        "first_offending": int(offending[0]) if offending.size else None,
    }
