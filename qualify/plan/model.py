"""Pydantic models of a qualification plan (schema version 1).

A plan is written before any number is seen. Every model is frozen and rejects unknown fields, so a
typo in a plan is an error rather than a silently ignored control. Cross-field rules that need the
whole plan (names that must exist, budgets that must hold one ABBA block) live in `Plan`'s
validators; rules that need files (sources exist, kernels are declared in them) live in
`qualify.plan.load`.

Field-by-field documentation: docs/plan.md (kept next to the generated JSON Schema).
"""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

from qualify import expr
from qualify.dtypes import DType

SCHEMA_VERSION = 1

# Opt-in dynamic shared memory per block, by architecture (CUDA C++ Programming Guide,
# "Technical Specifications per Compute Capability"). An architecture missing here is refused:
# qualify cannot say whether a launch fits it.
MAX_SHARED_PER_BLOCK = {
    "sm_75": 65_536,
    "sm_80": 166_912,
    "sm_86": 101_376,
    "sm_87": 166_912,
    "sm_89": 101_376,
    "sm_90": 232_448,
    "sm_100": 232_448,
    "sm_103": 232_448,
    "sm_120": 101_376,
    "sm_121": 101_376,
}
MAX_THREADS_PER_BLOCK = 1024
MAX_WARMUP = 10_000  # warm-up settles clocks and caches within tens of launches; more is a typo


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class AddedFields(Strict):
    """A model that gained fields after plans were frozen under schema version 1.

    The plan's digest hashes its dump, defaults included; the fields named in `_added` are left out
    of the dump while they hold their defaults, so a plan frozen before they existed keeps its digest
    (and its records stay checkable) while a plan that sets them is bound to them.
    """

    _added: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_added_defaults(self, handler):
        data = handler(self)
        for name in self._added:
            if name in data and getattr(self, name) == type(self).model_fields[name].get_default(
                call_default_factory=True
            ):
                del data[name]
        return data


def _check_expr(value: object) -> object:
    if isinstance(value, str):
        try:
            expr.parse(value)
        except expr.ExprError as exc:
            raise ValueError(str(exc)) from None
    return value


Expr = Annotated[
    Union[int, str],
    AfterValidator(_check_expr),
    Field(description="An integer, or an arithmetic expression over the workload parameters"),
]
FloatExpr = Annotated[
    Union[float, int, str],
    AfterValidator(_check_expr),
    Field(description="A number, or an arithmetic expression over the workload parameters"),
]
ExprText = Annotated[str, AfterValidator(_check_expr)]
Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=64)]


def _plain_text(value: str) -> str:
    """One line of visible text: no newline, tab, escape (ESC starts every terminal sequence) or
    other control or format character (a bidirectional override can reorder what is shown).

    Labels reach the README, the terminal and one-line errors; a newline there can forge a line of
    its own (a verdict, a "frozen: yes"), an escape sequence can rewrite the screen.
    """
    for i, ch in enumerate(value):
        if not ch.isprintable():
            raise ValueError(f"character {i} is {ascii(ch)}: labels and paths are one line of plain text")
    return value


PlainText = Annotated[str, AfterValidator(_plain_text)]
Label = Annotated[PlainText, Field(min_length=1, max_length=200)]
Prose = Annotated[PlainText, Field(min_length=1, max_length=2000)]
PathText = Annotated[PlainText, Field(min_length=1, max_length=1024)]


# NVRTC options a plan may add, by canonical name (two dashes). The list is closed on purpose:
# every option left out either names a file NVRTC reads (headers, precompiled headers) or writes
# (timing reports, traces, PCH files), or is set by qualify itself (architecture, include paths,
# the trace it reads its dependency list from). A value is checked by the rule beside its name.
_BOOL = ("true", "false")
_OPTION_VALUES: dict[str, object] = {
    "use_fast_math": None,
    "extra-device-vectorization": None,
    "restrict": None,
    "device-int128": None,
    "disable-warnings": None,
    "default-device": None,
    "ftz": _BOOL,
    "prec-sqrt": _BOOL,
    "prec-div": _BOOL,
    "fmad": _BOOL,
    "maxrregcount": "count",
    "jump-table-density": "count",
    "diag-suppress": "numbers",
    "diag-error": "numbers",
    "diag-warn": "numbers",
    "std": ("c++11", "c++14", "c++17", "c++20"),
    "ptxas-options": ("-v", "-O0", "-O1", "-O2", "-O3", "--warn-on-spills", "--warn-on-local-memory-usage",
                      "--allow-expensive-optimizations=true", "--allow-expensive-optimizations=false"),
}  # fmt: skip
# Short spellings NVRTC accepts for the options above (one dash or two reach the same name).
_OPTION_ALIASES = {"w": "disable-warnings", "Xptxas": "ptxas-options"}
_OPTION_SHAPE = re.compile(r"^--?([A-Za-z][A-Za-z0-9_+\-]*)(?:=(.*))?$", re.DOTALL)


def normalize_option(text: str) -> str:
    """An NVRTC option in canonical form (`--name` or `--name=value`), or ValueError saying why it
    is not allowed. Surrounding whitespace is dropped and `--name value` becomes `--name=value`
    first, so a leading space or a space-separated value cannot pass for another option."""
    stripped = text.strip()
    parts = stripped.split(None, 1)
    if len(parts) == 2 and "=" not in parts[0]:
        stripped = f"{parts[0]}={parts[1]}"
    if re.match(r"^--?(I|isystem|system-include)", stripped):
        raise ValueError(f"{text!r}: set architectures and include_dirs in their fields")
    m = _OPTION_SHAPE.match(stripped)
    if m is None:
        raise ValueError(f"{text!r} is not an NVRTC option (-name or --name=value)")
    name, value = m.group(1), m.group(2)
    name = _OPTION_ALIASES.get(name, name)
    lowered = name.lower()
    if lowered.startswith(("arch", "gpu-architecture", "gpu_architecture")) or lowered in ("i", "include-path"):
        raise ValueError(f"{text!r}: set architectures and include_dirs in their fields")
    if lowered in ("include", "pre-include", "preinclude") or "include" in lowered:
        # NVRTC would read that header from anywhere on the host, outside the lock
        raise ValueError(f"{text!r}: a pre-included header is not frozen; #include it in the source")
    if name not in _OPTION_VALUES:
        raise ValueError(f"{text!r} is not among the NVRTC options a plan may set (docs/plan.md lists "
                         "them); none that reads or writes a file is allowed")
    rule = _OPTION_VALUES[name]
    if rule is None:
        if value is not None:
            raise ValueError(f"{text!r}: --{name} takes no value")
        return f"--{name}"
    if value is None or value == "":
        raise ValueError(f"{text!r}: --{name} needs a value")
    if rule == "count":
        ok = value.isascii() and value.isdigit() and 0 < int(value) <= 65_535
    elif rule == "numbers":
        ok = all(v.isascii() and v.isdigit() and len(v) <= 6 for v in value.split(","))
    else:
        ok = value in rule  # type: ignore[operator]
    if not ok:
        raise ValueError(f"{text!r}: {value!r} is not a value --{name} accepts here")
    return f"--{name}={value}"


def _check_option(value: str) -> str:
    normalize_option(value)
    return value


NvrtcOption = Annotated[str, Field(max_length=200), AfterValidator(_check_option)]
DefineValue = Annotated[Union[int, Annotated[PlainText, Field(max_length=200)]], Field(union_mode="left_to_right")]



# ---------------------------------------------------------------------------------------------
# identity and hardware


class Revisions(Strict):
    base: Label = Field(description="Label of the base revision (a git sha, a tag, 'tile-64').")
    candidate: Label = Field(description="Label of the candidate revision.")


class DeviceSpec(Strict):
    name: Annotated[PlainText, Field(max_length=200)] | None = Field(
        default=None,
        description="fnmatch pattern for the device name as CUDA reports it ('NVIDIA H200*').",
    )
    compute_capability: str | None = Field(
        default=None, pattern=r"^\d{1,2}\.\d$", description="'9.0' for sm_90."
    )

    @model_validator(mode="after")
    def _one_needed(self) -> DeviceSpec:
        if self.name is None and self.compute_capability is None:
            raise ValueError("give a name pattern, a compute_capability, or both")
        return self


class Hardware(Strict):
    devices: list[DeviceSpec] = Field(
        min_length=1, description="Devices the plan is for; others are refused unless exploratory."
    )
    architectures: list[str] = Field(
        min_length=1, description="Architectures every CUDA arm is compiled for ('sm_90')."
    )

    @field_validator("architectures")
    @classmethod
    def _known_arch(cls, value: list[str]) -> list[str]:
        for arch in value:
            if arch not in MAX_SHARED_PER_BLOCK:
                known = ", ".join(MAX_SHARED_PER_BLOCK)
                raise ValueError(f"unsupported architecture {arch!r} (supported: {known})")
        if len(set(value)) != len(value):
            raise ValueError("architectures are listed twice")
        return value


# ---------------------------------------------------------------------------------------------
# workload

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


Init = Annotated[
    Union[NormalInit, UniformInit, ConstantInit, ZerosInit, GoldenInit], Field(discriminator="kind")
]


class Buffer(Strict):
    name: Identifier
    dtype: DType
    shape: list[Expr] = Field(min_length=1, max_length=8)
    role: Literal["input", "output", "scratch"]
    init: Init | None = Field(
        default=None,
        description="Inputs: required. Outputs and scratch are poisoned before every launch.",
    )


    @model_validator(mode="after")
    def _init_for_inputs(self) -> Buffer:
        if self.role == "input" and self.init is None:
            raise ValueError("an input buffer needs init")
        if self.role != "input" and self.init is not None:
            raise ValueError("only inputs take init (outputs and scratch are poisoned)")
        return self


class BufferArg(Strict):
    kind: Literal["buffer"]
    name: Identifier
    offset: Expr = Field(default=0, description="Offset in elements from the buffer's start.")



class ScalarArg(Strict):
    kind: ScalarType
    value: FloatExpr



Arg = Annotated[Union[BufferArg, ScalarArg], Field(discriminator="kind")]


class Launch(Strict):
    grid: list[Expr] = Field(min_length=1, max_length=3)
    block: list[Expr] = Field(min_length=1, max_length=3)
    shared_bytes: Expr = Field(default=0, description="Dynamic shared memory per block.")
    args: list[Arg] = Field(min_length=1)



class Workload(Strict):
    params: dict[Identifier, Union[int, float]] = Field(
        default_factory=dict, description="Parameters fixed for every case."
    )
    cases: list[dict[Identifier, Union[int, float]]] = Field(
        min_length=1, description="Each case sets parameters ({'T': 512}); ids are 'T=512'."
    )
    buffers: list[Buffer] = Field(min_length=1)
    launch: Launch | None = Field(
        default=None, description="Kernel launch of CUDA arms (arms may override params)."
    )
    call: list[Arg] | None = Field(
        default=None,
        description="Arguments of shared-library entry points, the stream excluded (it goes last).",
    )


# ---------------------------------------------------------------------------------------------
# arms


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


# ---------------------------------------------------------------------------------------------
# schedule, budget, stop


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


# ---------------------------------------------------------------------------------------------
# acceptance and controls


class CaseSelector(Strict):
    cases: list[Annotated[PlainText, Field(max_length=1000)]] | None = Field(
        default=None, description="Case ids ('T=640')."
    )
    where: ExprText | None = Field(default=None, description="Expression over parameters ('T >= 640').")



class SpeedGate(CaseSelector):
    name: Identifier
    min_speedup_pct: float | None = Field(
        default=None, ge=0, lt=100,
        description="Candidate at least this much faster (median ratio). 0 to below 100: a negative "
        "bound would be a regression allowance (max_regression_pct says that), 100 % needs zero time.",
    )
    max_regression_pct: float | None = Field(
        default=None, ge=0, description="Candidate at most this much slower."
    )
    every_trial: bool = Field(default=True, description="The gate must hold in each trial.")

    @model_validator(mode="after")
    def _one_bound(self) -> SpeedGate:
        if self.min_speedup_pct is None and self.max_regression_pct is None:
            raise ValueError("give min_speedup_pct or max_regression_pct")
        return self


class ExactSelector(CaseSelector):
    outputs: list[Identifier] | None = Field(
        default=None, description="Outputs held bit-exact in the selected cases (None: all)."
    )


class ToleranceRule(CaseSelector):
    """The bound of the selected cases' selected outputs; the first rule that matches rules.

    `atol_quanta` states the absolute part in the unit a reviewer reasons in: k representable
    steps of the output's dtype at the golden's RMS magnitude for that output and case, so a bound
    fitted to values near 1 does not turn meaningless for an output whose values sit near 1e-3."""

    outputs: list[Identifier] | None = Field(default=None, description="None: every output.")
    bit_exact: bool = Field(default=False, description="Hold the selection bit for bit (no rtol, no atol).")
    rtol: float | None = Field(default=None, ge=0, description="|err| <= atol + rtol·|expected|")
    atol: float | None = Field(default=None, ge=0)
    atol_quanta: float | None = Field(
        default=None, gt=0, description="atol as k quanta of the output's dtype at the golden's RMS magnitude."
    )

    @model_validator(mode="after")
    def _one_bound(self) -> ToleranceRule:
        if self.bit_exact:
            if self.rtol is not None or self.atol is not None or self.atol_quanta is not None:
                raise ValueError("a bit_exact rule takes no rtol, atol or atol_quanta")
        elif self.rtol is None or (self.atol is None) == (self.atol_quanta is None):
            raise ValueError("give rtol and one of atol or atol_quanta (or bit_exact)")
        return self


class Calibration(Strict):
    """Mutation calibration: the candidate's outputs perturbed by k quanta on n elements (seeded)."""

    ceiling_quanta: int = Field(ge=1, le=2**20, description="Largest k tried (k doubles from 1).")
    elements: list[int] = Field(min_length=1, max_length=8, description="Values of n tried.")
    seed: int = Field(default=0, ge=0, lt=2**63)

    @field_validator("elements")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if any(n < 1 for n in value) or len(set(value)) != len(value):
            raise ValueError("element counts must be distinct and at least 1")
        return sorted(value)


class Fidelity(AddedFields):
    _added = frozenset({"atol", "rtol", "rel_floor", "exact", "golden_script", "calibration", "tolerances"})
    mode: Literal["bytes", "ulp", "abs", "rel", "tolerance"] = "bytes"
    bound: float | None = Field(default=None, ge=0, description="ulp count or tolerance.")
    atol: float | None = Field(default=None, ge=0, description="tolerance: |err| <= atol + rtol·|expected|")
    rtol: float | None = Field(default=None, ge=0)
    rel_floor: float = Field(
        default=1e-6, gt=0, description="Relative error is reported only where |expected| reaches this."
    )
    exact: list[ExactSelector] = Field(
        default_factory=list, description="Cases (and outputs) held bit-exact whatever the mode."
    )
    tolerances: list[ToleranceRule] = Field(
        default_factory=list,
        description="Per case and output bounds, first match rules; unmatched outputs keep atol and rtol.",
    )
    against: Literal["base", "float64", "golden"] = "base"
    golden: PathText | None = Field(default=None, description="Golden file, relative to the plan.")
    golden_script: PathText | None = Field(
        default=None, description="The script that wrote the golden, relative to the plan; frozen with it."
    )
    reference: PathText | None = Field(
        default=None, description="float64 reference: 'file.py:function', relative to the plan."
    )
    calibration: Calibration | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Fidelity:
        if self.mode == "bytes" and self.bound is not None:
            raise ValueError("mode 'bytes' takes no bound")
        if self.mode == "tolerance":
            if self.bound is not None or self.atol is None or self.rtol is None:
                raise ValueError("mode 'tolerance' takes atol and rtol, not bound")
        elif self.atol is not None or self.rtol is not None:
            raise ValueError("atol and rtol belong to mode 'tolerance'")
        elif self.mode != "bytes" and self.bound is None:
            raise ValueError(f"mode {self.mode!r} needs a bound")
        if (self.against == "golden") != (self.golden is not None):
            raise ValueError("golden is required with against 'golden' and only then")
        if self.against != "golden" and (self.mode == "tolerance" or self.exact or self.calibration
                                         or self.tolerances):  # fmt: skip
            # the base-arm comparison has no counts to judge them by: they would pass vacuously
            raise ValueError("mode 'tolerance', exact, tolerances and calibration need against 'golden'")
        if self.tolerances and self.mode != "tolerance":
            raise ValueError("tolerances belong to mode 'tolerance'")
        if self.golden_script is not None and self.golden is None:
            # optional with a golden (older plans have none); when given it is frozen with the golden
            raise ValueError("golden_script is the script that wrote the golden: give the golden too")
        if (self.against == "float64") != (self.reference is not None):
            raise ValueError("reference is required with against 'float64' and only then")
        if self.against == "float64" and self.mode == "bytes":
            raise ValueError("a float64 reference needs a tolerance mode, not 'bytes'")
        return self


class SanitizerCheck(Strict):
    tool: Literal["memcheck", "racecheck", "initcheck", "synccheck"]
    cases: list[str] = Field(min_length=1)
    timeout_seconds: float = Field(default=300, gt=0)


class Acceptance(Strict):
    gates: list[SpeedGate] = Field(default_factory=list)
    fidelity: Fidelity = Field(default_factory=Fidelity)
    sanitizer: list[SanitizerCheck] = Field(default_factory=list)


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


NegativeControl = Annotated[Union[InputControl, BuildControl], Field(discriminator="kind")]


class Controls(Strict):
    aa: bool = Field(default=True, description="Run base against itself; it must come out 'same'.")
    negative: list[NegativeControl] = Field(
        default_factory=list, description="Candidate mutations that must fail the fidelity gate."
    )


# ---------------------------------------------------------------------------------------------


class Seeds(Strict):
    generator: Literal["pcg64"] = "pcg64"
    base: int = Field(ge=0, lt=2**63, description="Every input derives from this seed.")


class Plan(Strict):
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

    @model_validator(mode="after")
    def _golden_inputs_need_golden(self) -> Plan:
        for buffer in self.workload.buffers:
            if isinstance(buffer.init, GoldenInit) and self.acceptance.fidelity.golden is None:
                raise ValueError(f"buffer {buffer.name!r} takes its values from a golden, and the plan names none")
        return self

    def arm(self, side: str) -> CudaArm | LibraryArm:
        return getattr(self.arms, side)


ARM_SIDES = ("base", "candidate")
