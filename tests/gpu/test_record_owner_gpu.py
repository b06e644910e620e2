"""One owner per device per record on the GPU (issue 25 item 9): `qualify run` owns device 0's
trials in its record while its trial processes run; a second `qualify run` on device 0 into the
same record is refused (exit 5) naming the owner, and the owner's record still checks out."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from plans import make_repo, plan_copy

pytestmark = pytest.mark.gpu


def test_a_second_run_on_the_device_into_the_record_is_refused_naming_the_owner(tmp_path):
    plan = plan_copy()
    plan["hardware"] = {"devices": [{"name": "*"}], "architectures": ["sm_90"]}
    plan["schedule"] = {"warmup": 5, "samples_per_block": 10, "blocks": 10, "trials": 2}
    plan["budget"] = {"max_trials": 2, "max_samples": 200, "max_wall_seconds": 300}
    plan["acceptance"]["sanitizer"] = []
    path = make_repo(tmp_path / "repo", plan, freeze=True)
    record = tmp_path / "record"
    command = [sys.executable, "-m", "qualify", "run", str(path), "--record", str(record), "--device", "0"]
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list(record.glob(".owner-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(record.glob(".owner-*")), "the first run never took the device"
        second = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert first.poll() is None, "the first run ended before the second was refused: make it longer"
    finally:
        _, first_stderr = first.communicate(timeout=600)  # reads and closes the pipe
    assert second.returncode == 5, second.stderr
    assert f"pid {first.pid}" in second.stderr and "one run per device per record" in second.stderr
    assert second.stderr.startswith("qualify: error:") and second.stderr.count("\n") == 1
    assert first.returncode in (0, 1, 7), first_stderr[-2000:]
    check = subprocess.run([sys.executable, "-m", "qualify", "report", "--check", str(record)], capture_output=True)
    assert check.returncode == 0, check.stderr
