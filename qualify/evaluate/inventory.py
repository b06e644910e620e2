"""The kernel inventory of one arm in one case: every kernel one call launches, from its traced calls.

A kernel is known by its demangled name and its occurrence within a call (the second launch of
`prep` in one call is `prep` #1), so an entry point that launches one kernel twice keeps two rows.
Launch facts (grid, block, registers, shared memory) come from the kernel's first traced launch;
its duration is the median of its CUPTI durations over the calls that launched it.
"""

from __future__ import annotations

import statistics

from qualify.evaluate.occupancy import occupancy
from qualify.results.model import DeviceLimits, KernelActivity, KernelRow, TracedCall


def launch_order(call: TracedCall) -> list[KernelActivity]:
    """A call's kernels in the order the GPU started them (the order CUPTI hands buffers back in is
    not promised)."""
    return sorted(call.kernels, key=lambda k: (k.start_ns, k.correlation_id))


def keyed(call: TracedCall, names: dict[str, str]) -> list[tuple[tuple[str, int], KernelActivity]]:
    """((readable name, occurrence), record) per kernel of a call, in launch order."""
    seen: dict[str, int] = {}
    out = []
    for k in launch_order(call):
        name = names.get(k.name, k.name)
        out.append(((name, seen.get(name, 0)), k))
        seen[name] = seen.get(name, 0) + 1
    return out


def inventory(calls: list[TracedCall], names: dict[str, str], limits: DeviceLimits | None) -> list[KernelRow]:
    first: dict[tuple[str, int], KernelActivity] = {}
    durations: dict[tuple[str, int], list[int]] = {}
    for call in calls:
        for key, k in keyed(call, names):
            first.setdefault(key, k)
            durations.setdefault(key, []).append(k.end_ns - k.start_ns)
    rows = []
    for key, k in first.items():
        threads = k.block[0] * k.block[1] * k.block[2]
        occ = (
            None
            if limits is None
            else occupancy(limits, threads, k.registers_per_thread, k.static_shared_bytes, k.dynamic_shared_bytes)
        )
        rows.append(
            KernelRow(
                name=key[0],
                occurrence=key[1],
                grid=k.grid,
                block=k.block,
                registers=k.registers_per_thread,
                static_shared_bytes=k.static_shared_bytes,
                dynamic_shared_bytes=k.dynamic_shared_bytes,
                local_bytes=k.local_bytes_per_thread,
                blocks_per_sm=None if occ is None else occ.blocks_per_sm,
                warps_per_sm=None if occ is None else occ.warps_per_sm,
                limiter=None if occ is None else occ.limiter,
                calls=len(durations[key]),
                median_ns=float(statistics.median(durations[key])),
            )
        )
    return rows
