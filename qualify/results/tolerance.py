"""Result models of tolerance-gated fidelity: parity counts, control outcomes, gate resolution.

Kept apart from `results/model.py` so the trial model only gains optional fields; every value here
is derived by a pure function (`qualify.evaluate.parity_counts`, `qualify.evaluate.tolerance_controls`)
from arrays or other values, and `report --check` can recompute it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ParityCounts(_Model):
    """How one output of one case differs from its expected values, counted as the seed reports it."""

    output: str
    dtype: str
    elements: int
    identical: int = Field(description="elements whose bits equal the expected element's bits")
    one_quantum: int = Field(description="elements exactly one representable step away")
    over_one_quantum: int
    over_two_quanta: int
    non_finite: int = Field(description="elements that are NaN or infinite where a finite value was expected")
    max_abs: float
    max_rel: float | None = Field(description="None when no expected magnitude reaches rel_floor")
    rel_floor: float
    atol: float
    rtol: float
    worst_bound_fraction: float | None = Field(
        description="max |err| / (atol + rtol·|expected|); None when an element is non-finite "
        "or differs where the bound is zero (an infinite fraction)"
    )
    worst_index: int | None
    first_offending: int | None = Field(description="first flat index outside the bound")
    within: bool = Field(description="every element within atol + rtol·|expected|")


class ControlOutcome(_Model):
    """A negative control on one case: what the plan declared, what the gate saw."""

    control: str
    case: str
    expected: dict[str, Literal["pass", "fail"]] = Field(description="per output, as the plan declared")
    passed: dict[str, bool] = Field(description="per output, whether the fidelity gate held")
    worst_bound_fraction: dict[str, float | None] = Field(
        description="per output; None when infinite (a difference where the gate is bit-exact)"
    )
    as_declared: bool


class MutationStep(_Model):
    quanta: int
    elements: int
    caught: bool
    worst_bound_fraction: float | None


class MutationResolution(_Model):
    """The smallest seeded perturbation of one output that the gate catches, or none up to a ceiling."""

    output: str
    case: str
    steps: list[MutationStep]
    smallest_caught: MutationStep | None
    vacuous: bool = Field(description="no perturbation up to the plan's ceiling was caught")


class CaseTolerance(_Model):
    """A case judged against the golden: each arm's counts per output, and the gate's resolution."""

    counts: dict[Literal["base", "candidate"], list[ParityCounts]]
    calibration: list[MutationResolution] = Field(default_factory=list)
