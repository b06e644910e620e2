"""C types of the scalar and pointer arguments a plan passes (kernel parameters, entry points)."""

from __future__ import annotations

import ctypes

C_TYPES = {
    "ptr": ctypes.c_void_p,
    "i32": ctypes.c_int32,
    "u32": ctypes.c_uint32,
    "i64": ctypes.c_int64,
    "u64": ctypes.c_uint64,
    "f32": ctypes.c_float,
    "f64": ctypes.c_double,
}
