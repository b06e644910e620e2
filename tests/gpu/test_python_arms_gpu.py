"""Python arms on the GPU (torch and Triton installed): qualify's buffers reach the callable as torch
tensors over the same memory, Triton launches on qualify's stream, work on another stream is
flagged, graph capture replays, the JIT's cubins are digested and the callable control is caught,
in short trials of protocols/triton-softmax and protocols/softmax-mixed and under memcheck.

    QUALIFY_REQUIRE_GPU=1 .venv/bin/python -m pytest tests/gpu/test_python_arms_gpu.py -m gpu -v -s
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import numpy as np
import pytest
from plans import make_repo

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
TRITON_SOURCE = ROOT / "kernels" / "triton" / "softmax.py"
ESCAPE = """\
import torch


def copy_on_the_side(x, y, stream):
    y.copy_(torch.softmax(x, dim=1))  # on qualify's stream
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # and busy work where qualify's events cannot see it
        a = torch.ones(4096, 4096, device=x.device)
        for _ in range(20):
            a = a @ a / 4096.0
"""


def short_plan(name: str, **arm_changes) -> dict:
    data = json.loads((ROOT / "protocols" / name / "plan.json").read_text())
    data["schedule"] = {"warmup": 3, "samples_per_block": 4, "blocks": 4, "trials": 1, "cache": "cold"}
    data["budget"] = {"max_trials": 1, "max_samples": 32, "max_wall_seconds": 600}
    data["acceptance"]["sanitizer"] = []
    for side, changes in arm_changes.items():
        data["arms"][side].update(changes)
    return data


def repo(tmp_path: Path, plan: dict, extra: dict | None = None) -> Path:
    files = {
        "kernels/triton/softmax.py": TRITON_SOURCE,
        "kernels/softmax/row_softmax.cu": ROOT / "kernels" / "softmax" / "row_softmax.cu",
        **(extra or {}),
    }
    return make_repo(tmp_path / "repo", copy.deepcopy(plan), files=files, freeze=True)


def run(path: Path, record: Path):
    from qualify.commands.pipeline import load_frozen, run_plan
    from qualify.run.device import CudaDevice
    from qualify.run.telemetry import Telemetry

    return run_plan(load_frozen(path), record, lambda: CudaDevice(0), Telemetry)


def kernel_names(case, side: str) -> str | None:
    """The one kernel the side's traced calls launched (Triton names it after its function); None
    where CUPTI is not installed (QUALIFY_REQUIRE_CUPTI=1 makes that a failure)."""
    if case.trace is None:
        assert not os.environ.get("QUALIFY_REQUIRE_CUPTI"), "no kernel trace"
        return None
    names = {k.name for call in case.trace[side] for k in call.kernels}
    assert len(names) == 1, names
    (name,) = names
    print(case.case, side, "launched", name)
    return name.split("(")[0]


def test_buffers_are_torch_tensors_over_qualifys_own_memory():
    import torch

    from qualify.run.device import CudaDevice

    with CudaDevice(0) as dev:
        runtime = dev.python_runtime()
        buf = dev.alloc(4 * 1024)
        dev.upload(buf, np.arange(1024, dtype=np.float32))
        t = runtime.array(buf.ptr, buf.nbytes, "f32", 4, (32, 32))
        assert t.data_ptr() == buf.ptr and t.dtype == torch.float32 and t.shape == (32, 32)
        assert float(t.sum()) == float(np.arange(1024).sum())
        with runtime.scope():
            assert torch.cuda.current_stream().cuda_stream == dev.stream_handle
            t.mul_(2.0)
        dev.synchronize()
        assert np.array_equal(dev.download(buf).view(np.float32), 2 * np.arange(1024, dtype=np.float32))
        dev.free(buf)


def test_the_triton_pair_runs_a_trial_with_its_facts(tmp_path):
    outcome = run(repo(tmp_path, short_plan("triton-softmax")), tmp_path / "record")
    (trial,) = outcome.trials
    print(json.dumps({s: i.model_dump() for s, i in trial.python.items()}, indent=1))
    assert trial.status == "complete", trial.failures
    assert {(c.name, c.caught) for c in trial.controls} >= {("skip_last_col", True), ("flip_first_x_bit", True)}
    for side in ("base", "candidate"):
        info = trial.python[side]
        assert "torch" in info.packages and any("triton" in p for p in info.packages), info.packages
        assert info.cubins and info.first_call_s > 0 and info.null_call_ns > 0 and not info.graph
    assert trial.code.arms == "python" and trial.code.status == "differs", trial.code
    for case in trial.cases:
        assert kernel_names(case, "candidate") in (None, "_online")
        assert kernel_names(case, "base") in (None, "_three_pass")
        assert all(v < 50_000 for v in case.stream_escape_ns.values()), case.stream_escape_ns
        print(case.case, "change %", case.stats.delta_pct, "medians", {s: t.median_ns for s, t in case.timing.items()})


def test_the_same_callable_twice_is_identical_code(tmp_path):
    plan = short_plan("triton-softmax")
    plan["arms"]["base"] = copy.deepcopy(plan["arms"]["candidate"])
    plan["controls"]["negative"] = plan["controls"]["negative"][:1]
    (trial,) = run(repo(tmp_path, plan), tmp_path / "record").trials
    assert trial.code.status == "identical", trial.code
    assert trial.python["base"].cubins[0].sha256 in {c.sha256 for c in trial.python["candidate"].cubins}


def test_graph_capture_replays_on_qualifys_stream(tmp_path):
    plan = short_plan("triton-softmax", base={"graph": True}, candidate={"graph": True})
    (trial,) = run(repo(tmp_path, plan), tmp_path / "record").trials
    assert trial.status == "complete", trial.failures
    assert trial.python["candidate"].graph and trial.python["candidate"].call_ns is not None
    assert not [f for f in trial.failures if f.kind == "fidelity"]
    for case in trial.cases:
        print(case.case, "graph change %", case.stats.delta_pct)


def test_work_on_another_stream_is_flagged(tmp_path):
    plan = short_plan("triton-softmax")
    plan["arms"]["candidate"] = {"kind": "python", "callable": "../../kernels/triton/escape.py:copy_on_the_side"}
    plan["acceptance"]["fidelity"] = {"mode": "tolerance", "against": "base", "atol": 1e-3, "rtol": 1e-3}
    plan["controls"] = {"aa": False, "negative": []}
    plan["workload"]["cases"] = plan["workload"]["cases"][:1]
    path = repo(tmp_path, plan, {"kernels/triton/escape.py": ESCAPE})
    (trial,) = run(path, tmp_path / "record").trials
    (case,) = trial.cases or [None]
    assert any("escaped" in f.message and f.side == "candidate" for f in trial.failures), trial.failures
    if case is not None:
        assert case.stream_escape_ns["candidate"] > 50_000


def test_the_mixed_pair_runs_on_the_same_buffers(tmp_path):
    (trial,) = run(repo(tmp_path, short_plan("softmax-mixed")), tmp_path / "record").trials
    assert trial.status == "complete", trial.failures
    assert set(trial.python) == {"candidate"} and trial.code.arms == "python"
    for case in trial.cases:
        assert case.resources.get("base") is not None  # the NVRTC arm's resources are still read
        assert kernel_names(case, "candidate") in (None, "_row_block")
        print(case.case, "change %", case.stats.delta_pct)


def test_a_triton_arm_runs_isolated_and_under_memcheck(tmp_path):
    from qualify.run.isolation import preflight
    from qualify.run.sanitizer import run_check

    path = repo(tmp_path, short_plan("triton-softmax"))
    out = preflight(path, "candidate", ["COLS=4096"], case_timeout=300)
    assert [o.status for o in out] == ["ok"], out
    result = run_check("memcheck", path, "COLS=4096", "candidate", timeout=600)
    print(result)
    assert result.status == "clean", result
