"""Negative controls: the candidate run on mutated inputs, rebuilt with a control's defines, or (a
Python candidate) called with `control=<name>`, and its outputs judged by the fidelity gate, which
must catch each one (or, under counted fidelity, `Fidelity.counted`, behave as the control
declares)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from qualify.evaluate.fidelity import compare
from qualify.evaluate.verdict import fidelity_passes
from qualify.plan.golden import Golden
from qualify.plan.load import LoadedPlan
from qualify.plan.resolve import ResolvedCase
from qualify.results.model import ControlResult
from qualify.results.tolerance import ControlOutcome
from qualify.run import golden_stage
from qualify.run.arms import ArmExec, compile_and_load
from qualify.run.controls import mutate
from qualify.run.device_protocol import Device
from qualify.run.python_arm import PythonEntry
from qualify.run.stages.case_setup import CaseSetup
from qualify.run.stages.fidelity import Reference
from qualify.run.stages.where import watch


@dataclass(frozen=True)
class ControlFound:
    result: ControlResult
    outcome: ControlOutcome | None  # counted fidelity's outcome (None when base parity decides)
    problem: str | None  # why the control did not behave as declared


class ControlKernels:
    """The candidate rebuilt with each kernel control's defines, built and loaded once a trial."""

    def __init__(self, loaded: LoadedPlan, device: Device):
        self._loaded = loaded
        self._device = device
        self._loaded_kernels: dict[str, object] = {}

    def get(self, control, candidate: object = None) -> object:
        if control.kind == "callable":  # the candidate's own function, told which control it is
            assert isinstance(candidate, PythonEntry)  # plan checks: a callable control needs a Python candidate
            return candidate.with_control(control.name)
        if control.name not in self._loaded_kernels:
            label = f"candidate+{control.name}"
            _, kernel = compile_and_load(
                self._device, self._loaded, "candidate", self._loaded.cases, control.defines, label
            )
            self._loaded_kernels[control.name] = kernel
        return self._loaded_kernels[control.name]


def run_controls(
    loaded: LoadedPlan,
    golden: Golden | None,
    case: ResolvedCase,
    setup: CaseSetup,
    ref: Reference,
    kernels: ControlKernels,
    device,
) -> Iterator[ControlFound]:
    """Each of the case's controls in the plan's order, yielded as soon as it is judged (a fault
    in a later one keeps the earlier ones). Every launch here is the candidate's."""
    plan = loaded.plan
    cand = setup.arms["candidate"]
    base_ref = ref.outputs["base"]
    for control in plan.controls.negative:
        if control.cases is not None and case.id not in control.cases:
            continue
        with watch(case.id, "candidate"):
            out = _run_one(control, case, setup, cand, kernels, device)
        parity = [compare(n, ref.dtypes[n], base_ref[n], out[n]) for n in cand.outputs]
        differing = sum(p.differing_elements for p in parity)
        if plan.acceptance.fidelity.counted:
            outcome = golden_stage.control(plan, golden, case, control, out, ref.dtypes, base_ref)
            # `caught` reads "behaved as declared" here: a control declared to pass must pass
            result = ControlResult(
                name=control.name,
                kind=control.kind,
                case=case.id,
                caught=outcome.as_declared,
                differing_elements=differing,
            )
            yield ControlFound(result, outcome, golden_stage.control_problem(outcome))
            continue
        caught = not fidelity_passes(parity, plan.acceptance.fidelity)
        result = ControlResult(
            name=control.name, kind=control.kind, case=case.id, caught=caught, differing_elements=differing
        )
        yield ControlFound(result, None, None)


def _run_one(control, case: ResolvedCase, setup: CaseSetup, cand: ArmExec, kernels: ControlKernels, device: Device):
    """The candidate's outputs under one control; a mutated input is restored however the run ends."""
    if control.kind == "input":
        spec = next(b for b in case.arms["candidate"].buffers if b.name == control.buffer)
        original = setup.host_inputs["candidate"][control.buffer]
        mutated = mutate(original, spec.dtype, control.mutation, case.arms["candidate"].params)
        device.upload(cand.buffers[control.buffer], mutated)
        try:
            return cand.run_once(device)
        finally:
            device.upload(cand.buffers[control.buffer], original)
    variant = ArmExec(
        "candidate",
        kernels.get(control, cand.kernel),
        cand.resolved,
        cand.buffers,
        cand.outputs,
        cand.args,
        cand.step_args,
    )
    if control.kind == "callable":
        variant.bind_args()
    return variant.run_once(device)
