"""CUDA generations: which one qualify's CUDA packages belong to, and whether the parts agree.

qualify's CUDA stack has four versioned parts: the driver (what `nvidia-smi` calls "CUDA
Version", read with cuDriverGetVersion), cuda-bindings, NVRTC, and the runtime headers NVRTC
compiles against. They come from the install extra of one generation (`qualify[cu13]` or
`qualify[cu12]`); this module names what each extra holds and states the rules as pure functions
of versions. The probes that read the versions stay where the libraries are imported:
`qualify.build.nvrtc` (NVRTC, headers) and `qualify.run.device` (the driver), so this module
imports no CUDA package and its rules are tested on any machine.

The rules, from CUDA's compatibility guarantees:
- a driver loads CUBIN from an NVRTC of its own major or an older one (minor-version
  compatibility covers a newer minor of the same major), never from a newer major;
- a driver JIT-compiles PTX only from an NVRTC no newer than itself, minor included, which is
  why qualify always ships CUBIN;
- cuda-bindings of major N loads NVRTC of major N only, and needs a driver of major N or newer;
- the runtime headers must be NVRTC's major (a CUDA 13 header uses what NVRTC 12 does not know);
  another minor of that major compiles but is not what was tested, so it is only a warning.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from qualify.errors import DeviceError


@dataclass(frozen=True, order=True)
class CudaVersion:
    major: int
    minor: int

    @classmethod
    def from_int(cls, value: int) -> CudaVersion:
        """CUDA's integer encoding (13000 is 13.0, 12090 is 12.9), as cuDriverGetVersion and
        CUDART_VERSION give it."""
        return cls(value // 1000, value % 1000 // 10)

    @classmethod
    def parse(cls, text: str) -> CudaVersion:
        """ "13.0" or "12.9.86" (a package version: its first two numbers)."""
        match = re.match(r"(\d+)\.(\d+)", text.strip())
        if match is None:
            raise ValueError(f"not a CUDA version: {text!r}")
        return cls(int(match.group(1)), int(match.group(2)))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


@dataclass(frozen=True)
class Generation:
    """What one install extra holds."""

    major: int
    extra: str
    nvrtc_package: str
    runtime_package: str
    header_folder: str  # where the runtime wheel puts cuda_runtime.h, under site-packages
    cccl_package: str = ""
    cccl_folder: str = ""  # where the CCCL wheel puts cuda/std/..., under site-packages

    @property
    def pip(self) -> str:
        return f"pip install 'qualify[{self.extra}]'"

    @property
    def packages(self) -> tuple[str, ...]:
        return ("cuda-bindings", self.nvrtc_package, self.runtime_package)


GENERATIONS = {
    13: Generation(
        13,
        "cu13",
        "nvidia-cuda-nvrtc",
        "nvidia-cuda-runtime",
        "nvidia/cu13/include",
        "nvidia-cuda-cccl",
        "nvidia/cu13/include/cccl",
    ),
    12: Generation(
        12,
        "cu12",
        "nvidia-cuda-nvrtc-cu12",
        "nvidia-cuda-runtime-cu12",
        "nvidia/cuda_runtime/include",
        "nvidia-cuda-cccl-cu12",
        "nvidia/cuda_cccl/include",
    ),
}
NEWEST = max(GENERATIONS)


def for_major(major: int) -> Generation | None:
    return GENERATIONS.get(major)


def install_advice(version: CudaVersion | None = None, of: str = "the driver's") -> str:
    """Which extra to install: the one of `version` (the driver's, or NVRTC's) when it is known,
    else the rule for choosing."""
    gen = for_major(version.major) if version is not None else None
    if gen is not None:
        return f"install the extra for {of} CUDA {version}: {gen.pip}"
    if version is not None and version.major > NEWEST:
        return f"{of} CUDA {version} is newer than every extra; {GENERATIONS[NEWEST].pip} runs on it"
    choices = " or ".join(
        f"qualify[{g.extra}] (CUDA {g.major}.x)" for g in sorted(GENERATIONS.values(), key=lambda g: -g.major)
    )
    return f"install {choices}, the one matching the driver's CUDA version that nvidia-smi prints"


def missing_extra(what: str, cause: str) -> DeviceError:
    """The refusal when a CUDA package of the extras is not installed or cannot be loaded."""
    return DeviceError(f"{cause}; qualify's CUDA packages come with an install extra: {install_advice()}", file=what)


# ---------------------------------------------------------------------------------------------
# the rules


def cubin_loads(nvrtc: CudaVersion, driver: CudaVersion) -> bool:
    return nvrtc.major <= driver.major


def ptx_loads(nvrtc: CudaVersion, driver: CudaVersion) -> bool:
    return nvrtc <= driver


@dataclass(frozen=True)
class CudaStack:
    """The versions of the four parts; None where a part is absent or unreadable."""

    driver: CudaVersion | None
    bindings: str | None  # the cuda-bindings package version, e.g. "13.3.1"
    nvrtc: CudaVersion | None
    headers: CudaVersion | None

    @property
    def bindings_major(self) -> int | None:
        match = re.match(r"(\d+)\.", self.bindings or "")
        return int(match.group(1)) if match else None

    @property
    def generation(self) -> Generation | None:
        """The installed generation: NVRTC's, else cuda-bindings'."""
        major = self.nvrtc.major if self.nvrtc is not None else self.bindings_major
        return for_major(major) if major is not None else None


def refusals(stack: CudaStack) -> list[str]:
    """Why qualify cannot compile or load code with this stack; each says what to install."""
    out = []
    advice = install_advice(stack.driver)
    if stack.bindings is None or stack.nvrtc is None:
        missing = ", ".join(n for n, v in (("cuda-bindings", stack.bindings), ("NVRTC", stack.nvrtc)) if v is None)
        out.append(f"{missing} not installed; {advice}")
        return out
    bindings = stack.bindings_major
    if bindings != stack.nvrtc.major:
        out.append(f"cuda-bindings {stack.bindings} and NVRTC {stack.nvrtc} are of different generations; {advice}")
    if stack.driver is not None:
        if not cubin_loads(stack.nvrtc, stack.driver):
            out.append(f"NVRTC {stack.nvrtc} writes code the driver's CUDA {stack.driver} cannot load; {advice}")
        elif bindings is not None and bindings > stack.driver.major:
            out.append(
                f"cuda-bindings {stack.bindings} needs a CUDA {bindings} driver, this one is CUDA "
                f"{stack.driver}; {advice}"
            )
    if stack.headers is not None and stack.headers.major != stack.nvrtc.major:
        out.append(
            f"the CUDA headers are {stack.headers}, NVRTC is {stack.nvrtc}: they must be of one generation; "
            f"{install_advice(stack.nvrtc, of='NVRTC')}"
        )
    return out


def warnings(stack: CudaStack) -> list[str]:
    """What works but is not the tested combination."""
    out: list[str] = []
    if stack.nvrtc is None:
        return out
    if stack.driver is not None and cubin_loads(stack.nvrtc, stack.driver) and not ptx_loads(stack.nvrtc, stack.driver):
        out.append(
            f"NVRTC {stack.nvrtc} is newer than the driver's CUDA {stack.driver}: its CUBIN loads, its PTX "
            f"would not; keep NVRTC on the driver's minor"
        )
    if stack.headers is not None and stack.headers.major == stack.nvrtc.major and stack.headers != stack.nvrtc:
        out.append(f"the CUDA headers are {stack.headers}, NVRTC is {stack.nvrtc}: keep them on one minor")
    return out


def load_refusal(nvrtc: CudaVersion, driver: CudaVersion, error: str) -> str:
    """The start-up check's message when the driver refused NVRTC's code."""
    return f"the driver's CUDA {driver} cannot load code compiled by NVRTC {nvrtc} ({error}); {install_advice(driver)}"


# ---------------------------------------------------------------------------------------------
# header discovery

_CUDART_VERSION = re.compile(rb"^\s*#\s*define\s+CUDART_VERSION\s+(\d+)", re.MULTILINE)


def header_version(include_dir: Path) -> CudaVersion | None:
    """The CUDA version of a header folder, from CUDART_VERSION in its cuda_runtime_api.h."""
    try:
        text = (include_dir / "cuda_runtime_api.h").read_bytes()
    except OSError:
        return None
    match = _CUDART_VERSION.search(text)
    return CudaVersion.from_int(int(match.group(1))) if match else None


def header_dir(nvrtc: CudaVersion, fallback: Callable[[], str | None], search: Iterable[str] | None = None) -> Path:
    """The header folder for NVRTC's generation.

    First the runtime wheel of NVRTC's own generation in any folder on the import path (with both
    generations' wheels installed, cuda-pathfinder returns the newest generation's whatever NVRTC
    is), then `fallback` (cuda-pathfinder: conda, $CUDA_HOME, /usr/local/cuda). A folder is taken
    only when its CUDART_VERSION is of NVRTC's major."""
    gen = for_major(nvrtc.major)
    candidates: list[Path] = []
    if gen is not None:
        for entry in sys.path if search is None else search:
            folder = Path(entry or ".") / gen.header_folder
            if (folder / "cuda_runtime.h").is_file():
                candidates.append(folder)
    found = fallback()
    if found:
        candidates.append(Path(found))
    others = []
    for folder in candidates:
        version = header_version(folder)
        if version is not None and version.major == nvrtc.major:
            return folder
        others.append(f"{folder} ({version or 'no CUDART_VERSION'})")
    seen = f"; found only {', '.join(others)}" if others else ""
    raise DeviceError(
        f"no CUDA {nvrtc.major} headers for NVRTC {nvrtc} (cuda_bf16.h ...){seen}; {install_advice(nvrtc, of='NVRTC')}",
        file="cuda_runtime.h",
    )


# ---------------------------------------------------------------------------------------------
# CCCL: the device-side standard library (<cuda/std/...>, <cuda/barrier>, cub) for NVRTC

_CCCL_VERSION = re.compile(rb"^\s*#\s*define\s+CCCL_VERSION\s+(\d+)", re.MULTILINE)
CCCL_PREFIX = "<cccl>/"  # how a lock names a CCCL header: never a repository path


def installed_major() -> int | None:
    """The generation of the installed cuda-bindings, from its package metadata (no CUDA import)."""
    from importlib import metadata

    try:
        match = re.match(r"(\d+)\.", metadata.version("cuda-bindings"))
    except metadata.PackageNotFoundError:
        return None
    return int(match.group(1)) if match else None


def cccl_dir(major: int | None, toolkit: Path | None = None, search: Iterable[str] | None = None) -> Path | None:
    """The CCCL headers of generation `major`: $QUALIFY_CCCL_DIR when set (a CCCL of the team's
    choosing; its headers are frozen all the same), else its wheel's folder on the import path,
    else those a toolkit folder holds (CUDA 13 keeps them in include/cccl, CUDA 12 in include)."""
    explicit = os.environ.get("QUALIFY_CCCL_DIR")
    if explicit:
        folder = Path(explicit).resolve()
        if not (folder / "cuda" / "std" / "__cccl" / "version.h").is_file():
            raise DeviceError("not a CCCL include folder (no cuda/std/__cccl/version.h)", file=explicit)
        return folder
    gen = for_major(major) if major is not None else None
    candidates: list[Path] = []
    if gen is not None and gen.cccl_folder:
        candidates += [Path(entry or ".") / gen.cccl_folder for entry in (sys.path if search is None else search)]
    if toolkit is not None:
        candidates += [toolkit / "cccl", toolkit]
    for folder in candidates:
        if (folder / "cuda" / "std" / "__cccl" / "version.h").is_file():
            return folder
    return None


def cccl_version(folder: Path) -> str | None:
    """CCCL's version ("3.0.1") from CCCL_VERSION (MMMmmmppp) in its version header."""
    try:
        text = (folder / "cuda" / "std" / "__cccl" / "version.h").read_bytes()
    except OSError:
        return None
    match = _CCCL_VERSION.search(text)
    if match is None:
        return None
    value = int(match.group(1))
    return f"{value // 1000000}.{value // 1000 % 1000}.{value % 1000}"
