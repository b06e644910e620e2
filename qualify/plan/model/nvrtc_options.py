"""The NVRTC options and preprocessor values a plan may give a CUDA arm."""

from __future__ import annotations

import re
from typing import Annotated, Union

from pydantic import AfterValidator, Field

from qualify.plan.model.fields import PlainText

# NVRTC options a plan may add, by canonical name (two dashes). The list is closed on purpose:
# every option left out either names a file NVRTC reads (headers, precompiled headers) or writes
# (timing reports, traces, PCH files), or is set by qualify itself (architecture, include paths,
# the trace it reads its dependency list from). A value is checked by the rule beside its name.
_BOOL = ("true", "false")
_OPTION_VALUES: dict[str, object] = {
    "use_fast_math": None,
    "extra-device-vectorization": None,
    "restrict": None,
    "device-int128": None,
    "disable-warnings": None,
    "default-device": None,
    "ftz": _BOOL,
    "prec-sqrt": _BOOL,
    "prec-div": _BOOL,
    "fmad": _BOOL,
    "maxrregcount": "count",
    "jump-table-density": "count",
    "diag-suppress": "numbers",
    "diag-error": "numbers",
    "diag-warn": "numbers",
    "std": ("c++11", "c++14", "c++17", "c++20"),
    "ptxas-options": (
        "-v",
        "-O0",
        "-O1",
        "-O2",
        "-O3",
        "--warn-on-spills",
        "--warn-on-local-memory-usage",
        "--allow-expensive-optimizations=true",
        "--allow-expensive-optimizations=false",
    ),
}
# Short spellings NVRTC accepts for the options above (one dash or two reach the same name).
_OPTION_ALIASES = {"w": "disable-warnings", "Xptxas": "ptxas-options"}
_OPTION_SHAPE = re.compile(r"^--?([A-Za-z][A-Za-z0-9_+\-]*)(?:=(.*))?$", re.DOTALL)


def normalize_option(text: str) -> str:
    """An NVRTC option in canonical form (`--name` or `--name=value`), or ValueError saying why it
    is not allowed. Surrounding whitespace is dropped and `--name value` becomes `--name=value`
    first, so a leading space or a space-separated value cannot pass for another option."""
    stripped = text.strip()
    parts = stripped.split(None, 1)
    if len(parts) == 2 and "=" not in parts[0]:
        stripped = f"{parts[0]}={parts[1]}"
    if re.match(r"^--?(I|isystem|system-include)", stripped):
        raise ValueError(f"{text!r}: set architectures and include_dirs in their fields")
    m = _OPTION_SHAPE.match(stripped)
    if m is None:
        raise ValueError(f"{text!r} is not an NVRTC option (-name or --name=value)")
    name, value = m.group(1), m.group(2)
    name = _OPTION_ALIASES.get(name, name)
    lowered = name.lower()
    if lowered.startswith(("arch", "gpu-architecture", "gpu_architecture")) or lowered in ("i", "include-path"):
        raise ValueError(f"{text!r}: set architectures and include_dirs in their fields")
    if lowered in ("include", "pre-include", "preinclude") or "include" in lowered:
        # NVRTC would read that header from anywhere on the host, outside the lock
        raise ValueError(f"{text!r}: a pre-included header is not frozen; #include it in the source")
    if name not in _OPTION_VALUES:
        raise ValueError(
            f"{text!r} is not among the NVRTC options a plan may set (docs/plan.md lists "
            "them); none that reads or writes a file is allowed"
        )
    rule = _OPTION_VALUES[name]
    if rule is None:
        if value is not None:
            raise ValueError(f"{text!r}: --{name} takes no value")
        return f"--{name}"
    if value is None or value == "":
        raise ValueError(f"{text!r}: --{name} needs a value")
    if rule == "count":
        ok = value.isascii() and value.isdigit() and 0 < int(value) <= 65_535
    elif rule == "numbers":
        ok = all(v.isascii() and v.isdigit() and len(v) <= 6 for v in value.split(","))
    else:
        ok = value in rule  # type: ignore[operator]
    if not ok:
        raise ValueError(f"{text!r}: {value!r} is not a value --{name} accepts here")
    return f"--{name}={value}"


def _check_option(value: str) -> str:
    normalize_option(value)
    return value


NvrtcOption = Annotated[str, Field(max_length=200), AfterValidator(_check_option)]
DefineValue = Annotated[Union[int, Annotated[PlainText, Field(max_length=200)]], Field(union_mode="left_to_right")]
