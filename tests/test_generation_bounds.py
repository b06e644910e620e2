"""Every input `plan check` accepts can be generated, and the CPU-side commands are bounded
(issue 36, item 4): a generator's parameters that numpy cannot draw from are refused by the plan
with the reason; an integer buffer takes any float without an undefined cast; `golden make` and
`plan rehearse` refuse, with the numbers, a case whose buffers exceed the host budget before they
generate a byte."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError
from test_hostile_files import bounded
from test_refused_inputs import refused
from test_rehearse import REFERENCE, softmax_repo

from qualify.commands import golden as golden_cmd
from qualify.dtypes import NUMPY_DTYPES
from qualify.plan.model import Buffer, Seeds
from qualify.plan.resolve import ResolvedBuffer
from qualify.run import inputs

EXTREMES = [
    {"kind": "uniform", "low": -1e308, "high": 1e308},
    {"kind": "uniform", "low": -1.7976931348623157e308, "high": 0.0},
    {"kind": "uniform", "low": 0.0, "high": 5e-324},
    {"kind": "normal", "mean": 1e308, "std": 1e308},
    {"kind": "normal", "mean": -1e308, "std": 5e-324},
    {"kind": "constant", "value": 1.7976931348623157e308},
    {"kind": "constant", "value": -1.7976931348623157e308},
    {"kind": "constant", "value": 9.223372036854775807e18},
    {"kind": "constant", "value": 1.8446744073709552e19},
]


@pytest.mark.parametrize("init", EXTREMES, ids=lambda i: json.dumps(i))
@pytest.mark.parametrize("dtype", sorted(NUMPY_DTYPES))
@pytest.mark.parametrize("overflow", [None, "saturate"])
def test_every_accepted_generator_generates_without_an_internal_error(init, dtype, overflow):
    """Either the plan's model refuses the buffer (with its reason) or generation succeeds; warnings
    are errors in this suite, so an undefined cast or an overflow numpy warns about fails too."""
    raw = {"name": "x", "dtype": dtype, "shape": ["64"], "role": "input", "init": init}
    if overflow:
        raw["overflow"] = overflow
    try:
        spec = Buffer.model_validate(raw)
    except ValidationError as exc:
        assert exc.errors()[0]["msg"], exc  # refused, and says why
        return
    data = inputs.generate(Seeds(base=7), "c", spec, ResolvedBuffer("x", dtype, (64,), "input"))
    assert data.size == 64 * np.dtype(NUMPY_DTYPES[dtype]).itemsize


def test_a_uniform_span_beyond_float64_is_refused_by_plan_check(tmp_path, capsys):
    plan = softmax_repo(tmp_path)
    data = json.loads(plan.read_text())
    data["workload"]["buffers"][0]["init"] = {"kind": "uniform", "low": -1e308, "high": 1e308}
    plan.write_text(json.dumps(data))
    refused(capsys, ["plan", "check", plan, "--no-compile"], 2, "workload.buffers[0].init", "exceeds float64")


@pytest.mark.parametrize("dtype, top", [("i64", np.iinfo(np.int64).max), ("u64", np.iinfo(np.uint64).max)])
def test_a_float_beyond_a_64_bit_integer_becomes_its_largest_value(dtype, top):
    spec = Buffer.model_validate(
        {"name": "x", "dtype": dtype, "shape": ["4"], "role": "input", "init": {"kind": "constant", "value": 1e308}}
    )
    data = inputs.generate(Seeds(base=7), "c", spec, ResolvedBuffer("x", dtype, (4,), "input"))
    assert data.view(NUMPY_DTYPES[dtype]).tolist() == [top] * 4


@pytest.mark.parametrize("command", ["golden", "rehearse"])
def test_a_case_over_the_host_budget_is_refused_with_the_numbers(tmp_path, capsys, monkeypatch, command):
    monkeypatch.setattr(golden_cmd, "HOST_BUDGET_BYTES", 1 << 20)
    plan = softmax_repo(tmp_path)
    argv = (
        ["golden", "make", plan, "--reference", f"{REFERENCE}:softmax", "--out", tmp_path / "g.safetensors"]
        if command == "golden"
        else ["plan", "rehearse", plan, "--reference", f"{REFERENCE}:softmax", "--out", tmp_path / "r"]
    )
    line = refused(capsys, argv, 2, "GiB on the host", "over the 0 GiB budget", "'x' alone")
    assert "case " in line
    assert not (tmp_path / "g.safetensors").exists()


def test_a_16_gib_input_is_refused_before_it_is_generated(tmp_path):
    """In a child whose heap is capped at 1.5 GiB: 16 GiB of f32 (64 GiB as float64 and back)
    must be refused up front, not attempted."""
    plan = softmax_repo(tmp_path, rows=1 << 20)
    code, err = bounded(
        ["golden", "make", plan, "--reference", f"{REFERENCE}:softmax", "--out", tmp_path / "g.safetensors"], tmp_path
    )
    assert code == 2 and "over the 8 GiB budget" in err and "Traceback" not in err, err
