"""Cross-field rules of a plan: names that must exist, budgets that must hold the schedule.

Each rule raises PlanError with the field path at fault. These need the whole plan but no files;
rules about files live in `qualify.plan.files`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from qualify import expr
from qualify.errors import PlanError, all_of
from qualify.plan.model import (
    ARM_SIDES,
    Arg,
    ArmLaunch,
    BufferArg,
    CaseSelector,
    CudaArm,
    LibraryArm,
    Plan,
    PythonArm,
)
from qualify.plan.model.hardware import unrunnable_device
from qualify.plan.resolve import case_id, case_key

# builds the PlanError of a rule: (field path, message), the plan's file already known
Fail = Callable[[str, str], PlanError]
# a buffer's role by name: "input", "output" or "scratch"
Roles = dict[str, str]


def cross_check(plan: Plan, file: str | None = None) -> None:
    """Every cross-field rule; PlanError (Problems when several) naming each field at fault."""
    problems = structure_problems(plan, file) + selector_problems(plan, file)
    if problems:
        raise all_of(problems)


def _collect(rules: Sequence[Callable[[Fail], None]], fail: Fail) -> list[PlanError]:
    """Run each rule (a callable raising PlanError), collecting the first refusal of each: rules
    are independent, so a plan's problems are listed together rather than one per round."""
    out: list[PlanError] = []
    for rule in rules:
        try:
            rule(fail)
        except PlanError as exc:
            out.extend(e for e in exc.each() if isinstance(e, PlanError))
    return out


def _failer(file: str | None) -> Fail:
    def fail(field: str, message: str) -> PlanError:
        return PlanError(message, file=file, field=field)

    return fail


def structure_problems(plan: Plan, file: str | None = None) -> list[PlanError]:
    """The rules the resolution of cases depends on: devices, parameters, cases, buffers and the
    launches' and calls' references. Each group reports its first refusal."""
    wl = plan.workload
    roles: Roles = {b.name: b.role for b in wl.buffers}

    def devices(fail: Fail) -> None:
        for i, device in enumerate(plan.hardware.devices):
            reason = unrunnable_device(plan.hardware.architectures, device)
            if reason is not None:
                raise fail(f"hardware.devices[{i}]", reason)

    def cases(fail: Fail) -> None:
        # Cases compare by value: S=1 and S=1.0 are one case whatever the JSON spelling or key order.
        first = _first_repeat([case_key(c) for c in wl.cases])
        if first is not None:
            i, j = first
            raise fail(
                f"workload.cases[{j}]", f"case {case_id(wl.cases[j])} is declared twice (as workload.cases[{i}] too)"
            )

    def buffers(fail: Fail) -> None:
        _refuse_repeated_name([b.name for b in wl.buffers], "workload.buffers", "buffer", fail)
        if not any(b.role == "output" for b in wl.buffers):
            raise fail("workload.buffers", "no buffer has role 'output': there is nothing to compare")

    def launches(fail: Fail) -> None:
        kinds = {type(plan.arm(side)) for side in ARM_SIDES}
        own = [_cuda_launches(plan, s) is None for s in ARM_SIDES if isinstance(plan.arm(s), CudaArm)]
        if any(own) and wl.launch is None:
            raise fail("workload.launch", "a CUDA arm that names `kernel` needs workload.launch")
        for side in ARM_SIDES:
            _check_own_launches(plan.arm(side), roles, f"arms.{side}", fail)
        if LibraryArm in kinds and wl.call is None:
            raise fail("workload.call", "shared-library arms need the call's arguments")
        for field, args in (
            ("workload.launch.args", wl.launch.args if wl.launch else []),
            ("workload.call", wl.call or []),
        ):
            for k, arg in enumerate(args):
                if isinstance(arg, BufferArg) and arg.name not in roles:
                    raise fail(f"{field}[{k}].name", f"unknown buffer {arg.name!r}")
        for side in ARM_SIDES:
            arm = plan.arm(side)
            if isinstance(arm, LibraryArm):
                _check_signature(arm, wl.call or [], f"arms.{side}", fail)

    return _collect((devices, lambda fail: _check_parameters(plan, fail), cases, buffers, launches), _failer(file))


def selector_problems(plan: Plan, file: str | None = None) -> list[PlanError]:
    """The rules of what selects cases and outputs (gates, tolerances, sanitizer checks, controls)
    and of the budget; nothing is resolved from them, so they are checked alongside the rest."""
    wl = plan.workload
    known_cases = {case_id(c) for c in wl.cases}
    roles: Roles = {b.name: b.role for b in wl.buffers}

    def gates(fail: Fail) -> None:
        _refuse_repeated_name([g.name for g in plan.acceptance.gates], "acceptance.gates", "gate", fail)
        for i, gate in enumerate(plan.acceptance.gates):
            _check_selector(gate, plan, known_cases, f"acceptance.gates[{i}]", fail)
        for i, rule in enumerate(plan.gate.cases):
            _check_selector(rule, plan, known_cases, f"gate.cases[{i}]", fail)

    def sanitizer(fail: Fail) -> None:
        for i, check in enumerate(plan.acceptance.sanitizer):
            _check_case_ids(check.cases, known_cases, f"acceptance.sanitizer[{i}].cases", fail)

    def controls(fail: Fail) -> None:
        _refuse_repeated_name([c.name for c in plan.controls.negative], "controls.negative", "control", fail)
        for i, control in enumerate(plan.controls.negative):
            field = f"controls.negative[{i}]"
            if control.cases is not None:
                _check_case_ids(control.cases, known_cases, f"{field}.cases", fail)
            if control.kind == "input":
                if control.buffer not in roles:
                    raise fail(f"{field}.buffer", f"unknown buffer {control.buffer!r}")
                if roles[control.buffer] != "input":
                    raise fail(f"{field}.buffer", f"{control.buffer!r} is not an input buffer")
            elif control.kind == "callable":
                if not isinstance(plan.arms.candidate, PythonArm):
                    raise fail(f"{field}.kind", "callable controls need a Python candidate arm")
            elif not isinstance(plan.arms.candidate, CudaArm):
                raise fail(f"{field}.kind", "build controls need a CUDA source candidate arm")

    rules = (
        gates,
        lambda fail: _check_tolerances(plan, known_cases, roles, fail),
        sanitizer,
        controls,
        lambda fail: _check_budget(plan, fail),
    )
    return _collect(rules, _failer(file))


def _check_tolerances(plan: Plan, known: set[str], roles: Roles, fail: Fail) -> None:
    """A rule that selects nothing is a typo that would leave the default bound in force unseen."""
    for i, rule in enumerate(plan.acceptance.fidelity.tolerances):
        field = f"acceptance.fidelity.tolerances[{i}]"
        _check_selector(rule, plan, known, field, fail)
        for j, name in enumerate(rule.outputs or []):
            if roles.get(name) != "output":
                outputs = ", ".join(sorted(n for n, r in roles.items() if r == "output"))
                raise fail(f"{field}.outputs[{j}]", f"{name!r} is not an output buffer (outputs: {outputs})")
        if rule.outputs == []:
            raise fail(f"{field}.outputs", "an empty list selects no output")
    # exact[] holds outputs bit for bit; an input named there would hold nothing, silently
    for i, sel in enumerate(plan.acceptance.fidelity.exact):
        for j, name in enumerate(sel.outputs or []):
            if roles.get(name) != "output":
                outputs = ", ".join(sorted(n for n, r in roles.items() if r == "output"))
                raise fail(
                    f"acceptance.fidelity.exact[{i}].outputs[{j}]",
                    f"{name!r} is not an output buffer (outputs: {outputs})",
                )


def _refuse_repeated_name(names: list[str], field: str, what: str, fail: Fail) -> None:
    """A name declared twice is refused at its second declaration's `name` field."""
    repeat = _first_repeat(names)
    if repeat is not None:
        j = repeat[1]
        raise fail(f"{field}[{j}].name", f"{what} {names[j]!r} is declared twice")


def _first_repeat(items: Sequence[Hashable]) -> tuple[int, int] | None:
    """(first index, repeating index) of the first item seen twice, in one pass: a plan with
    tens of thousands of cases is checked in linear time."""
    seen: dict[Hashable, int] = {}
    for j, item in enumerate(items):
        i = seen.setdefault(item, j)
        if i != j:
            return i, j
    return None


def _check_parameters(plan: Plan, fail: Fail) -> None:
    wl = plan.workload
    keys = sorted(wl.cases[0])
    for i, case in enumerate(wl.cases):
        if not case:
            raise fail(f"workload.cases[{i}]", "a case must set at least one parameter")
        if sorted(case) != keys:
            raise fail(f"workload.cases[{i}]", f"sets {sorted(case)}; every case must set {keys}")
    sources = {"workload.params": set(wl.params), "workload.cases": set(keys)}
    arm_params = [set(plan.arm(side).params) for side in ARM_SIDES]
    # one shared workload.launch needs every name it uses in both arms; an arm with its own
    # launches has its own geometry, so its parameters are its own
    # (and a Python arm's parameters go to its own function, not to a shared launch)
    own = any(_cuda_launches(plan, side) is not None or isinstance(plan.arm(side), PythonArm) for side in ARM_SIDES)
    if arm_params[0] != arm_params[1] and not own:
        raise fail("arms.candidate.params", "both arms must set the same parameters")
    sources["arms.*.params"] = arm_params[0] | arm_params[1]
    seen: dict[str, str] = {}
    for where, names in sources.items():
        for name in sorted(names):
            if name in expr.FUNCTIONS:
                raise fail(where, f"parameter {name!r} shadows a function")
            if name in seen:
                raise fail(where, f"parameter {name!r} is also set in {seen[name]}")
            seen[name] = where


def _check_signature(arm: LibraryArm, call: list[Arg], field: str, fail: Fail) -> None:
    if len(arm.signature) != len(call):
        raise fail(
            f"{field}.signature",
            f"{len(arm.signature)} types for {len(call)} arguments in workload.call",
        )
    for k, (ctype, arg) in enumerate(zip(arm.signature, call)):
        expected = "ptr" if isinstance(arg, BufferArg) else arg.kind
        if ctype != expected:
            raise fail(f"{field}.signature[{k}]", f"{ctype!r} but workload.call[{k}] is {expected!r}")
    if (arm.abi_symbol is None) != (arm.abi_version is None):
        raise fail(f"{field}.abi_version", "abi_symbol and abi_version go together")


def _check_case_ids(ids: list[str], known: set[str], field: str, fail: Fail) -> None:
    for j, cid in enumerate(ids):
        if cid not in known:
            raise fail(f"{field}[{j}]", f"undeclared case {cid!r} (cases: {', '.join(sorted(known))})")


def _check_selector(sel: CaseSelector, plan: Plan, known: set[str], field: str, fail: Fail) -> None:
    if sel.cases is not None and sel.where is not None:
        raise fail(field, "give cases or where, not both")
    if sel.cases is not None:
        _check_case_ids(sel.cases, known, f"{field}.cases", fail)
    if sel.where is not None:
        if not selected_cases(sel, plan, field, fail):
            raise fail(f"{field}.where", f"{sel.where!r} selects no case")


def selected_cases(sel: CaseSelector, plan: Plan, field: str = "", fail: Fail | None = None) -> list[str]:
    """Ids of the cases a gate or control applies to (all cases when it names none)."""
    out = []
    for case in plan.workload.cases:
        cid = case_id(case)
        if sel.cases is not None:
            chosen = cid in sel.cases
        elif sel.where is not None:
            try:
                chosen = bool(expr.evaluate(sel.where, {**plan.workload.params, **case}))
            except expr.ExprError as exc:
                if fail is None:
                    raise
                raise fail(f"{field}.where", f"case {cid}: {exc}") from None
        else:
            chosen = True
        if chosen:
            out.append(cid)
    return out


def _check_budget(plan: Plan, fail: Fail) -> None:
    sched, budget = plan.schedule, plan.budget
    per_block = 2 * sched.samples_per_block  # each arm runs twice per A B B A block
    if budget.max_samples < per_block:
        raise fail(
            "budget.max_samples",
            f"{budget.max_samples} is smaller than one ABBA block ({per_block} samples per arm)",
        )
    if plan.stop.rule == "fixed" and sched.blocks * per_block > budget.max_samples:
        raise fail(
            "budget.max_samples",
            f"the fixed schedule needs {sched.blocks * per_block} samples per arm and case",
        )
    if sched.trials > budget.max_trials:
        raise fail("schedule.trials", f"{sched.trials} trials exceed budget.max_trials")
    if plan.stop.min_blocks > sched.blocks:
        raise fail("stop.min_blocks", f"{plan.stop.min_blocks} exceeds schedule.blocks")


def warmup_launches(planned: int, elapsed_s: float, per_launch_s: float, max_wall_s: float) -> int:
    """How many of a case's `planned` warm-up launches (per arm) fit in what is left of the trial's
    wall budget, `elapsed_s` into it, at `per_launch_s` each (the first warm-up's time).

    Warm-up counts against budget.max_wall_seconds like everything else in a trial: the engine
    times one warm-up launch, asks this for the rest and stops the trial over budget when none fits.
    """
    if planned <= 0:
        return 0
    left = max_wall_s - elapsed_s
    if left <= 0:
        return 0
    if per_launch_s <= 0:
        return planned
    return min(planned, int(left // per_launch_s))


def _cuda_launches(plan: Plan, side: str) -> list[ArmLaunch] | None:
    """A CUDA arm's own launches (None for one that names `kernel`, and for a library arm)."""
    arm = plan.arm(side)
    return arm.launches if isinstance(arm, CudaArm) else None


def _check_own_launches(arm: CudaArm | LibraryArm | PythonArm, roles: Roles, field: str, fail: Fail) -> None:
    """An arm's own launches pass buffers of the workload or of its own scratch; a scratch buffer
    is named once and never shadows a workload buffer."""
    if not isinstance(arm, CudaArm) or arm.launches is None:
        return
    own: set[str] = set()
    for j, buf in enumerate(arm.scratch):
        if buf.name in roles or buf.name in own:
            raise fail(f"{field}.scratch[{j}].name", f"buffer {buf.name!r} is declared twice")
        own.add(buf.name)
    named = set()
    for i, launch in enumerate(arm.launches):
        for k, arg in enumerate(launch.args):
            if isinstance(arg, BufferArg) and arg.name not in roles and arg.name not in own:
                raise fail(f"{field}.launches[{i}].args[{k}].name", f"unknown buffer {arg.name!r}")
            if isinstance(arg, BufferArg):
                named.add(arg.name)
    # a scratch buffer no launch is passed is a typo or a leftover: the launch that was meant to
    # use it writes elsewhere, and its declared size bounds nothing
    for j, buf in enumerate(arm.scratch):
        if buf.name not in named:
            raise fail(
                f"{field}.scratch[{j}]",
                f"scratch buffer {buf.name!r} is passed to none of the arm's launches; pass it in "
                "a launch's args or remove it",
            )
