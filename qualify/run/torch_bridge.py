"""torch's side of Python arms: the one module of qualify that imports torch, imported only by
`CudaDevice.python_runtime` in a trial's child process (never by `plan check`).

qualify's buffers stay qualify's: each is handed to the callable as a torch tensor over the same
device memory (`__cuda_array_interface__`, no copy), on qualify's own stream wrapped as a
`torch.cuda.ExternalStream` and made torch's current stream for the call, so Triton and torch ops
enqueue there. A graph is captured by torch on that same stream (its allocator then keeps the
call's temporaries in the graph's private pool), after an eager call has compiled everything.
"""

from __future__ import annotations

import torch

# qualify dtype -> torch dtype; a type torch lacks is exposed as its storage (raw bits)
_TORCH = {
    "bf16": torch.bfloat16,
    "f16": torch.float16,
    "f32": torch.float32,
    "f64": torch.float64,
    "i8": torch.int8,
    "u8": torch.uint8,
    "i16": torch.int16,
    "i32": torch.int32,
    "i64": torch.int64,
    "f8e4m3": getattr(torch, "float8_e4m3fn", torch.uint8),
    "f8e5m2": getattr(torch, "float8_e5m2", torch.uint8),
}
_STORAGE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class _Memory:
    """A byte range of device memory, described the way torch.as_tensor reads it."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (ptr, False),
            "version": 3,
            "strides": None,
            "stream": None,  # qualify orders its own stream; torch must not synchronise on import
        }


class TorchRuntime:
    """What a Python arm's call sees on a real device: tensors, the stream, graph capture."""

    name = "torch"

    def __init__(self, ordinal: int, stream_handle: int):
        self.device = torch.device("cuda", ordinal)
        torch.cuda.set_device(self.device)
        self.stream = torch.cuda.ExternalStream(stream_handle, device=self.device)

    def array(self, ptr: int, nbytes: int, dtype: str, itemsize: int, shape: tuple[int, ...]):
        raw = torch.as_tensor(_Memory(ptr, nbytes), device=self.device)
        if raw.data_ptr() != ptr:  # a copy would time and write the wrong memory
            raise RuntimeError("torch copied qualify's buffer instead of viewing it")
        return raw.view(_TORCH.get(dtype) or _STORAGE[itemsize]).view(shape)

    def scope(self):
        return torch.cuda.stream(self.stream)

    def capture(self, call):
        """A graph of one call, captured on qualify's stream; replay() enqueues it there."""
        graph = torch.cuda.CUDAGraph()
        # thread_local: qualify's other threads (input generation, telemetry) are not the capture's
        with torch.cuda.graph(graph, stream=self.stream, capture_error_mode="thread_local"):
            call()
        return graph

    def replay(self, graph) -> None:
        with torch.cuda.stream(self.stream):
            graph.replay()

    def synchronize(self) -> None:
        self.stream.synchronize()
