"""How a plan is timed: the schedule of samples, the budget that bounds it, and the stopping rule."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_serializer, model_validator

from qualify.plan.model.fields import AddedFields, Strict


MAX_WARMUP = 10_000  # warm-up settles clocks and caches within tens of launches; more is a typo


class Schedule(AddedFields):
    _added = frozenset({"traced_calls"})

    warmup: int = Field(
        default=10, ge=0, le=MAX_WARMUP,
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
        default=5, ge=0, le=100,
        description="Calls per arm and case traced with CUPTI after the case's timing (kernel "
        "inventory and the second timer); 0 disables tracing.",
    )


class Budget(Strict):
    max_trials: int = Field(ge=1, description="Trials per device, failed ones included.")
    max_samples: int = Field(ge=1, description="Timed samples per arm, case and trial.")
    max_wall_seconds: float = Field(gt=0, description="Wall time of one trial.")


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
        default=None, gt=0,
        description="precision: wall seconds one case's timing (the comparison, or the A/A) may "
        "take; reaching it stops that case with 'wall cap' (not a failure).",
    )
    fail_fast: list[Literal["fidelity", "sanitizer", "fault", "throttle"]] = Field(
        default_factory=lambda: ["fidelity", "fault"]
    )

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
    def _omit_absent_cap(self, handler):
        # The digest hashes the plan with its defaults; an absent wall cap is no cap, so plans
        # frozen before the field existed keep their digest.
        data = handler(self)
        if isinstance(data, dict) and data.get("max_case_seconds") is None:
            data.pop("max_case_seconds", None)
        return data
