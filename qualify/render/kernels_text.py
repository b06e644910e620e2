"""The README's kernel section as values: which trials were traced, the attribution sentence, the
second timer's rows. Templates only format what these return (qualify.render.readme)."""

from __future__ import annotations

from dataclasses import dataclass

from qualify.evaluate.cupti_delta import ALLOWANCE_TEXT, cupti_change_stated
from qualify.evaluate.kernels import BAND_TEXT, change_text, label
from qualify.evaluate.second_timer import BOUND_TEXT, SAMPLE_BOUND_TEXT
from qualify.evaluate.verdict import device_label
from qualify.results.model import (
    CaseKernels,
    CaseStats,
    CaseTrial,
    KernelChange,
    Results,
    SampleTimer,
    TimerAgreement,
    TimerDelta,
    Trial,
)


@dataclass(frozen=True)
class TracedTrial:
    device: str
    trial: Trial
    cases: tuple[CaseTrial, ...]


@dataclass(frozen=True)
class TimerRow:
    trial: int
    case: str
    side: str
    timers: TimerAgreement

    @property
    def worst(self) -> int:
        return self.timers.worst_call if self.timers.worst_call is not None else 0


def any_trace_info(results: Results) -> bool:
    """Whether the section is written at all: trials made before tracing existed render as before."""
    return any(t.kernel_trace is not None for t in results.trials)


def traced_trials(results: Results) -> list[TracedTrial]:
    """The first trial per device with a kernel trace (as the resources section shows the first)."""
    out, seen = [], set()
    for t in results.trials:
        cases = tuple(c for c in t.cases if c.kernels is not None)
        if cases and device_label(t) not in seen:
            seen.add(device_label(t))
            out.append(TracedTrial(device_label(t), t, cases))
    return out


def untraced_notes(results: Results) -> list[str]:
    return [
        f"Trial {t.index}: kernel trace {t.kernel_trace.tool}."
        for t in results.trials
        if t.kernel_trace is not None and not any(c.kernels for c in t.cases)
    ]


def timer_rows(results: Results) -> list[TimerRow]:
    return [
        TimerRow(t.index, c.case, side, timers)
        for t in results.trials
        for c in t.cases
        if c.kernels
        for side, timers in c.kernels.timers.items()
    ]


def traced_version(trial: Trial) -> int:
    """1: traced apart from the samples (records made before trace version 2); 2: like them;
    3: like them, CUPTI's change kept as evidence and not printed."""
    return trial.kernel_trace.version if trial.kernel_trace is not None else 1


def changes_stated(trial: Trial) -> bool:
    """Whether this trial's CUPTI changes are printed (trace versions 1 and 2 only)."""
    return cupti_change_stated(trial.kernel_trace)


def presence_text(change: KernelChange) -> str:
    """Where a kernel ran, never by how much it changed: 'both arms', 'only in candidate'."""
    return change.outcome if change.outcome.startswith("only in") else "both arms"


def presence_parts(changes: list[KernelChange]) -> list[tuple[str, str]]:
    """(kernel label, which arms launch it) per kernel: the inventory's names without CUPTI's change
    (trace version 3)."""
    return [(label(c), presence_text(c)) for c in changes]


def kernel_parts(trial: Trial, kernels: CaseKernels) -> list[tuple[str, str]]:
    """Per kernel of a case, what a reader is shown beside its name: CUPTI's change where the
    trial's trace version states it, else only which arms launch it."""
    if not changes_stated(trial):
        return presence_parts(kernels.attribution)
    return attribution_parts(kernels.attribution) if kernels.deltas is None else delta_parts(kernels)


def change_ci(stats: CaseStats) -> str:
    """'+12.10 % [+11.02, +13.20]': a change and its 95 % CI in %, or the change alone without one."""
    if stats.ci_low is None or stats.ci_high is None:
        return f"{stats.delta_pct:+.2f} % (no interval: {stats.blocks or 0} block)"
    return f"{stats.delta_pct:+.2f} % [{(stats.ci_low - 1) * 100:+.2f}, {(stats.ci_high - 1) * 100:+.2f}]"


def delta_parts(kernels: CaseKernels) -> list[tuple[str, str]]:
    """(kernel label, CUPTI change with its CI) per kernel in the attribution's order, or 'only in
    base' / 'only in candidate' (trace version 2)."""
    deltas = {(d.name, d.occurrence): d for d in kernels.deltas or []}
    out = []
    for c in kernels.attribution:
        d = deltas.get((c.name, c.occurrence)) if c.base_ns is not None else None
        out.append((label(c), change_text(c) if d is None else change_ci(d.stats)))
    return out


@dataclass(frozen=True)
class TimerDeltaRow:
    trial: int
    case: str
    delta: TimerDelta


@dataclass(frozen=True)
class SampleTimerRow:
    trial: int
    case: str
    side: str
    timer: SampleTimer


def timer_delta_rows(results: Results) -> list[TimerDeltaRow]:
    return [
        TimerDeltaRow(t.index, c.case, c.kernels.timer_delta)
        for t in results.trials
        if changes_stated(t)
        for c in t.cases
        if c.kernels is not None and c.kernels.timer_delta is not None
    ]


def sample_timer_rows(results: Results) -> list[SampleTimerRow]:
    return [
        SampleTimerRow(t.index, c.case, side, timer)
        for t in results.trials
        if changes_stated(t)
        for c in t.cases
        if c.kernels is not None
        for side, timer in (c.kernels.sample_timers or {}).items()
    ]


def agree_text(agree: bool | None) -> str:
    return "n/a (no interval)" if agree is None else ("yes" if agree else "no")


def attribution_parts(changes: list[KernelChange]) -> list[tuple[str, str]]:
    """(kernel label, change) per kernel: ('flash<128>', '+12.1 %'), ('prep', 'same')."""
    return [(label(c), change_text(c)) for c in changes]


def dims(value: tuple[int, int, int]) -> str:
    return "×".join(str(v) for v in value)


KERNEL_FUNCTIONS = (
    any_trace_info,
    traced_trials,
    untraced_notes,
    timer_rows,
    attribution_parts,
    traced_version,
    changes_stated,
    kernel_parts,
    delta_parts,
    timer_delta_rows,
    sample_timer_rows,
)
KERNEL_FILTERS = {"dims": dims, "kernel_label": label, "change_ci": change_ci, "agree_text": agree_text}
KERNEL_GLOBALS = {
    "attribution_band": BAND_TEXT,
    "timer_bound": BOUND_TEXT,
    "sample_timer_bound": SAMPLE_BOUND_TEXT,
    "timer_allowance": ALLOWANCE_TEXT,
}
