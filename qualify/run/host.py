"""What `qualify doctor` reads of this host, each probe a field of `Host`: the device, NVML, the
toolkit's tools, the installed packages, NVRTC and its headers. `real_host` reads them; tests hand
doctor a `Host` of fakes, so its decisions (`qualify.commands.doctor`) run on the CPU. Every probe
reads and never changes the host.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable

from qualify import generation
from qualify.errors import QualifyError
from qualify.results.model import DeviceInfo
from qualify.run.nvml_state import NvmlState, read_nvml_state

TOOLKIT_BIN = ("CUDA_HOME", "CUDA_PATH")  # where a CUDA toolkit says it is installed


@dataclass(frozen=True)
class Host:
    """The probes doctor runs; each raises or returns None/str where the thing is missing."""

    open_device: Callable[[int], DeviceInfo]  # raises DeviceError without a usable GPU
    nvml_state: Callable[[str], NvmlState | str]  # by UUID; a str says why NVML cannot tell
    which: Callable[[str], str | None]
    package_version: Callable[[str], str | None]
    nvrtc_version: Callable[[], str]  # raises QualifyError
    include_dir: Callable[[], Path]  # raises QualifyError
    driver_cuda: Callable[[], str | None]  # the driver's CUDA version ("13.0"); None without a driver
    header_version: Callable[[Path], str | None]  # CUDART_VERSION of a header folder ("13.0")
    # None when cupti-python loads, else why not (qualify.run.cupti_tracer.missing); the default
    # says nothing is missing, for hosts built by tests that do not care
    cupti_missing: Callable[[], str | None] = lambda: None


def find_tool(name: str) -> str | None:
    """PATH first, then the CUDA toolkit's usual places, as qualify.run.sanitizer looks."""
    found = shutil.which(name)
    if found:
        return found
    folders = [Path(os.environ[v]) / "bin" for v in TOOLKIT_BIN if os.environ.get(v)]
    folders.append(Path("/usr/local/cuda/bin"))
    for folder in folders:
        path = folder / name
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def device_info(ordinal: int) -> DeviceInfo:
    from qualify.run.device import CudaDevice

    device = CudaDevice(ordinal)
    try:
        return device.info
    finally:
        device.close()


def driver_cuda() -> str | None:
    from qualify.run.device import driver_cuda_version

    try:
        return driver_cuda_version()
    except QualifyError:  # no cuda-bindings: the packages and cuda lines say so
        return None


def header_version(include_dir: Path) -> str | None:
    version = generation.header_version(include_dir)
    return str(version) if version else None


def real_host() -> Host:
    from qualify.build.nvrtc import nvrtc_version, toolkit_include_dir
    from qualify.run import cupti_tracer

    return Host(
        open_device=device_info,
        nvml_state=read_nvml_state,
        which=find_tool,
        package_version=package_version,
        nvrtc_version=nvrtc_version,
        include_dir=toolkit_include_dir,
        driver_cuda=driver_cuda,
        header_version=header_version,
        cupti_missing=cupti_tracer.missing,
    )
