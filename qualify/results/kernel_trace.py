"""A trial's kernels under CUPTI (results.json's `kernel_trace` and each case's `trace` and
`kernels`): the raw activity records of the traced calls, and what `qualify.evaluate` derives from
them (the inventory, the attribution of a change to kernels, the two timers' agreement)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from qualify.results.base import CaseStats, Model, Side


class KernelActivity(Model):
    """One CUPTI CONCURRENT_KERNEL record, as the activity API gave it (raw: nothing derived)."""

    name: str = Field(description="the kernel's name as launched (mangled for C++ kernels)")
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers_per_thread: int
    static_shared_bytes: int
    dynamic_shared_bytes: int
    local_bytes_per_thread: int
    start_ns: int = Field(description="CUPTI timestamp at the kernel's start")
    end_ns: int
    correlation_id: int
    stream_id: int
    shared_memory_executed: int | None = Field(
        default=None, description="shared-memory carveout the kernel ran with, in bytes"
    )


class TracedCall(Model):
    """One traced call of an arm: its event window and every kernel CUPTI saw it launch."""

    event_ns: float = Field(description="the call's event window (the empty-pair floor included)")
    kernels: list[KernelActivity]
    # where the call ran (trace version 2; absent from calls traced before, and from null calls):
    # qualify.plan.schedule.trace_plan's draw for it
    block: int | None = Field(default=None, description="the traced block the call belongs to")
    position: int | None = Field(default=None, description="its position (0..3) in the block's order")
    order: Literal["ABBA", "BAAB"] | None = Field(default=None, description="the block's order (A: base)")
    placement: int | None = Field(default=None, description="the case's buffer placement it ran on")
    flush_slot: int | None = Field(default=None, description="the flush buffer flushed before it")


class KernelRow(Model):
    """One kernel a call launches, derived from the traced calls (qualify.evaluate.inventory)."""

    name: str = Field(description="demangled where the demangler could")
    occurrence: int = Field(description="0 for its first launch in a call, 1 for the second ...")
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers: int
    static_shared_bytes: int
    dynamic_shared_bytes: int
    local_bytes: int
    blocks_per_sm: int | None = Field(description="implied on this device; None without its limits")
    warps_per_sm: int | None
    limiter: str | None = Field(description="what caps blocks/SM: warps, blocks, registers or shared memory")
    calls: int = Field(description="traced calls that launched it")
    median_ns: float = Field(description="median CUPTI duration over those calls")


class KernelChange(Model):
    """Attribution: one kernel of base against the same kernel of candidate (verdict-neutral)."""

    name: str
    occurrence: int
    candidate_name: str | None = Field(
        default=None,
        description="set when the candidate's kernel has other template arguments (matched by its template's name)",
    )
    base_ns: float | None
    candidate_ns: float | None
    change_pct: float | None
    outcome: Literal["same", "slower", "faster", "only in base", "only in candidate"]


class TimerAgreement(Model):
    """The second timer: per traced call, the event window less the floor against the CUPTI span."""

    calls: int
    bound: str = Field(description="the agreement bound as stated in the record")
    event_ns: list[float] = Field(description="per call: event window minus the empty-pair floor")
    offset_ns: float = Field(
        default=0.0,
        description="the traced offset subtracted besides the floor: "
        "median of (events - floor - CUPTI span) of the null calls",
    )
    cupti_span_ns: list[float] = Field(description="per call: first kernel start to last kernel end")
    cupti_sum_ns: list[float] = Field(description="per call: sum of kernel durations")
    worst_call: int | None = Field(description="the call furthest outside (or nearest) the bound")
    agree: bool


class KernelDelta(Model):
    """One kernel's change, from CUPTI durations paired per traced block (trace version 2): per
    block the log of the candidate's median over the base's, a t-interval over the blocks (the
    placements where blocks share one), as the event samples' statistics are taken."""

    name: str
    occurrence: int
    candidate_name: str | None = Field(default=None, description="as in KernelChange")
    stats: CaseStats


class TimerDelta(Model):
    """The call's change by its two timers (trace version 2): CUPTI spans paired per traced block
    against the timed event samples. They disagree when their intervals lie further apart than the
    allowance; a disagreement is a reason in the verdict."""

    cupti: CaseStats = Field(description="the traced calls' CUPTI spans (first start to last end)")
    events: CaseStats = Field(description="the case's timed event samples (the trial's `stats`)")
    overhead_ns: float = Field(description="launch overhead inside an event window: the null calls' traced offset")
    allowance_pct: float = Field(
        description="how far apart the intervals may lie, in points: the launch overhead's pull of the "
        "events' change toward 0 (|CUPTI change| x overhead / (base span + overhead)) plus a fixed "
        "allowance for the timers' own differences"
    )
    gap_pct: float | None = Field(
        description="how far apart the two intervals lie, in points (0: they overlap); None without both intervals"
    )
    agree: bool | None = Field(description="None when either timer has no interval")


class SampleTimer(Model):
    """The second timer of one arm (trace version 2): the median CUPTI span of its traced calls
    against the median of its timed samples less the floor (per launch)."""

    events_median_ns: float = Field(description="median timed sample, floor-corrected, per launch")
    cupti_median_ns: float = Field(description="median CUPTI span over the arm's traced calls")
    overhead_ns: float = Field(description="launch overhead inside an event window (the null calls' traced offset)")
    gap_ns: float = Field(description="events - CUPTI")
    low_ns: float = Field(description="the least gap the bound accepts")
    high_ns: float = Field(description="the largest gap the bound accepts")
    agree: bool


class CaseKernels(Model):
    """What the traced calls of a case give: per arm the kernels, the attribution, the timers."""

    inventory: dict[Side, list[KernelRow]]
    attribution: list[KernelChange]
    timers: dict[Side, TimerAgreement] = Field(
        default_factory=dict,
        description="trace version 1: each traced call's event window against its own CUPTI span",
    )
    deltas: list[KernelDelta] | None = Field(
        default=None,
        description="trace version 2: per kernel, the change from its CUPTI durations paired per traced block",
    )
    timer_delta: TimerDelta | None = Field(
        default=None, description="trace version 2: the call's CUPTI change against the event samples' change"
    )
    sample_timers: dict[Side, SampleTimer] | None = Field(
        default=None, description="trace version 2: per arm, the median CUPTI span against the timed samples"
    )


class DeviceLimits(Model):
    """The device's occupancy limits (cuDeviceGetAttribute), kept with the trial for re-derivation."""

    warp_size: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    max_threads_per_block: int
    registers_per_sm: int
    registers_per_block: int
    shared_per_sm: int
    shared_per_block_optin: int
    reserved_shared_per_block: int
    register_unit: int = Field(description="register allocation unit per warp (architecture constant)")
    shared_unit: int = Field(description="shared-memory allocation unit (architecture constant)")
    sub_partitions: int = Field(description="SM sub-partitions registers are split across")


class KernelTrace(Model):
    """How a trial traced kernels: the tool, the demangler and the names it gave, the limits."""

    tool: str = Field(description="'cupti-python X.Y.Z', or why no trace was taken")
    demangler: str = Field(description="c++filt, builtin, or none (names kept as launched)")
    names: dict[str, str] = Field(default_factory=dict, description="launched name -> demangled")
    limits: DeviceLimits | None = None
    version: Literal[1, 2, 3] = Field(
        default=1,
        description="1: traced_calls calls per arm after timing on the first placement, base's then "
        "candidate's, each call's event window against its own CUPTI span; 2: traced like the samples "
        "(ABBA/BAAB blocks, poisoned outputs, the case's placements and flush slots, each call's draw "
        "kept), CUPTI's change and spans against the timed samples; 3: traced and derived as 2, but "
        "CUPTI's change and its comparison with the samples are kept as evidence only: not a reason "
        "in the verdict and not printed (ncu sided with the samples where they differed)",
    )
    flush_slots: int | None = Field(
        default=None, description="trace version 2: the flush buffers the traced calls drew from"
    )
    null_calls: list[TracedCall] = Field(
        default_factory=list,
        description=(
            "traced calls of qualify's own one-thread kernel, queued as every traced call is: what a "
            "traced event window holds beyond the kernels (CUPTI's own cost per launch), measured in "
            "the same trial; the second timer subtracts their median offset"
        ),
    )
