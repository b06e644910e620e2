"""`qualify plan rehearse`: the plan's fidelity contract tried on the CPU before any GPU time.

For every case: the seeded inputs `run` would upload (their sha256), the expected values (the
plan's golden, or a float64 reference rounded to each output's dtype), a simulated candidate
(`qualify.evaluate.rehearsal.reordered`: the expected values moved as a change of summation order
moves them) and the plan's own gate applied to it, with the same entries, counts and calibration
as a trial. Input controls are simulated too where a reference can evaluate the mutated inputs. The
result is written as REHEARSAL.md and rehearsal.json into a folder outside records/, marked as a
rehearsal; a plan whose gate refuses the simulated candidate, or whose control the gate cannot
see, is a plan error (exit 2), found before a trial counts.

With a device (`--device N` on a GPU host, the fake device in tests) each CUDA arm also runs once
per case with a guard after every output and scratch buffer (`qualify.run.bounds`): a launch that
writes past a buffer's declared size is a plan error too, naming the case, the launch, the buffer
and how many bytes past. Without one, the rehearsal says it did not check.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qualify.commands.golden import PlanView, Reference, case_params, check_host_budget
from qualify.errors import PlanError, UsageError
from qualify.evaluate.fidelity import compare
from qualify.evaluate.rehearsal import declared_identical, reordered
from qualify.evaluate.tolerance_gate import calibrate, control_outcome, judge_case, passes
from qualify.evaluate.verdict import fidelity_passes
from qualify.io import atomic_write_text
from qualify.plan.golden import Golden, load_golden
from qualify.plan.load import load_plan
from qualify.plan.model import ARM_SIDES, CudaArm, GoldenInit, InputControl
from qualify.plan.resolve import ResolvedCase
from qualify.render.rehearsal import rehearsal_markdown
from qualify.results.rehearsal import Rehearsal, RehearsedCase, RehearsedControl
from qualify.run import bounds, golden_stage
from qualify.run.arms import compile_and_load, unload
from qualify.run.controls import mutate
from qualify.run.device import KernelFault
from qualify.run.device_protocol import Device
from qualify.run.reference import host_values, reference_outputs

# 16 steps: the softmax pair's two summation orders differ by up to 1.0e-6 relative (9 to 17 f32
# steps) on 4096-term rows on the H200 (tests/gpu/test_softmax_gpu.py); longer reductions need more
DEFAULT_REORDER_ULP = 16
REORDER_HINT = (
    "a change of summation order needs a bound that holds a few ulp (mode 'tolerance' with rtol above "
    "k·eps of the dtype; `qualify probe` measures it on a GPU); rehearse a change that keeps every bit "
    "with --reorder-ulp 0"
)


def check_folder(out: Path) -> Path:
    """A rehearsal never lands in records/ nor over a record: it must not pass for one."""
    resolved = out.resolve()
    if "records" in resolved.parts:
        raise UsageError("a rehearsal is not a record: write it outside records/", file=out, field="--out")
    if (resolved / "results.json").exists():
        raise UsageError("holds a record (results.json): choose another folder", file=out, field="--out")
    return resolved


def _sha256(data: np.ndarray) -> str:
    return hashlib.sha256(data.tobytes()).hexdigest()


class _Expected:
    """The expected values of a case: the golden's outputs, else the reference's of given inputs."""

    def __init__(self, loaded: PlanView, golden: Golden | None, reference: Reference | None):
        self.loaded, self.golden, self.reference = loaded, golden, reference

    @property
    def words(self) -> str:
        if self.golden is not None:
            return f"the golden file {self.loaded.plan.acceptance.fidelity.golden} (provenance checked)"
        if self.reference is not None:
            return f"the float64 reference {self.reference.spec}, rounded to each output's dtype"
        return "none: give --reference file.py:function (or a golden) to simulate the outputs"

    def outputs(self, case: ResolvedCase, inputs: dict[str, np.ndarray], from_golden: bool = True):
        if self.golden is not None and from_golden:
            return {b.name: self.golden.expected(case.id, b.name) for b in _outputs(case)}
        if self.reference is None:
            return None
        arm = case.arms["candidate"]
        host = {n: host_values(arm.buffer(n).dtype, a, arm.buffer(n).shape) for n, a in inputs.items()}
        wanted = {b.name: (b.dtype, b.shape) for b in _outputs(case)}
        try:
            with np.errstate(over="ignore"):  # beyond the dtype: infinity, which the gate counts as non-finite
                return reference_outputs(
                    self.reference.function, case_params(self.loaded, case), host, wanted, self.loaded.path, case.id
                )
        except PlanError as exc:
            raise UsageError(exc.message, file=self.reference.script, field="--reference") from None


def _outputs(case: ResolvedCase):
    return [b for b in case.arms["candidate"].buffers if b.role == "output"]


@dataclass(frozen=True)
class _Case:
    """One case as the rehearsal sees it: its inputs, expected values and simulated candidate."""

    case: ResolvedCase
    params: dict
    dtypes: dict[str, str]  # output -> dtype
    inputs: dict[str, np.ndarray]
    truth: dict[str, np.ndarray]  # the expected values, rounded to each output's dtype

    def candidate(self, fid, values: dict[str, np.ndarray], reorder_ulp: int, seed: int) -> dict[str, np.ndarray]:
        """`values` as a reordered candidate would give them (declared bit-exact outputs kept)."""
        cid = self.case.id
        return {
            n: v.copy()
            if declared_identical(fid, cid, self.params, n)
            else reordered(v, self.dtypes[n], reorder_ulp, seed, cid, n)
            for n, v in values.items()
        }


def rehearse(
    loaded: PlanView,
    reference: Reference | None,
    out: Path,
    reorder_ulp: int = DEFAULT_REORDER_ULP,
    seed: int = 0,
    only: list[str] | None = None,
    device: Device | None = None,
) -> Rehearsal:
    """Rehearse every case (or the cases `only` names) and input control, write the folder, and
    return what was found. Cases are rehearsed one at a time: one case's inputs and outputs are
    what the rehearsal holds at once."""
    folder = check_folder(out)
    known = [c.id for c in loaded.cases]
    known_set = set(known)  # membership per named case, not a scan of every case
    for cid in only or []:
        if cid not in known_set:
            raise UsageError(f"undeclared case {cid!r} (cases: {', '.join(known)})", field="--cases")
    check_host_budget(loaded, "plan rehearse")
    plan, fid = loaded.plan, loaded.plan.acceptance.fidelity
    golden_path = loaded.path.parent / fid.golden if fid.golden is not None else None
    problems: list[str] = []
    golden = None
    if golden_path is not None and golden_path.exists():
        golden = load_golden(plan, loaded.path, loaded.root, loaded.cases)
    elif golden_path is not None:
        problems.append(
            f"acceptance.fidelity.golden: {fid.golden} does not exist yet: write it with "
            "`qualify golden make PLAN --reference file.py:function`"
        )
    has_golden_inputs = any(isinstance(b.init, GoldenInit) for b in plan.workload.buffers)
    expected = _Expected(loaded, golden, reference)
    cases, controls = [], []
    chosen = set(only or ())
    # the cases each control runs in, as sets: looked up once per case, not scanned
    control_cases: list[set[str] | None] = [None if c.cases is None else set(c.cases) for c in plan.controls.negative]
    for case in loaded.cases:
        if chosen and case.id not in chosen:
            continue
        if has_golden_inputs and golden is None:
            cases.append(RehearsedCase(case=case.id, input_sha256={}, simulated=False, passed=None))
            continue
        rehearsed, tried, found = _rehearse_case(loaded, golden, expected, case, reorder_ulp, seed, control_cases)
        cases.append(rehearsed)
        controls += tried
        problems += found
    checked = [c for c in loaded.cases if not chosen or c.id in chosen]
    words, fields = None, []
    if device is not None and golden_path is not None and golden is None:
        words = "not checked: the golden (its inputs and the plan's digest) is missing"
    elif device is not None:
        seen, words = _buffer_bounds(loaded, device, checked, golden)
        problems += [o.line() if isinstance(o, bounds.Overrun) else o for o in seen]
        fields = [_field(loaded, o) for o in seen if isinstance(o, bounds.Overrun)]
    rehearsal = Rehearsal(
        plan=plan.name,
        plan_digest=loaded.digest or "none yet (the golden is missing)",
        frozen=loaded.frozen,
        expected_from=expected.words,
        simulation=(
            f"each float output moved a seeded whole number of steps in [-{reorder_ulp}, {reorder_ulp}] of its "
            "dtype from the expected values (a change of summation order), except where the plan declares it "
            "bit-exact"
            if reorder_ulp
            else "identical to the expected values"
        ),
        reorder_ulp=reorder_ulp,
        seed=seed,
        cases=cases,
        controls=controls,
        problems=problems,
        hint=REORDER_HINT if reorder_ulp and any(c.passed is False for c in cases) else None,
        **({"buffer_bounds": words} if words else {}),
        overrun_fields=fields,
    )
    # written by qualify.io under --out's folder: a link planted in the folder is refused, never followed
    atomic_write_text(folder / "rehearsal.json", rehearsal.model_dump_json(indent=1) + "\n", root=folder)
    atomic_write_text(folder / "REHEARSAL.md", rehearsal_markdown(plan, rehearsal), root=folder)
    return rehearsal


def _rehearse_case(
    loaded: PlanView,
    golden: Golden | None,
    expected: _Expected,
    case: ResolvedCase,
    reorder_ulp: int,
    seed: int,
    control_cases: list[set[str] | None],
) -> tuple[RehearsedCase, list[RehearsedControl], list[str]]:
    """One case and its controls (`control_cases`: the cases each control runs in, None for all).
    A function of its own so that the case's arrays (inputs, expected values, simulated outputs)
    are released when it returns, before the next case's are made: the rehearsal holds one case
    at a time."""
    plan, fid = loaded.plan, loaded.plan.acceptance.fidelity
    inputs = golden_stage.case_inputs(plan, golden, case.id, case.arms["candidate"])
    sha = {n: _sha256(a) for n, a in inputs.items()}
    truth = expected.outputs(case, inputs)
    if truth is None:
        return RehearsedCase(case=case.id, input_sha256=sha, simulated=False, passed=None), [], []
    dtypes = {b.name: b.dtype for b in _outputs(case)}
    one = _Case(case, case_params(loaded, case), dtypes, inputs, truth)
    judged, problems = _judge_case(fid, one, one.candidate(fid, truth, reorder_ulp, seed))
    controls = []
    for control, runs_in in zip(plan.controls.negative, control_cases):
        if runs_in is None or case.id in runs_in:
            rehearsed, problem = _rehearse_control(fid, control, one, expected, reorder_ulp, seed)
            controls.append(rehearsed)
            problems += [problem] if problem else []
    return judged.model_copy(update={"input_sha256": sha}), controls, problems


def _field(loaded: PlanView, overrun: bounds.Overrun) -> str:
    """The plan field that declares the buffer written past: the arm's scratch or the workload's buffer."""
    arm = loaded.plan.arm(overrun.side)
    own = [b.name for b in arm.scratch] if isinstance(arm, CudaArm) else []
    if overrun.buffer in own:
        return f"arms.{overrun.side}.scratch[{own.index(overrun.buffer)}]"
    names = [b.name for b in loaded.plan.workload.buffers]
    return f"workload.buffers[{names.index(overrun.buffer)}]"


def _buffer_bounds(
    loaded: PlanView, device: Device, cases: list[ResolvedCase], golden
) -> tuple[list[bounds.Overrun | str], str]:
    """Each CUDA arm (compiled for the device, loaded once) run once per case with guarded outputs
    and scratch, the case's buffers freed before the next: each buffer written past, and a line for a
    launch that faulted."""
    full = load_plan(loaded.path)  # what the worker compiles: the plan's lock and repository
    sides = [s for s in ARM_SIDES if isinstance(loaded.plan.arm(s), CudaArm)]
    problems: list[bounds.Overrun | str] = []
    for side in sides:
        kernel = compile_and_load(device, full, side, cases, label=f"bounds:{side}")[1]
        for case in cases:
            arm = case.arms[side]
            buffers = bounds.allocate(device, arm)
            inputs = golden_stage.case_inputs(loaded.plan, golden, case.id, arm)
            try:
                found = bounds.run_guarded(device, side, kernel, case.id, arm, inputs, buffers)
            except KernelFault as exc:  # the context is lost on a GPU: nothing more runs on it, not even a free
                problems.append(f"{case.id}: {side}: the launch faulted ({exc.message}); nothing after it was run")
                return problems, f"stopped at a fault: {problems[-1]}"
            problems += found
            bounds.free(device, buffers)
        unload(device, kernel)
    words = (
        f"checked on {device.info.name}: the {' and '.join(sides) or 'no CUDA'} arm(s) run once in each of "
        f"{len(cases)} case(s), each output and scratch buffer followed by a guard read back after every launch"
    )
    return problems, words


def _judge_case(fid, one: _Case, simulated: dict[str, np.ndarray]) -> tuple[RehearsedCase, list[str]]:
    """The plan's gate on one case's simulated candidate: counts under each output's entry
    (counted fidelity, with the calibration when the plan has one), else parity and the mode."""
    cid, params, dtypes, truth = one.case.id, one.params, one.dtypes, one.truth
    problems: list[str] = []
    counts, parity, resolutions = [], [], []
    if fid.counted:
        counts = judge_case(fid, cid, params, dtypes, truth, simulated)
        passed = all(passes(c) for c in counts)
        problems += [
            f"{cid}: {c.output}: the simulated candidate fails the bound (|err| ≤ {c.atol:g} + "
            f"{c.rtol:g}·|expected|): {c.elements - c.identical} of {c.elements} differ, worst bound fraction "
            f"{_fraction(c.worst_bound_fraction)} at index {c.worst_index}"
            for c in counts
            if not passes(c)
        ]
        for n in dtypes if fid.calibration is not None else ():
            r = calibrate(fid, fid.calibration, cid, params, n, dtypes[n], truth[n], simulated[n])
            resolutions.append(r)
            if r.vacuous:
                problems.append(
                    f"{cid}: {n}: the gate caught no perturbation up to "
                    f"{fid.calibration.ceiling_quanta} quanta: it is vacuous here"
                )
    else:
        parity = [compare(n, dtypes[n], truth[n], simulated[n]) for n in dtypes]
        passed = fidelity_passes(parity, fid)
        if not passed:
            bad = ", ".join(
                f"{p.buffer}: {p.differing_elements} of {p.elements} differ, up to {p.max_ulp} ulp"
                for p in parity
                if not p.equal
            )
            problems.append(f"{cid}: the simulated candidate fails mode {fid.mode!r}: {bad}")
    judged = RehearsedCase(
        case=cid,
        input_sha256={},
        simulated=True,
        counts=counts,
        parity=parity,
        calibration=resolutions,
        passed=passed,
    )
    return judged, problems


def _rehearse_control(
    fid, control, one: _Case, expected: _Expected, reorder_ulp: int, seed: int
) -> tuple[RehearsedControl, str | None]:
    """An input control simulated by the reference on the mutated inputs, judged as a trial
    judges it; a build control (or one without a reference) is listed as not rehearsed."""
    cid = one.case.id
    if not isinstance(control, InputControl) or expected.reference is None:
        why = (
            f"a {control.kind} control needs the kernel"
            if not isinstance(control, InputControl)
            else ("needs --reference to evaluate the mutated inputs")
        )
        return RehearsedControl(control=control.name, case=cid, simulated=False, caught=None, note=why), None
    arm = one.case.arms["candidate"]
    mutated = dict(one.inputs)
    mutated[control.buffer] = mutate(
        one.inputs[control.buffer], arm.buffer(control.buffer).dtype, control.mutation, arm.params
    )
    got = one.candidate(fid, expected.outputs(one.case, mutated, from_golden=False), reorder_ulp, seed)
    outcome = None
    if fid.counted:
        counts = judge_case(fid, cid, one.params, one.dtypes, one.truth, got)
        outcome = control_outcome(control, cid, one.params, counts)
        caught = outcome.as_declared
    else:
        caught = not fidelity_passes([compare(n, one.dtypes[n], one.truth[n], got[n]) for n in one.dtypes], fid)
    rehearsed = RehearsedControl(control=control.name, case=cid, simulated=True, caught=caught, outcome=outcome)
    if caught:
        return rehearsed, None
    if outcome is None:
        why = "passes the gate: the gate cannot see it"
    else:  # which output behaved otherwise than declared, and how
        wrong = [
            f"{name} {'passed' if outcome.passed[name] else 'failed'} where '{outcome.expected[name]}' was declared"
            for name in outcome.expected
            if outcome.passed[name] != (outcome.expected[name] == "pass")
        ]
        why = f"is not as declared: {'; '.join(wrong)}"
    return rehearsed, f"{cid}: negative control {control.name} {why}"


def _fraction(value: float | None) -> str:
    return "infinite" if value is None else f"{value:.3g}"
