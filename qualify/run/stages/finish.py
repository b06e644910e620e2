"""Finish: the trial file and its samples written however the trial ended, and what it cost."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from qualify.build.nvrtc import nvrtc_version
from qualify.evaluate.recompute import derived_fields, kernel_fields
from qualify.evaluate.summarize import floor_ns, has_series
from qualify.plan.digest import lock_path, sha256_bytes
from qualify.plan.load import LoadedPlan
from qualify.plan.model import ARM_SIDES
from qualify.results import samples as samples_io
from qualify.results.model import (
    CaseTrial,
    CodeIdentity,
    ControlResult,
    Failure,
    KernelTrace,
    LibraryInfo,
    SanitizerResult,
    Trial,
    TrialCost,
)
from qualify.results.samples import TrialSamples
from qualify.results.store import Record, now_iso
from qualify.run import code_identity, provenance
from qualify.run.device import MAX_BATCH
from qualify.run.stages.clock import StageClock
from qualify.run.stages.fidelity import CaseFacts
from qualify.run.stages.timing import BATCH_MIN_NS
from qualify.run.stages.trace import Tracer


@dataclass
class Evidence:
    """Everything a trial has found so far, gathered by the sequencer from its stages; the finish
    stage writes it whatever the trial's status."""

    samples: TrialSamples = field(default_factory=TrialSamples)
    failures: list[Failure] = field(default_factory=list)
    cases: list[CaseFacts] = field(default_factory=list)
    controls: list[ControlResult] = field(default_factory=list)
    control_outcomes: list = field(default_factory=list)  # under counted fidelity (Fidelity.counted)
    tolerance: dict = field(default_factory=dict)  # case -> CaseTolerance, under counted fidelity
    sanitizer: list[SanitizerResult] = field(default_factory=list)
    libraries: dict[str, LibraryInfo] = field(default_factory=dict)
    python: dict = field(default_factory=dict)  # side -> python_arm.PythonEntry, read when the trial is written
    code: CodeIdentity | None = None


@dataclass(frozen=True)
class Ending:
    """How the trial ran, as the trial file states it."""

    index: int
    planned: bool
    started_at: str
    status: str  # complete | failed | interrupted
    argv: list[str]
    preflight: str  # how the cases were preflighted
    telemetry: str  # where the clock and throttle readings came from
    counted: bool  # fidelity was judged by counts (Fidelity.counted): a golden, or a tolerance against base
    added: str | None = None  # why this trial runs beyond schedule.trials (None: a planned trial)


def write_trial(
    loaded: LoadedPlan,
    record: Record,
    device,
    ending: Ending,
    found: Evidence,
    tracer: Tracer,
    clock: StageClock,
) -> Trial:
    plan = loaded.plan
    arrays = found.samples.arrays()
    data = samples_io.save(record.samples_path(ending.index), arrays, root=record.folder)
    iterations = plan.schedule.iterations_per_sample
    floor = floor_ns(arrays)
    kernel_trace = tracer.kernel_trace(found.cases)
    # a case stopped before its timing has no CaseTrial; its samples (if any) stay in the npz
    timed = [f for f in found.cases if all(has_series(arrays, f.case, s) for s in ARM_SIDES)]
    cases = [_case_trial(f, found.tolerance.get(f.case), arrays, iterations, kernel_trace, floor) for f in timed]
    paths = [loaded.path, lock_path(loaded.path), *loaded.files.files.values()]
    python = {side: entry.info() for side, entry in found.python.items()}
    status = ending.status
    drift = autotune_drift(record, python)
    if drift:
        found.failures.extend(drift)
        status = "failed" if status == "complete" else status
    code = found.code
    if code is not None and len(found.python) == len(ARM_SIDES):  # both JITs have run by now
        code = code_identity.python(
            found.python["base"].cubin_bytes(), found.python["candidate"].cubin_bytes(), code.arch
        )
    trial = Trial(
        index=ending.index,
        status=status,
        plan_digest=loaded.digest,
        started_at=ending.started_at,
        ended_at=now_iso(),
        provenance=provenance.collect(
            device.info, loaded.files.root, ending.planned, nvrtc_version(), ending.argv, paths=paths
        ),
        timer={
            "mode": plan.schedule.timing,
            "cache": plan.schedule.cache,
            "floor_ns": floor,
            "floor_samples": int(arrays.get("floor_ns", np.empty(0)).size),
            "iterations_per_sample": iterations,
            # a case's halves are queued behind one blocking kernel each when its warm-ups
            # are at least this long, else one sample per blocking kernel (batch_size)
            "batch_min_ns": BATCH_MIN_NS,
            "preflight": ending.preflight,
            "max_batch": MAX_BATCH,
            "telemetry": ending.telemetry,
        },
        cases=cases,
        controls=found.controls,
        control_outcomes=found.control_outcomes if ending.counted else None,
        code=None if code is None else code_identity.with_traced_launches(code, cases),
        kernel_trace=kernel_trace,
        sanitizer=found.sanitizer,
        libraries=found.libraries,
        python=python,
        failures=found.failures,
        samples_file=record.samples_path(ending.index).relative_to(record.folder).as_posix(),
        samples_sha256=sha256_bytes(data),
        cost=trial_cost(arrays, clock.elapsed(), clock.spent),
        added=ending.added,
    )
    record.write_trial(trial)
    record.append({"event": "trial_ended", "trial": ending.index, "status": status})
    return trial


def autotune_drift(record: Record, python: dict) -> list[Failure]:
    """An autotuner that chose otherwise than in the record's first trial that recorded a choice:
    the configuration is part of what the record compares, so such a trial cannot be complete."""
    out = []
    for side, info in python.items():
        if not info.autotuned:
            continue
        earlier = [
            t for t in record.trials() if t.status == "complete" and t.python.get(side) and t.python[side].autotuned
        ]
        if earlier and earlier[0].python[side].autotuned != info.autotuned:
            chosen = "; ".join(f"{k}: {v}" for k, v in sorted(info.autotuned.items()))
            out.append(
                Failure(
                    kind="error",
                    side=side,
                    message=f"the autotuner chose {chosen}, not trial {earlier[0].index}'s configuration: "
                    "pin it in the arm's params, or start a new record",
                )
            )
    return out


def _case_trial(
    f: CaseFacts, tolerance, arrays: dict[str, np.ndarray], iterations: int, kernel_trace: KernelTrace, floor: float
) -> CaseTrial:
    derived = derived_fields(arrays, f.case, iterations)  # what `report --check` recomputes
    return CaseTrial(
        case=f.case,
        input_sha256=f.input_sha256,
        resources=f.resources,
        parity=f.parity,
        deterministic=f.deterministic,
        timed_outputs_match=f.timed_outputs_match,
        stream_escape_ns=f.stream_escape_ns,
        stopped=f.stopped,
        tolerance=tolerance,
        trace=f.trace,
        placements=f.placements,
        **derived,
        **kernel_fields(f.trace, kernel_trace, floor, derived, f.case, iterations),
    )


def trial_cost(arrays: dict[str, np.ndarray], wall_s: float, stages: dict[str, float]) -> TrialCost:
    """What a trial cost: its wall time against the time the GPU spent inside timed windows.

    GPU-busy is the sum of every timed window in the samples file (floor, warm-ups, ABBA and A/A
    samples); everything else — builds, workers, inputs, flushes, host work — is overhead.
    """
    busy_ns = sum(float(np.sum(a)) for k, a in arrays.items() if k == "floor_ns" or k.endswith(("/ns", "/warmup_ns")))
    busy_s = busy_ns / 1e9
    # the fraction of the figures as recorded, so that a reader's gpu_busy_s / wall_s gives it back
    wall_s = round(wall_s, 3)
    return TrialCost(
        wall_s=wall_s,
        gpu_busy_s=round(busy_s, 6),
        busy_fraction=round(busy_s / wall_s, 4) if wall_s > 0 else 0.0,
        stages_s={k: round(v, 3) for k, v in stages.items()},
    )
