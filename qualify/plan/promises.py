"""No vacuous promise: every selector of a plan selects something, every index, bit and count is in
range for its buffer and dtype, and every field a plan sets is one `run` evaluates.

A promise that covers nothing passes in silence: an `exact[]` entry naming a case that does not
exist holds nothing bit-exact, a control flipping bit 40 of an f32 mutates nothing the gate can
see. These rules need the resolved cases (buffer sizes, parameters per arm), so they run where
`plan check` runs (and `plan freeze`, `run` and `compare` with it), after the plan has loaded.
Every problem found is reported, one PlanError each, in the plan's order; selectors are checked
over the plan's own outputs and cases, whatever declares them.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING

from qualify import expr
from qualify.dtypes import ITEMSIZE
from qualify.errors import PlanError, all_of
from qualify.plan.checks import Fail, selected_cases
from qualify.plan.model import CaseSelector, InputControl, Plan
from qualify.plan.resolve import ResolvedCase

if TYPE_CHECKING:
    from qualify.plan.load import LoadedPlan

# The mutation fields each op reads (qualify.run.controls.mutate); any other field set is refused.
MUTATION_FIELDS = {
    "flip_bit": {"index", "bit"},
    "set": {"index", "value"},
    "scale": {"index", "value"},
    "zero": set(),
    "fill": {"value"},
    "swap": {"index", "other", "length"},
}
# What `run` and `compare` evaluate: the base arm's outputs or a golden file. A float64 reference
# serves `qualify probe` (and writing a golden), never a trial.
RUN_EVALUATES = ("base", "golden")


def check_promises(loaded: LoadedPlan) -> None:
    """Refuse every vacuous promise of a loaded plan (`qualify.plan.load.LoadedPlan`)."""
    problems = promise_problems(loaded.plan, loaded.cases, loaded.path)
    if problems:
        raise all_of(problems)


def promise_problems(plan: Plan, cases: list[ResolvedCase], path: Path) -> list[PlanError]:
    found: list[PlanError] = []

    def fail(field: str, message: str) -> PlanError:
        error = PlanError(message, file=path, field=field)
        found.append(error)
        return error

    outputs = [b.name for b in plan.workload.buffers if b.role == "output"]
    known = [c.id for c in cases]
    fid = plan.acceptance.fidelity
    for i, sel in enumerate(fid.exact):
        field = f"acceptance.fidelity.exact[{i}]"
        _selection(sel, plan, known, known, field, fail)
        _outputs(sel.outputs, outputs, field, fail)
    for i, gate in enumerate(plan.acceptance.gates):
        _selection(gate, plan, known, known, f"acceptance.gates[{i}]", fail)
    for i, rule in enumerate(fid.tolerances):
        _selection(rule, plan, known, known, f"acceptance.fidelity.tolerances[{i}]", fail)
    for i, control in enumerate(plan.controls.negative):
        field = f"controls.negative[{i}]"
        if control.cases == []:
            fail(f"{field}.cases", "an empty list selects no case: the control would never run")
        named = None if control.cases is None else set(control.cases)
        applies = known if named is None else [c for c in known if c in named]
        for j, entry in enumerate(control.expect):
            _selection(entry, plan, known, applies, f"{field}.expect[{j}]", fail)
            _outputs(entry.outputs, outputs, f"{field}.expect[{j}]", fail)
        if isinstance(control, InputControl):
            runs_in = [c for c in cases if named is None or c.id in named]
            _mutation(control, runs_in, f"{field}.mutation", fail)
    if fid.calibration is not None:
        _calibration(fid.calibration.elements, cases, outputs, fail)
    if fid.reference is not None:
        _reference(fid.reference, path, fail)
    if fid.against not in RUN_EVALUATES:
        fail(
            "acceptance.fidelity.against",
            f"{fid.against!r} is not evaluated by `run` or `compare` (only `qualify probe` calls a float64 "
            "reference); compare with 'base', or write a golden file from the reference and use 'golden'",
        )
    return found


def _selection(sel: CaseSelector, plan: Plan, known: list[str], applies: list[str], field: str, fail: Fail) -> None:
    """`cases` name cases that exist (and that the owner applies to); `where` selects one of them."""
    if sel.cases is not None:
        if not sel.cases:
            fail(f"{field}.cases", "an empty list selects no case")
        known_set, applies_set = set(known), set(applies)  # membership per named case, not a list scan
        for j, cid in enumerate(sel.cases):
            if cid not in known_set:
                fail(f"{field}.cases[{j}]", f"undeclared case {cid!r} (cases: {', '.join(known)})")
            elif cid not in applies_set:
                fail(f"{field}.cases[{j}]", f"case {cid!r} is not one the control runs in ({', '.join(applies)})")
    if sel.where is not None:
        try:
            chosen = set(selected_cases(sel, plan))
        except expr.ExprError as exc:
            fail(f"{field}.where", str(exc))
            return
        if not chosen & set(applies):
            fail(f"{field}.where", f"{sel.where!r} selects no case (of {', '.join(applies)})")


def _outputs(names: list[str] | None, outputs: list[str], field: str, fail: Fail) -> None:
    if names is None:
        return
    if not names:
        fail(f"{field}.outputs", "an empty list selects no output")
    for j, name in enumerate(names):
        if name not in outputs:
            fail(f"{field}.outputs[{j}]", f"{name!r} is not an output buffer (outputs: {', '.join(outputs)})")


def _mutation(control: InputControl, cases: list[ResolvedCase], field: str, fail: Fail) -> None:
    """The mutation's index, bit and slices inside the candidate's buffer in each case it runs in,
    with the candidate's parameters (what `qualify.run.controls.mutate` evaluates)."""
    m = control.mutation
    unused = sorted(m.model_fields_set - {"op"} - MUTATION_FIELDS[m.op])
    for name in unused:
        fail(f"{field}.{name}", f"op {m.op!r} does not read {name!r}; remove it")
    for case in cases:
        arm = case.arms["candidate"]
        buffer = arm.buffer(control.buffer)
        n, bits = buffer.elements, 8 * ITEMSIZE[buffer.dtype]
        if m.op == "flip_bit" and m.bit >= bits:
            fail(f"{field}.bit", f"bit {m.bit} is past the {bits} bits of a {buffer.dtype} element")
            return
        try:
            if m.op in ("flip_bit", "set", "scale"):
                index = expr.evaluate_int(m.index, arm.params)
                if not 0 <= index < n:
                    fail(
                        f"{field}.index", f"case {case.id}: index {index} is outside the {n} elements of {buffer.name}"
                    )
                    return
            elif m.op == "swap":
                first, second, length = (expr.evaluate_int(e, arm.params) for e in (m.index, m.other, m.length))
                low, high = sorted((first, second))
                if length < 1 or low < 0 or high + length > n or low + length > high:
                    fail(
                        f"{field}.length",
                        f"case {case.id}: slices of {length} elements at {first} and {second} are not two "
                        f"separate slices inside the {n} elements of {buffer.name}",
                    )
                    return
        except expr.ExprError as exc:
            fail(f"{field}.index" if m.op != "swap" else field, f"case {case.id}: {exc}")
            return


def _calibration(elements: list[int], cases: list[ResolvedCase], outputs: list[str], fail: Fail) -> None:
    """Perturbing more elements than an output holds perturbs them all: the count promised is not run."""
    for j, count in enumerate(elements):
        for case in cases:
            for name in outputs:
                size = case.arms["candidate"].buffer(name).elements
                if count > size:
                    fail(
                        f"acceptance.fidelity.calibration.elements[{j}]",
                        f"{count} elements to perturb, but output {name} has {size} in case {case.id}",
                    )
                    return


def _reference(spec: str, path: Path, fail: Fail) -> None:
    """`file.py:function` names a function the file defines (read, not run: a misspelling is
    caught on a host that cannot import the reference's dependencies)."""
    script, _, name = spec.partition(":")
    field = "acceptance.fidelity.reference"
    if not name:
        fail(field, f"{spec!r}: give the function as file.py:function")
        return
    try:
        tree = ast.parse((path.parent / script).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as exc:
        fail(field, f"{script} cannot be read as Python: {exc}")
        return
    defined = sorted(node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))
    assigned = {
        target.id
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.ImportFrom, ast.Import))
        for target in (getattr(node, "targets", None) or [])
        if isinstance(target, ast.Name)
    }
    imported = {
        (alias.asname or alias.name).split(".")[0]
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    if name not in defined and name not in assigned and name not in imported:
        fail(field, f"{script} defines no function {name!r} (functions: {', '.join(defined) or 'none'})")
