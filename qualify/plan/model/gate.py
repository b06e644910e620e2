"""The regression gate's policy (`qualify gate`): per case, the largest regression it lets through
and the smallest change it must be able to see.

A gate compares each arm at a base revision with the same arm in the working tree. A plan that
says nothing gets the defaults below; a plan that states them is bound to them by its digest.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import Field

from qualify.plan.model.acceptance import CaseSelector
from qualify.plan.model.fields import Strict

# 0.5 %: the band inside which a ratio counts as "same" for any case (evaluate.stats.SAME_BAND,
# NVBench's robust-compare threshold); a slowdown smaller than that is not called a regression.
DEFAULT_MAX_REGRESSION_PCT = 0.5
# 2 %: the change the gate must be able to resolve; issue 34's power target is a planted 2 % slowdown.
DEFAULT_DETECT_PCT = 2.0


class GateRule(CaseSelector):
    """A policy for the cases it selects (`cases` or `where`; every case when neither)."""

    max_regression_pct: float = Field(
        default=DEFAULT_MAX_REGRESSION_PCT,
        ge=0,
        lt=100,
        description="The largest slowdown the gate lets through: slower needs the whole interval above 1 "
        "and the change beyond this.",
    )
    detect_pct: float = Field(
        default=DEFAULT_DETECT_PCT,
        gt=0,
        lt=100,
        description="The change the gate must be able to see: unchanged needs the interval inside ±this, "
        "and a case whose smallest resolvable change exceeds it is flagged as underpowered.",
    )


class GatePolicy(Strict):
    max_regression_pct: float = Field(default=DEFAULT_MAX_REGRESSION_PCT, ge=0, lt=100)
    detect_pct: float = Field(default=DEFAULT_DETECT_PCT, gt=0, lt=100)
    cases: list[GateRule] = Field(
        default_factory=list, description="Per-case policies; the first that selects a case applies, else the above."
    )

    def rule_for(self, selects: Callable[[GateRule], bool]) -> GateRule:
        """The rule of the first entry `selects(entry)` accepts, else the plan-wide one."""
        for rule in self.cases:
            if selects(rule):
                return rule
        return GateRule(max_regression_pct=self.max_regression_pct, detect_pct=self.detect_pct)
