"""Fidelity: each arm's resources, reference outputs (run twice: determinism), base-versus-
candidate parity and the stream-escape check; then the case's fidelity gate (the plan's bound,
or the golden's when the plan has one)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from qualify.evaluate.fidelity import compare
from qualify.evaluate.verdict import fidelity_passes
from qualify.plan.golden import Golden
from qualify.plan.model import Plan
from qualify.plan.resolve import ResolvedCase
from qualify.results.model import Failure
from qualify.results.tolerance import CaseTolerance
from qualify.run import golden_stage
from qualify.run.arms import ArmExec
from qualify.run.device import DeviceBuffer
from qualify.run.device_protocol import Device
from qualify.run.stages.case_setup import CaseMemory, CaseSetup
from qualify.run.stages.where import watch

# A device-wide sync right after the stream's stop event returns in microseconds; a wait beyond
# this means work was still running elsewhere on the device.
ESCAPE_MIN_NS = 50_000.0

Outputs = Mapping[str, Mapping[str, np.ndarray]]  # side -> output name -> bytes


@dataclass
class CaseFacts:
    """What a case has found apart from timing (timing is derived from the samples at the end).

    Filled in by the stages as they go, so a trial that fails part-way keeps what its cases found.
    """

    case: str
    input_sha256: Mapping[str, str]
    resources: dict
    parity: list
    deterministic: dict
    stream_escape_ns: dict
    timed_outputs_match: bool = True
    stopped: dict = field(default_factory=dict)  # pair -> the stop rule's reason
    trace: dict | None = None  # side -> [TracedCall], the raw CUPTI trace of the case
    placements: dict | None = None  # the case's pool of buffer placements as drawn (PoolFacts.to_json)


@dataclass(frozen=True)
class Reference:
    facts: CaseFacts
    outputs: Outputs  # each arm's first run, the bytes every later run is compared with
    dtypes: Mapping[str, str]  # buffer name -> dtype
    escaped: tuple[Failure, ...]  # arms whose work outlived qualify's stream
    on_device: Mapping[str, Mapping[str, DeviceBuffer]]  # side -> output -> the first run's bytes, on the device


@dataclass(frozen=True)
class Gate:
    passed: bool
    tolerance: CaseTolerance | None  # the counts (None when base parity decides: Fidelity.counted)
    failures: tuple[Failure, ...]


def reference_outputs(case: ResolvedCase, setup: CaseSetup, memory: CaseMemory, device: Device) -> Reference:
    """Resources, reference outputs, determinism, parity and the stream-escape check of a case.

    The first run's outputs are read back (parity, the golden and the controls judge them on the
    host) and copied on the device, where the second run is compared with them and every timed
    launch later is: a second read-back of hundreds of MB would cost more than the kernel."""
    execs = setup.arms
    resources = {
        side: device.resources(ex.kernel, ex.resolved.launch.threads_per_block, ex.resolved.launch.shared_bytes)
        for side, ex in execs.items()
        if ex.resolved.launch is not None
    }
    reference, deterministic, on_device = {}, {}, {}
    for side, ex in execs.items():
        with watch(case.id, side):
            reference[side] = ex.run_once(device)
            on_device[side] = {n: memory.alloc(ex.buffers[n].nbytes) for n in ex.outputs}
            for n in ex.outputs:
                device.copy(on_device[side][n], ex.buffers[n])
            ex.run_on_device(device)
            deterministic[side] = not any(device.differs(ex.buffers[n], on_device[side][n]) for n in ex.outputs)
    dtypes = {b.name: b.dtype for b in case.arms["base"].buffers}
    outputs = execs["base"].outputs
    parity = [compare(n, dtypes[n], reference["base"][n], reference["candidate"][n]) for n in outputs]
    escape_ns = {side: _escape_wait(ex, device) for side, ex in execs.items()}
    escaped = tuple(
        Failure(
            kind="fault", case=case.id, side=side, message=escape_message(waited, execs[side].resolved.launch is None)
        )
        for side, waited in escape_ns.items()
        if waited > ESCAPE_MIN_NS
    )
    facts = CaseFacts(case.id, setup.input_sha256, resources, parity, deterministic, escape_ns)
    return Reference(facts, reference, dtypes, escaped, on_device)


def escape_message(waited_ns: float, entry_point: bool) -> str:
    """What a device busy after qualify's stream finished means, for the arm's kind."""
    busy = f"the device stayed busy {waited_ns / 1e3:.1f} µs after qualify's stream finished"
    if entry_point:
        return (
            f"work escaped qualify's stream: {busy}; the entry point queues work on a stream of its own, "
            "which the events on qualify's stream do not time: its timed samples leave that work out"
        )
    return (
        f"{busy}: a kernel arm launches only on qualify's stream, so this is other work on the device "
        "(another process or the driver), which may have shared the device with timed samples"
    )


def _escape_wait(ex: ArmExec, device: Device) -> float:
    """Nanoseconds the device stays busy after qualify's stream has finished one call.

    Events on qualify's stream time only the work queued there; work an entry point sends to
    another stream escapes them and would look free. A device-wide synchronisation after the
    stop event shows it: the median of three calls waits for any such work.
    """
    waits = []
    for _ in range(3):
        device.synchronize()
        device.time_sample(lambda: ex.enqueue(device), cold=False, block_stream=False)
        start = time.perf_counter_ns()
        device.check_idle()
        waits.append(time.perf_counter_ns() - start)
    return float(sorted(waits)[1])


def gate(plan: Plan, golden: Golden | None, case: ResolvedCase, ref: Reference) -> Gate:
    """Whether the case's outputs pass the plan's fidelity rule, and the failures that say why not.

    Counted fidelity (a golden, or mode 'tolerance' against the base arm) is judged by the counts
    under each output's bound; base-versus-candidate parity stays informative.
    """
    facts = ref.facts
    failures: list[Failure] = []
    tolerance = None
    passed = fidelity_passes(facts.parity, plan.acceptance.fidelity)
    counted = plan.acceptance.fidelity.counted
    if counted:
        tolerance, problems = golden_stage.judge(plan, golden, case, ref.outputs, ref.dtypes)
        passed = not problems
        failures += [Failure(kind="fidelity", case=case.id, message=problem) for problem in problems]
    deterministic = all(facts.deterministic.values())
    if (not passed or not deterministic) and (not counted or not deterministic):
        # the counts' problems are in already
        failures.append(Failure(kind="fidelity", case=case.id, message=_message(facts.parity, facts.deterministic)))
    return Gate(passed and deterministic, tolerance, tuple(failures))


def _message(parity, deterministic) -> str:
    parts = [
        f"{p.buffer}: {p.differing_elements} of {p.elements} elements differ from base, first at "
        f"index {p.first_difference}" + (f", up to {p.max_ulp} ulp" if p.max_ulp is not None else "")
        for p in parity
        if not p.equal
    ]
    parts += [f"{side} gave different bytes on two runs" for side, ok in deterministic.items() if not ok]
    return "; ".join(parts) or "outputs outside the fidelity bound"
