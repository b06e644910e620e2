"""The float64 reference of `acceptance.fidelity.against: float64`: loading it and calling it.

The contract (docs/plan.md, "Fidelity"): `reference` is `file.py:function`, relative to the plan,
called once per case as `function(params, inputs)`; `params` holds the case's parameters
(`workload.params` and the case's keys — not the arms' own, which differ), `inputs` each input
buffer as a read-only float64 array of its shape (integers as int64). It returns every output
buffer's values as float64, which are rounded to the output's dtype before comparison, so one
comparison function (`qualify.evaluate.fidelity.compare`) serves every `against`, and "identical" means
correctly rounded.

Used by `qualify probe` today; `run` and `compare` do not evaluate `against: float64` yet.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Callable

import numpy as np

from qualify.dtypes import FLOATS, NUMPY_DTYPES, as_float64, from_float64
from qualify.errors import PlanError

FIELD = "acceptance.fidelity.reference"


def load_reference(plan_path: Path, spec: str) -> Callable:
    script, _, name = spec.partition(":")
    path = (plan_path.parent / script).resolve()
    if not name:
        raise PlanError(f"{spec!r}: give the function as file.py:function", file=plan_path, field=FIELD)
    module_spec = importlib.util.spec_from_file_location(f"qualify_reference_{abs(hash(path))}", path)
    if module_spec is None or module_spec.loader is None:
        raise PlanError(f"{script!r} cannot be imported as Python", file=plan_path, field=FIELD)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's file: report it; its sys.exit() is no success
        raise PlanError(
            f"importing {script} failed: {type(exc).__name__}: {exc}", file=plan_path, field=FIELD
        ) from None
    function = getattr(module, name, None)
    if not callable(function):
        raise PlanError(f"{script} defines no function {name!r}", file=plan_path, field=FIELD)
    return function


def host_values(dtype: str, data: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """An input's bytes as the reference sees them: float64 (int64 for integers), read-only."""
    if dtype in FLOATS:
        values = as_float64(data, dtype)
    else:
        values = data.view(NUMPY_DTYPES[dtype]).astype(np.int64)
    values = values.reshape(shape)
    values.flags.writeable = False
    return values


def reference_outputs(
    function: Callable,
    params: dict,
    inputs: dict[str, np.ndarray],
    outputs: Mapping[str, tuple[str, int | tuple[int, ...]]],
    plan_path: Path,
    case: str,
) -> dict[str, np.ndarray]:
    """Call the reference for one case; outputs maps name → (dtype, elements), or (dtype, shape)
    to hold each output to the buffer's shape and host type (`output_problem`). Returns each
    output's rounded bytes. PlanError (naming the case) for a result that breaks the contract."""
    try:
        result = function(dict(params), dict(inputs))
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a reference's sys.exit(0) is an error, not success
        raise PlanError(
            f"case {case}: the reference raised {type(exc).__name__}: {exc}", file=plan_path, field=FIELD
        ) from None
    if not isinstance(result, dict) or set(result) != set(outputs):
        got = sorted(result) if isinstance(result, dict) else type(result).__name__
        raise PlanError(
            f"case {case}: the reference must return a dict of the outputs {sorted(outputs)}, got {got}",
            file=plan_path,
            field=FIELD,
        )
    out = {}
    for name, (dtype, size) in outputs.items():
        if isinstance(size, tuple):  # the buffer's shape: held exactly, as the inputs are given
            problem = output_problem(result[name], dtype, size)
            if problem is not None:
                raise PlanError(f"case {case}: output {name!r} {problem}", file=plan_path, field=FIELD)
            size = math.prod(size)
        values = np.asarray(result[name], dtype=np.float64).reshape(-1)
        if values.size != size:
            raise PlanError(
                f"case {case}: output {name!r} has {values.size} values, the buffer {size}",
                file=plan_path,
                field=FIELD,
            )
        out[name] = from_float64(values, dtype)
    return out


def output_problem(value: object, dtype: str, shape: tuple[int, ...]) -> str | None:
    """Why a reference's output is not what the contract asks for a buffer of `dtype` and
    `shape`, or None: an array of exactly the buffer's shape, float64 for a float buffer and
    int64 for an integer one (the types the inputs come in). Nothing is reshaped or cast for the
    reference: a transposed array of the same size, or float32 values where the golden records
    float64 ones, are the reference's mistakes, and a silent fix would freeze them."""
    array = np.asarray(value)
    want = "float64" if dtype in FLOATS else "int64"
    if array.dtype != np.dtype(want):
        return (
            f"is {array.dtype}, not {want}: return {want} values (compute in float64; cast only what the kernel casts)"
        )
    if tuple(array.shape) != tuple(shape):
        return (
            f"has shape {tuple(array.shape)}, the buffer {tuple(shape)}: return an array of the buffer's shape "
            "(a transposed or flattened result is not reshaped for you)"
        )
    return None
