"""One trial of a plan on one device: the sequencer of the stages in `qualify/run/stages/`.

`TrialRunner.run` is the one place the order of a trial is written: admission, then build and
load (with the isolated preflight and the sanitizer's checks alongside, all done before anything
is timed), the floor, then each case through set-up, fidelity, controls, the fidelity gate,
timing and trace, and the trial file last, however the trial ended — complete, failed or
interrupted — so evidence already gathered is never lost. The stages return what they found;
this module keeps it in the trial's `Evidence` and turns a located fault into the trial's failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from qualify.errors import DeviceError, QualifyError, ToolError
from qualify.plan.load import LoadedPlan
from qualify.plan.model import ARM_SIDES as SIDES
from qualify.plan.resolve import ResolvedCase
from qualify.plan.schedule import AA, MAIN
from qualify.results.model import Failure, Trial
from qualify.results.store import Record, now_iso
from qualify.run import golden_stage
from qualify.run.device import KernelFault, LaunchHang
from qualify.run.device_protocol import Device
from qualify.run.inputs import InputStore
from qualify.run.library import EntryPointFailed
from qualify.run.stages import case_setup, fidelity, timing
from qualify.run.stages.admission import Admission, BudgetExhausted, admit, samples_per_trial
from qualify.run.stages.build import build_and_load
from qualify.run.stages.case_setup import CaseMemory, InputPrefetch, Placing
from qualify.run.stages.clock import STAGES, StageClock
from qualify.run.stages.controls import ControlFound, ControlKernels, run_controls
from qualify.run.stages.fidelity import ESCAPE_MIN_NS
from qualify.run.stages.finish import Ending, Evidence, trial_cost, write_trial
from qualify.run.stages.preflight import run_preflight
from qualify.run.stages.sanitize import SANITIZER_WORKERS, SanitizerChecks
from qualify.run.stages.timing import BATCH_MIN_NS, FLOOR_SAMPLES, batch_size
from qualify.run.stages.trace import Tracer
from qualify.run.stages.where import Located, Where, watch

# What other modules import from the engine; each is defined with the stage it belongs to.
__all__ = [
    "BATCH_MIN_NS",
    "ESCAPE_MIN_NS",
    "FLOOR_SAMPLES",
    "SANITIZER_WORKERS",
    "SIDES",
    "STAGES",
    "BudgetExhausted",
    "RunOptions",
    "TrialRunner",
    "batch_size",
    "samples_per_trial",
    "trial_cost",
]


@dataclass
class RunOptions:
    record_dir: Path
    exploratory: bool = False
    argv: list[str] = field(default_factory=list)
    progress: Callable[[int, str], None] = lambda advance, what: None
    # (tool, case, side, timeout) -> SanitizerResult; None: the checks are not run in this process
    sanitize: Callable | None = None
    # (side, case ids) -> [isolation.CaseOutcome]: each arm's cases run first in child workers
    preflight: Callable | None = None
    # shared-library arms: the builds named on `qualify compare`'s command line, by side
    libraries: dict[str, Path] = field(default_factory=dict)
    # the run's scratch folder shared by its trial processes (inputs generated once, the preflight's outcomes)
    workdir: Path | None = None
    # why this trial runs beyond the plan's schedule.trials (the gate's added trial); None: planned
    added: str | None = None


class TrialRunner:
    """Runs one trial's stages in order and keeps what they find."""

    def __init__(self, loaded: LoadedPlan, device: Device, telemetry, options: RunOptions):
        self.loaded = loaded
        self.plan = loaded.plan
        self.device = device
        self.telemetry = telemetry
        self.options = options
        self.record = Record(options.record_dir)
        self.clock = StageClock()
        self.found = Evidence()
        # the plan's golden (qualify/run/golden_stage.py); None when the plan compares with base
        self.golden = golden_stage.open_golden(loaded)
        store = InputStore(options.workdir) if options.workdir is not None else None
        self.inputs = InputPrefetch(self.plan, self.golden, loaded.cases, store)
        self.tracer = Tracer(self.plan, device)
        self.control_kernels = ControlKernels(loaded, device)
        self.controlled: frozenset[str] = frozenset()  # cases whose controls this device has run already
        self.bench = timing.Bench(self.plan, device, telemetry, self.found.samples, self.clock, options.progress)
        # a missing compute-sanitizer found before the timing is reported after it, as it always was:
        # the trial's samples are kept first (exit 6 then)
        self.missing_tool: ToolError | None = None

    def run(self) -> Trial:
        admission = admit(self.loaded, self.device.info, self.record, self.options.exploratory, self.options.libraries)
        started_at = now_iso()
        self.bench = replace(self.bench, trial=admission.index)
        self.controlled = controlled_cases(self.record, self.device.info.uuid)
        status = "complete"
        pending: Exception | None = None
        try:
            with watch():  # a fault no stage places more closely belongs to the trial as a whole
                kernels, bad = self._build_and_preflight()
                if bad:
                    status = "failed"  # the verdict cannot be "qualified"; the other cases still run
                with self.clock.stage("timing"):
                    self.bench = replace(self.bench, flush_slots=timing.prepare_flush(self.bench))
                    timing.time_floor(self.bench)
                for case in self.loaded.cases:
                    if case.id in bad:
                        continue
                    if not self._run_case(case, kernels, admission.index):
                        status = "failed"
                        break
                if status == "complete" and self.missing_tool is not None:
                    raise self.missing_tool
        except KeyboardInterrupt:
            status = "interrupted"
            self.found.failures.append(Failure(kind="interrupted", message="interrupted (SIGINT or SIGTERM)"))
        except Located as located:
            if isinstance(located.cause, ToolError):  # keep the trial, then report the missing tool (exit 6)
                pending = located.cause
            else:
                status = "failed"
                self.found.failures.append(_failure(located.cause, located.where))
                if not isinstance(located.cause, DeviceError):
                    pending = located.cause  # a build or plan problem, or a bug: reported with its own exit code
        trial = self._finish(admission, started_at, status)
        if pending is not None:
            raise pending
        return trial

    def _build_and_preflight(self) -> tuple[Mapping[str, object], frozenset[str]]:
        """Both arms loaded, and the cases the isolated workers found faulting (left out here).

        The preflight's workers and the sanitizer's checks run while this process builds and
        generates the first inputs; nothing is timed before they are all done."""
        if self.loaded.cases:
            self.inputs.start(self.loaded.cases[0])
        opts = self.options
        checks = SanitizerChecks(self.plan, self.record, self.device.info.uuid, opts.sanitize)
        try:
            with ThreadPoolExecutor(max_workers=1) as side_pool:
                preflight = side_pool.submit(
                    run_preflight, self.loaded, opts.preflight, opts.progress, self.found.failures
                )
                with self.clock.stage("build"):
                    built = build_and_load(
                        self.loaded, self.device, opts.libraries, self.found.libraries, self.found.python
                    )
                    self.found.code = built.code
                    self.tracer.check_available()
                with self.clock.stage("preflight"):
                    bad = preflight.result()
            with self.clock.stage("sanitizer"):
                self._collect(checks)
        finally:
            checks.close()
        return built.kernels, bad

    def _collect(self, checks: SanitizerChecks) -> None:
        try:
            for result in checks.results(self.options.progress):
                self.found.sanitizer.append(result)  # each kept as it comes: a later check's error loses none
        except Located as located:
            if not isinstance(located.cause, ToolError):
                raise
            self.missing_tool = located.cause

    def _run_case(self, case: ResolvedCase, kernels: Mapping[str, object], trial: int) -> bool:
        """One case through its stages; False stops the trial (fail-fast or budget)."""
        found, bench, device, sched = self.found, self.bench, self.device, self.plan.schedule
        placing = Placing(
            count=sched.placements_for(sched.blocks),
            seed=self.plan.seeds.base,
            trial=trial,
            granularity=sched.placement.granularity_bytes,
        )
        with watch(case.id), CaseMemory(device) as memory:
            with self.clock.stage("inputs"):
                got = self.inputs.take(case)
                setup = case_setup.set_up(case, got.inputs, kernels, memory, device, placing, got.sha256)
            with self.clock.stage("fidelity"):
                ref = fidelity.reference_outputs(case, setup, memory, device)
                found.failures.extend(ref.escaped)
                ref.facts.placements = setup.pool.facts.to_json()
                found.cases.append(ref.facts)
                refs = ref.on_device
            if case.id not in self.controlled:
                with self.clock.stage("controls"):
                    for control in run_controls(
                        self.loaded, self.golden, case, setup, ref, self.control_kernels, device
                    ):
                        self._keep_control(case.id, control)
            gate = fidelity.gate(self.plan, self.golden, case, ref)
            if gate.tolerance is not None:
                found.tolerance[case.id] = gate.tolerance
            found.failures.extend(gate.failures)
            if not gate.passed and "fidelity" in self.plan.stop.fail_fast:
                return False
            with self.clock.stage("timing"):
                stop = timing.warm_up(bench, case, setup)
                if stop is None:
                    stop = timing.time_pair(bench, case, setup, refs, ref.facts, MAIN)
                if stop is None and self.plan.controls.aa:
                    stop = timing.time_pair(bench, case, setup, refs, ref.facts, AA)
            if stop is not None:
                found.failures.append(stop)
                return False
            if self.tracer.untraced is None:
                with self.clock.stage("inventory"):  # after the timing: tracing never touches a timed sample
                    ref.facts.trace = self.tracer.trace_case(case.id, setup, trial, bench.flush_slots)
        return True

    def _keep_control(self, case_id: str, control: ControlFound) -> None:
        if control.outcome is not None:
            self.found.control_outcomes.append(control.outcome)
        if control.problem:
            self.found.failures.append(Failure(kind="fidelity", case=case_id, message=control.problem))
        self.found.controls.append(control.result)

    def _finish(self, admission: Admission, started_at: str, status: str) -> Trial:
        self.inputs.close()
        preflight = self.options.preflight
        if preflight is None:
            preflighted = "none"
        elif getattr(preflight, "reused", False):
            preflighted = "reused from this run's first trial"
        else:
            preflighted = "isolated workers"
        ending = Ending(
            index=admission.index,
            planned=admission.planned,
            started_at=started_at,
            status=status,
            argv=self.options.argv,
            preflight=preflighted,
            telemetry="nvml" if getattr(self.telemetry, "available", False) else "none",
            counted=self.plan.acceptance.fidelity.counted,
            added=self.options.added,
        )
        return write_trial(self.loaded, self.record, self.device, ending, self.found, self.tracer, self.clock)


def controlled_cases(record: Record, device_uuid: str) -> frozenset[str]:
    """The cases whose negative controls an earlier trial on this device has kept already.

    A control asks whether the fidelity gate catches a known wrong output: the same build, the
    same mutated inputs and the same device give the same answer in every process, so (as the
    sanitizer's checks) the controls run in the first trial on a device that reaches a case, and
    later trial processes spend their time on samples."""
    return frozenset(c.case for t in record.trials() if t.provenance.device.uuid == device_uuid for c in t.controls)


def _failure(exc: Exception, where: Where) -> Failure:
    """A fault as the trial records it: its kind, the case and arm it happened in, its message."""
    if isinstance(exc, EntryPointFailed):
        kind, message = "fault", exc.message
    elif isinstance(exc, KernelFault):
        kind, message = ("timeout" if isinstance(exc, LaunchHang) else "fault"), exc.message
    elif isinstance(exc, DeviceError):
        kind, message = "error", exc.message
    else:
        kind = "error"
        message = exc.one_line() if isinstance(exc, QualifyError) else f"internal error: {exc!r}"
    return Failure(kind=kind, case=where.case, side=where.side, message=message)
