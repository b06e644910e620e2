"""Bit patterns of each float dtype a plan allows, as the byte arrays outputs are compared in."""

from __future__ import annotations

import numpy as np

# the largest finite bit pattern of each float dtype, and the unsigned word it is stored in
LARGEST = {
    "bf16": (0x7F7F, np.uint16),
    "f16": (0x7BFF, np.uint16),
    "f32": (0x7F7FFFFF, np.uint32),
    "f64": (0x7FEFFFFFFFFFFFFF, np.uint64),
}
SIGN = {"bf16": 0x8000, "f16": 0x8000, "f32": 0x80000000, "f64": 0x8000000000000000}


def words(dtype: str, patterns) -> np.ndarray:
    return np.asarray(patterns, dtype=LARGEST[dtype][1]).view(np.uint8)
