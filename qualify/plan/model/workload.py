"""The workload: parameters, cases, buffers and how they are filled, the launch or call, and the seeds."""

from __future__ import annotations

import math
from typing import Annotated, ClassVar, Literal, Union

from pydantic import Field, model_validator

from qualify.dtypes import FLOATS, DType, Overflow
from qualify.plan.model.fields import AddedFields, Expr, FloatExpr, Identifier, Strict

ScalarType = Literal["i32", "u32", "i64", "u64", "f32", "f64"]

MAX_BUFFER_BYTES = 64 * 2**30  # no single test buffer needs more than 64 GiB


class NormalInit(Strict):
    kind: Literal["normal"]
    mean: float = 0.0
    std: float = Field(default=1.0, gt=0)


class UniformInit(Strict):
    kind: Literal["uniform"]
    low: float = -1.0
    high: float = 1.0

    @model_validator(mode="after")
    def _ordered(self) -> UniformInit:
        if not self.low < self.high:
            raise ValueError("low must be below high")
        if not math.isfinite(self.high - self.low):
            # numpy draws low + (high - low)·u: a span beyond float64 cannot be drawn at all
            raise ValueError(f"high - low ({self.high!r} - {self.low!r}) exceeds float64; keep the span below 1.7e308")
        return self


class ConstantInit(Strict):
    kind: Literal["constant"]
    value: float = 0.0


class ZerosInit(Strict):
    kind: Literal["zeros"]


class GoldenInit(Strict):
    """The input's values are the golden file's tensor '<case id>/<buffer>' (a mask, positions: inputs
    no random init can express). Needs acceptance.fidelity.golden."""

    kind: Literal["golden"]


Init = Annotated[Union[NormalInit, UniformInit, ConstantInit, ZerosInit, GoldenInit], Field(discriminator="kind")]


class Buffer(AddedFields):
    _added: ClassVar[frozenset[str]] = frozenset({"overflow"})

    name: Identifier
    dtype: DType
    shape: list[Expr] = Field(min_length=1, max_length=8)
    role: Literal["input", "output", "scratch"]
    init: Init | None = Field(
        default=None,
        description="Inputs: required. Outputs and scratch are poisoned before every launch.",
    )
    overflow: Overflow | None = Field(
        default=None,
        description=(
            "Float inputs: a generated value beyond the dtype's largest finite one is clamped to it "
            "('saturate', CUDA's __NV_SATFINITE) or cast as it falls ('nonfinite': infinity, NaN for "
            "e4m3, the largest finite value for fp6/fp4). Unset: 'nonfinite'."
        ),
    )

    @model_validator(mode="after")
    def _init_for_inputs(self) -> Buffer:
        if self.role == "input" and self.init is None:
            raise ValueError("an input buffer needs init")
        if self.role != "input" and self.init is not None:
            raise ValueError("only inputs take init (outputs and scratch are poisoned)")
        if self.overflow is not None and (self.role != "input" or self.dtype not in FLOATS):
            raise ValueError("overflow applies to float inputs only")
        return self


class BufferArg(AddedFields):
    _added: ClassVar[frozenset[str]] = frozenset({"reinterpret"})

    kind: Literal["buffer"]
    name: Identifier
    offset: Expr = Field(default=0, description="Offset in elements from the buffer's start.")
    reinterpret: bool = Field(
        default=False,
        description=(
            "The kernel reads this buffer's bytes as another element type on purpose (fp8 bytes "
            "through `const uint8_t*`, floats through `const int*`): `plan check` then does not hold "
            "the buffer's dtype to the pointee type of the parameter it is passed to. Unset, a dtype "
            "other than the pointee's (f8e4m3 to `const float*`) is refused."
        ),
    )


class ScalarArg(Strict):
    kind: ScalarType
    value: FloatExpr


Arg = Annotated[Union[BufferArg, ScalarArg], Field(discriminator="kind")]


class Launch(Strict):
    grid: list[Expr] = Field(min_length=1, max_length=3)
    block: list[Expr] = Field(min_length=1, max_length=3)
    shared_bytes: Expr = Field(default=0, description="Dynamic shared memory per block.")
    args: list[Arg] = Field(min_length=1)


class Workload(AddedFields):
    _added: ClassVar[frozenset[str]] = frozenset({"bytes_moved", "flops"})

    params: dict[Identifier, Union[int, float]] = Field(
        default_factory=dict, description="Parameters fixed for every case."
    )
    cases: list[dict[Identifier, Union[int, float]]] = Field(
        min_length=1, description="Each case sets parameters ({'T': 512}); ids are 'T=512'."
    )
    buffers: list[Buffer] = Field(min_length=1)
    launch: Launch | None = Field(default=None, description="Kernel launch of CUDA arms (arms may override params).")
    call: list[Arg] | None = Field(
        default=None,
        description="Arguments of shared-library entry points, the stream excluded (it goes last).",
    )
    bytes_moved: Expr | None = Field(
        default=None,
        description="DRAM bytes one launch (or call) reads and writes, for throughput; default: each "
        "input buffer read once and each output buffer written once (scratch not counted).",
    )
    flops: FloatExpr | None = Field(
        default=None,
        description="Floating-point operations of one launch (or call), for TFLOP/s; default: not stated.",
    )


class Seeds(Strict):
    generator: Literal["pcg64"] = "pcg64"
    base: int = Field(ge=0, lt=2**63, description="Every input derives from this seed.")
