"""What a kernel's `__global__` declaration says: its parameters' names, types and constness,
and the C types qualify maps to plan dtypes.

`plan new` reads a declaration to write a skeleton (`qualify.commands.scaffold`); `plan check`
reads it to check each argument's kind against the plan (`qualify.build.kernel_match`). One
reading, so the two never disagree about what a declaration means.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_QUALIFIERS = re.compile(r"\b(const|volatile|__restrict__|__restrict|restrict|__grid_constant__|struct)\b")


@dataclass(frozen=True)
class Param:
    name: str
    ctype: str  # the declared type without qualifiers: "float*", "int"
    pointer: bool
    const: bool  # pointer to const: an input


def declared_params(source: str, kernel: str) -> list[Param] | None:
    """The parameters of `__global__ ... kernel(...)` as declared in `source`; None if not found.

    A reading of the declaration, not a C++ parser: enough to name arguments and buffers. The
    count and sizes are then checked against the CUBIN, so a misreading cannot reach a plan.
    """
    name = kernel.split("<", 1)[0].split("::")[-1]
    text = _COMMENTS.sub(" ", source)
    match = re.search(r"__global__[^;{}]*?\b" + re.escape(name) + r"\s*\(", text)
    if match is None:
        return None
    depth, start = 1, match.end()
    for end in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        if depth == 0:
            break
    else:
        return None
    inside, parts, depth, current = text[start:end], [], 0, ""
    for ch in inside:
        depth += {"(": 1, "<": 1, ")": -1, ">": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    out = []
    for k, part in enumerate(p.split("=", 1)[0].strip() for p in parts):
        if not part or part == "void":
            continue
        const = bool(re.search(r"\bconst\b", part.split("*", 1)[0])) if "*" in part else False
        bare = " ".join(_QUALIFIERS.sub(" ", part).split())
        found = re.match(r"^(.*?)([A-Za-z_]\w*)\s*$", bare)
        if found is None or not found.group(1).strip():
            ctype, pname = bare, f"arg{k}"
        else:
            ctype, pname = found.group(1).strip(), found.group(2)
        pointer = "*" in ctype
        out.append(Param(pname, " ".join(ctype.replace("*", " * ").split()).replace(" *", "*"), pointer, const))
    return out
