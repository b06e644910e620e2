"""`qualify compare` on the GPU: an entry point that launches on a stream of its own is flagged."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest
from plans import make_repo

pytestmark = pytest.mark.gpu
HERE = Path(__file__).resolve().parent


def nvcc() -> str:
    for candidate in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.fail("nvcc not found: the GPU tests build their libraries with it")


def build(tmp_path: Path, escape: int) -> Path:
    out = tmp_path / f"libscale_escape{escape}.so"
    subprocess.run(
        [
            nvcc(),
            "-O2",
            "-shared",
            "-Xcompiler",
            "-fPIC",
            f"-DESCAPE={escape}",
            "-gencode",
            "arch=compute_90,code=sm_90",
            str(HERE / "planted" / "escape.cu"),
            "-o",
            str(out),
        ],
        check=True,
    )
    return out


PLAN = {
    "schema_version": 1,
    "name": "escape",
    "hypothesis": "an entry point that escapes the stream is flagged",
    "independent_variable": "the stream the entry point launches on",
    "revisions": {"base": "honest", "candidate": "escaping"},
    "hardware": {"devices": [{"name": "*"}], "architectures": ["sm_90"]},
    "arms": {
        "base": {"kind": "library", "symbol": "scale_entry", "signature": ["ptr", "ptr", "i32"]},
        "candidate": {"kind": "library", "symbol": "scale_entry", "signature": ["ptr", "ptr", "i32"]},
    },
    "workload": {
        "cases": [{"N": 65536}],
        "buffers": [
            {"name": "x", "dtype": "f32", "shape": ["N"], "role": "input", "init": {"kind": "normal"}},
            {"name": "y", "dtype": "f32", "shape": ["N"], "role": "output"},
        ],
        "call": [{"kind": "buffer", "name": "x"}, {"kind": "buffer", "name": "y"}, {"kind": "i32", "value": "N"}],
    },
    "seeds": {"base": 5},
    "schedule": {"warmup": 2, "samples_per_block": 3, "blocks": 2, "trials": 1},
    "budget": {"max_trials": 1, "max_samples": 12, "max_wall_seconds": 120},
    "stop": {"min_blocks": 2, "fail_fast": []},
    "controls": {"aa": False},
}


def test_work_on_another_stream_is_flagged(tmp_path):
    from qualify.commands.pipeline import load_frozen, run_plan
    from qualify.run.device import CudaDevice
    from qualify.run.telemetry import Telemetry

    path = make_repo(tmp_path / "repo", copy.deepcopy(PLAN), files={}, freeze=True)
    honest, escaping = build(tmp_path, 0), build(tmp_path, 1)
    outcome = run_plan(
        load_frozen(path),
        tmp_path / "record",
        lambda: CudaDevice(0),
        Telemetry,
        libraries={"base": honest, "candidate": escaping},
    )
    (trial,) = outcome.trials
    (case,) = trial.cases
    print(
        "escape waits (ns):",
        case.stream_escape_ns,
        "medians:",
        case.timing["base"].median_ns,
        case.timing["candidate"].median_ns,
    )
    assert case.stream_escape_ns["base"] < 50_000
    assert case.stream_escape_ns["candidate"] > 50_000
    assert any("escaped" in f.message and f.side == "candidate" for f in trial.failures)
    # without the check the escaping build would look much faster: its events see no work
    assert case.timing["candidate"].median_ns < 0.5 * case.timing["base"].median_ns
    assert outcome.results.verdict.status == "not_qualified"


def test_library_arms_run_isolated_and_under_the_sanitizer(tmp_path):
    """The compare path's worker: an honest build passes preflight and memcheck; the escaping
    build's launch fault-free too (escape is a timing problem, found by the engine's check)."""
    from qualify.run.isolation import preflight
    from qualify.run.sanitizer import run_check

    path = make_repo(tmp_path / "repo", copy.deepcopy(PLAN), files={}, freeze=True)
    honest = build(tmp_path, 0)
    out = preflight(path, "base", ["N=65536"], case_timeout=30, library=honest)
    assert [o.status for o in out] == ["ok"], out
    result = run_check("memcheck", path, "N=65536", "base", timeout=120, library=honest)
    print(result)
    assert result.status == "clean", result
