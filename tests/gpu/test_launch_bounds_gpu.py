"""The launch bounds `plan check` reads from the CUBIN are the driver's: a block within them
launches, a larger one is refused (which is why `plan check` refuses it before the GPU)."""

from __future__ import annotations

import pytest

from qualify.build.launch_bounds import launch_bounds
from qualify.build.nvrtc import KernelSpec, compile_kernel
from qualify.errors import DeviceError

pytestmark = pytest.mark.gpu

SOURCE = """\
extern "C" __global__ void __launch_bounds__(128) bounded(float* y) { y[threadIdx.x] = threadIdx.x; }
extern "C" __global__ void unbounded(float* y) { y[threadIdx.x] = threadIdx.x; }
"""


@pytest.fixture(scope="module")
def device():
    from qualify.run.device import CudaDevice

    with CudaDevice(0) as dev:
        yield dev


def test_the_cubins_bounds_are_the_drivers_and_a_larger_block_is_refused(device, tmp_path):
    source = tmp_path / "k.cu"
    source.write_text(SOURCE)
    compiled = compile_kernel(KernelSpec(source, "bounded", device.info.arch))
    assert launch_bounds(compiled.cubin, compiled.lowered_name).max_per_block == 128
    kernel = device.load_kernel("bounded", compiled, 0)
    out = device.alloc(4 * 1024)
    try:
        assert device.resources(kernel, 128, 0).max_threads_per_block == 128
        device.launch(kernel, (1, 1, 1), (128, 1, 1), 0, [("ptr", out.ptr)])
        device.synchronize()
        with pytest.raises(DeviceError):
            device.launch(kernel, (1, 1, 1), (256, 1, 1), 0, [("ptr", out.ptr)])
    finally:
        device.free(out)
        device.unload_kernel(kernel)


def test_a_kernel_without_bounds_reads_as_unbounded(device, tmp_path):
    source = tmp_path / "k.cu"
    source.write_text(SOURCE)
    compiled = compile_kernel(KernelSpec(source, "unbounded", device.info.arch))
    assert launch_bounds(compiled.cubin, compiled.lowered_name).max_per_block is None
    kernel = device.load_kernel("unbounded", compiled, 0)
    try:
        assert device.resources(kernel, 1024, 0).max_threads_per_block == 1024
    finally:
        device.unload_kernel(kernel)
