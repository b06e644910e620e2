"""One trial of a plan on one device: build → load → inputs → fidelity → controls → ABBA timing.

The engine takes a device (real or fake) and a telemetry reader, appends the trial to the record's
ledger before touching the GPU, and writes the trial file however the trial ends — complete,
failed or interrupted — so evidence already gathered is never lost.
"""

from __future__ import annotations

import hashlib
import struct
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from qualify.build.arms import kernel_spec
from qualify.build.nvrtc import compile_kernel, nvrtc_version
from qualify.errors import DeviceError, FrozenInputChanged, QualifyError, ToolError, UsageError
from qualify.results import samples as samples_io
from qualify.results.samples import TrialSamples, key
from qualify.evaluate.stopping import stop_reason
from qualify.evaluate.recompute import derived_fields, kernel_fields
from qualify.evaluate.summarize import floor_ns, has_series, pair_stats
from qualify.evaluate.verdict import fidelity_passes
from qualify.plan.checks import warmup_launches
from qualify.plan.digest import lock_path, sha256_bytes, sha256_file
from qualify.plan.load import LoadedPlan
from qualify.plan.model import LibraryArm
from qualify.plan.resolve import ResolvedCase
from qualify.results.model import (
    CaseTrial, CodeIdentity, ControlResult, Failure, KernelTrace, LibraryInfo, Trial, TrialCost,
)
from qualify.results.store import Record, now_iso
from qualify.run import code_identity, provenance
from qualify.run.arms import ArmExec
from qualify.run import golden_stage
from qualify.run.controls import mutate
from qualify.run.device import MAX_BATCH, KernelFault, LaunchHang
from qualify.evaluate.device_match import device_matches
from qualify.evaluate.fidelity import compare
from qualify.run.demangle import demangle_all
from qualify.run.library import EntryPointFailed, LibraryEntry, load_library
from qualify.plan.schedule import AA, MAIN, block_halves

FLOOR_SAMPLES = 100
# Samples of kernels at least this long are queued a whole ABBA half behind one blocking kernel;
# shorter ones one sample per blocking kernel. Measured on the H200 (benchmarks/timer/boundary.py):
# a launch queued behind other samples reads 0.2-0.5 µs longer than one queued alone, whatever
# pause separates them - 5-10 % of a 5 µs kernel, under 0.2 % from here up.
BATCH_MIN_NS = 250_000.0
SANITIZER_WORKERS = 4
# "timing" is the time spent queueing and waiting for samples; "readback" (checking the timed
# launches' outputs) and "telemetry" (NVML) are counted apart from it.
# "inventory" is the CUPTI trace of a few calls per arm, taken after a case's timing.
STAGES = ("build", "preflight", "inputs", "fidelity", "controls", "timing", "readback", "telemetry", "inventory",
          "sanitizer")  # fmt: skip
# A device-wide sync right after the stream's stop event returns in microseconds; a wait beyond
# this means work was still running elsewhere on the device.
ESCAPE_MIN_NS = 50_000.0
SIDES = ("base", "candidate")


class BudgetExhausted(FrozenInputChanged):
    """A trial beyond the plan's budget was asked for."""


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


@dataclass
class _CaseFacts:
    """What a case produced apart from timing (timing is derived from the samples at the end)."""

    case: str
    input_sha256: dict
    resources: dict
    parity: list
    deterministic: dict
    timed_outputs_match: bool = True
    stream_escape_ns: dict = field(default_factory=dict)
    stopped: dict = field(default_factory=dict)  # pair -> the stop rule's reason
    trace: dict | None = None  # side -> [TracedCall], the raw CUPTI trace of the case


def samples_per_trial(loaded: LoadedPlan) -> int:
    s = loaded.plan.schedule
    per_case = s.blocks * 4 * s.samples_per_block * (2 if loaded.plan.controls.aa else 1)
    return per_case * len(loaded.cases)


class TrialRunner:
    def __init__(self, loaded: LoadedPlan, device, telemetry, options: RunOptions):
        self.loaded = loaded
        self.plan = loaded.plan
        self.device = device
        self.telemetry = telemetry
        self.options = options
        self.record = Record(options.record_dir)
        self.samples = TrialSamples()
        self.failures: list[Failure] = []
        self.facts: list[_CaseFacts] = []
        self.controls: list[ControlResult] = []
        self.sanitizer: list = []
        self.libraries: dict[str, LibraryInfo] = {}
        self.kernels: dict[str, object] = {}
        self.code: CodeIdentity | None = None
        self.control_kernels: dict[str, object] = {}
        self.started = time.monotonic()
        self.stages: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        self._stage_stack: list[str] = []
        self._input_pool = ThreadPoolExecutor(max_workers=1)  # one case ahead, at most
        self._input_futures: dict[str, Future] = {}
        # golden-based fidelity (qualify/run/golden_stage.py); None when the plan compares with base
        self.golden = golden_stage.open_golden(loaded)
        self.tolerance: dict[str, object] = {}
        self.control_outcomes: list = []
        # why no kernel trace is taken (None: traced); set once the device is known
        self.untraced: str | None = None
        self._limits = None  # the device's occupancy limits, read at the first trace
        self._null_calls: list = []  # traced calls of qualify's one-thread kernel (the second timer's offset)

    @contextmanager
    def _stage(self, name: str):
        """Adds the wall time spent inside to the stage's total (kept in the trial file); time in a
        nested stage counts for the nested one only."""
        start = time.monotonic()
        self._stage_stack.append(name)
        try:
            yield
        finally:
            self._stage_stack.pop()
            spent = time.monotonic() - start
            self.stages[name] += spent
            if self._stage_stack:
                self.stages[self._stage_stack[-1]] -= spent

    # -- admission --------------------------------------------------------------------------

    def admit(self) -> tuple[int, bool]:
        info = self.device.info
        planned = device_matches(info, self.plan.hardware.devices)
        if not planned and not self.options.exploratory:
            raise DeviceError(
                f"{info.name} (cc {info.compute_capability}) is not among the plan's devices; "
                "pass --exploratory to run anyway (the record is then marked unplanned)"
            )
        if info.arch not in self.plan.hardware.architectures and not self.options.exploratory:
            raise DeviceError(f"{info.arch} is not among the plan's architectures")
        self._check_library_binding()  # before anything is written to the record
        # One worker per GPU may share the record (`--devices`): the index is taken, and this
        # device's dangling trials closed, under the record's lock; another device's open trial
        # may be running now and is left alone.
        with self.record.locked():
            self.record.close_dangling(info.uuid)
            self.record.bind(self.loaded.path, self.loaded.digest)
            used = self.record.trials_on_device(info.uuid)
            if len(used) >= self.plan.budget.max_trials:
                raise BudgetExhausted(
                    f"budget spent: {len(used)} of {self.plan.budget.max_trials} trials already ran on "
                    f"{info.name} {info.uuid} (failed and interrupted ones count)",
                    file=self.record.folder,
                )
            index = self.record.next_trial_index()
            self.record.append({"event": "trial_started", "trial": index, "digest": self.loaded.digest,
                                "device_uuid": info.uuid, "device": info.name})  # fmt: skip
        return index, planned

    # -- the trial --------------------------------------------------------------------------

    def run(self) -> Trial:
        index, planned = self.admit()
        started_at = now_iso()
        status = "complete"
        pending: Exception | None = None
        try:
            # The isolated workers run while this process builds and generates the first inputs;
            # nothing is timed before they are done.
            if self.loaded.cases:
                self._prefetch(self.loaded.cases[0])
            with ThreadPoolExecutor(max_workers=1) as side_pool:
                preflight = side_pool.submit(self._preflight)
                with self._stage("build"):
                    self._load_kernels()
                    self.untraced = self._trace_missing()
                with self._stage("preflight"):
                    bad = preflight.result()
            if bad:
                status = "failed"  # the verdict cannot be "qualified"; the other cases still run
            cold = self.plan.schedule.cache == "cold"
            with self._stage("timing"):  # the empty window, measured the way samples are
                for ns in self.device.time_samples(lambda: None, FLOOR_SAMPLES, cold=cold):
                    self.samples.add_floor(ns)
            for case in self.loaded.cases:
                if case.id in bad:
                    continue
                if not self._run_case(case):
                    status = "failed"
                    break
            self._case = self._side = None
            if status == "complete":
                with self._stage("sanitizer"):
                    self._sanitize()
        except ToolError as exc:  # keep the trial, then report the missing tool (exit 6)
            pending = exc
        except KeyboardInterrupt:
            status = "interrupted"
            self.failures.append(Failure(kind="interrupted", message="interrupted (SIGINT or SIGTERM)"))
        except EntryPointFailed as exc:
            status = "failed"
            self.failures.append(Failure(kind="fault", case=self._case, side=self._side, message=exc.message))
        except KernelFault as exc:
            status = "failed"
            kind = "timeout" if isinstance(exc, LaunchHang) else "fault"
            self.failures.append(Failure(kind=kind, case=self._case, side=self._side, message=exc.message))
        except DeviceError as exc:
            status = "failed"
            self.failures.append(Failure(kind="error", case=self._case, side=self._side, message=exc.message))
        except Exception as exc:  # noqa: BLE001 - a build or plan problem, or a bug: keep the trial
            status = "failed"
            message = exc.one_line() if isinstance(exc, QualifyError) else f"internal error: {exc!r}"
            self.failures.append(Failure(kind="error", case=self._case, side=self._side, message=message))
            pending = exc  # then report it with its own exit code
        trial = self._finish(index, planned, started_at, status)
        if pending is not None:
            raise pending
        return trial

    _case: str | None = None
    _side: str | None = None

    def _load_kernels(self) -> None:
        arch = self.device.info.arch
        compiled = {}
        for side in SIDES:
            arm = self.plan.arm(side)
            self._side = side
            if isinstance(arm, LibraryArm):
                self.kernels[side] = self._load_library(side, arm)
                continue
            compiled[side] = compile_kernel(kernel_spec(self.loaded, side, arch))
            smem = max(c.arms[side].launch.shared_bytes for c in self.loaded.cases)
            self.kernels[side] = self.device.load_kernel(side, compiled[side], smem)
        self._side = None
        self.code = self._code_identity(compiled, arch)

    def _code_identity(self, compiled: dict, arch: str) -> CodeIdentity:
        """Both arms' machine code compared once the arms are built and loaded; never fatal."""
        try:
            if len(compiled) == len(SIDES):
                return code_identity.nvrtc(compiled["base"], compiled["candidate"], self.loaded.cases, arch)
            if len(self.libraries) == len(SIDES):
                return code_identity.library(Path(self.libraries["base"].path), Path(self.libraries["candidate"].path),
                                             arch)  # fmt: skip
            return code_identity.unknown(arch, "library", "one arm is a library and the other compiled by NVRTC")
        except (ValueError, struct.error) as exc:  # a malformed binary this reader did not foresee
            return code_identity.unknown(arch, "nvrtc" if compiled else "library", f"unreadable device code: {exc}")

    def _preflight(self) -> set[str]:
        """Cases whose kernels fault or hang in a child worker; recorded, then left out here.

        The two arms' workers run at the same time: nothing is timed while they run.
        """
        if self.options.preflight is None:
            return set()
        bad: set[str] = set()
        kinds = {"fault": "fault", "timeout": "timeout", "error": "error"}
        ids = [c.id for c in self.loaded.cases]
        with ThreadPoolExecutor(max_workers=len(SIDES)) as pool:
            outcomes = list(pool.map(lambda side: self.options.preflight(side, ids), SIDES))
        for side, results in zip(SIDES, outcomes):
            for outcome in results:
                if outcome.status != "ok":
                    bad.add(outcome.case)
                    self.failures.append(Failure(kind=kinds[outcome.status], case=outcome.case, side=side,
                                                 message=f"in an isolated worker: {outcome.message}"))  # fmt: skip
            self.options.progress(0, f"preflight {side}")
        return bad

    def _sanitize(self) -> None:
        """The plan's compute-sanitizer checks, once per device (the first trial that gets there).

        The checks run SANITIZER_WORKERS at a time, after all timing: each is a process of its own
        and none is timed. Results are kept in the plan's order; with fail-fast on "sanitizer",
        checks not yet started when one finds something are not started.
        """
        checks = self.plan.acceptance.sanitizer
        if not checks or self.options.sanitize is None:
            return
        uuid = self.device.info.uuid
        if any(t.sanitizer for t in self.record.trials() if t.provenance.device.uuid == uuid):
            return
        fail_fast = "sanitizer" in self.plan.stop.fail_fast
        jobs = [(check.tool, cid, side, check.timeout_seconds) for check in checks for cid in check.cases for side in SIDES]
        stop = False

        def one(job):
            if stop:
                return None
            return self.options.sanitize(*job)

        with ThreadPoolExecutor(max_workers=SANITIZER_WORKERS) as pool:
            futures = [pool.submit(one, job) for job in jobs]
            for job, future in zip(jobs, futures):
                self._case, self._side = job[1], job[2]
                result = future.result()
                if result is None:
                    continue
                self.sanitizer.append(result)
                self.options.progress(0, f"{job[0]} {job[1]} {job[2]}: {result.status}")
                if result.status != "clean" and fail_fast:
                    stop = True
        self._case = self._side = None

    def _load_library(self, side: str, arm: LibraryArm) -> LibraryEntry:
        path = self._library_path(side)
        if path is None:
            raise UsageError(f"the {side} arm names no library: give it to `qualify compare`",
                             file=self.loaded.path, field=f"arms.{side}.library")  # fmt: skip
        entry = load_library(side, Path(path), arm, f"arms.{side}.library")
        self.libraries[side] = LibraryInfo(path=str(path), sha256=entry.sha256, symbol=arm.symbol,
                                           abi_version=entry.abi_version)  # fmt: skip
        return entry

    def _library_path(self, side: str) -> Path | None:
        arm = self.plan.arm(side)
        if not isinstance(arm, LibraryArm):
            return None
        given = self.options.libraries.get(side)
        if given is not None:
            return Path(given)
        return None if arm.library is None else self.loaded.path.parent / arm.library

    def _check_library_binding(self) -> None:
        """A record compares one pair of builds: another build is refused before the ledger moves."""
        for side in SIDES:
            if not isinstance(self.plan.arm(side), LibraryArm):
                continue
            path = self._library_path(side)
            if path is None:
                raise UsageError(f"the {side} arm names no library: give it to `qualify compare`",
                                 file=self.loaded.path, field=f"arms.{side}.library")  # fmt: skip
            if not path.is_file():
                continue  # reported with its field when the library is loaded
            digest = sha256_file(path)
            for t in self.record.trials():
                info = t.libraries.get(side)
                if info is not None and info.sha256 != digest:
                    raise FrozenInputChanged(f"the record's trials compared another {side} library; "
                                             "a different build needs a new record", file=path)  # fmt: skip

    def _over_time(self) -> bool:
        return time.monotonic() - self.started > self.plan.budget.max_wall_seconds

    def _run_case(self, case: ResolvedCase) -> bool:
        """Run one case; False stops the trial (fail-fast or budget)."""
        self._case = case.id
        execs: dict[str, ArmExec] = {}
        self._refs: dict[str, dict[str, object]] = {}
        self._allocations: list = []  # the case's device buffers, some shared by both arms
        try:
            with self._stage("inputs"):
                hashes, host_inputs = self._prepare_case(case, execs)
            return self._measure_case(case, execs, hashes, host_inputs)
        finally:
            for buf in self._allocations:
                self.device.free(buf)
            self._allocations = []
            for refs in self._refs.values():
                for buf in refs.values():
                    self.device.free(buf)

    def _prepare_case(self, case: ResolvedCase, execs: dict[str, ArmExec]):
        """Allocate each arm's buffers into `execs` (freed by the caller however this ends) and
        upload the seeded inputs; returns the inputs' hashes and host copies."""
        dev = self.device
        inputs = self._inputs(case).result()
        hashes: dict[str, str] = {}
        host_inputs: dict[str, dict[str, np.ndarray]] = {}
        # Both arms use the same device buffers wherever their buffers agree in name, type and
        # shape: two allocations of one size can run measurably apart (their placement in memory
        # differs), which would be read as a difference between the arms. Measured on the H200 by
        # benchmarks/calibration (identical kernels on separate buffers: 0.3-0.6 % apart).
        shared: dict[tuple, object] = {}
        for side in SIDES:
            arm = case.arms[side]
            buffers: dict[str, object] = {}
            outputs = [b.name for b in arm.buffers if b.role == "output"]
            execs[side] = ArmExec(side, self.kernels[side], arm, buffers, outputs)
            for b in arm.buffers:
                shape = (b.name, b.dtype, b.shape)
                if shape not in shared:
                    shared[shape] = dev.alloc(b.nbytes)
                    self._allocations.append(shared[shape])
                buffers[b.name] = shared[shape]
            host_inputs[side] = {}
            for name, data in inputs[side].items():
                dev.upload(buffers[name], data)
                host_inputs[side][name] = data
                hashes.setdefault(name, hashlib.sha256(data).hexdigest())
            execs[side].bind_args()
        return hashes, host_inputs

    def _inputs(self, case: ResolvedCase) -> Future:
        """The case's inputs per arm, generated on the host in the background: the next case's
        while this one is timed (the host only waits on the GPU then)."""
        self._prefetch(case)
        following = self.loaded.cases.index(case) + 1
        if following < len(self.loaded.cases):
            self._prefetch(self.loaded.cases[following])
        return self._input_futures.pop(case.id)

    def _prefetch(self, case: ResolvedCase) -> None:
        if case.id not in self._input_futures:
            self._input_futures[case.id] = self._input_pool.submit(self._generate_inputs, case)

    def _generate_inputs(self, case: ResolvedCase) -> dict[str, dict[str, np.ndarray]]:
        specs = [s for s in self.plan.workload.buffers if s.role == "input"]
        out = {}
        for side in SIDES:
            arm = case.arms[side]
            out[side] = golden_stage.case_inputs(self.plan, self.golden, case.id, arm)
        return out

    def _measure_case(self, case, execs, hashes, host_inputs) -> bool:
        dev, plan = self.device, self.plan
        with self._stage("fidelity"):
            facts, reference, dtypes = self._fidelity(case, execs, hashes)
            for side, ex in execs.items():  # the reference bytes on the device, for the timed launches' check
                self._refs[side] = {}
                for n in ex.outputs:
                    self._refs[side][n] = dev.alloc(reference[side][n].nbytes)
                    dev.upload(self._refs[side][n], reference[side][n])
        with self._stage("controls"):
            self._run_controls(case, execs, host_inputs, reference["base"], dtypes)
        fail_fast = set(plan.stop.fail_fast)
        fidelity_ok = fidelity_passes(facts.parity, plan.acceptance.fidelity)
        if self.golden is not None:  # the gate is the golden's; base-vs-candidate parity stays informative
            self.tolerance[case.id], problems = golden_stage.judge(plan, self.golden, case, reference, dtypes)
            fidelity_ok = not problems
            for problem in problems:
                self.failures.append(Failure(kind="fidelity", case=case.id, message=problem))
        if not fidelity_ok or not all(facts.deterministic.values()):
            if self.golden is None or not all(facts.deterministic.values()):  # golden problems are in already
                self.failures.append(Failure(kind="fidelity", case=case.id,
                                             message=_fidelity_message(facts.parity, facts.deterministic)))  # fmt: skip
            if "fidelity" in fail_fast:
                return False
        with self._stage("timing"):
            if not self._warmup(case, execs):
                return False
            ok = self._abba(case, execs, reference, facts, MAIN)
            if ok and plan.controls.aa:
                ok = self._abba(case, {"base": execs["base"]}, reference, facts, AA)
        if ok and self.untraced is None:
            with self._stage("inventory"):  # after the timing: tracing never touches a timed sample
                self._trace(case, execs, facts)
        return ok

    def _trace_missing(self) -> str | None:
        if self.plan.schedule.traced_calls == 0:
            return "off (schedule.traced_calls is 0)"
        why = self.device.trace_missing()
        return None if why is None else f"not taken: {why}"

    def _trace(self, case, execs, facts) -> None:
        """schedule.traced_calls calls per arm under CUPTI: the kernels each launches and the
        second timer. A CUPTI failure ends tracing for the trial (said in the record); a kernel
        fault is the trial's, as anywhere else."""
        cold = self.plan.schedule.cache == "cold"
        calls = self.plan.schedule.traced_calls
        trace = {}
        try:
            if self._limits is None:  # read while the context is sound: the trial may end in a fault
                self._limits = self.device.limits()
                # what a traced window holds beyond its kernels, measured once per trial, before
                # the first arm's trace (the second timer subtracts it)
                self._null_calls = self.device.trace_null_calls(calls, cold)
            for side, ex in execs.items():
                self._side = side
                trace[side] = self.device.trace_calls(lambda ex=ex: ex.enqueue(self.device), calls, side, cold)
        except (KernelFault, EntryPointFailed):
            raise
        except DeviceError as exc:  # CUPTI's own failure
            self.untraced = f"stopped at {case.id} ({self._side}): {exc.one_line()}"
            return
        finally:
            self._side = None
        facts.trace = trace

    def _fidelity(self, case, execs, hashes):
        """Resources, reference outputs, determinism, parity and the stream-escape check of a case."""
        dev = self.device
        resources = {
            side: dev.resources(ex.kernel, ex.resolved.launch.threads_per_block, ex.resolved.launch.shared_bytes)
            for side, ex in execs.items()
            if ex.resolved.launch is not None
        }
        reference, deterministic = {}, {}
        for side, ex in execs.items():
            self._side = side
            reference[side] = ex.run_once(dev)
            again = ex.run_once(dev)
            deterministic[side] = all(np.array_equal(reference[side][n], again[n]) for n in ex.outputs)
        self._side = None
        dtypes = {b.name: b.dtype for b in case.arms["base"].buffers}
        parity = [compare(n, dtypes[n], reference["base"][n], reference["candidate"][n]) for n in execs["base"].outputs]
        facts = _CaseFacts(case.id, hashes, resources, parity, deterministic)
        facts.stream_escape_ns = {side: self._escape_wait(ex) for side, ex in execs.items()}
        for side, waited in facts.stream_escape_ns.items():
            if waited > ESCAPE_MIN_NS:
                self.failures.append(Failure(kind="fault", case=case.id, side=side, message=(
                    f"work escaped qualify's stream: the device stayed busy {waited / 1e3:.1f} µs after "
                    "the stream finished (an entry point launching on a stream of its own?)")))  # fmt: skip
        self.facts.append(facts)
        return facts, reference, dtypes

    def _escape_wait(self, ex: ArmExec) -> float:
        """Nanoseconds the device stays busy after qualify's stream has finished one call.

        Events on qualify's stream time only the work queued there; work an entry point sends to
        another stream escapes them and would look free. A device-wide synchronisation after the
        stop event shows it: the median of three calls waits for any such work.
        """
        waits = []
        for _ in range(3):
            self.device.synchronize()
            self.device.time_sample(lambda: ex.enqueue(self.device), cold=False, block_stream=False)
            start = time.perf_counter_ns()
            self.device.check_idle()
            waits.append(time.perf_counter_ns() - start)
        return float(sorted(waits)[1])

    def _run_controls(self, case, execs, host_inputs, base_ref, dtypes) -> None:
        cand = execs["candidate"]
        for control in self.plan.controls.negative:
            if control.cases is not None and case.id not in control.cases:
                continue
            if control.kind == "input":
                spec = next(b for b in case.arms["candidate"].buffers if b.name == control.buffer)
                original = host_inputs["candidate"][control.buffer]
                mutated = mutate(original, spec.dtype, control.mutation, case.arms["candidate"].params)
                self.device.upload(cand.buffers[control.buffer], mutated)
                try:
                    out = cand.run_once(self.device)
                finally:
                    self.device.upload(cand.buffers[control.buffer], original)
            else:
                kernel = self._control_kernel(control)
                variant = ArmExec("candidate", kernel, cand.resolved, cand.buffers, cand.outputs, cand.args)
                out = variant.run_once(self.device)
            parity = [compare(n, dtypes[n], base_ref[n], out[n]) for n in cand.outputs]
            if self.golden is not None:
                outcome = golden_stage.control(self.plan, self.golden, case, control, out, dtypes)
                self.control_outcomes.append(outcome)
                problem = golden_stage.control_problem(outcome)
                if problem:
                    self.failures.append(Failure(kind="fidelity", case=case.id, message=problem))
                # `caught` reads "behaved as declared" here: a control declared to pass must pass
                self.controls.append(ControlResult(name=control.name, kind=control.kind, case=case.id,
                                                   caught=outcome.as_declared,
                                                   differing_elements=sum(p.differing_elements for p in parity)))  # fmt: skip
                continue
            self.controls.append(ControlResult(
                name=control.name, kind=control.kind, case=case.id,
                caught=not fidelity_passes(parity, self.plan.acceptance.fidelity),
                differing_elements=sum(p.differing_elements for p in parity),
            ))  # fmt: skip

    def _control_kernel(self, control):
        if control.name not in self.control_kernels:
            spec = kernel_spec(self.loaded, "candidate", self.device.info.arch, extra_defines=control.defines)
            smem = max(c.arms["candidate"].launch.shared_bytes for c in self.loaded.cases)
            self.control_kernels[control.name] = self.device.load_kernel(
                f"candidate+{control.name}", compile_kernel(spec), smem
            )
        return self.control_kernels[control.name]

    def _warmup(self, case, execs) -> bool:
        """The plan's warm-up launches per arm, inside the trial's wall budget: one is timed, and
        only as many more as the budget has room for run. False: no room left (budget failure).

        Without the blocking kernel: a first launch may load lazily, which deadlocks behind it.
        A few host round trips per arm and case; not worth batching."""
        planned = self.plan.schedule.warmup
        budget = self.plan.budget.max_wall_seconds
        for side, ex in execs.items():
            self._side = side
            if planned == 0:
                continue
            enqueue = lambda ex=ex: ex.enqueue(self.device)  # noqa: E731
            first = self.device.time_sample(enqueue, cold=False, block_stream=False)
            self.samples.add_warmup(case.id, side, first)
            elapsed = time.monotonic() - self.started
            more = warmup_launches(planned - 1, elapsed, first / 1e9, budget)
            for _ in range(more):
                self.samples.add_warmup(case.id, side, self.device.time_sample(enqueue, cold=False, block_stream=False))
            if more < planned - 1:
                self._side = None
                self.failures.append(Failure(kind="budget", case=case.id, side=side, message=(
                    f"wall-time budget of {budget:g} s spent during warm-up ({1 + more} of {planned} launches)")))  # fmt: skip
                return False
        self._side = None
        return True

    def _abba(self, case, execs, reference, facts, pair) -> bool:
        """The ABBA blocks of one pair: each half's samples queued behind one blocking kernel.

        Per half: one batch on the device (device.time_samples), one telemetry reading shared by
        the half's samples, and one read-back of the outputs, compared with the reference.
        """
        sched, dev = self.plan.schedule, self.device
        cold = sched.cache == "cold"
        iterations = sched.iterations_per_sample
        batch = batch_size(self.samples.arrays(), case.id, sched.samples_per_block, iterations)
        started = time.monotonic()
        for block in range(sched.blocks):
            for half in block_halves(block, pair):
                ex = execs[half.side]
                self._side = half.side
                enqueue = lambda ex=ex: ex.enqueue(dev, iterations)  # noqa: E731
                if cold:  # poisoned before each sample, outside its window
                    poison = lambda ex=ex: ex.poison_outputs(dev)  # noqa: E731
                    times = dev.time_samples(enqueue, sched.samples_per_block, cold=True,
                                             before_each=poison, max_batch=batch)  # fmt: skip
                else:
                    ex.poison_outputs(dev)
                    times = dev.time_samples(enqueue, sched.samples_per_block, cold=False, max_batch=batch)
                with self._stage("telemetry"):
                    r = self.telemetry.read()
                for ns in times:
                    self.samples.add(case.id, half.series, ns=ns, block=block,
                                     sm_mhz=r.sm_mhz, throttle=r.throttle, temp_c=r.temp_c)  # fmt: skip
                self.options.progress(sched.samples_per_block, f"{case.id} {half.series}")
                with self._stage("readback"):
                    refs = self._refs[half.side]
                    if any(dev.differs(ex.buffers[n], refs[n]) for n in ex.outputs):
                        facts.timed_outputs_match = False
            self._side = None
            if self._over_time():
                self.failures.append(Failure(kind="budget", case=case.id,
                                             message=f"wall-time budget of {self.plan.budget.max_wall_seconds:g} s spent"))  # fmt: skip
                return False
            reason = stop_reason(self.samples.arrays(), case.id, pair, block + 1, self.plan,
                                 elapsed_s=time.monotonic() - started)  # fmt: skip
            if reason is not None:
                facts.stopped["aa" if pair == AA else "comparison"] = reason
                break
        return True

    # -- the end ----------------------------------------------------------------------------

    def _finish(self, index: int, planned: bool, started_at: str, status: str) -> Trial:
        self._input_pool.shutdown(wait=False, cancel_futures=True)
        arrays = self.samples.arrays()
        data = samples_io.save(self.record.samples_path(index), arrays)
        iterations = self.plan.schedule.iterations_per_sample
        floor = floor_ns(arrays)
        kernel_trace = self._kernel_trace()
        cases = []
        for f in self.facts:
            if not all(has_series(arrays, f.case, s) for s in SIDES):
                continue  # stopped before timing; its samples (if any) stay in the npz
            cases.append(CaseTrial(
                case=f.case, input_sha256=f.input_sha256, resources=f.resources,
                parity=f.parity, deterministic=f.deterministic,
                timed_outputs_match=f.timed_outputs_match, stream_escape_ns=f.stream_escape_ns,
                stopped=f.stopped,
                tolerance=self.tolerance.get(f.case),
                trace=f.trace,
                **derived_fields(arrays, f.case, iterations),  # what `report --check` recomputes
                **kernel_fields(f.trace, kernel_trace, floor),
            ))  # fmt: skip
        trial = Trial(
            index=index,
            status=status,
            plan_digest=self.loaded.digest,
            started_at=started_at,
            ended_at=now_iso(),
            provenance=provenance.collect(self.device.info, self.loaded.files.root, planned,
                                          nvrtc_version(), self.options.argv,
                                          paths=[self.loaded.path, lock_path(self.loaded.path),
                                                 *self.loaded.files.files.values()]),  # fmt: skip
            timer={
                "mode": self.plan.schedule.timing,
                "cache": self.plan.schedule.cache,
                "floor_ns": floor,
                "floor_samples": int(arrays.get("floor_ns", np.empty(0)).size),
                "iterations_per_sample": iterations,
                # a case's halves are queued behind one blocking kernel each when its warm-ups
                # are at least this long, else one sample per blocking kernel (batch_size)
                "batch_min_ns": BATCH_MIN_NS,
                "preflight": "none" if self.options.preflight is None else (
                    "reused from this run's first trial" if getattr(self.options.preflight, "reused", False)
                    else "isolated workers"),
                "max_batch": MAX_BATCH,
                "telemetry": "nvml" if getattr(self.telemetry, "available", False) else "none",
            },
            cases=cases,
            controls=self.controls,
            control_outcomes=self.control_outcomes if self.golden is not None else None,
            code=None if self.code is None else code_identity.with_traced_launches(self.code, cases),
            kernel_trace=kernel_trace,
            sanitizer=self.sanitizer,
            libraries=self.libraries,
            failures=self.failures,
            samples_file=self.record.samples_path(index).relative_to(self.record.folder).as_posix(),
            samples_sha256=sha256_bytes(data),
            cost=trial_cost(arrays, time.monotonic() - self.started, self.stages),
        )
        self.record.write_trial(trial)
        self.record.append({"event": "trial_ended", "trial": index, "status": status})
        return trial

    def _kernel_trace(self) -> KernelTrace:
        """How this trial traced: the tool (or why it did not), the names as demangled here."""
        launched = [k.name for f in self.facts for calls in (f.trace or {}).values() for c in calls for k in c.kernels]
        demangler, names = demangle_all(launched) if launched else ("none", {})
        traced = any(f.trace for f in self.facts)
        tool = self.device.trace_tool() if traced else (self.untraced or "not taken: no case was timed")
        if traced and self.untraced:
            tool = f"{tool}; {self.untraced}"
        return KernelTrace(tool=tool, demangler=demangler, names=names, limits=self._limits if traced else None,
                           null_calls=self._null_calls if traced else [])


def batch_size(arrays: dict[str, np.ndarray], case_id: str, samples_per_block: int, iterations: int) -> int:
    """Samples per blocking kernel for a case: a whole half when both arms' warm-up medians reach
    BATCH_MIN_NS per launch, else 1. Both arms get the same size, so whatever offset batching adds
    is the same on both sides. Derived from the warm-ups kept in the samples file."""
    medians = []
    for side in SIDES:
        warm = arrays.get(key(case_id, side, "warmup_ns"))
        if warm is None or warm.size == 0:
            return 1
        medians.append(float(np.median(warm)))
    return min(samples_per_block, MAX_BATCH) if min(medians) >= BATCH_MIN_NS else 1


def trial_cost(arrays: dict[str, np.ndarray], wall_s: float, stages: dict[str, float]) -> TrialCost:
    """What a trial cost: its wall time against the time the GPU spent inside timed windows.

    GPU-busy is the sum of every timed window in the samples file (floor, warm-ups, ABBA and A/A
    samples); everything else — builds, workers, inputs, flushes, host work — is overhead.
    """
    busy_ns = sum(float(np.sum(a)) for k, a in arrays.items() if k == "floor_ns" or k.endswith(("/ns", "/warmup_ns")))
    busy_s = busy_ns / 1e9
    # the fraction of the figures as recorded, so that a reader's gpu_busy_s / wall_s gives it back
    # (of a 0.09 s trial, the unrounded wall time moved it by up to 0.002)
    wall_s = round(wall_s, 3)
    return TrialCost(wall_s=wall_s, gpu_busy_s=round(busy_s, 6),
                     busy_fraction=round(busy_s / wall_s, 4) if wall_s > 0 else 0.0,
                     stages_s={k: round(v, 3) for k, v in stages.items()})  # fmt: skip


def _fidelity_message(parity, deterministic) -> str:
    parts = [
        f"{p.buffer}: {p.differing_elements} of {p.elements} elements differ from base, first at "
        f"index {p.first_difference}" + (f", up to {p.max_ulp} ulp" if p.max_ulp is not None else "")
        for p in parity
        if not p.equal
    ]
    parts += [f"{side} gave different bytes on two runs" for side, ok in deterministic.items() if not ok]
    return "; ".join(parts) or "outputs outside the fidelity bound"
