"""Planted faults, each caught by the mechanism meant for it (GPU; QUALIFY_REQUIRE_GPU=1 fails them
when no GPU is present).

| planted fault              | mechanism                                  |
|----------------------------|--------------------------------------------|
| out-of-bounds write        | compute-sanitizer memcheck                 |
| shared-memory race         | compute-sanitizer racecheck                |
| uninitialised read         | compute-sanitizer initcheck                |
| __trap()                   | isolated worker: fault, trial goes on      |
| endless loop               | isolated worker: timeout, trial goes on    |
| one wrong element          | byte parity (first difference named)       |
| output left unwritten      | poisoned outputs + byte parity             |
| work on another stream     | tests/gpu/test_compare_gpu.py (library arms)   |
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from plans import make_repo

pytestmark = pytest.mark.gpu
HERE = Path(__file__).resolve().parent
N = 4096

PLAN = {
    "schema_version": 1,
    "name": "planted",
    "hypothesis": "the planted defect is caught",
    "independent_variable": "one planted defect",
    "revisions": {"base": "copy_ok", "candidate": "planted"},
    "hardware": {"devices": [{"name": "*"}], "architectures": ["sm_90"]},
    "arms": {
        "base": {"kind": "cuda", "source": "../../kernels/faults.cu", "kernel": "copy_ok"},
        "candidate": {"kind": "cuda", "source": "../../kernels/faults.cu", "kernel": "PLANTED"},
    },
    "workload": {
        "params": {"THREADS": 256},
        "cases": [{"N": N}, {"N": 2 * N}],
        "buffers": [
            {"name": "x", "dtype": "f32", "shape": ["N"], "role": "input", "init": {"kind": "normal"}},
            {"name": "out", "dtype": "f32", "shape": ["N"], "role": "output"},
        ],
        "launch": {
            "grid": ["cdiv(N, THREADS)"],
            "block": ["THREADS"],
            "args": [{"kind": "buffer", "name": "x"}, {"kind": "buffer", "name": "out"}, {"kind": "i32", "value": "N"}],
        },
    },
    "seeds": {"base": 1},
    "schedule": {"warmup": 1, "samples_per_block": 2, "blocks": 2, "trials": 1},
    "budget": {"max_trials": 1, "max_samples": 8, "max_wall_seconds": 120},
    "stop": {"min_blocks": 2},
}


def planted_plan(tmp_path: Path, kernel: str) -> Path:
    plan = copy.deepcopy(PLAN)
    plan["arms"]["candidate"]["kernel"] = kernel
    return make_repo(tmp_path / "repo", plan, files={"kernels/faults.cu": HERE / "planted" / "faults.cu"}, freeze=True)


@pytest.mark.parametrize(
    "kernel, tool",
    [("oob_write", "memcheck"), ("smem_race", "racecheck"), ("uninit_read", "initcheck")],
)
def test_sanitizer_catches(tmp_path, kernel, tool):
    from qualify.run.sanitizer import run_check

    path = planted_plan(tmp_path, kernel)
    bad = run_check(tool, path, f"N={N}", "candidate", timeout=240)
    good = run_check(tool, path, f"N={N}", "base", timeout=240)
    print(tool, kernel, bad.status, bad.errors, bad.summary, bad.excerpt[:2])
    assert bad.status == "findings" and (bad.errors or 0) >= 1, bad
    assert good.status == "clean", good


@pytest.mark.parametrize("kernel, status", [("trap_at_end", "fault"), ("endless", "timeout")])
def test_isolated_worker_catches(tmp_path, kernel, status):
    from qualify.run.isolation import preflight

    path = planted_plan(tmp_path, kernel)
    out = preflight(path, "candidate", [f"N={N}", f"N={2 * N}"], case_timeout=15)
    print(kernel, out)
    assert out[0].status == status, out
    assert out[0].case == f"N={N}"
    assert len(out) == 2  # the next case got its own, fresh worker
    base = preflight(path, "base", [f"N={N}"], case_timeout=15)
    assert [o.status for o in base] == ["ok"]


def test_trial_goes_on_after_a_trap(tmp_path):
    from qualify.commands.pipeline import load_frozen, run_plan
    from qualify.run.device import CudaDevice
    from qualify.run.isolation import preflight
    from qualify.run.telemetry import Telemetry

    path = planted_plan(tmp_path, "trap_at_end")
    loaded = load_frozen(path)
    outcome = run_plan(
        loaded,
        tmp_path / "record",
        lambda: CudaDevice(0),
        Telemetry,
        preflight=lambda side, cases: preflight(path, side, cases, case_timeout=15),
    )
    (trial,) = outcome.trials
    kinds = {(f.kind, f.case, f.side) for f in trial.failures}
    print(kinds)
    assert ("fault", f"N={N}", "candidate") in kinds
    assert trial.status == "failed"
    assert outcome.results.verdict.status == "not_qualified"


@pytest.mark.parametrize("kernel, first", [("one_wrong", N // 2), ("skips_last", N - 1)])
def test_parity_catches(tmp_path, kernel, first):
    from qualify.commands.pipeline import load_frozen, run_plan
    from qualify.run.device import CudaDevice
    from qualify.run.telemetry import Telemetry

    path = planted_plan(tmp_path, kernel)
    outcome = run_plan(load_frozen(path), tmp_path / "record", lambda: CudaDevice(0), Telemetry)
    (trial,) = outcome.trials
    assert trial.failures and trial.failures[0].kind == "fidelity", trial.failures
    assert f"1 of {N} elements differ from base, first at index {first}" in trial.failures[0].message
    assert outcome.results.verdict.status == "not_qualified"


HANG_SCRIPT = """
import sys, time
from pathlib import Path
from qualify.build.nvrtc import KernelSpec, compile_kernel
from qualify.run.device import CudaDevice, LaunchHang
dev = CudaDevice(0)
kernel = dev.load_kernel("endless", compile_kernel(KernelSpec(Path(sys.argv[1]), "endless", dev.info.arch)), 0)
x, y = dev.alloc(4096 * 4), dev.alloc(4096 * 4)
args = [("ptr", x.ptr), ("ptr", y.ptr), ("i32", 4096)]
start = time.monotonic()
try:
    dev.time_sample(lambda: dev.launch(kernel, (16, 1, 1), (256, 1, 1), 0, args), cold=True, timeout_s=3)
except LaunchHang as exc:
    print("HANG after", round(time.monotonic() - start, 1), "s:", exc.message, flush=True)
dev.close()  # must return at once: a hung kernel never lets a synchronisation finish
print("CLOSED", flush=True)
"""


def test_watchdog_in_the_timing_process(tmp_path):
    """A launch that hangs inside the timing process itself: the sample's deadline fires, close()
    does not block, and the process exits (the driver frees the GPU)."""
    import subprocess
    import sys
    import time

    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", HANG_SCRIPT, str(HERE / "planted" / "faults.cu")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    print(done.stdout, done.stderr[-500:], f"total {time.monotonic() - start:.1f} s")
    assert "HANG after" in done.stdout and "the launch hangs" in done.stdout
    assert "CLOSED" in done.stdout
