"""Element types of a plan's buffers: their names, sizes and storage, and their bytes read as values.

Every buffer travels as a flat uint8 array of its elements' bytes. bf16, which NumPy lacks, is
stored as its uint16 bit pattern and read through float32 (a bf16 is the upper half of a float32).

The narrow floats (fp8 e4m3 and e5m2 of Hopper, fp6 e2m3 and e3m2 and fp4 e2m1 of Blackwell) take
one byte per element, the storage of CUDA's scalar `__nv_fp8_e4m3`, `__nv_fp6_e2m3`, `__nv_fp4_e2m1`
...: the value's bits are the low BITS bits of the byte, the rest zero (packed fp4x2 pairs are not
a buffer dtype). They are stored as uint8 bit patterns and read through ml-dtypes, NumPy's
implementation of exactly these formats (OCP MX rounding, e4m3 with no infinity and NaN at
S.1111.111, e5m2 IEEE-like, the fp6/fp4 types with neither infinity nor NaN).

The tables name NumPy types by string (`np.dtype`, `.view` and `.astype` accept them), so the plan
model, which needs only names and sizes, loads without NumPy; the functions import it when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import numpy as np

DType = Literal[
    "bf16",
    "f16",
    "f32",
    "f64",
    "i8",
    "u8",
    "i16",
    "u16",
    "i32",
    "u32",
    "i64",
    "u64",
    "f8e4m3",
    "f8e5m2",
    "f6e2m3",
    "f6e3m2",
    "f4e2m1",
]

# floats narrower than 16 bits, one per byte, NumPy's through ml-dtypes
NARROW_FLOATS = ("f8e4m3", "f8e5m2", "f6e2m3", "f6e3m2", "f4e2m1")
FLOATS = ("bf16", "f16", "f32", "f64", *NARROW_FLOATS)

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
    "f8e4m3": 1,
    "f8e5m2": 1,
    "f6e2m3": 1,
    "f6e3m2": 1,
    "f4e2m1": 1,
}

# bits of an element that carry its value: the sign bit is BITS - 1, bits above it are zero
BITS = {name: 8 * size for name, size in ITEMSIZE.items()} | {"f6e2m3": 6, "f6e3m2": 6, "f4e2m1": 4}

# the ml-dtypes type that reads each narrow float's byte
ML_DTYPES = {
    "f8e4m3": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
    "f6e2m3": "float6_e2m3fn",
    "f6e3m2": "float6_e3m2fn",
    "f4e2m1": "float4_e2m1fn",
}

# the NumPy type an element is stored as: its value's type, and for bf16 and the narrow floats
# its bit pattern
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
    "f8e4m3": "uint8",
    "f8e5m2": "uint8",
    "f6e2m3": "uint8",
    "f6e3m2": "uint8",
    "f4e2m1": "uint8",
}

# the NumPy type of an element's value, for every dtype NumPy has itself (all but bf16 and the
# narrow floats)
NUMPY_DTYPES = {
    name: numpy_type for name, numpy_type in STORAGE.items() if name != "bf16" and name not in NARROW_FLOATS
}

# the safetensors dtype a golden stores each dtype as: bf16 as its bit pattern (like STORAGE), fp8
# as safetensors' own F8 types, fp6 and fp4 (whose safetensors types are packed, not one a byte)
# as uint8 bit patterns
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
    "f8e4m3": "F8_E4M3",
    "f8e5m2": "F8_E5M2",
    "f6e2m3": "U8",
    "f6e3m2": "U8",
    "f4e2m1": "U8",
}

# float dtypes: (explicit mantissa bits, exponent of the smallest normal)
MANTISSA = {
    "bf16": (7, -126),
    "f16": (10, -14),
    "f32": (23, -126),
    "f64": (52, -1022),
    "f8e4m3": (3, -6),
    "f8e5m2": (2, -14),
    "f6e2m3": (3, 0),
    "f6e3m2": (2, -2),
    "f4e2m1": (1, 0),
}
# float dtypes: the bit pattern of the exponent field, and of the largest finite value. An
# exponent of all ones is infinity or NaN for the IEEE-like types; e4m3 keeps finite values there
# (only S.1111.111 is NaN) and the fp6/fp4 types have no non-finite encoding at all, so whether a
# value is finite is read from its value (`as_float64`), never from this mask.
EXPONENT_BITS = {
    "bf16": 0x7F80,
    "f16": 0x7C00,
    "f32": 0x7F800000,
    "f64": 0x7FF0000000000000,
    "f8e4m3": 0x78,
    "f8e5m2": 0x7C,
    "f6e2m3": 0x18,
    "f6e3m2": 0x1C,
    "f4e2m1": 0x6,
}
LARGEST_FINITE_BITS = {
    "bf16": 0x7F7F,
    "f16": 0x7BFF,
    "f32": 0x7F7FFFFF,
    "f64": 0x7FEFFFFFFFFFFFFF,
    "f8e4m3": 0x7E,  # 448
    "f8e5m2": 0x7B,  # 57344
    "f6e2m3": 0x1F,  # 7.5
    "f6e3m2": 0x1F,  # 28
    "f4e2m1": 0x7,  # 6
}

# what a float input does with a value beyond its dtype's largest finite one: "saturate" clamps it
# to the largest finite value of its sign (CUDA's __NV_SATFINITE), "nonfinite" lets the cast make
# it infinite, or NaN where the type has no infinity (e4m3), or the largest finite value where it
# has neither (fp6, fp4)
Overflow = Literal["saturate", "nonfinite"]

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


def ml_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype (ml-dtypes') of a narrow float's values."""
    import ml_dtypes
    import numpy as np

    return np.dtype(getattr(ml_dtypes, ML_DTYPES[dtype]))


def as_float64(data: np.ndarray, dtype: str) -> np.ndarray:
    """The float64 values of a flat uint8 array of `dtype` elements (exact for every dtype but
    the 64-bit integers beyond 2**53)."""
    import numpy as np

    if dtype == "bf16":
        return bf16_bits_to_f32(data.view(np.uint16)).astype(np.float64)
    if dtype in NARROW_FLOATS:
        return data.view(np.uint8).view(ml_dtype(dtype)).astype(np.float64)
    return data.view(NUMPY_DTYPES[dtype]).astype(np.float64)


def largest_finite(dtype: str) -> float:
    """The largest finite value of a float dtype."""
    import numpy as np

    size = ITEMSIZE[dtype]
    pattern = np.asarray([LARGEST_FINITE_BITS[dtype]], dtype=UNSIGNED[size])
    return float(as_float64(pattern.view(np.uint8), dtype)[0])


def from_float64(values: np.ndarray, dtype: str, overflow: Overflow = "nonfinite") -> np.ndarray:
    """float64 values as a flat uint8 array of `dtype` elements: floats rounded to nearest even
    (bf16 through float32, the narrow floats directly from float64), values beyond the largest
    finite one as `overflow` says (NaN stays NaN); integers rounded and clamped to their range."""
    import numpy as np

    if dtype in FLOATS and overflow == "saturate":
        top = largest_finite(dtype)
        values = np.clip(np.asarray(values, dtype=np.float64), -top, top)
    if dtype == "bf16":
        return to_bf16_bits(values).view(np.uint8)
    if dtype in NARROW_FLOATS:
        return np.asarray(values, dtype=np.float64).astype(ml_dtype(dtype)).view(np.uint8)
    target = np.dtype(NUMPY_DTYPES[dtype])
    if target.kind in "iu":
        info = np.iinfo(target)
        values = np.rint(values)
        # 2**63 - 1 rounds up to 2**63 as a float64, which no int64 holds: clamp below it, then set
        # what reached the top to the largest integer (a cast of 2**63 would be undefined)
        top = np.nextafter(float(info.max), 0.0) if float(info.max) > info.max else float(info.max)
        high = values >= float(info.max)
        ints = np.clip(values, info.min, top).astype(target)
        ints[high] = info.max
        return ints.view(np.uint8)
    with np.errstate(over="ignore"):  # a float beyond its range becomes infinite: "nonfinite" says so
        return values.astype(target).view(np.uint8)
