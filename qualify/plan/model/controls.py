"""Controls: the A/A run and the negative controls, mutations the fidelity gate must catch."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

from qualify.plan.model.acceptance import CaseSelector
from qualify.plan.model.fields import AddedFields, Expr, Identifier, PlainText, Strict
from qualify.plan.model.nvrtc_options import DefineValue


class Mutation(AddedFields):
    _added = frozenset({"other", "length"})
    op: Literal["flip_bit", "set", "scale", "zero", "fill", "swap"]
    index: Expr = Field(default=0, description="Flat element index (flip_bit, set; swap: first slice).")
    bit: int = Field(default=0, ge=0, le=63)
    value: float = Field(default=0.0, description="set, scale, fill (every element).")
    other: Expr = Field(default=0, description="swap: start of the second slice.")
    length: Expr = Field(default=0, description="swap: elements in each slice.")


class Expectation(CaseSelector, AddedFields):
    """What a control must do to the fidelity gate in the selected cases (and outputs)."""

    _added = frozenset({"reason"})
    outputs: list[Identifier] | None = Field(default=None, description="None: every output.")
    outcome: Literal["pass", "fail"]
    reason: Annotated[PlainText, Field(max_length=1000)] | None = Field(
        default=None, description="Why the control must behave so here (a 'pass' most needs one)."
    )


class InputControl(AddedFields):
    _added = frozenset({"expect"})
    kind: Literal["input"]
    name: Identifier
    buffer: Identifier
    mutation: Mutation
    cases: list[str] | None = None
    expect: list[Expectation] = Field(
        default_factory=list,
        description="Per case and output; the first matching entry rules; none matching: 'fail'.",
    )


class BuildControl(AddedFields):
    _added = frozenset({"expect"})
    kind: Literal["build"]
    name: Identifier
    defines: dict[Identifier, DefineValue] = Field(min_length=1)
    cases: list[str] | None = None
    expect: list[Expectation] = Field(default_factory=list)


class CallableControl(AddedFields):
    """The Python counterpart of a build control: the candidate callable is called with
    `control=<name>` (it takes a `control` parameter) and must then produce a wrong result."""

    _added = frozenset({"expect"})
    kind: Literal["callable"]
    name: Identifier
    cases: list[str] | None = None
    expect: list[Expectation] = Field(default_factory=list)


NegativeControl = Annotated[Union[InputControl, BuildControl, CallableControl], Field(discriminator="kind")]


class Controls(Strict):
    aa: bool = Field(default=True, description="Run base against itself; it must come out 'same'.")
    negative: list[NegativeControl] = Field(
        default_factory=list, description="Candidate mutations that must fail the fidelity gate."
    )
