"""The headline of a record as frozen values: what `qualify.evaluate.headline.headline` computes
and `qualify.evaluate.headline_text` words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from qualify.evaluate.why import Cause

# a case's class across a device's complete trials: the class they agree on, or one of these
MIXED = "mixed"  # the trials disagree
UNMEASURED = "unmeasured"  # no complete trial measured the case


@dataclass(frozen=True)
class CaseEffect:
    case: str
    case_class: str  # faster / slower / same / cant_tell / mixed / unmeasured
    delta_pct: float | None  # median over complete trials of (ratio - 1) * 100
    trials: int


@dataclass(frozen=True)
class Run:
    """Consecutive cases (in the plan's order) of one class on one device."""

    case_class: str
    cases: tuple[str, ...]
    where: str  # "all" | "from" | "up to" | "between" | "at"
    low_pct: float | None  # smallest and largest per-case delta in the run
    high_pct: float | None


@dataclass(frozen=True)
class Crossover:
    """Where the candidate starts (or stops) being faster, and the gate the data would support."""

    parameter: str
    direction: str  # ">=" (faster from `value` up) or "<=" (faster up to `value`)
    value: float | int
    supported_speedup_pct: float  # smallest speed-up the 95 % intervals resolve there, floored to 0.5 %


@dataclass(frozen=True)
class DeviceEffect:
    device: str
    complete_trials: int
    cases: int
    runs: tuple[Run, ...]
    crossover: Crossover | None
    # every complete trial ran identical machine code with identical launches: the runs are what
    # the timer measured between two copies of one kernel, not an effect of the candidate
    free_aa: bool = False
    # the runs' classes and changes are the pooled two-level interval's (trace version 3 on)
    pooled: bool = False


@dataclass(frozen=True)
class Fidelity:
    contract: str  # "byte-identical to the base arm", "within 2 ulp of the float64 reference"...
    checks: int  # case-trials whose outputs were compared
    failing: tuple[str, ...]  # "T=512 (trial 1)"
    nondeterministic: tuple[str, ...]  # "candidate at T=512 (trial 1)"
    timed_mismatch: tuple[str, ...]


@dataclass(frozen=True)
class Checks:
    aa_declared: bool
    aa_runs: int
    aa_resolved: tuple[str, ...]  # "slower at T=512 (trial 1)": the timer saw a difference that is not there
    # "slower at T=512 on NVIDIA H200 (GPU-…)": the same, pooled over a device's trials (what the verdict judges)
    aa_pooled_resolved: tuple[str, ...]
    negative_declared: int
    negative_runs: int
    negative_missed: tuple[str, ...]  # "flip at T=512 (trial 1)"
    sanitizer_runs: int
    sanitizer_tools: tuple[str, ...]
    sanitizer_bad: tuple[str, ...]  # "memcheck at T=512 (candidate): findings"
    sanitizer_not_run: int
    negative_declared_outcomes: bool = False  # judged against declarations (a golden): missed = not as declared
    aa_classes: tuple[tuple[str, int], ...] = ()  # (class, runs) of the A/A, most frequent first


@dataclass(frozen=True)
class GateMiss:
    """One gate on one device: the cases that missed it and the range of values."""

    gate: str
    device: str
    bound: str
    cases: tuple[str, ...]
    all_cases: bool  # every case the gate judged on this device missed
    missed: int  # judgements missed (one per trial, or one per case pooled over trials)
    judged: int
    low_change_pct: float  # change in time per launch in %: negative is faster
    high_change_pct: float
    unresolved: bool  # at least one miss had the speed-up but not the interval to back it


@dataclass(frozen=True)
class Headline:
    status: str
    devices: tuple[DeviceEffect, ...]
    fidelity: Fidelity
    checks: Checks
    gate_misses: tuple[GateMiss, ...]
    other_reasons: tuple[str, ...]  # the verdict's reasons that are not gate misses, as written
    causes: tuple[Cause, ...] = ()  # qualify.evaluate.why.Cause per device and case: the arms side by side
    causes_left: int = 0  # cases whose cause a many-case plan leaves out of the headline
