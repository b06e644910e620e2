"""`qualify golden make`: a plan's golden file written from a float64 reference, with its provenance.

A team writes one function, `function(params, inputs) -> {output: values}` (the contract of
`qualify.run.reference`: float64 inputs of each buffer's shape, float64 outputs), and this command
does the rest: the seeded inputs of every case, the reference's outputs rounded to each output's
dtype, and a golden whose `producer` is the reference's file (the plan's `golden_script` must
name that file, so `plan check` and `run` check the golden was written by it and `plan freeze`
locks both). Nothing here needs a GPU.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from qualify import __version__
from qualify.dtypes import FLOATS, STORAGE, as_float64
from qualify.errors import PlanError, UsageError
from qualify.plan.digest import read_lock
from qualify.plan.files import repository_root
from qualify.plan.golden import tensor_name, write_golden
from qualify.plan.load import load_plan, read_plan_json, validate_plan
from qualify.plan.model import GoldenInit, Plan
from qualify.plan.resolve import ResolvedCase, resolve_cases
from qualify.run import inputs as input_gen
from qualify.run.reference import host_values, load_reference, reference_outputs

OPTION = "--reference"


@dataclass(frozen=True)
class Reference:
    """A float64 reference function and the file it lives in (its provenance)."""

    spec: str  # as given: 'path/to/file.py:function' or 'package.module:function'
    function: Callable
    script: Path  # resolved


@dataclass(frozen=True)
class PlanView:
    """What writing or rehearsing a golden needs of a plan. Unlike `load_plan`, it reads a plan
    whose golden is not written yet (the file `golden make` is about to write)."""

    path: Path
    plan: Plan
    root: Path
    cases: list[ResolvedCase]
    digest: str | None  # None while the golden the plan names is missing (the digest covers it)
    frozen: bool


def view_plan(plan_path: Path) -> PlanView:
    path = Path(plan_path)
    plan = validate_plan(read_plan_json(path), path)
    golden = plan.acceptance.fidelity.golden
    if golden is None or (path.parent / golden).exists():
        loaded = load_plan(path)
        return PlanView(
            loaded.path, loaded.plan, loaded.files.root, loaded.cases, loaded.digest, loaded.lock is not None
        )
    return PlanView(
        path.resolve(),
        plan,
        repository_root(path).resolve(),
        resolve_cases(plan, str(path)),
        None,
        read_lock(path.resolve()) is not None,
    )


# What a golden should take in a repository (docs/golden.md "Keeping goldens small"): git keeps
# every version of a binary file forever, and a clone fetches them all
GOLDEN_BUDGET_BYTES = 16 * 2**20


@dataclass(frozen=True)
class GoldenMade:
    path: Path
    producer: str
    cases: int
    tensors: int
    hint: str | None  # what the plan still needs for the golden to be used, if anything


def resolve_reference(spec: str, plan_path: Path) -> Reference:
    """'file.py:function' (relative to the working folder) or 'module:function' (importable from
    the working folder); a one-line error naming --reference for anything that does not load."""
    target, _, name = spec.rpartition(":")
    if not target or not name:
        raise UsageError(f"{spec!r}: give the function as file.py:function or module:function", field=OPTION)
    if target.endswith(".py") or "/" in target or Path(target).is_file():
        script = Path(target).resolve()
        if not script.is_file():
            raise UsageError(f"{target}: no such file", field=OPTION)
        try:
            function = load_reference(plan_path, f"{script}:{name}")
        except PlanError as exc:
            raise UsageError(exc.message, file=script, field=OPTION) from None
        return Reference(spec, function, script)
    sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(target)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's module: report it; sys.exit is no success
        raise UsageError(f"importing {target} failed: {type(exc).__name__}: {exc}", field=OPTION) from None
    finally:
        sys.path.pop(0)
    function = getattr(module, name, None)
    source = inspect.getsourcefile(module) if hasattr(module, "__file__") else None
    if not callable(function):
        raise UsageError(f"module {target} defines no function {name!r}", field=OPTION)
    if source is None:
        raise UsageError(f"module {target} has no source file to record as the golden's producer", field=OPTION)
    return Reference(spec, function, Path(source).resolve())


def repository_path(path: Path, root: Path) -> str:
    """A file as a golden's producer names it: relative to the repository, else absolute."""
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def case_inputs(loaded: PlanView, case: ResolvedCase) -> dict[str, np.ndarray]:
    """Each input of one case as the reference sees it (float64, or int64, of the buffer's shape):
    the bytes `run` uploads, generated from the plan's seeds."""
    arm = case.arms["candidate"]
    specs = [s for s in loaded.plan.workload.buffers if s.role == "input"]
    arrays = input_gen.generate_case(loaded.plan.seeds, case.id, [(s, arm.buffer(s.name)) for s in specs])
    return {s.name: host_values(arm.buffer(s.name).dtype, a, arm.buffer(s.name).shape) for s, a in zip(specs, arrays)}


# What `golden make` and `plan rehearse` may hold on the host for one case: every buffer as its
# dtype's bytes and as the float64 values the reference sees (and returns). A case above it is
# refused before any input is generated, with the numbers, instead of exhausting the machine.
HOST_BUDGET_BYTES = 8 << 30


def check_host_budget(loaded: PlanView, what: str) -> None:
    """UsageError naming the first case whose buffers need more host memory than HOST_BUDGET_BYTES."""
    for case in loaded.cases:
        buffers = [b for b in case.arms["candidate"].buffers if b.role in ("input", "output")]
        need = sum(b.elements * 8 + b.nbytes for b in buffers)
        if need > HOST_BUDGET_BYTES:
            largest = max(buffers, key=lambda b: b.elements * 8 + b.nbytes)
            raise UsageError(
                f"case {case.id}: {what} would hold {need / 2**30:.1f} GiB on the host (each buffer as "
                f"its dtype and as float64; {largest.name!r} alone {largest.elements} elements), over the "
                f"{HOST_BUDGET_BYTES >> 30} GiB budget; {what} checks smaller cases on the CPU",
                file=loaded.path,
            )


def case_params(loaded: PlanView, case: ResolvedCase) -> dict:
    return {**loaded.plan.workload.params, **case.values}


def evaluate_case(loaded: PlanView, reference: Reference, case: ResolvedCase) -> dict[str, np.ndarray]:
    """The reference's outputs of one case, each rounded to its buffer's dtype (flat uint8 bytes);
    a result that breaks the contract is one error naming the case and --reference."""
    outputs = {b.name: (b.dtype, b.shape) for b in case.arms["candidate"].buffers if b.role == "output"}
    try:
        # a value beyond the dtype rounds to infinity, which the caller reports as non-finite
        with np.errstate(over="ignore"):
            return reference_outputs(
                reference.function, case_params(loaded, case), case_inputs(loaded, case), outputs, loaded.path, case.id
            )
    except PlanError as exc:
        raise UsageError(exc.message, file=reference.script, field=OPTION) from None


def make_golden(loaded: PlanView, reference: Reference, out: Path | None = None) -> GoldenMade:
    """Write the golden of every case of the plan; refuses what `plan check` would then refuse."""
    plan, fid = loaded.plan, loaded.plan.acceptance.fidelity
    for i, b in enumerate(plan.workload.buffers):
        if isinstance(b.init, GoldenInit):
            raise PlanError(
                f"input {b.name!r} is read from the golden: its values come from your own script, not "
                "from a reference of the seeded inputs (write this golden with qualify.plan.golden.write_golden)",
                file=loaded.path,
                field=f"workload.buffers[{i}].init",
            )
    if out is None:
        if fid.golden is None:
            raise UsageError(
                "the plan names no golden (acceptance.fidelity.golden): give --out, or add the golden to the plan",
                file=loaded.path,
            )
        # the name as written, never resolved: a dangling link or `../..` must not carry the write out
        out = Path(os.path.normpath(loaded.path.parent.resolve() / fid.golden))
        if not out.is_relative_to(loaded.root):
            raise PlanError(
                f"{fid.golden!r} names a file outside the repository ({loaded.root}); a golden lives in it",
                file=loaded.path,
                field="acceptance.fidelity.golden",
            )
        write_root = loaded.root
    else:
        out = Path(os.path.abspath(out))
        write_root = out.parent  # the folder --out names; a link in the file's place is refused
    root = loaded.root
    producer = repository_path(reference.script, root)
    hint = None
    if fid.golden_script is not None:
        declared = repository_path((loaded.path.parent / fid.golden_script).resolve(), root)
        if declared != producer:
            raise UsageError(
                f"the plan's golden_script is {declared!r} but the reference is in {producer!r}: the "
                "golden's producer must be the plan's golden_script (name the same file in both)",
                file=loaded.path,
                field="acceptance.fidelity.golden_script",
            )
    else:
        hint = (
            f"set acceptance.fidelity.golden_script to {_relative_to(reference.script, loaded.path.parent)!r} "
            "so the golden's producer is checked and the reference is frozen with the plan"
        )
    if fid.against != "golden" or fid.golden is None:
        hint = "; ".join(
            filter(None, [hint, "set acceptance.fidelity.against to 'golden' and .golden to this file to gate on it"])
        )
    check_host_budget(loaded, "golden make")
    tensors: dict[str, tuple[str, np.ndarray]] = {}
    for case in loaded.cases:
        values = evaluate_case(loaded, reference, case)
        for buf in case.arms["candidate"].buffers:
            if buf.role != "output":
                continue
            data = values[buf.name]
            if buf.dtype in FLOATS:
                bad = np.flatnonzero(~np.isfinite(as_float64(data, buf.dtype)))
                if bad.size:
                    raise UsageError(
                        f"case {case.id}: output {buf.name!r} has {bad.size} non-finite values once rounded to "
                        f"{buf.dtype}, the first at flat index {int(bad[0])}; a golden holds finite values only",
                        file=reference.script,
                        field=OPTION,
                    )
            tensors[tensor_name(case.id, buf.name)] = (buf.dtype, data.view(STORAGE[buf.dtype]).reshape(buf.shape))
    metadata = {
        "written_by": f"qualify {__version__} golden make",
        "reference": f"{producer}:{reference.spec.rpartition(':')[2]}",
        "reference_sha256": hashlib.sha256(reference.script.read_bytes()).hexdigest(),
    }
    write_golden(out, plan, tensors, producer, extra_metadata=metadata, root=write_root)
    return GoldenMade(path=out, producer=producer, cases=len(loaded.cases), tensors=len(tensors), hint=hint)


def _relative_to(path: Path, folder: Path) -> str:
    import os

    return Path(os.path.relpath(path, folder)).as_posix()
