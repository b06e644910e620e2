"""Throughput of each arm on each case, against the device's peak DRAM bandwidth.

Bytes one launch moves and its FLOPs are the plan's (`workload.bytes_moved`, `workload.flops`,
resolved per case and arm by `qualify.plan.resolve`); without `bytes_moved` they are each input
buffer read once and each output buffer written once. The time is the arm's timed median
(floor-corrected, per launch), the median over a device's complete trials of each trial's median.

The peak is the DRAM interface's: memory clock x bus width x 2 transfers per clock, both read off
the device when the trial ran (`DeviceInfo`); trials recorded before qualify read the bus width
have no peak. A rate above the peak is physically impossible when the bytes must come from DRAM:
the plan flushes L2 before every sample (cold cache) or the bytes exceed L2. Then the kernel
skipped work or the timer is wrong, and the verdict says so.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from qualify.plan.model import ARM_SIDES, Plan, Side
from qualify.plan.resolve import resolve_cases
from qualify.results.model import CaseTrial, DeviceInfo, Trial

TRANSFERS_PER_CLOCK = 2  # DDR, GDDR and HBM move data on both clock edges

IMPOSSIBLE = "faster than the memory system allows: skipped work or a timer fault"


def peak_bandwidth(device: DeviceInfo) -> float | None:
    """Peak DRAM bandwidth in bytes per second; None where the record lacks clock or bus width."""
    if not device.mem_clock_max_mhz or not device.memory_bus_width_bits:
        return None
    return device.mem_clock_max_mhz * 1e6 * TRANSFERS_PER_CLOCK * device.memory_bus_width_bits / 8


@dataclass(frozen=True)
class ArmRate:
    median_ns: float
    bytes_moved: int
    flops: float | None

    @property
    def gb_per_s(self) -> float:
        return self.bytes_moved / self.median_ns  # bytes per ns is GB/s

    @property
    def tflop_per_s(self) -> float | None:
        return None if self.flops is None else self.flops / self.median_ns / 1e3


@dataclass(frozen=True)
class CaseRate:
    device: str
    case: str
    declared: bool  # bytes are the plan's expression, not the buffers' default
    peak_bytes_per_s: float | None
    dram_bound: bool  # the bytes must come from DRAM: cold cache, or more bytes than L2 holds
    arms: dict[str, ArmRate]

    def fraction(self, side: str) -> float | None:
        """The arm's rate as a fraction of the peak; None without a peak."""
        if self.peak_bytes_per_s is None:
            return None
        return self.arms[side].gb_per_s * 1e9 / self.peak_bytes_per_s

    def impossible(self, side: str) -> bool:
        fraction = self.fraction(side)
        return self.dram_bound and fraction is not None and fraction > 1.0


def case_rates(plan: Plan, groups: dict[str, list[Trial]]) -> list[CaseRate]:
    """Per device (label -> its trials) and planned case with a complete trial, each arm's rate."""
    resolved = resolve_cases(plan)
    out = []
    for label, trials in groups.items():
        complete = [t for t in trials if t.status == "complete"]
        if not complete:
            continue
        device = complete[0].provenance.device
        peak = peak_bandwidth(device)
        by_case: dict[str, list[CaseTrial]] = {}  # each case's rows, in trial order: gathered once, not per case
        for t in complete:
            for c in t.cases:
                by_case.setdefault(c.case, []).append(c)
        for case in resolved:
            rows = by_case.get(case.id, [])
            if not rows:
                continue
            arms: dict[str, ArmRate] = {}
            for side in ARM_SIDES:
                arm = case.arms[side]
                median = statistics.median(c.timing[side].median_ns for c in rows)
                if median > 0:
                    arms[side] = ArmRate(median, arm.bytes_moved, arm.flops)
            if len(arms) != len(ARM_SIDES):
                continue  # a floor-corrected median at or below zero has no rate
            moved = max(a.bytes_moved for a in arms.values())
            out.append(
                CaseRate(
                    device=label,
                    case=case.id,
                    declared=case.arms[ARM_SIDES[0]].bytes_declared,
                    peak_bytes_per_s=peak,
                    dram_bound=plan.schedule.cache == "cold" or moved > device.l2_bytes,
                    arms=arms,
                )
            )
    return out


def impossible_reasons(plan: Plan, groups: dict[str, list[Trial]]) -> list[tuple[Side, str]]:
    """(side, reason): one per device, case and arm whose rate exceeds the peak where DRAM bounds it."""
    out = []
    for rate in case_rates(plan, groups):
        for side in ARM_SIDES:
            if rate.impossible(side):
                assert rate.peak_bytes_per_s is not None
                out.append(
                    (
                        side,
                        f"{rate.case} ({side}) on {rate.device}: {rate.arms[side].gb_per_s:,.0f} GB/s against a peak "
                        f"of {rate.peak_bytes_per_s / 1e9:,.0f} GB/s ({rate.fraction(side):.0%}): {IMPOSSIBLE}",
                    )
                )
    return out
