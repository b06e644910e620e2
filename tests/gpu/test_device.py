"""The device session on a real GPU: identity, timing floor, a whole trial of the vecload plan."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from plans import make_repo

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def device():
    from qualify.run.device import CudaDevice

    with CudaDevice(0) as dev:
        yield dev


def test_identity(device):
    info = device.info
    assert info.uuid.startswith("GPU-") and len(info.uuid) == 40
    assert info.sm_count > 0 and info.l2_bytes > 0
    assert info.arch == "sm_" + info.compute_capability.replace(".", "")


def test_device_uuid_names_the_gpu_an_opened_device_reports(device):
    """A run's parent identifies its GPU without a context (qualify.procs.invocation); its trial
    processes open it: both must name the same GPU, or every trial process is refused."""
    from qualify.run.device import device_uuid

    assert device_uuid(0) == device.info.uuid


def test_the_peak_dram_bandwidth_is_read_off_the_device(device):
    """Memory clock and bus width as the driver reports them give the datasheet's peak: on the
    H200 3,201 MHz x 2 x 6,144 bits, about 4.9 TB/s (its datasheet says 4.8)."""
    from qualify.evaluate.throughput import peak_bandwidth

    info = device.info
    assert info.memory_bus_width_bits and info.memory_bus_width_bits % 64 == 0
    peak = peak_bandwidth(info)
    assert peak is not None and 1e11 < peak < 2e13
    if "H200" in info.name:
        assert info.memory_bus_width_bits == 6144 and 4.6e12 < peak < 5.1e12


def test_empty_window_floor_is_small_and_stable(device):
    floors = [device.time_sample(lambda: None, cold=True) for _ in range(50)]
    median = float(np.median(floors))
    assert 100 < median < 10_000  # ns: the event pair's own floor (1.3 us measured on the H200)
    assert np.percentile(floors, 90) < 3 * median


def test_poison_upload_download_round_trip(device):
    buf = device.alloc(1 << 20)
    try:
        device.poison(buf)
        assert (device.download(buf) == 0xFF).all()
        data = np.arange(1 << 20, dtype=np.uint32).astype(np.uint8)
        device.upload(buf, data)
        assert np.array_equal(device.download(buf), data)
    finally:
        device.free(buf)


def test_vecload_trial_on_the_gpu(tmp_path):
    """A whole trial of a shortened vecload plan: byte parity, controls caught, the float4 arm faster."""
    import json

    from qualify.commands.pipeline import run_plan
    from qualify.plan.load import load_plan
    from qualify.run.device import CudaDevice
    from qualify.run.telemetry import Telemetry

    plan = json.loads((ROOT / "protocols" / "vecload" / "plan.json").read_text())
    plan["workload"]["cases"] = [{"N": 16777216}, {"N": 16777219}]
    plan["schedule"].update(samples_per_block=5, blocks=4, trials=1)
    plan["stop"]["min_blocks"] = 4
    plan["acceptance"] = {
        "gates": [{"name": "faster", "min_speedup_pct": 1.0}],
        "fidelity": {"mode": "bytes", "against": "base"},
    }
    plan["controls"]["negative"][1]["cases"] = ["N=16777219"]
    plan["hardware"]["devices"] = [{"compute_capability": "9.0"}, {"name": "*"}]
    repo = tmp_path / "repo"
    source = ROOT / "kernels" / "vecload" / "vecload.cu"
    loaded = load_plan(make_repo(repo, plan, files={"kernels/vecload/vecload.cu": source}, freeze=True))
    outcome = run_plan(loaded, repo / "records" / "vecload", lambda: CudaDevice(0), Telemetry)
    (trial,) = outcome.trials
    assert trial.status == "complete", trial.failures
    assert all(p.equal for c in trial.cases for p in c.parity)
    assert all(c.timed_outputs_match and all(c.deterministic.values()) for c in trial.cases)
    assert {(c.name, c.case): c.caught for c in trial.controls} == {
        ("flip_last_x_bit", "N=16777216"): True,
        ("flip_last_x_bit", "N=16777219"): True,
        ("drop_tail", "N=16777219"): True,
    }
    assert 300 < trial.timer["floor_ns"] < 10_000
    for case in trial.cases:
        assert case.timing["base"].median_ns > 1_000  # 200 MB moved: tens of microseconds
        assert case.resources["candidate"].registers > 0 and case.resources["base"].blocks_per_sm > 0
    assert (repo / "records" / "vecload" / "README.md").exists()
