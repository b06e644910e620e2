"""The README's kernel section as values: which trials were traced, the attribution sentence, the
second timer's rows. Templates only format what these return (qualify.render.readme)."""

from __future__ import annotations

from dataclasses import dataclass

from qualify.evaluate.kernels import BAND_TEXT, change_text, label
from qualify.evaluate.second_timer import BOUND_TEXT
from qualify.evaluate.verdict import device_label
from qualify.results.model import CaseTrial, KernelChange, Results, TimerAgreement, Trial


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


def attribution_parts(changes: list[KernelChange]) -> list[tuple[str, str]]:
    """(kernel label, change) per kernel: ('flash<128>', '+12.1 %'), ('prep', 'same')."""
    return [(label(c), change_text(c)) for c in changes]


def dims(value: tuple[int, int, int]) -> str:
    return "×".join(str(v) for v in value)


KERNEL_FUNCTIONS = (any_trace_info, traced_trials, untraced_notes, timer_rows, attribution_parts)
KERNEL_FILTERS = {"dims": dims, "kernel_label": label}
KERNEL_GLOBALS = {"attribution_band": BAND_TEXT, "timer_bound": BOUND_TEXT}
