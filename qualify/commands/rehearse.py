"""`qualify plan rehearse`: the plan's fidelity contract tried on the CPU before any GPU time.

For every case: the seeded inputs `run` would upload (their sha256), the expected values (the
plan's golden, or a float64 reference rounded to each output's dtype), a simulated candidate
(`qualify.evaluate.rehearsal.reordered`: the expected values moved as a change of summation order
moves them) and the plan's own gate applied to it, with the same entries, counts and calibration
as a trial. Input controls are simulated too where a reference can evaluate the mutated inputs. The
result is written as REHEARSAL.md and rehearsal.json into a folder outside records/, marked as a
rehearsal; a plan whose gate refuses the simulated candidate, or whose control the gate cannot
see, is a plan error (exit 2), found before a trial counts.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from qualify.commands.golden import PlanView, Reference, case_params
from qualify.errors import PlanError, UsageError
from qualify.evaluate.fidelity import compare
from qualify.evaluate.rehearsal import declared_identical, reordered
from qualify.evaluate.tolerance_gate import calibrate, control_outcome, judge_case, passes
from qualify.evaluate.verdict import fidelity_passes
from qualify.plan.golden import Golden, load_golden
from qualify.plan.model import GoldenInit, InputControl
from qualify.plan.resolve import ResolvedCase
from qualify.render.rehearsal import rehearsal_markdown
from qualify.results.rehearsal import Rehearsal, RehearsedCase, RehearsedControl
from qualify.run import golden_stage
from qualify.run.controls import mutate
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
        wanted = {b.name: (b.dtype, b.elements) for b in _outputs(case)}
        try:
            with np.errstate(over="ignore"):  # beyond the dtype: infinity, which the gate counts as non-finite
                return reference_outputs(
                    self.reference.function, case_params(self.loaded, case), host, wanted, self.loaded.path, case.id
                )
        except PlanError as exc:
            raise UsageError(exc.message, file=self.reference.script, field="--reference") from None


def _outputs(case: ResolvedCase):
    return [b for b in case.arms["candidate"].buffers if b.role == "output"]


def rehearse(
    loaded: PlanView,
    reference: Reference | None,
    out: Path,
    reorder_ulp: int = DEFAULT_REORDER_ULP,
    seed: int = 0,
) -> Rehearsal:
    """Rehearse every case and input control, write the folder, and return what was found."""
    folder = check_folder(out)
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
    for case in loaded.cases:
        params = case_params(loaded, case)
        if has_golden_inputs and golden is None:
            cases.append(RehearsedCase(case=case.id, input_sha256={}, simulated=False, passed=None))
            continue
        inputs = golden_stage.case_inputs(plan, golden, case.id, case.arms["candidate"])
        truth = expected.outputs(case, inputs)
        sha = {n: _sha256(a) for n, a in inputs.items()}
        if truth is None:
            cases.append(RehearsedCase(case=case.id, input_sha256=sha, simulated=False, passed=None))
            continue
        dtypes = {b.name: b.dtype for b in _outputs(case)}

        def candidate(values: dict[str, np.ndarray], case=case, params=params, dtypes=dtypes):
            return {
                n: v.copy()
                if declared_identical(fid, case.id, params, n)
                else reordered(v, dtypes[n], reorder_ulp, seed, case.id, n)
                for n, v in values.items()
            }

        simulated = candidate(truth)
        counts, parity, resolutions = [], [], []
        if fid.counted:
            counts = judge_case(fid, case.id, params, dtypes, truth, simulated)
            passed = all(passes(c) for c in counts)
            problems += [
                f"{case.id}: {c.output}: the simulated candidate fails the bound (|err| ≤ {c.atol:g} + "
                f"{c.rtol:g}·|expected|): {c.elements - c.identical} of {c.elements} differ, worst bound fraction "
                f"{_fraction(c.worst_bound_fraction)} at index {c.worst_index}"
                for c in counts
                if not passes(c)
            ]
            if fid.calibration is not None:
                for n in dtypes:
                    r = calibrate(fid, fid.calibration, case.id, params, n, dtypes[n], truth[n], simulated[n])
                    resolutions.append(r)
                    if r.vacuous:
                        problems.append(
                            f"{case.id}: {n}: the gate caught no perturbation up to "
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
                problems.append(f"{case.id}: the simulated candidate fails mode {fid.mode!r}: {bad}")
        cases.append(
            RehearsedCase(
                case=case.id,
                input_sha256=sha,
                simulated=True,
                counts=counts,
                parity=parity,
                calibration=resolutions,
                passed=passed,
            )
        )
        for control in plan.controls.negative:
            if control.cases is not None and case.id not in control.cases:
                continue
            if not isinstance(control, InputControl) or reference is None:
                why = (
                    "a build control needs the kernel"
                    if not isinstance(control, InputControl)
                    else ("needs --reference to evaluate the mutated inputs")
                )
                controls.append(
                    RehearsedControl(control=control.name, case=case.id, simulated=False, caught=None, note=why)
                )
                continue
            spec = case.arms["candidate"].buffer(control.buffer)
            mutated = dict(inputs)
            mutated[control.buffer] = mutate(
                inputs[control.buffer], spec.dtype, control.mutation, case.arms["candidate"].params
            )
            got = candidate(expected.outputs(case, mutated, from_golden=False))
            outcome = None
            if fid.counted:
                outcome = control_outcome(
                    control, case.id, params, judge_case(fid, case.id, params, dtypes, truth, got)
                )
                caught = outcome.as_declared
            else:
                caught = not fidelity_passes([compare(n, dtypes[n], truth[n], got[n]) for n in dtypes], fid)
            controls.append(
                RehearsedControl(control=control.name, case=case.id, simulated=True, caught=caught, outcome=outcome)
            )
            if not caught:
                problems.append(
                    f"{case.id}: negative control {control.name} "
                    + ("is not as declared" if outcome is not None else "passes the gate: the gate cannot see it")
                )
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
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rehearsal.json").write_text(rehearsal.model_dump_json(indent=1) + "\n")
    (folder / "REHEARSAL.md").write_text(rehearsal_markdown(plan, rehearsal))
    return rehearsal


def _fraction(value: float | None) -> str:
    return "infinite" if value is None else f"{value:.3g}"
