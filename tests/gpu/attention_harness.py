"""Driver-level helpers for the attention kernel's GPU tests and its sanitizer runner.

Nothing here touches a GPU at import time: the test module imports this on machines with no GPU,
no nvcc and no torch (CI). Device work goes through `cuda.bindings.driver` on the device's primary
context; the two shared libraries are called through ctypes with the caller's stream.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
KERNEL_DIR = REPO / "kernels" / "attention"
HEAD_DIM = 256
CUDA_ERROR_INVALID_VALUE = 1
SENTINEL = 0xFFFF  # a bf16 NaN pattern: rows the kernel should write but did not stay visible


# ----------------------------------------------------------------------------------------- bf16
def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits (uint16), round to nearest even (inputs here are finite)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = u + (((u >> 16) & 1) + np.uint32(0x7FFF))
    return (rounded >> 16).astype(np.uint16)


def from_bf16(b: np.ndarray) -> np.ndarray:
    return (np.ascontiguousarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


# ----------------------------------------------------------------------------------------- build
def find_nvcc() -> str:
    for candidate in (
        shutil.which("nvcc"),
        os.path.join(os.environ.get("CUDA_HOME", ""), "bin", "nvcc") if os.environ.get("CUDA_HOME") else None,
        "/usr/local/cuda/bin/nvcc",
    ):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError("nvcc not found (looked in PATH, $CUDA_HOME/bin and /usr/local/cuda/bin)")


def build_libraries(build_dir: Path) -> dict[str, Path]:
    """`make -C kernels/attention BUILD=build_dir`; returns {"base": .so (64 rows), "cand": .so (128 rows)}."""
    build_dir = Path(build_dir).resolve()
    cmd = ["make", "-C", str(KERNEL_DIR), f"BUILD={build_dir}", f"NVCC={find_nvcc()}", "-j2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return {"base": build_dir / "libattention_base.so", "cand": build_dir / "libattention_cand.so"}


def find_sanitizer() -> str | None:
    for candidate in (
        shutil.which("compute-sanitizer"),
        os.path.join(os.environ.get("CUDA_HOME", ""), "bin", "compute-sanitizer")
        if os.environ.get("CUDA_HOME")
        else None,
        "/usr/local/cuda/bin/compute-sanitizer",
    ):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


# ------------------------------------------------------------------------------------- library
_p, _i, _f, _ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_longlong


class AttentionLib:
    """One attention .so, loaded RTLD_LOCAL so a base and a candidate copy can live side by side."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.dll = ctypes.CDLL(str(self.path))
        d = self.dll
        d.attention_abi_version.argtypes, d.attention_abi_version.restype = [], _i
        d.attention_error_string.argtypes, d.attention_error_string.restype = [_i], ctypes.c_char_p
        d.attention_gated.argtypes = [_p, _p, _p, _i, _p, _p, _i, _i, _i, _i, _f, _p]
        d.attention_gated_prefix.argtypes = [_p, _p, _p, _i, _p, _p, _i, _i, _i, _i, _f, _i, _p]
        d.attention_ungated.argtypes = [_p, _p, _p, _i, _p, _i, _i, _i, _i, _f, _p]
        d.attention_sigmoid_gate.argtypes = [_p, _p, _p, _ll, _p]
        for name in ("attention_gated", "attention_gated_prefix", "attention_ungated", "attention_sigmoid_gate"):
            getattr(d, name).restype = _i

    def abi_version(self) -> int:
        return self.dll.attention_abi_version()

    def error_string(self, code: int) -> str:
        return self.dll.attention_error_string(code).decode()

    def gated(self, q, k, v, ldv, gate, out, T, Hq, Hk, scale, stream, Dh=HEAD_DIM) -> int:
        return self.dll.attention_gated(q, k, v, ldv, gate, out, T, Hq, Hk, Dh, scale, stream)

    def gated_prefix(self, q, k, v, ldv, gate, out, T, Hq, Hk, scale, q_base, stream, Dh=HEAD_DIM) -> int:
        return self.dll.attention_gated_prefix(q, k, v, ldv, gate, out, T, Hq, Hk, Dh, scale, q_base, stream)

    def ungated(self, q, k, v, ldv, out, T, Hq, Hk, scale, stream, Dh=HEAD_DIM) -> int:
        return self.dll.attention_ungated(q, k, v, ldv, out, T, Hq, Hk, Dh, scale, stream)

    def sigmoid_gate(self, attn, gate, out, n, stream) -> int:
        return self.dll.attention_sigmoid_gate(attn, gate, out, n, stream)


# -------------------------------------------------------------------------------------- device
class Device:
    """The primary context of one device, a stream, and the allocations made through it."""

    def __init__(self, ordinal: int = 0):
        from cuda.bindings import driver

        self._drv = driver
        self._check(driver.cuInit(0))
        (self._dev,) = self._check(driver.cuDeviceGet(ordinal))
        (self._ctx,) = self._check(driver.cuDevicePrimaryCtxRetain(self._dev))
        self._check(driver.cuCtxSetCurrent(self._ctx))
        (self._stream,) = self._check(driver.cuStreamCreate(0))
        self.stream = int(self._stream)
        self._allocs: list = []
        (name,) = self._check(driver.cuDeviceGetName(256, self._dev))
        self.name = name.split(b"\0", 1)[0].decode()

    def _check(self, result):
        err, *values = result if isinstance(result, tuple) else (result,)
        if err != self._drv.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"CUDA driver call failed: {err.name}")
        return values

    def alloc(self, nbytes: int) -> int:
        (ptr,) = self._check(self._drv.cuMemAlloc(max(int(nbytes), 16)))
        self._allocs.append(ptr)
        return int(ptr)

    def upload(self, array: np.ndarray) -> int:
        array = np.ascontiguousarray(array)
        ptr = self.alloc(array.nbytes)
        self._check(self._drv.cuMemcpyHtoD(ptr, array, array.nbytes))
        return ptr

    def fill16(self, ptr: int, value: int, count: int) -> None:
        self._check(self._drv.cuMemsetD16Async(ptr, value, count, self._stream))

    def download(self, ptr: int, shape, dtype=np.uint16) -> np.ndarray:
        self.synchronize()
        host = np.empty(shape, dtype=dtype)
        self._check(self._drv.cuMemcpyDtoH(host, ptr, host.nbytes))
        return host

    def synchronize(self) -> None:
        self._check(self._drv.cuStreamSynchronize(self._stream))

    def close(self) -> None:
        drv = self._drv
        drv.cuStreamSynchronize(self._stream)
        for ptr in self._allocs:
            drv.cuMemFree(ptr)
        self._allocs.clear()
        drv.cuStreamDestroy(self._stream)
        drv.cuDevicePrimaryCtxRelease(self._dev)


# ----------------------------------------------------------------------------------------- cases
@dataclass
class Case:
    """Seeded inputs of one shape, on the host (bf16 bits) and on the device.

    V is a column slice of a fused [T, 2*Hk*256 + 256] buffer (K-like block, V block, one spare
    head), so ldv = (2*Hk + 1) * 256 exceeds Hk * 256 and V rows are strided.
    """

    T: int
    Hq: int
    Hk: int
    seed: int
    scale: float = 1.0 / 16.0
    q: np.ndarray = field(init=False)
    k: np.ndarray = field(init=False)
    v: np.ndarray = field(init=False)
    gate: np.ndarray = field(init=False)
    fused: np.ndarray = field(init=False)
    ldv: int = field(init=False)

    def __post_init__(self):
        rng = np.random.default_rng(self.seed)
        T, Hq, Hk, D = self.T, self.Hq, self.Hk, HEAD_DIM
        self.q = to_bf16(rng.standard_normal((T, Hq, D), dtype=np.float32) * 2.0)
        self.k = to_bf16(rng.standard_normal((T, Hk, D), dtype=np.float32))
        self.ldv = (2 * Hk + 1) * D
        self.fused = to_bf16(rng.standard_normal((T, self.ldv), dtype=np.float32))
        self.v = self.fused[:, Hk * D : 2 * Hk * D].reshape(T, Hk, D)
        self.gate = to_bf16(rng.standard_normal((T, Hq, D), dtype=np.float32) * 2.0)

    @property
    def out_elems(self) -> int:
        return self.T * self.Hq * HEAD_DIM


class DeviceCase:
    """A Case uploaded to a Device, with helpers that run one library and return its output bits."""

    def __init__(self, device: Device, case: Case):
        self.device, self.case = device, case
        self.q = device.upload(case.q)
        self.k = device.upload(case.k)
        self.fused = device.upload(case.fused)
        self.v = self.fused + case.Hk * HEAD_DIM * 2  # byte offset of the V block in a row
        self.gate = device.upload(case.gate)
        self.out = device.alloc(case.out_elems * 2)
        self.tmp = device.alloc(case.out_elems * 2)

    def _fresh_out(self, ptr: int) -> None:
        self.device.fill16(ptr, SENTINEL, self.case.out_elems)

    def _shape(self):
        c = self.case
        return (c.T, c.Hq, HEAD_DIM)

    def _expect_ok(self, lib: AttentionLib, code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"{lib.path.name} {what}: error {code} ({lib.error_string(code)})")

    def gated(self, lib: AttentionLib) -> np.ndarray:
        c, d = self.case, self.device
        self._fresh_out(self.out)
        self._expect_ok(
            lib,
            lib.gated(self.q, self.k, self.v, c.ldv, self.gate, self.out, c.T, c.Hq, c.Hk, c.scale, d.stream),
            "attention_gated",
        )
        return d.download(self.out, self._shape())

    def ungated(self, lib: AttentionLib) -> np.ndarray:
        c, d = self.case, self.device
        self._fresh_out(self.out)
        self._expect_ok(
            lib,
            lib.ungated(self.q, self.k, self.v, c.ldv, self.out, c.T, c.Hq, c.Hk, c.scale, d.stream),
            "attention_ungated",
        )
        return d.download(self.out, self._shape())

    def ungated_then_gate(self, lib: AttentionLib) -> np.ndarray:
        c, d = self.case, self.device
        self._fresh_out(self.tmp)
        self._fresh_out(self.out)
        self._expect_ok(
            lib,
            lib.ungated(self.q, self.k, self.v, c.ldv, self.tmp, c.T, c.Hq, c.Hk, c.scale, d.stream),
            "attention_ungated",
        )
        self._expect_ok(
            lib, lib.sigmoid_gate(self.tmp, self.gate, self.out, c.out_elems, d.stream), "attention_sigmoid_gate"
        )
        return d.download(self.out, self._shape())

    def gated_prefix(self, lib: AttentionLib, q_base: int) -> np.ndarray:
        """Rows [q_base, T) through the prefix entry point; returns the whole output buffer, whose
        rows below q_base must still hold the sentinel."""
        c, d = self.case, self.device
        row_bytes = c.Hq * HEAD_DIM * 2
        off = q_base * row_bytes
        self._fresh_out(self.out)
        self._expect_ok(
            lib,
            lib.gated_prefix(
                self.q + off,
                self.k,
                self.v,
                c.ldv,
                self.gate + off,
                self.out + off,
                c.T,
                c.Hq,
                c.Hk,
                c.scale,
                q_base,
                d.stream,
            ),
            "attention_gated_prefix",
        )
        return d.download(self.out, self._shape())


# ------------------------------------------------------------------------------------ reference
def reference_rows(case: Case, rows, heads) -> tuple[np.ndarray, np.ndarray]:
    """float64 causal attention (ungated) and its gated value for the given rows and heads.

    Returns two arrays [len(rows), len(heads), 256]. Inputs are the bf16 values the kernel reads.
    """
    q = from_bf16(case.q).astype(np.float64)
    k = from_bf16(case.k).astype(np.float64)
    v = from_bf16(case.v).astype(np.float64)
    gate = from_bf16(case.gate).astype(np.float64)
    group = case.Hq // case.Hk
    attn = np.empty((len(rows), len(heads), HEAD_DIM))
    for i, r in enumerate(rows):
        for j, h in enumerate(heads):
            kv = h // group
            logits = k[: r + 1, kv, :] @ q[r, h, :] * case.scale
            p = np.exp(logits - logits.max())
            attn[i, j] = (p / p.sum()) @ v[: r + 1, kv, :]
    sig = 1.0 / (1.0 + np.exp(-gate[np.asarray(rows)][:, np.asarray(heads)]))
    return attn, attn * sig


def sample_rows(T: int, count: int = 8, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed + T)
    picks = {0, T - 1}
    if T > 2:
        picks.update(int(x) for x in rng.choice(np.arange(1, T - 1), size=min(count - 2, T - 2), replace=False))
    return sorted(picks)
