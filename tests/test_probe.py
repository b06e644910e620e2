"""`qualify probe`: its logic on the fake device (the coordinator runs it on the H200), its
per-element measures, and the no-driver message every GPU command shares."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fakes import axpy
from plans import make_repo, plan_copy

from qualify.commands.probe import format_probe, probe_buffer, run_probe, ulp_histogram
from qualify.errors import DeviceError
from qualify.plan.load import load_plan
from qualify.run.fake import FakeDevice


def f32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint8)


def step(values: np.ndarray, ulps: np.ndarray) -> np.ndarray:
    """Each value moved by the given number of ulps (towards +inf for a positive count)."""
    bits = values.astype(np.float32).view(np.int32).copy()
    return (bits + np.where(values >= 0, ulps, -ulps).astype(np.int32)).view(np.float32)


def test_histogram_counts_differing_elements_by_distance():
    base = np.linspace(0.5, 2.0, 12, dtype=np.float32)
    moved = step(base, np.array([0, 0, 1, 1, 2, 3, 4, 7, 9, 100, 5000, 0]))
    histogram, nonfinite = ulp_histogram("f32", f32(base), f32(moved))
    assert dict(histogram) == {"1": 2, "2": 1, "3-4": 2, "5-8": 1, "9-16": 1, "65-128": 1, ">4096": 1}
    assert nonfinite == 0


def test_signed_zeros_subnormals_and_nan():
    tiny = np.float32(1e-45)  # the smallest subnormal
    base = f32([0.0, tiny, -tiny, 1.0, np.nan, 3.0])
    cand = f32([-0.0, -tiny, tiny, np.inf, np.nan, 3.0])
    row = probe_buffer("N=6", "out", "f32", base, cand)
    # +0/-0 differ in bits but are 0 ulps apart; ±smallest subnormal are 2 apart; Inf is apart
    assert row.identical == 2  # the same NaN bits, and 3.0
    assert dict(row.ulp_histogram) == {"0": 1, "2": 2}
    assert row.nonfinite == 1
    assert row.max_ulp is None  # a differing non-finite value: no bound passes
    zeros = probe_buffer("N=1", "out", "f32", f32([0.0]), f32([-0.0]))
    assert (zeros.max_ulp, zeros.max_abs, zeros.max_rel) == (0, 0.0, 0.0)  # docs/plan.md's ±0 rule


def test_bf16_and_integers():
    base = np.array([0x3F80, 0x4000], dtype=np.uint16).view(np.uint8)  # 1.0, 2.0
    cand = np.array([0x3F81, 0x4000], dtype=np.uint16).view(np.uint8)
    assert dict(ulp_histogram("bf16", base, cand)[0]) == {"1": 1}
    row = probe_buffer(
        "N=2", "idx", "i32", np.array([1, 5], np.int32).view(np.uint8), np.array([1, 7], np.int32).view(np.uint8)
    )
    # integers: the ulp distance is the plain difference (docs/plan.md), rel against the base
    assert (row.max_abs, row.max_ulp, row.max_rel) == (2, 2, 0.4) and row.ulp_histogram == ()


def candidate_off_by(ulps: int):
    def kernel(memory, args, k):
        axpy(memory, args, k)
        if k.label == "candidate":
            (_, _), (_, _), (_, out_ptr), _, (_, n) = args
            out = memory.view(out_ptr, 4 * n).view(np.float32)
            out[::3] = step(out[::3], np.full(out[::3].size, ulps))

    return kernel


def probe(tmp_path, kernel, fidelity=None):
    plan = plan_copy()
    if fidelity:
        plan["acceptance"]["fidelity"] = fidelity
    loaded = load_plan(make_repo(tmp_path, plan))  # unfrozen: allowed
    device = FakeDevice({"axpy": kernel})
    return run_probe(loaded, device), device, tmp_path


def test_probe_runs_each_case_once_per_arm_and_writes_nothing(tmp_path):
    result, device, root = probe(tmp_path, axpy)
    launches = [c for c in device.calls if c[0] == "launch"]
    assert launches == [("launch", "base"), ("launch", "candidate")] * 2
    assert device.live_buffers == 0
    assert not (root / "records").exists() and not (root / "protocols/tiny/plan.lock.json").exists()
    assert result.bytes_identical and result.lock == "not frozen"
    text = "\n".join(format_probe(result))
    assert "exploration, not evidence" in text and "mode 'bytes' would pass" in text


def test_probe_reports_the_smallest_passing_bound(tmp_path):
    result, _, _ = probe(tmp_path, candidate_off_by(3), {"mode": "ulp", "bound": 2})
    assert [b.case for b in result.buffers] == ["N=1024", "N=4096"]
    first = result.buffers[0]
    assert first.elements == 1024 and first.identical == 1024 - 342 and dict(first.ulp_histogram) == {"3-4": 342}
    assert result.smallest_bound("ulp") == 3
    text = "\n".join(format_probe(result))
    assert "smallest bound that would pass: ulp 3" in text
    assert "the plan's bound (ulp <= 2) would FAIL" in text


def test_probe_on_a_frozen_then_edited_plan_says_so(tmp_path, capsys):
    path = make_repo(tmp_path, freeze=True)
    plan = json.loads(path.read_text())
    plan["hypothesis"] = "edited"
    path.write_text(json.dumps(plan))
    result = run_probe(load_plan(path), FakeDevice({"axpy": axpy}))
    assert result.lock == "changed since freezing"


class NoDriver:
    """cuda.bindings' driver module where libcuda.so is missing: cuInit raises."""

    @staticmethod
    def cuInit(flags):
        raise RuntimeError("DynamicLibNotFoundError: libcuda.so.1")


def test_no_driver_is_one_line_in_the_documented_shape(monkeypatch):
    import qualify.run.device as device

    monkeypatch.setattr(device, "_driver", lambda: NoDriver)
    with pytest.raises(DeviceError) as exc:
        device.CudaDevice(0)
    assert exc.value.one_line().startswith("libcuda.so.1: driver: not found: no NVIDIA driver on this machine")
    assert "Error" not in exc.value.one_line()  # no Python class name


def test_probe_cli_without_a_driver_exits_5_before_any_output(tmp_path, monkeypatch, capsys):
    import qualify.run.device as device
    from qualify.cli import main

    monkeypatch.setattr(device, "_driver", lambda: NoDriver)
    path = make_repo(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["probe", str(path)])
    out = capsys.readouterr()
    assert exc.value.code == 5 and out.out == ""
    assert out.err.startswith("qualify: error: libcuda.so.1: driver: not found") and out.err.count("\n") == 1


REF = """\
import numpy as np

def axpy64(params, inputs):
    assert set(params) == {"THREADS", "N"} and inputs["x"].dtype == np.float64
    return {"out": 0.5 * inputs["x"] + inputs["y"]}

def wrong_keys(params, inputs):
    return {"y": inputs["y"]}
"""


def probe_against_float64(tmp_path, function, kernel):
    from plans import HEADER, KERNEL

    plan = plan_copy()
    plan["acceptance"]["fidelity"] = {
        "mode": "ulp",
        "bound": 2,
        "against": "float64",
        "reference": f"ref.py:{function}",
    }
    files = {"kernels/k.cu": KERNEL, "kernels/common.cuh": HEADER, "protocols/tiny/ref.py": REF}
    return run_probe(load_plan(make_repo(tmp_path, plan, files=files)), FakeDevice({"axpy": kernel}))


def test_float64_reference_compares_each_arm_with_the_rounded_reference(tmp_path):
    result = probe_against_float64(tmp_path, "axpy64", candidate_off_by(3))
    assert [(b.case, b.compared) for b in result.buffers] == [
        ("N=1024", "base/float64"),
        ("N=1024", "candidate/float64"),
        ("N=4096", "base/float64"),
        ("N=4096", "candidate/float64"),
    ]
    base, cand = result.buffers[0], result.buffers[1]
    assert base.max_ulp is not None and base.max_ulp <= 1  # float32 a*x+y: two roundings at most
    assert 2 <= cand.max_ulp <= 4  # three ulps off the base, which is within one of the reference
    assert result.smallest_bound("ulp") == max(b.max_ulp for b in result.buffers)
    assert "candidate/float64" in "\n".join(format_probe(result))


def test_a_reference_breaking_the_contract_names_the_case(tmp_path):
    from qualify.errors import PlanError

    with pytest.raises(
        PlanError, match=r"case N=1024: the reference must return a dict of the outputs \['out'\], got \['y'\]"
    ):
        probe_against_float64(tmp_path, "wrong_keys", axpy)
