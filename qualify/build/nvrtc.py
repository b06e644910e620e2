"""NVRTC compilation through cuda.bindings: the only module that imports NVRTC.

Works without a GPU (CI compiles every declared architecture). It always produces CUBIN for a real
architecture: an NVRTC newer than the driver writes PTX the driver cannot load, while SASS for the
device's own architecture loads on any driver that knows the GPU.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from qualify.build.resources import KernelResources, error_lines, parse_ptxas_log
from qualify.errors import BuildError, ToolError

_LOCK = threading.Lock()


@dataclass(frozen=True)
class KernelSpec:
    """What to compile: one kernel of one source for one architecture."""

    source: Path
    kernel: str  # name expression, e.g. "attention_gated_fwd<64>"
    arch: str  # "sm_90"
    defines: tuple[tuple[str, str], ...] = ()
    options: tuple[str, ...] = ()
    include_dirs: tuple[Path, ...] = ()


@dataclass(frozen=True)
class CompiledKernel:
    spec: KernelSpec
    lowered_name: str
    cubin: bytes
    log: str
    resources: KernelResources | None  # None: ptxas printed no report (seen with some NVRTC builds)


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # pragma: no cover - a broken install
        raise ToolError(f"cuda-bindings NVRTC is unavailable: {exc}") from None
    return nvrtc


@lru_cache(maxsize=1)
def nvrtc_version() -> str:
    nvrtc = _nvrtc()
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except RuntimeError as exc:  # libnvrtc not found
        raise ToolError(f"NVRTC library not found ({exc}); install nvidia-cuda-nvrtc") from None
    _check(err, "nvrtcVersion")
    return f"{major}.{minor}"


@lru_cache(maxsize=1)
def toolkit_include_dir() -> Path:
    from cuda.pathfinder import find_nvidia_header_directory

    found = find_nvidia_header_directory("cudart")
    if not found:
        raise ToolError("CUDA headers not found; install nvidia-cuda-runtime (cuda_bf16.h ...)")
    return Path(found)


def _check(err, what: str) -> None:
    nvrtc = _nvrtc()
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, msg = nvrtc.nvrtcGetErrorString(err)
        raise BuildError(f"{what} failed: {msg.decode(errors='replace')}")


def options_for(spec: KernelSpec) -> list[bytes]:
    opts = [
        f"--gpu-architecture={spec.arch}",
        "--std=c++17",
        "--ptxas-options=-v",
        "--generate-line-info",  # sanitizer reports name source lines
        f"--include-path={spec.source.parent}",
        *(f"--include-path={d}" for d in spec.include_dirs),
        f"--include-path={toolkit_include_dir()}",
        *(f"-D{k}={v}" for k, v in spec.defines),
        *spec.options,
    ]
    return [o.encode() for o in opts]


def compile_kernel(spec: KernelSpec) -> CompiledKernel:
    """Compile one kernel to CUBIN; BuildError carries the NVRTC log lines that matter."""
    nvrtc = _nvrtc()
    nvrtc_version()  # a clear ToolError when the library is missing
    source = spec.source.read_bytes()
    err, prog = nvrtc.nvrtcCreateProgram(source, str(spec.source.name).encode(), 0, [], [])
    _check(err, "nvrtcCreateProgram")
    try:
        name = spec.kernel.encode()
        (err,) = nvrtc.nvrtcAddNameExpression(prog, name)
        _check(err, "nvrtcAddNameExpression")
        opts = options_for(spec)
        (compile_err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        log = _program_log(prog)
        if compile_err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise BuildError(
                f"NVRTC could not compile {spec.kernel} for {spec.arch}",
                log=error_lines(log),
                file=spec.source,
            )
        err, lowered = nvrtc.nvrtcGetLoweredName(prog, name)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise BuildError(f"kernel {spec.kernel} was not instantiated", file=spec.source)
        lowered_name = lowered.decode()
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(err, "nvrtcGetCUBINSize")
        if size == 0:  # a virtual architecture yields PTX only, with success
            raise BuildError(f"NVRTC produced no CUBIN for {spec.arch}", file=spec.source)
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _check(err, "nvrtcGetCUBIN")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    # Seen on the GPU machine's NVRTC 13.0 for extern "C" kernels: an empty log. The figures are then
    # missing from `plan check`; at run time the driver's own attributes are recorded regardless.
    resources = parse_ptxas_log(log).get(lowered_name)
    return CompiledKernel(spec=spec, lowered_name=lowered_name, cubin=cubin, log=log, resources=resources)


def _program_log(prog) -> str:
    nvrtc = _nvrtc()
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    _check(err, "nvrtcGetProgramLogSize")
    buf = b" " * size
    (err,) = nvrtc.nvrtcGetProgramLog(prog, buf)
    _check(err, "nvrtcGetProgramLog")
    return buf.rstrip(b"\x00").decode(errors="replace")
