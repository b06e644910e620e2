"""Shared test configuration: the `gpu` marker.

A test marked `gpu` needs a usable NVIDIA device. Without one it is skipped, except when
QUALIFY_REQUIRE_GPU=1: then a missing device fails the test, so a GPU runner that lost its GPU can
never report green.
"""

from __future__ import annotations

import os

import pytest


def _gpu_problem() -> str | None:
    """Return why no GPU is usable, or None when one is."""
    try:
        from cuda.bindings import driver
    except Exception as exc:  # noqa: BLE001 - any import failure means "no GPU stack"
        return f"cuda.bindings unavailable: {exc}"
    try:
        (err,) = driver.cuInit(0)
    except RuntimeError as exc:  # no driver library at all
        return f"no NVIDIA driver: {exc}"
    if err != driver.CUresult.CUDA_SUCCESS:
        return f"cuInit failed: {err.name}"
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        return "no CUDA device"
    return None


def gpu_required() -> bool:
    return os.environ.get("QUALIFY_REQUIRE_GPU", "") == "1"


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    problem = _gpu_problem()
    if problem is None:
        return
    if gpu_required():
        mark = pytest.mark.usefixtures("_fail_missing_gpu")
    else:
        mark = pytest.mark.skip(reason=f"gpu test: {problem}")
    for item in gpu_items:
        item.add_marker(mark)


@pytest.fixture
def _fail_missing_gpu():
    pytest.fail(f"QUALIFY_REQUIRE_GPU=1 but no usable GPU: {_gpu_problem()}")
