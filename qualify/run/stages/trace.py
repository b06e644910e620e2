"""Trace: the kernels each call launches and the second timer, from calls traced under CUPTI like
the timed samples are taken. A CUPTI failure ends tracing for the rest of the trial and is said in
the record; a kernel fault is the trial's, as anywhere else.

The traced calls are `schedule.traced_calls` per arm in ABBA/BAAB blocks of one call per half
(qualify.plan.schedule.trace_plan), each block on a placement of the case's pool and a flush slot
drawn as the timed blocks draw theirs, each call queued as a sample is (poisoned outputs, the
cold flush, behind the blocking kernel), and each call keeps its draw. They run as a phase of
their own after the case's timing, not in untimed blocks between the timed ones: CUPTI's kernel
activity costs every launch while it is on, and switching it on and off between timed blocks
would put that cost, and the activity buffers' flushes, next to the timed samples; the timed
blocks' count is also the stop rule's to decide, which traced blocks in between would change.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

from qualify.errors import DeviceError
from qualify.evaluate.cupti_delta import TRACE_VERSION
from qualify.plan.model import Plan
from qualify.plan.schedule import trace_plan
from qualify.results.model import DeviceLimits, KernelTrace, TracedCall
from qualify.run.demangle import demangle_all
from qualify.run.device import KernelFault
from qualify.run.device_protocol import Device
from qualify.run.library import EntryPointFailed
from qualify.run.stages.case_setup import CaseSetup
from qualify.run.stages.fidelity import CaseFacts


class Tracer:
    """The trial's CUPTI tracing: whether it is taken, and what is read once per trial."""

    def __init__(self, plan: Plan, device: Device):
        self._plan = plan
        self._device = device
        self.untraced: str | None = None  # why no (further) trace is taken; None: traced
        self._limits: DeviceLimits | None = None  # the device's occupancy limits, read at the first trace
        self._flush_slots: int | None = None  # the flush buffers the traced calls draw from
        self._null_calls: list = []  # traced calls of qualify's one-thread kernel (the second timer's offset)

    def check_available(self) -> None:
        """Once the arms are loaded: is there a tracer, and does the plan ask for traced calls."""
        if self._plan.schedule.traced_calls == 0:
            self.untraced = "off (schedule.traced_calls is 0)"
            return
        why = self._device.trace_missing()
        self.untraced = None if why is None else f"not taken: {why}"

    def trace_case(self, case_id: str, setup: CaseSetup, trial: int = 0, flush_slots: int = 1) -> dict | None:
        """schedule.traced_calls calls per arm (side -> [TracedCall], each with its draw); None when
        not traced."""
        if self.untraced is not None:
            return None
        device = self._device
        cold = self._plan.schedule.cache == "cold"
        calls = self._plan.schedule.traced_calls
        self._flush_slots = flush_slots
        draws = trace_plan(self._plan.seeds.base, trial, case_id, calls, setup.placements, flush_slots)
        trace: dict[str, list[TracedCall]] = {side: [] for side in setup.arms}
        arms = {}  # placement -> both arms bound to it
        side = None
        try:
            if self._limits is None:  # read while the context is sound: the trial may end in a fault
                self._limits = device.limits()
                # what a traced window holds beyond its kernels, measured once per trial, before
                # the first arm's trace (the second timer's launch overhead)
                self._null_calls = device.trace_null_calls(calls, cold)
            for draw in draws:
                side = draw.side
                if draw.placement not in arms:
                    arms[draw.placement] = setup.arms_at(draw.placement)
                ex = arms[draw.placement][side]
                (call,) = device.trace_calls(
                    partial(ex.enqueue, device),
                    1,
                    side,
                    cold,
                    flush_slot=draw.flush_slot,
                    before_each=partial(ex.poison_outputs, device),
                )
                where = {
                    "block": draw.block,
                    "position": draw.position,
                    "order": draw.order,
                    "placement": draw.placement,
                    "flush_slot": draw.flush_slot,
                }
                trace[side].append(call.model_copy(update=where))
        except (KernelFault, EntryPointFailed):
            raise  # the case's fault, named without an arm
        except DeviceError as exc:  # CUPTI's own failure
            self.untraced = f"stopped at {case_id} ({side}): {exc.one_line()}"
            return None
        return trace

    def kernel_trace(self, cases: Iterable[CaseFacts]) -> KernelTrace:
        """How this trial traced: the tool (or why it did not), the names as demangled here."""
        cases = list(cases)
        launched = [k.name for f in cases for calls in (f.trace or {}).values() for c in calls for k in c.kernels]
        demangler, names = demangle_all(launched) if launched else ("none", {})
        traced = any(f.trace for f in cases)
        tool = self._device.trace_tool() if traced else (self.untraced or "not taken: no case was timed")
        if traced and self.untraced:
            tool = f"{tool}; {self.untraced}"
        limits, null_calls = (self._limits, self._null_calls) if traced else (None, [])
        return KernelTrace(
            tool=tool,
            demangler=demangler,
            names=names,
            limits=limits,
            version=TRACE_VERSION,
            flush_slots=self._flush_slots if traced else None,
            null_calls=null_calls,
        )
