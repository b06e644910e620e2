"""Shared test configuration: the `gpu` marker.

A test marked `gpu` needs a usable NVIDIA device. Without one it is skipped, except when
QUALIFY_REQUIRE_GPU=1: then a missing device fails the test, so a GPU runner that lost its GPU can
never report green.
"""

from __future__ import annotations

import functools
import os

import pytest


@functools.cache
def _gpu_problem() -> str | None:
    """Return why no GPU is usable, or None when one is (asked once per session)."""
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
    """Without a GPU, gpu tests are skipped, unless one is required (see pytest_runtest_setup)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items or gpu_required():
        return
    problem = _gpu_problem()
    if problem is None:
        return
    for item in gpu_items:
        item.add_marker(pytest.mark.skip(reason=f"gpu test: {problem}"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A required GPU that is missing fails each gpu test before any fixture opens a device. A hook,
    not a fixture added at collection: pytest fixes a test's fixtures before collection ends."""
    if gpu_required() and item.get_closest_marker("gpu"):
        problem = _gpu_problem()
        if problem is not None:
            pytest.fail(f"QUALIFY_REQUIRE_GPU=1 but no usable GPU: {problem}", pytrace=False)
