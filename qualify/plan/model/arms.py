"""The two arms a plan compares, base and candidate: a CUDA kernel or a shared-library entry point each."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

from qualify.plan.model.fields import Identifier, PathText, Strict
from qualify.plan.model.nvrtc_options import DefineValue, NvrtcOption

# the two sides of every comparison, in the order results and records list them
ARM_SIDES = ("base", "candidate")


class CudaArm(Strict):
    kind: Literal["cuda"]
    source: PathText = Field(description="CUDA source, relative to the plan file.")
    kernel: str = Field(
        min_length=1,
        max_length=200,
        pattern=r"^[A-Za-z_][A-Za-z0-9_:]*(<[A-Za-z0-9_:, +\-*()]*>)?$",
        description="Kernel name; a template instantiation is allowed ('attention<64>').",
    )
    params: dict[Identifier, Union[int, float]] = Field(
        default_factory=dict, description="Parameters this arm sets (the tile, say)."
    )
    defines: dict[Identifier, DefineValue] = Field(default_factory=dict)
    options: list[NvrtcOption] = Field(
        default_factory=list,
        description="Extra NVRTC options, from a closed list (docs/plan.md): none that reads or writes a file.",
    )
    include_dirs: list[PathText] = Field(default_factory=list, description="Relative to the plan file.")


class LibraryArm(Strict):
    kind: Literal["library"]
    library: PathText | None = Field(
        default=None,
        description="Shared library, relative to the plan file; None: given to `qualify compare`.",
    )
    symbol: Identifier = Field(description="Exported C entry point; it returns an int status.")
    signature: list[Literal["ptr", "i32", "u32", "i64", "u64", "f32", "f64"]] = Field(
        description="C types of the entry point's arguments before the trailing stream."
    )
    params: dict[Identifier, Union[int, float]] = Field(default_factory=dict)
    abi_symbol: Identifier | None = Field(
        default=None, description="A function returning an int ABI version that must match."
    )
    abi_version: int | None = None
    error_symbol: Identifier | None = Field(
        default=None, description="A function mapping a status code to a message (const char*)."
    )


Arm = Annotated[Union[CudaArm, LibraryArm], Field(discriminator="kind")]


class Arms(Strict):
    base: Arm
    candidate: Arm
