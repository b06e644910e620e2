"""The `gpu` marker of tests/conftest.py on a host whose GPU is missing: skipped by default, failed
before any fixture runs when QUALIFY_REQUIRE_GPU=1 (a GPU runner that lost its GPU never reports
green). The conftest runs in a scratch project, with the GPU probe answering "missing"."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).with_name("conftest.py")

PROJECT_CONFTEST = """\
import shared_conftest
from shared_conftest import pytest_collection_modifyitems, pytest_runtest_setup  # noqa: F401

shared_conftest._gpu_problem = lambda: "no CUDA device (planted)"
"""

TESTS = """\
import pytest


@pytest.fixture
def device():
    raise AssertionError("a fixture ran before the missing GPU was reported")

@pytest.mark.gpu
def test_on_the_gpu(device):
    pass

def test_on_the_cpu():
    pass
"""


def _run(tmp_path: Path, required: bool) -> subprocess.CompletedProcess:
    shutil.copy(CONFTEST, tmp_path / "shared_conftest.py")
    (tmp_path / "conftest.py").write_text(PROJECT_CONFTEST)
    (tmp_path / "test_planted.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    gpu: needs an NVIDIA GPU\naddopts = -ra --strict-markers\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "QUALIFY_REQUIRE_GPU"}
    if required:
        env["QUALIFY_REQUIRE_GPU"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_missing_gpu_skips_gpu_tests(tmp_path):
    result = _run(tmp_path, required=False)
    assert result.returncode == 0, result.stdout
    assert "1 passed, 1 skipped" in result.stdout
    assert "gpu test: no CUDA device (planted)" in result.stdout


def test_a_missing_gpu_fails_gpu_tests_when_one_is_required(tmp_path):
    result = _run(tmp_path, required=True)
    assert result.returncode == 1, result.stdout
    assert "1 passed, 1 error" in result.stdout
    assert "QUALIFY_REQUIRE_GPU=1 but no usable GPU: no CUDA device (planted)" in result.stdout
    assert "a fixture ran before" not in result.stdout
