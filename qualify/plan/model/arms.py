"""The two arms a plan compares, base and candidate: a CUDA kernel, a shared-library entry point or a
Python callable each."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Union

from pydantic import Field, model_validator

from qualify.dtypes import DType
from qualify.plan.model.fields import AddedFields, Expr, Identifier, PathText, Strict
from qualify.plan.model.nvrtc_options import DefineValue, NvrtcOption
from qualify.plan.model.workload import Arg

KERNEL_NAME = r"^[A-Za-z_][A-Za-z0-9_:]*(<[A-Za-z0-9_:, +\-*()]*>)?$"
MAX_LAUNCHES = 16  # launches of one arm's sequence


class ArmLaunch(Strict):
    """One launch of an arm that declares its own sequence: a kernel of the arm's source and its
    geometry and arguments, in the arm's own parameters."""

    kernel: str = Field(min_length=1, max_length=200, pattern=KERNEL_NAME, description="A kernel of the arm's source.")
    grid: list[Expr] = Field(min_length=1, max_length=3)
    block: list[Expr] = Field(min_length=1, max_length=3)
    shared_bytes: Expr = Field(default=0, description="Dynamic shared memory per block.")
    args: list[Arg] = Field(min_length=1)


class ScratchBuffer(Strict):
    """A buffer only this arm allocates: what one launch of its sequence writes and a later one
    reads. Poisoned before each call like outputs, never compared."""

    name: Identifier
    dtype: DType
    shape: list[Expr] = Field(min_length=1, max_length=8)


# the two sides of every comparison, in the order results and records list them
Side = Literal["base", "candidate"]
ARM_SIDES: tuple[Side, Side] = ("base", "candidate")


class CudaArm(AddedFields):
    _added: ClassVar[frozenset[str]] = frozenset({"launches", "scratch"})

    kind: Literal["cuda"]
    source: PathText = Field(description="CUDA source, relative to the plan file.")
    kernel: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=KERNEL_NAME,
        description=(
            "Kernel name, launched as workload.launch says; a template instantiation is allowed "
            "('attention<64>'). Leave it out when the arm declares `launches`."
        ),
    )
    launches: list[ArmLaunch] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_LAUNCHES,
        description=(
            "The arm's own sequence of launches, in order, instead of `kernel` and workload.launch: "
            "one call of the arm enqueues all of them, timed as one."
        ),
    )
    scratch: list[ScratchBuffer] = Field(
        default_factory=list,
        description="Buffers only this arm allocates (between its launches); never compared.",
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

    @model_validator(mode="after")
    def _kernel_or_launches(self) -> CudaArm:
        if (self.kernel is None) == (self.launches is None):
            raise ValueError("a CUDA arm names either `kernel` (launched by workload.launch) or its own `launches`")
        if self.scratch and self.launches is None:
            raise ValueError("`scratch` buffers belong to an arm with its own `launches`")
        return self

    @property
    def kernels(self) -> tuple[str, ...]:
        """The kernels the arm launches, in launch order (repeats kept)."""
        if self.launches is not None:
            return tuple(launch.kernel for launch in self.launches)
        assert self.kernel is not None  # _kernel_or_launches: one of the two
        return (self.kernel,)


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


# 'kernels/triton/softmax.py:softmax_online': a file of the repository, then the function's name
CALLABLE = r"^[^:\x00]+\.py:[A-Za-z_][A-Za-z0-9_]*$"


class PythonArm(Strict):
    """A Python function (Triton, CuTe DSL, a torch op) that enqueues its work on the stream it is
    given. It runs only in trial child processes; `plan check` parses it and never imports it."""

    kind: Literal["python"]
    callable: str = Field(
        max_length=400,
        pattern=CALLABLE,
        description=(
            "'file.py:function', the file relative to the plan file and inside the repository; it and "
            "every local module it imports are frozen in the lock. The function takes, by name, any of "
            "the workload's buffers (tensors over qualify's own allocations), the case's parameters, "
            "`stream` and `control`."
        ),
    )
    params: dict[Identifier, Union[int, float]] = Field(
        default_factory=dict, description="Parameters this arm sets, passed to the function by name (BLOCK, num_warps)."
    )
    graph: bool = Field(
        default=False,
        description=(
            "Capture one call in a CUDA graph (after an eager warm-up call) and time the graph's "
            "replays: the interpreter's cost per call leaves the timed work."
        ),
    )
    autotune: Literal["forbid", "warmup"] = Field(
        default="forbid",
        description=(
            "'forbid': the module must hold no Triton autotuner (configurations are pinned by params); "
            "'warmup': autotuning runs in the first, untimed call and the configuration each autotuner "
            "chose is recorded in the trial."
        ),
    )

    @property
    def file(self) -> str:
        return self.callable.rsplit(":", 1)[0]

    @property
    def function(self) -> str:
        return self.callable.rsplit(":", 1)[1]


Arm = Annotated[Union[CudaArm, LibraryArm, PythonArm], Field(discriminator="kind")]


class Arms(Strict):
    base: Arm
    candidate: Arm
