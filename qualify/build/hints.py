"""What to do about NVRTC's commonest failures, in one clause appended to the build error.

NVRTC's own words stay in the log lines below the error; a hint says the fix where qualify knows
it: a host C++ header NVRTC does not have (CCCL's `<cuda/std/...>` is the device-side one), a
header that exists in the repository but in no folder the arm searches (the plan's
`include_dirs`), and a kernel template named without its arguments.
"""

from __future__ import annotations

import re
from pathlib import Path

_MISSING = re.compile(r'(?:cannot|could not) open source file "([^"]+)"')
_TEMPLATE = re.compile(r"cannot determine which instance of function template \"([^\"]+)\"")

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
    if missing is None:
        return ""
    return missing_header(missing.group(1), spec, cccl)


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
