"""The results of a qualification (results.json), schema version 1.

History of the format (bump RESULTS_VERSION on any incompatible change and say what changed here):
  1 — first version: trials with per-case timing summaries, parity, resources, controls; the
      verdict; raw samples live beside it in trials/<index>.npz. Optional fields added since,
      absent from trials made before them (results.json writes trials as their files hold them):
      a case's raw CUPTI `trace` and the `kernels` derived from it, the trial's `kernel_trace`,
      a case's `log_mean` and `log_sd`, and the record's `pooled` two-level statistics; the
      kernel trace's `version` 2 (traced calls placed like the samples, each call's draw kept, CUPTI
      compared with the samples: `deltas`, `timer_delta`, `sample_timers`); version 3 (traced as
      version 2, the same fields kept as evidence, but CUPTI's change neither judged nor printed).

Every statistic here is derived from the raw samples by `qualify.evaluate`; `qualify report
--check` recomputes them and refuses a results.json or README that disagrees.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field, model_validator

# the shared shapes and the kernel trace have modules of their own; their names stay importable here
from qualify.results.base import CaseClass as CaseClass
from qualify.results.base import CaseStats as CaseStats
from qualify.results.base import Model as Model
from qualify.results.base import Side as Side
from qualify.results.base import Status as Status
from qualify.results.base import VerdictStatus as VerdictStatus
from qualify.results.kernel_trace import CaseKernels as CaseKernels
from qualify.results.kernel_trace import DeviceLimits as DeviceLimits
from qualify.results.kernel_trace import KernelActivity as KernelActivity
from qualify.results.kernel_trace import KernelChange as KernelChange
from qualify.results.kernel_trace import KernelDelta as KernelDelta
from qualify.results.kernel_trace import KernelRow as KernelRow
from qualify.results.kernel_trace import KernelTrace as KernelTrace
from qualify.results.kernel_trace import SampleTimer as SampleTimer
from qualify.results.kernel_trace import TimerAgreement as TimerAgreement
from qualify.results.kernel_trace import TimerDelta as TimerDelta
from qualify.results.kernel_trace import TracedCall as TracedCall
from qualify.results.tolerance import CaseTolerance, ControlOutcome

RESULTS_VERSION: Final = 1


class DeviceInfo(Model):
    name: str
    uuid: str
    ordinal: int
    compute_capability: str
    arch: str
    sm_count: int
    l2_bytes: int
    max_shared_per_block_optin: int
    sm_clock_max_mhz: int | None = None
    mem_clock_max_mhz: int | None = None
    memory_bus_width_bits: int | None = Field(
        default=None, description="DRAM interface width; with the memory clock it gives the peak bandwidth"
    )
    driver_version: str
    cuda_driver_version: str
    pci_bus_id: str | None = None


class Provenance(Model):
    device: DeviceInfo
    planned: bool = Field(description="False when run with --exploratory on an unlisted device.")
    nvrtc_version: str
    cuda_bindings_version: str
    cccl_version: str | None = Field(default=None, description="the CCCL headers kernels compile against")
    compile_sandbox: str | None = Field(
        default=None, description='how NVRTC was confined: "landlock (ABI n)", or "none: <why>"'
    )
    qualify_version: str
    python_version: str
    numpy_version: str
    git_revision: str | None
    git_dirty: bool | None
    dirty_paths: list[str] | None = Field(
        default=None,
        description="paths git reported changed when the trial ran (capped); None: not recorded",
    )
    dirty_frozen: list[str] | None = Field(
        default=None,
        description="those of dirty_paths the plan's lock covers (the plan, its lock, bound files); None: not recorded",
    )
    host: str
    command: list[str]


class ArmResources(Model):
    registers: int
    static_shared_bytes: int
    dynamic_shared_bytes: int
    local_bytes: int
    max_threads_per_block: int
    threads_per_block: int
    blocks_per_sm: int
    warps_per_sm: int


class TimingSummary(Model):
    """Of one arm in one case and trial; floor-corrected nanoseconds per launch."""

    samples: int
    warmup: int
    median_ns: float
    q1_ns: float
    q3_ns: float
    min_ns: float
    max_ns: float
    throttled_samples: int
    mean_sm_clock_mhz: float | None


class PooledStats(Model):
    """A case on one device over its complete trials, each trial one process: a two-level interval
    in which the spread between processes enters beside the spread of blocks within each
    (qualify.evaluate.pooled)."""

    ratio: float = Field(description="candidate / base: exp of the mean over trials of their mean block log-ratios")
    ci_low: float | None = Field(description="95 % two-level t-interval; None where a trial has no interval")
    ci_high: float | None
    delta_pct: float = Field(description="(ratio - 1) * 100: negative is faster")
    case_class: CaseClass
    reason: str
    trials: int = Field(description="complete trials pooled, each one process")
    df: float | None = Field(description="degrees of freedom (Welch-Satterthwaite over the two parts)")
    within_pct: float | None = Field(
        description="the within-trial part: a trial's standard error, "
        "expm1(sqrt(mean of the trials' squared standard errors)) in %"
    )
    between_pct: float | None = Field(
        description="the between-trial part: the spread of processes' "
        "true ratios, expm1(sqrt(b)) in %; None from one trial"
    )
    mde_pct: float | None = Field(
        description="minimum detectable change in % (95 % confidence, 80 % power) of the pooled estimate"
    )


class BufferParity(Model):
    buffer: str
    equal: bool
    elements: int
    differing_elements: int
    first_difference: int | None
    max_ulp: int | None = Field(description="largest distance in units in the last place")
    max_abs: float | None
    max_rel: float | None


class CaseTrial(Model):
    case: str
    input_sha256: dict[str, str]
    resources: dict[Side, ArmResources]
    timing: dict[Side, TimingSummary]
    stats: CaseStats
    aa: CaseStats | None = Field(description="base against itself, when the plan asks for it")
    parity: list[BufferParity]
    deterministic: dict[Side, bool]
    timed_outputs_match: bool = Field(description="outputs of timed launches equal the checked ones")
    stream_escape_ns: dict[Side, float] = Field(
        default_factory=dict,
        description="host wait for device idle after qualify's stream finished one call; large "
        "values mean work escaped the stream (an entry point launching on a stream of its own)",
    )
    stopped: dict[Literal["comparison", "aa"], str] = Field(
        default_factory=dict,
        description="why each pair's timing stopped (qualify.evaluate.stopping): target met, blocks "
        "done, block cap, sample cap or wall cap",
    )
    tolerance: CaseTolerance | None = Field(
        default=None,
        description="plans with a golden: both arms' parity counts against it and the "
        "gate's resolution (absent otherwise)",
    )
    trace: dict[Side, list[TracedCall]] | None = Field(
        default=None,
        description="raw CUPTI trace of schedule.traced_calls calls per arm, taken "
        "after the case's timing (absent when tracing was off or unavailable)",
    )
    kernels: CaseKernels | None = Field(
        default=None, description="derived from `trace`: kernel inventory, attribution, timer agreement"
    )
    placements: dict[str, Any] | None = Field(
        default=None,
        description="the case's pool of buffer placements as drawn (qualify.run.placement: "
        "count requested and used, granularity, each placement's spacer and offsets, why fewer); the "
        "samples file holds which placement each sample used (absent in trials made before pools)",
    )
    placement_spread_pct: list[float] | None = Field(
        default=None,
        description="derived: the comparison's change in % on each placement, in "
        "placement order (qualify.evaluate.placements); absent with one placement",
    )


class LibraryInfo(Model):
    path: str
    sha256: str
    symbol: str
    abi_version: int | None


class LaunchedCode(Model):
    """One launch of an arm as its machine code: the kernel and what its identity holds
    (qualify.build.machine_code.launched)."""

    name: str = Field(description="the kernel as launched (its lowered name)")
    shown: str | None = Field(default=None, description="the name demangled, as the record shows it")
    digest: str = Field(description="the digest of the kernel's code, its callees and the module's facts")
    functions: list[str] = Field(description="the functions that digest holds, the kernel first")


class CompiledCode(Model):
    """One compiled kernel a Python arm's JIT wrote (a .cubin of Triton's cache)."""

    name: str = Field(description="the file's path inside the arm's cache folder")
    sha256: str


class PythonArmInfo(Model):
    """What a Python arm ran with (qualify/run/python_arm.py): the callable, the packages it used,
    what its JIT compiled and chose, and what one call costs the host."""

    callable: str
    graph: bool = Field(description="timed as replays of a CUDA graph captured from one call, not eager calls")
    packages: dict[str, str] = Field(
        default_factory=dict, description="installed distributions the arm's modules import, with their versions"
    )
    first_call_s: float | None = Field(
        default=None,
        description="wall time of the arm's first call (JIT compile, autotuning, first launch), "
        "before and apart from timing",
    )
    null_call_ns: float | None = Field(
        default=None,
        description="median host time of calling a function that does nothing, through the same path "
        "(stream scope, keyword arguments): the interpreter's share of every eager call",
    )
    call_ns: float | None = Field(
        default=None, description="median host time of one call of the arm (enqueue only) after warm-up"
    )
    cubins: list[CompiledCode] = Field(default_factory=list, description="the kernels its JIT compiled, digested")
    autotuned: dict[str, str] = Field(
        default_factory=dict, description="each Triton autotuner in its modules: the configuration it chose"
    )


class CodeIdentity(Model):
    """Whether both arms run the same machine code (qualify/run/code_identity.py)."""

    status: Literal["identical", "differs", "unknown"]
    arms: Literal["nvrtc", "library", "python"] = Field(
        description="compiled by qualify's NVRTC, embedded in the libraries' fat binaries, or the "
        "cubins Python arms' JIT compiled"
    )
    arch: str = Field(
        description="the architecture compared: the exact target NVRTC compiled (sm_90a where the plan "
        "asks for arch-specific code), the device's for library arms"
    )
    digests: dict[Side, str] = Field(
        default_factory=dict,
        description="each arm's machine-code digest: of its whole module (scope 'module'), or of the "
        "digests of what it launches, in launch order (scope 'launched')",
    )
    scope: Literal["module", "launched"] = Field(
        default="module",
        description="'module': each arm's whole module compared (library arms, and NVRTC records "
        "made before the launched functions were); 'launched': the functions each launch executes",
    )
    launched: dict[Side, list[LaunchedCode]] = Field(
        default_factory=dict, description="scope 'launched': per arm, each launch's code in launch order"
    )
    functions: int = Field(default=0, description="functions (kernels and device functions) compared")
    differences: list[str] = Field(
        default_factory=list,
        description="what differs, per function: the parts and the first differing instruction's offset",
    )
    reason: str | None = Field(default=None, description="why the status is unknown")
    launches_match: bool | None = Field(
        default=None,
        description="the arms launch the same kernels with "
        "the same grid, block, shared memory and arguments in every case; "
        "None when that is not known (library arms without a kernel inventory)",
    )
    free_aa: bool = Field(
        default=False,
        description="identical code and identical launches: the candidate "
        "is the base by construction and the trial is an A/A",
    )

    @model_validator(mode="after")
    def _compared_code_names_both_digests(self) -> CodeIdentity:
        """Code that was compared (identical or differs) was compared by its two digests: a
        record without them states a comparison nothing in it supports."""
        if self.status != "unknown" and set(self.digests) != {"base", "candidate"}:
            raise ValueError(f"code {self.status!r} needs both arms' digests (base and candidate)")
        if self.status != "unknown" and self.scope == "launched" and set(self.launched) != {"base", "candidate"}:
            raise ValueError(f"code {self.status!r} of launched functions needs both arms' launches")
        return self


class ControlResult(Model):
    name: str
    kind: Literal["input", "build", "callable"]
    case: str
    caught: bool = Field(description="True when the fidelity gate failed, as it must")
    differing_elements: int


class SanitizerResult(Model):
    tool: Literal["memcheck", "racecheck", "initcheck", "synccheck"]
    case: str
    side: Side
    status: Literal["clean", "findings", "timeout", "fault", "error"]
    errors: int | None
    exit_code: int | None
    summary: list[str] = Field(description="the tool's summary lines")
    excerpt: list[str] = Field(description="first lines of the first findings")
    seconds: float


class Failure(Model):
    kind: Literal["fidelity", "fault", "timeout", "budget", "interrupted", "error"]
    case: str | None = None
    side: Side | None = None
    message: str


class TrialCost(Model):
    wall_s: float = Field(description="the trial's wall time, admission to trial file")
    gpu_busy_s: float = Field(description="sum of every timed window in the samples file")
    busy_fraction: float = Field(description="gpu_busy_s / wall_s")
    stages_s: dict[str, float] = Field(
        description="wall time per engine stage (build, preflight, inputs, fidelity, controls, timing, sanitizer)"
    )


class Trial(Model):
    index: int
    status: Status
    plan_digest: str
    started_at: str
    ended_at: str
    provenance: Provenance
    timer: dict[str, float | int | str] = Field(
        description="timer boundary: mode, cache state, measured empty-window floor (ns) ..."
    )
    cases: list[CaseTrial]
    controls: list[ControlResult]
    sanitizer: list[SanitizerResult]
    failures: list[Failure]
    libraries: dict[Side, LibraryInfo] = Field(
        default_factory=dict, description="shared-library arms: the builds actually compared"
    )
    python: dict[Side, PythonArmInfo] = Field(
        default_factory=dict, description="Python arms: the callable, packages, JIT output and host cost"
    )
    samples_file: str = Field(description="raw samples (.npz), relative to the record folder")
    samples_sha256: str
    cost: TrialCost | None = Field(
        default=None,
        description="wall time, GPU-busy time and stage times (absent in trials made before they were recorded)",
    )
    kernel_trace: KernelTrace | None = Field(
        default=None, description="how kernels were traced (absent in trials made before tracing existed)"
    )
    control_outcomes: list[ControlOutcome] | None = Field(
        default=None,
        description="plans with a golden: each negative control per case against its "
        "declared expectation, with its bound fraction per output",
    )
    code: CodeIdentity | None = Field(
        default=None, description="the arms' machine code compared (absent in trials made before it was)"
    )
    added: str | None = Field(
        default=None,
        description="why this trial runs beyond the plan's schedule.trials (`qualify gate`: a case still "
        "underpowered after the planned trials); absent or null in a planned trial",
    )


class GateResult(Model):
    gate: str
    case: str
    trial: int | None
    device: str
    passed: bool
    value_pct: float
    bound: str


class Verdict(Model):
    status: VerdictStatus
    reasons: list[str]
    gates: list[GateResult]


class MachineTerm(Model):
    """A case over several machines of one GPU model, each machine one replicate: the spread
    between machines beside the spread within each (qualify.evaluate.machines)."""

    machines: int
    ratio: float = Field(description="candidate / base: exp of the mean over machines of their pooled log-ratios")
    ci_low: float
    ci_high: float
    delta_pct: float
    case_class: CaseClass
    reason: str
    df: float = Field(description="degrees of freedom (Welch-Satterthwaite over the two parts)")
    within_pct: float = Field(description="the within-machine part: a machine's standard error, in %")
    between_pct: float = Field(description="the between-machine part: the spread of machines' true ratios, in %")
    mde_pct: float = Field(description="minimum detectable change over the machines, in %")
    per_machine_delta_pct: dict[str, float] = Field(description="each machine's pooled change, in %")


class Results(Model):
    results_version: Literal[1] = RESULTS_VERSION
    plan_name: str
    plan_digest: str
    files: dict[str, str]
    trials: list[Trial]
    verdict: Verdict
    pooled: dict[str, dict[str, PooledStats]] = Field(
        default_factory=dict,
        description="per device (as the verdict labels it) and case: the "
        "two-level statistics over its complete trials; devices are never pooled together",
    )
    machines: dict[str, dict[str, MachineTerm]] = Field(
        default_factory=dict,
        description="per GPU model measured on two or more machines (a merged record) and case: "
        "the machine term, the spread between machines beside the within-machine interval; "
        "absent from records of one machine",
    )
