"""Resource usage of compiled kernels, read from ptxas's verbose log (`--ptxas-options=-v`).

The log lists, per entry function and architecture, the stack frame, spills, registers and static
shared memory. The figures here are compile-time; the run stage records the driver's own view
(`cuFuncGetAttribute`), which is the one to trust for static shared memory (ptxas leaves out the
1 KiB the driver reserves per block on sm_80 and later).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_BARRIERS = re.compile(r"used (\d+) barriers")


@dataclass(frozen=True)
class KernelResources:
    registers: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    static_shared_bytes: int
    barriers: int


def parse_ptxas_log(log: str) -> dict[str, KernelResources]:
    """Map each mangled entry-function name in the log to its resources."""
    found: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = m.group(1)
            found[current] = {}
            continue
        if current is None:
            continue
        m = _FRAME.search(line)
        if m:
            found[current].update(stack=int(m[1]), stores=int(m[2]), loads=int(m[3]))
        m = _USED.search(line)
        if m:
            fields = found[current]
            fields["registers"] = int(m[1])
            s = _SMEM.search(line)
            fields["smem"] = int(s[1]) if s else 0
            b = _BARRIERS.search(line)
            fields["barriers"] = int(b[1]) if b else 0
    return {
        name: KernelResources(
            registers=f["registers"],
            stack_bytes=f.get("stack", 0),
            spill_store_bytes=f.get("stores", 0),
            spill_load_bytes=f.get("loads", 0),
            static_shared_bytes=f.get("smem", 0),
            barriers=f.get("barriers", 0),
        )
        for name, f in found.items()
        if "registers" in f
    }


def error_lines(log: str, limit: int = 20) -> str:
    """The lines of a compiler log that matter: errors with their source line and caret."""
    lines = log.splitlines()
    keep: list[str] = []
    for i, line in enumerate(lines):
        if "error" in line.lower():
            keep.extend(lines[i : i + 3])  # the message, the offending source line, the caret
    if not keep:
        keep = [ln for ln in lines if ln.strip()][-limit:]
    deduped = list(dict.fromkeys(keep))
    return "\n".join(deduped[:limit])
