"""How a plan is timed: the schedule of samples, the budget that bounds it, and the stopping rule."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from qualify.plan.model.fields import AddedFields, Strict

MAX_WARMUP = 10_000  # warm-up settles clocks and caches within tens of launches; more is a typo
MAX_PLACEMENTS = 1_000


class Placement(Strict):
    """Where a case's buffers sit in device memory, drawn anew inside the trial.

    Where the buffers sit moves a short, memory-bound kernel's time by several percent, and not
    equally for both arms (benchmarks/placement): a trial that times one set of buffers describes
    that set only, and the next process, which gets another, answers differently. So the blocks of
    a trial draw their buffers from a pool of placements, each after a spacer allocation and at
    its own offset, both arms of a block on the same one.
    """

    count: int | Literal["per_block"] = Field(
        default="per_block",
        description="Placements per case: per_block gives every block its own (as many as the "
        "schedule has blocks, fewer where a quarter of the device's free memory cannot hold them); "
        "an integer K reuses K placements, and the interval is then taken over the placements' "
        "mean log-ratios, never over blocks that share one. 1 is one fixed set of buffers.",
    )
    granularity_bytes: int = Field(
        default=256,
        ge=256,
        le=1 << 20,
        multiple_of=256,
        description="Offsets inside a placement's allocations are multiples of this (below 2 MiB); "
        "256 keeps every alignment cuMemAlloc guarantees.",
    )

    @model_validator(mode="after")
    def _count(self) -> Placement:
        if isinstance(self.count, int) and not 1 <= self.count <= MAX_PLACEMENTS:
            raise ValueError(f"placement count {self.count}: must be per_block or 1..{MAX_PLACEMENTS}")
        return self


class Schedule(AddedFields):
    _added = frozenset({"traced_calls"})

    warmup: int = Field(
        default=10,
        ge=0,
        le=MAX_WARMUP,
        description="Excluded launches per arm and case; they count against budget.max_wall_seconds.",
    )
    iterations_per_sample: int = Field(default=1, ge=1, le=10_000)
    samples_per_block: int = Field(default=10, ge=1, description="Samples per arm per ABBA half.")
    blocks: int = Field(default=10, ge=1, description="ABBA blocks (A B B A) per case and trial.")
    trials: int = Field(default=2, ge=1, description="Trials per device.")
    cache: Literal["cold", "hot"] = Field(
        default="cold", description="cold: L2 flushed (left clean) before every sample."
    )
    timing: Literal["blocking-kernel"] = Field(
        default="blocking-kernel",
        description="How launch latency is kept out of the event window. Graph replay was measured "
        "against ncu and kept out (benchmarks/timer).",
    )
    traced_calls: int = Field(
        default=5,
        ge=0,
        le=100,
        description="Calls per arm and case traced with CUPTI after the case's timing (kernel "
        "inventory and the second timer); 0 disables tracing.",
    )
    placement: Placement = Field(default_factory=Placement)
    order: Literal["seeded", "alternate"] = Field(
        default="seeded",
        description="Which arm opens each block. seeded: one ABBA and one BAAB block per pair of "
        "blocks, in an order drawn from the plan's seed, the trial and the case (balanced in every "
        "prefix of whole pairs); alternate: ABBA on even blocks, BAAB on odd ones.",
    )

    def placements_for(self, blocks: int) -> int:
        """Placements a case asks its pool for."""
        return blocks if self.placement.count == "per_block" else self.placement.count


class Budget(Strict):
    max_trials: int = Field(ge=1, description="Trials per device, failed ones included.")
    max_samples: int = Field(ge=1, description="Timed samples per arm, case and trial.")
    max_wall_seconds: float = Field(gt=0, description="Wall time of one trial.")


FailFast = Literal["fidelity", "sanitizer", "fault", "throttle"]


class Stop(Strict):
    rule: Literal["fixed", "precision", "noise"] = Field(
        default="fixed",
        description="fixed: run schedule.blocks blocks; precision: add blocks until the ratio's "
        "interval half-width is at most target_ci_pct, or a cap stops it (schedule.blocks, "
        "budget.max_samples, max_case_seconds); noise: the earlier name of precision.",
    )
    target_ci_pct: float | None = Field(
        default=None, gt=0, description="precision: half-width of the 95 % CI of the ratio, in %."
    )
    min_blocks: int = Field(default=2, ge=1, description="precision: blocks before the target may stop a case.")
    max_case_seconds: float | None = Field(
        default=None,
        gt=0,
        description="precision: wall seconds one case's timing (the comparison, or the A/A) may "
        "take; reaching it stops that case with 'wall cap' (not a failure).",
    )
    fail_fast: list[FailFast] = Field(default_factory=lambda: list[FailFast](["fidelity", "fault"]))

    @model_validator(mode="after")
    def _precision_fields(self) -> Stop:
        adaptive = self.rule in ("precision", "noise")
        if adaptive and self.target_ci_pct is None:
            raise ValueError(f"rule '{self.rule}' needs target_ci_pct")
        if not adaptive and (self.target_ci_pct is not None or self.max_case_seconds is not None):
            raise ValueError("target_ci_pct and max_case_seconds only apply to rule 'precision'")
        # one degree of freedom makes the first block-to-block spread a coin toss: a stop on it
        # would be optional stopping at its worst
        if self.rule == "precision" and self.min_blocks < 3:
            raise ValueError("rule 'precision' needs min_blocks >= 3")
        return self

    @model_serializer(mode="wrap")
    def _omit_absent_cap(self, handler: SerializerFunctionWrapHandler) -> Any:
        # The digest hashes the plan with its defaults; an absent wall cap is no cap, so plans
        # frozen before the field existed keep their digest.
        data = handler(self)
        if isinstance(data, dict) and data.get("max_case_seconds") is None:
            data.pop("max_case_seconds", None)
        return data
