"""Element types of a plan's buffers: their names, sizes and storage, and their bytes read as values.

Every buffer travels as a flat uint8 array of its elements' bytes. bf16, which NumPy lacks, is
stored as its uint16 bit pattern and read through float32 (a bf16 is the upper half of a float32).

The tables name NumPy types by string (`np.dtype`, `.view` and `.astype` accept them), so the plan
model, which needs only names and sizes, loads without NumPy; the functions import it when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import numpy as np

DType = Literal["bf16", "f16", "f32", "f64", "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64"]

FLOATS = ("bf16", "f16", "f32", "f64")

# bytes per element
ITEMSIZE = {
    "bf16": 2,
    "f16": 2,
    "f32": 4,
    "f64": 8,
    "i8": 1,
    "u8": 1,
    "i16": 2,
    "u16": 2,
    "i32": 4,
    "u32": 4,
    "i64": 8,
    "u64": 8,
}

# the NumPy type an element is stored as: its value's type, and for bf16 its bit pattern
STORAGE = {
    "bf16": "uint16",
    "f16": "float16",
    "f32": "float32",
    "f64": "float64",
    "i8": "int8",
    "u8": "uint8",
    "i16": "int16",
    "u16": "uint16",
    "i32": "int32",
    "u32": "uint32",
    "i64": "int64",
    "u64": "uint64",
}

# the NumPy type of an element's value, for every dtype NumPy has (all but bf16)
NUMPY_DTYPES = {name: numpy_type for name, numpy_type in STORAGE.items() if name != "bf16"}

# the safetensors dtype a golden stores each dtype as (bf16 as its bit pattern, like STORAGE)
SAFETENSORS = {
    "bf16": "U16",
    "f16": "F16",
    "f32": "F32",
    "f64": "F64",
    "i8": "I8",
    "u8": "U8",
    "i16": "I16",
    "u16": "U16",
    "i32": "I32",
    "u32": "U32",
    "i64": "I64",
    "u64": "U64",
}

# float dtypes: (explicit mantissa bits, exponent of the smallest normal)
MANTISSA = {"bf16": (7, -126), "f16": (10, -14), "f32": (23, -126), "f64": (52, -1022)}
# float dtypes: the bit pattern of the exponent field (all ones: infinity or NaN), and of the
# largest finite value
EXPONENT_BITS = {"bf16": 0x7F80, "f16": 0x7C00, "f32": 0x7F800000, "f64": 0x7FF0000000000000}
LARGEST_FINITE_BITS = {"bf16": 0x7F7F, "f16": 0x7BFF, "f32": 0x7F7FFFFF, "f64": 0x7FEFFFFFFFFFFFFF}

# integers of each element size, for reading elements as bit patterns
UNSIGNED = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}
SIGNED = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}


def to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """float → bf16 bit patterns (uint16), round to nearest even, NaN kept NaN."""
    import numpy as np

    f32 = np.asarray(values, dtype=np.float32)
    bits = f32.view(np.uint32)
    # in 32 bits: only NaN patterns (exponent all ones) can wrap, and NaN is overwritten below
    with np.errstate(over="ignore"):
        rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    rounded[np.isnan(f32)] = 0x7FC0
    return rounded


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns → their float32 values, exactly."""
    import numpy as np

    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def as_float64(data: np.ndarray, dtype: str) -> np.ndarray:
    """The float64 values of a flat uint8 array of `dtype` elements (exact for every dtype but
    the 64-bit integers beyond 2**53)."""
    import numpy as np

    if dtype == "bf16":
        return bf16_bits_to_f32(data.view(np.uint16)).astype(np.float64)
    return data.view(NUMPY_DTYPES[dtype]).astype(np.float64)


def from_float64(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values as a flat uint8 array of `dtype` elements: rounded to nearest even (bf16
    through float32), integers rounded and clamped to the dtype's range."""
    import numpy as np

    if dtype == "bf16":
        return to_bf16_bits(values).view(np.uint8)
    target = np.dtype(NUMPY_DTYPES[dtype])
    if target.kind in "iu":
        info = np.iinfo(target)
        values = np.clip(np.rint(values), info.min, info.max)
    return values.astype(target).view(np.uint8)
