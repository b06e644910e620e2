"""The shapes every part of results.json shares: the frozen model base, the kinds a field takes
(side, status, a case's class, a verdict's status) and one comparison's statistics (`CaseStats`:
a trial's, the A/A's, each timer's)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Side = Literal["base", "candidate"]
Status = Literal["complete", "failed", "interrupted"]
CaseClass = Literal["faster", "slower", "same", "cant_tell"]
VerdictStatus = Literal["qualified", "not_qualified", "incomplete"]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CaseStats(Model):
    ratio: float = Field(description="candidate / base: exp of the mean per-block log-ratio of medians")
    ci_low: float | None = Field(description="95 % t-interval over blocks; None below 2 blocks")
    ci_high: float | None
    delta_pct: float = Field(description="(ratio - 1) * 100: negative is faster")
    case_class: CaseClass
    reason: str
    blocks: int | None = Field(
        default=None,
        description="independent units with a ratio on both arms: the blocks, or the "
        "placements where blocks shared one (qualify.evaluate.stats.unit_log_ratios)",
    )
    mde_pct: float | None = Field(
        default=None,
        description="minimum detectable change in % (95 % confidence, 80 % power); None below 2 blocks",
    )
    log_mean: float | None = Field(
        default=None,
        description="mean of the block log-ratios (absent in "
        "trials made before it was recorded; None without a usable block)",
    )
    log_sd: float | None = Field(
        default=None, description="their standard deviation (ddof 1); None below 2 blocks or where not recorded"
    )
