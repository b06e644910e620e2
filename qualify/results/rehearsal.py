"""The model of a CPU rehearsal (`qualify plan rehearse`): what the plan's cases would look like to
the fidelity gate with a simulated candidate. It is never a record: `rehearsal` is always true, it
is written as rehearsal.json beside REHEARSAL.md (no results.json, no ledger), and `report --check`
refuses the folder."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from qualify.results.model import BufferParity
from qualify.results.tolerance import ControlOutcome, MutationResolution, ParityCounts

NOT_A_RECORD = (
    "a rehearsal on the CPU: no kernel ran, the candidate is simulated from the expected values; "
    "this is not a record and proves nothing about the kernels"
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RehearsedCase(_Model):
    case: str
    input_sha256: dict[str, str] = Field(description="each input's bytes, as `run` would upload them")
    simulated: bool = Field(description="outputs were simulated (an expected value source was given)")
    counts: list[ParityCounts] = Field(default_factory=list, description="counted fidelity: the candidate's counts")
    parity: list[BufferParity] = Field(default_factory=list, description="otherwise: parity with the expected values")
    calibration: list[MutationResolution] = Field(default_factory=list)
    passed: bool | None = Field(description="the simulated candidate passes the gate; None when not simulated")


class RehearsedControl(_Model):
    control: str
    case: str
    simulated: bool
    caught: bool | None = Field(description="behaved as declared (counted fidelity) or caught; None: not simulated")
    outcome: ControlOutcome | None = None
    note: str = ""


class Rehearsal(_Model):
    rehearsal: Literal[True] = True
    not_a_record: str = NOT_A_RECORD
    plan: str
    plan_digest: str
    frozen: bool
    expected_from: str = Field(description="where the expected values came from, in words")
    simulation: str = Field(description="how the candidate was simulated, in words")
    reorder_ulp: int
    seed: int
    cases: list[RehearsedCase]
    controls: list[RehearsedControl]
    problems: list[str] = Field(description="what the rehearsal found wrong with the plan; empty when none")
    hint: str | None = Field(default=None, description="how to fix a bound the simulated candidate fails")
    buffer_bounds: str = Field(
        default="not checked: no device (`plan rehearse --device N` on a GPU host runs each CUDA arm once per case "
        "with a guard after every output and scratch buffer)",
        description="whether each arm's writes were held to its buffers' declared sizes, in words",
    )
    overrun_fields: list[str] = Field(
        default_factory=list,
        description="the plan field of the buffer of each write past a declared size, one per such line in `problems`",
    )
