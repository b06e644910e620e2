"""What to do about NVRTC's commonest failures, in one clause appended to the build error.

NVRTC's own words stay in the log lines below the error; a hint says the fix where qualify knows
it: a host C++ header NVRTC does not have (CCCL's `<cuda/std/...>` is the device-side one), a
header that exists in the repository but in no folder the arm searches (the plan's
`include_dirs`), a host C macro NVRTC does not define (`INFINITY`, `FLT_MAX`: they come from host
headers), and a kernel template named without its arguments.
"""

from __future__ import annotations

import re
from pathlib import Path

_MISSING = re.compile(r'(?:cannot|could not) open source file "([^"]+)"')
_TEMPLATE = re.compile(r"cannot determine which instance of function template \"([^\"]+)\"")
_UNDEFINED = re.compile(r'identifier "([A-Za-z_]\w*)" is undefined')

# host C macros kernels ported from host-compiled code use, and what NVRTC code writes instead:
# CCCL's numeric_limits, which is constexpr and device-side (under NVRTC, CCCL's <cuda/std/climits>
# defines the INT_ macros; its <cuda/std/cfloat> defines none of the FLT_/DBL_ ones)
_LIMIT = "cuda::std::numeric_limits<{t}>::{f}() (#include <cuda/std/limits>)"
_HOST_MACROS = {
    "INFINITY": _LIMIT.format(t="float", f="infinity"),
    "HUGE_VALF": _LIMIT.format(t="float", f="infinity"),
    "HUGE_VAL": _LIMIT.format(t="double", f="infinity"),
    "NAN": _LIMIT.format(t="float", f="quiet_NaN"),
    "FLT_MAX": _LIMIT.format(t="float", f="max"),
    "FLT_MIN": _LIMIT.format(t="float", f="min"),
    "FLT_EPSILON": _LIMIT.format(t="float", f="epsilon"),
    "DBL_MAX": _LIMIT.format(t="double", f="max"),
    "DBL_MIN": _LIMIT.format(t="double", f="min"),
    "DBL_EPSILON": _LIMIT.format(t="double", f="epsilon"),
    "INT_MAX": _LIMIT.format(t="int", f="max") + " or #include <cuda/std/climits>",
    "INT_MIN": _LIMIT.format(t="int", f="min") + " or #include <cuda/std/climits>",
    "UINT_MAX": _LIMIT.format(t="unsigned", f="max") + " or #include <cuda/std/climits>",
}

# host headers with a CCCL counterpart under <cuda/std/...>; C headers map to their C++ name
_C_HEADERS = {
    "float.h": "cfloat",
    "limits.h": "climits",
    "stdint.h": "cstdint",
    "stddef.h": "cstddef",
    "assert.h": "cassert",
    "math.h": "cmath",
    "stdlib.h": "cstdlib",
}


_TEMPLATE_HINT = " is a template: name one instantiation"


def is_template_hint(hint: str) -> bool:
    return _TEMPLATE_HINT in hint


def for_log(log: str, spec, cccl: Path | None) -> str:
    """'; <hint>' for the first failure of `log` qualify knows a fix for, else ''. `cccl`: the CCCL
    headers' folder (`nvrtc.cccl_include_dir`), None when not installed."""
    template = _TEMPLATE.search(log)
    if template:
        return f'; {template.group(1)}{_TEMPLATE_HINT} in the plan\'s kernel field, e.g. "{template.group(1)}<256>"'
    missing = _MISSING.search(log)
    if missing is not None:
        return missing_header(missing.group(1), spec, cccl)
    return host_macro(log)


def host_macro(log: str) -> str:
    """'; <hint>' naming each undefined identifier of `log` that is a host C macro, else ''."""
    names = dict.fromkeys(m.group(1) for m in _UNDEFINED.finditer(log) if m.group(1) in _HOST_MACROS)
    if not names:
        return ""
    fixes = "; ".join(f"for {name} write {_HOST_MACROS[name]}" for name in names)
    return f"; {', '.join(names)} {'is a host C macro' if len(names) == 1 else 'are host C macros'} NVRTC does not define: {fixes}"


def missing_header(name: str, spec, cccl: Path | None) -> str:
    std = _C_HEADERS.get(name, name)
    if "/" not in std and "." not in std:
        if cccl is not None and (cccl / "cuda" / "std" / std).is_file():
            return (
                f"; NVRTC has no host C++ headers: <{name}> has a device-side counterpart, "
                f"#include <cuda/std/{std}> (CCCL, installed with qualify's CUDA extra)"
            )
        return "; NVRTC has no host C++ headers: use CCCL's <cuda/std/...> headers where one exists"
    if cccl is None and name.split("/", 1)[0] in ("cuda", "cub", "nv", "thrust"):
        return "; the CCCL headers are not installed: they come with qualify's CUDA extra (nvidia-cuda-cccl)"
    folder = _elsewhere(name, spec)
    if folder is not None:
        return (
            f"; the repository has {name} under {folder or '.'}/, a folder this arm does not search: "
            f"add that folder to the arm's include_dirs (relative to the plan)"
        )
    return ""


def _elsewhere(name: str, spec) -> str | None:
    """The repository folder (a repository path) from which `name` would be found, looked for
    in the conventional include folders at and above the source's folder."""
    if spec.root is None:
        return None
    root = spec.root.resolve()
    start = spec.source.parent.resolve()
    for base in (start, *start.parents):
        if base != root and root not in base.parents:
            break
        for sub in ("include", "inc", "src", "kernels", ""):
            candidate = base / sub / name
            try:
                if candidate.is_file() and root in candidate.resolve().parents:
                    return (base / sub).relative_to(root).as_posix().rstrip("/").removesuffix("/.")
            except (OSError, ValueError):
                continue
    return None
