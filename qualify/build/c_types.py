"""The C types of kernel declarations and what a plan calls them: scalar parameters' kinds, and the
dtypes of the elements a pointer parameter points to.

Read by `plan new` (the arguments and buffers of a skeleton) and by `plan check` (a plan's
arguments and buffer dtypes against a kernel's declaration).
"""

from __future__ import annotations

SCALAR_TYPES = {
    "int": "i32",
    "int32_t": "i32",
    "signed": "i32",
    "signed int": "i32",
    "unsigned": "u32",
    "unsigned int": "u32",
    "uint32_t": "u32",
    "long long": "i64",
    "long long int": "i64",
    "int64_t": "i64",
    "long": "i64",
    "ptrdiff_t": "i64",
    "unsigned long long": "u64",
    "unsigned long": "u64",
    "uint64_t": "u64",
    "size_t": "u64",
    "float": "f32",
    "double": "f64",
}
ELEMENT_TYPES = {
    "float": "f32",
    "double": "f64",
    "__half": "f16",
    "half": "f16",
    "__nv_bfloat16": "bf16",
    "nv_bfloat16": "bf16",
    "int8_t": "i8",
    "char": "i8",
    "signed char": "i8",
    "uint8_t": "u8",
    "unsigned char": "u8",
    "int16_t": "i16",
    "short": "i16",
    "uint16_t": "u16",
    "unsigned short": "u16",
    "int": "i32",
    "int32_t": "i32",
    "unsigned": "u32",
    "unsigned int": "u32",
    "uint32_t": "u32",
    "long long": "i64",
    "int64_t": "i64",
    "unsigned long long": "u64",
    "uint64_t": "u64",
    "long": "i64",
    "unsigned long": "u64",
    "__nv_fp8_e4m3": "f8e4m3",
    "__nv_fp8_e5m2": "f8e5m2",
    "__nv_fp6_e2m3": "f6e2m3",
    "__nv_fp6_e3m2": "f6e3m2",
    "__nv_fp4_e2m1": "f4e2m1",
}
# CUDA's vector types hold elements of one dtype: a `const float4*` reads an f32 buffer
VECTOR_ELEMENT_TYPES = {
    **{f"float{n}": "f32" for n in (1, 2, 3, 4)},
    **{f"double{n}": "f64" for n in (1, 2, 3, 4)},
    **{f"int{n}": "i32" for n in (1, 2, 3, 4)},
    **{f"uint{n}": "u32" for n in (1, 2, 3, 4)},
    **{f"longlong{n}": "i64" for n in (1, 2, 4)},
    **{f"ulonglong{n}": "u64" for n in (1, 2, 4)},
    **{f"char{n}": "i8" for n in (1, 2, 3, 4)},
    **{f"uchar{n}": "u8" for n in (1, 2, 3, 4)},
    **{f"short{n}": "i16" for n in (1, 2, 3, 4)},
    **{f"ushort{n}": "u16" for n in (1, 2, 3, 4)},
    "__half2": "f16",
    "half2": "f16",
    "__nv_bfloat162": "bf16",
    "nv_bfloat162": "bf16",
    "__nv_fp8x2_e4m3": "f8e4m3",
    "__nv_fp8x4_e4m3": "f8e4m3",
    "__nv_fp8x2_e5m2": "f8e5m2",
    "__nv_fp8x4_e5m2": "f8e5m2",
}
