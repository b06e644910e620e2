"""Pydantic models of a qualification plan (schema version 1): the whole `Plan`, and every part
of it re-exported from the submodule that defines it.

A plan is written before any number is seen. Every model is frozen and rejects unknown fields, so a
typo in a plan is an error rather than a silently ignored control. Cross-field rules that need the
whole plan (names that must exist, budgets that must hold one ABBA block) live in `Plan`'s
validators; rules that need files (sources exist, kernels are declared in them) live in
`qualify.plan.load`.

Field-by-field documentation: docs/plan.md (kept next to the generated JSON Schema).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from qualify.dtypes import DType
from qualify.plan.model.acceptance import (
    Acceptance,
    Calibration,
    CaseSelector,
    ExactSelector,
    Fidelity,
    SanitizerCheck,
    SpeedGate,
    ToleranceRule,
)
from qualify.plan.model.arms import (
    ARM_SIDES,
    Arm,
    ArmLaunch,
    Arms,
    CudaArm,
    LibraryArm,
    PythonArm,
    ScratchBuffer,
    Side,
)
from qualify.plan.model.controls import (
    BuildControl,
    CallableControl,
    Controls,
    Expectation,
    InputControl,
    Mutation,
    NegativeControl,
)
from qualify.plan.model.fields import (
    AddedFields,
    Expr,
    ExprText,
    FloatExpr,
    Identifier,
    Label,
    PathText,
    PlainText,
    Prose,
    Strict,
)
from qualify.plan.model.gate import GatePolicy, GateRule
from qualify.plan.model.hardware import MAX_SHARED_PER_BLOCK, MAX_THREADS_PER_BLOCK, DeviceSpec, Hardware
from qualify.plan.model.nvrtc_options import (
    _OPTION_VALUES,  # noqa: F401 - the closed list, read by tests
    DefineValue,
    NvrtcOption,
    normalize_option,
)
from qualify.plan.model.schedule import MAX_WARMUP, Budget, Schedule, Stop
from qualify.plan.model.workload import (
    MAX_BUFFER_BYTES,
    Arg,
    Buffer,
    BufferArg,
    ConstantInit,
    GoldenInit,
    Init,
    Launch,
    NormalInit,
    ScalarArg,
    ScalarType,
    Seeds,
    UniformInit,
    Workload,
    ZerosInit,
)

SCHEMA_VERSION = 1


class Revisions(Strict):
    base: Label = Field(description="Label of the base revision (a git sha, a tag, 'tile-64').")
    candidate: Label = Field(description="Label of the candidate revision.")


class Plan(AddedFields):
    # `gate` came after plans were frozen: left out of the digest while it holds its defaults
    _added: ClassVar[frozenset[str]] = frozenset({"gate"})

    schema_version: Literal[1] = Field(description="Version of this schema; only 1 exists.")
    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", max_length=80)]
    hypothesis: Prose
    independent_variable: Prose
    revisions: Revisions
    hardware: Hardware
    arms: Arms
    workload: Workload
    seeds: Seeds
    schedule: Schedule = Field(default_factory=Schedule)
    budget: Budget
    stop: Stop = Field(default_factory=Stop)
    acceptance: Acceptance = Field(default_factory=Acceptance)
    controls: Controls = Field(default_factory=Controls)
    gate: GatePolicy = Field(
        default_factory=GatePolicy, description="The regression gate's policy (`qualify gate`), per case."
    )

    @model_validator(mode="after")
    def _golden_inputs_need_golden(self) -> Plan:
        for buffer in self.workload.buffers:
            if isinstance(buffer.init, GoldenInit) and self.acceptance.fidelity.golden is None:
                raise ValueError(f"buffer {buffer.name!r} takes its values from a golden, and the plan names none")
        return self

    def arm(self, side: str) -> CudaArm | LibraryArm | PythonArm:
        arm: CudaArm | LibraryArm | PythonArm = getattr(self.arms, side)
        return arm


__all__ = [
    "ARM_SIDES",
    "Side",
    "MAX_BUFFER_BYTES",
    "MAX_SHARED_PER_BLOCK",
    "MAX_THREADS_PER_BLOCK",
    "MAX_WARMUP",
    "SCHEMA_VERSION",
    "Acceptance",
    "AddedFields",
    "Arg",
    "ArmLaunch",
    "Arm",
    "Arms",
    "Budget",
    "Buffer",
    "BufferArg",
    "BuildControl",
    "Calibration",
    "CaseSelector",
    "ConstantInit",
    "Controls",
    "CudaArm",
    "DType",
    "DefineValue",
    "DeviceSpec",
    "ExactSelector",
    "Expectation",
    "Expr",
    "GatePolicy",
    "GateRule",
    "ExprText",
    "Fidelity",
    "FloatExpr",
    "GoldenInit",
    "Hardware",
    "Identifier",
    "Init",
    "InputControl",
    "Label",
    "Launch",
    "LibraryArm",
    "PythonArm",
    "CallableControl",
    "Mutation",
    "NegativeControl",
    "NormalInit",
    "NvrtcOption",
    "PathText",
    "Plan",
    "PlainText",
    "Prose",
    "Revisions",
    "SanitizerCheck",
    "ScalarArg",
    "ScalarType",
    "ScratchBuffer",
    "Schedule",
    "Seeds",
    "SpeedGate",
    "Stop",
    "Strict",
    "ToleranceRule",
    "UniformInit",
    "Workload",
    "ZerosInit",
    "normalize_option",
]
