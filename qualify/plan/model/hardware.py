"""The devices and architectures a plan is for, and the launch limits qualify knows of them."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from qualify.plan.model.fields import PlainText, Strict

# Opt-in dynamic shared memory per block, by architecture (CUDA C++ Programming Guide,
# "Technical Specifications per Compute Capability"). An architecture missing here is refused:
# qualify cannot say whether a launch fits it.
MAX_SHARED_PER_BLOCK = {
    "sm_75": 65_536,
    "sm_80": 166_912,
    "sm_86": 101_376,
    "sm_87": 166_912,
    "sm_89": 101_376,
    "sm_90": 232_448,
    "sm_100": 232_448,
    "sm_103": 232_448,
    "sm_120": 101_376,
    "sm_121": 101_376,
}
# Arch-specific targets ('a': wgmma, setmaxnreg, tcgen05 ...) run only on the exact compute
# capability; family-specific ones ('f', CUDA 12.9+) on every later minor of the same major.
# Each has its base architecture's limits. NVRTC 13.0 and 12.9 compile all of these.
ARCH_SPECIFIC = ("sm_90a", "sm_100a", "sm_103a", "sm_120a", "sm_121a")
FAMILY_SPECIFIC = ("sm_100f", "sm_103f", "sm_120f", "sm_121f")
MAX_SHARED_PER_BLOCK |= {arch: MAX_SHARED_PER_BLOCK[arch[:-1]] for arch in (*ARCH_SPECIFIC, *FAMILY_SPECIFIC)}
_ARCH = re.compile(r"^sm_(\d+)(\d)([af]?)$")


def compute_capability_of(arch: str) -> tuple[int, int]:
    """(major, minor) of an architecture name: sm_90a -> (9, 0), sm_121 -> (12, 1)."""
    match = _ARCH.match(arch)
    if match is None:
        raise ValueError(f"not an architecture name: {arch!r}")
    return int(match.group(1)), int(match.group(2))


def runs_on(arch: str, device_arch: str) -> bool:
    """Whether code compiled for `arch` runs on a device whose own architecture is `device_arch`
    (sm_90 for compute capability 9.0). A plain architecture is taken only for its own device,
    as qualify always compiles; 'a' code only on its exact compute capability, 'f' code on its
    major's later minors too."""
    target, device = compute_capability_of(arch), compute_capability_of(device_arch)
    if arch.endswith("f"):
        return target[0] == device[0] and device[1] >= target[1]
    return target == device


def target_for(declared: list[str], device_arch: str) -> str | None:
    """The plan architecture to compile for a device: its own when the plan lists it, else the
    plan's arch-specific target for it, else the family target of the highest minor; None when
    no listed architecture runs there."""
    if device_arch in declared:
        return device_arch
    fitting = [a for a in declared if a != device_arch and runs_on(a, device_arch)]
    fitting.sort(key=lambda a: (a.endswith("a"), compute_capability_of(a)), reverse=True)
    return fitting[0] if fitting else None


def refusal(declared: list[str], device_arch: str, compute_capability: str) -> str:
    """Why a device cannot run any of the plan's architectures, in one line."""
    specific = [a for a in declared if a[-1] in "af"]
    if specific:
        needs = "; ".join(
            f"{a} code runs only on compute capability "
            + (
                f"{'.'.join(map(str, compute_capability_of(a)))}"
                if a.endswith("a")
                else f"{compute_capability_of(a)[0]}.{compute_capability_of(a)[1]} or a later {compute_capability_of(a)[0]}.x"
            )
            for a in specific
        )
        return (
            f"this device is compute capability {compute_capability} ({device_arch}) and the plan lists "
            f"{', '.join(declared)}: {needs}"
        )
    return f"{device_arch} is not among the plan's architectures ({', '.join(declared)})"


# Compute capabilities of devices a plan names by name only, so `plan check` can tell that a
# device cannot run any of the plan's architectures (NVIDIA's CUDA GPUs list; names as CUDA reports
# them). A name missing here is not refused: qualify cannot say what it runs.
KNOWN_DEVICES = {
    "NVIDIA A100-SXM4-80GB": "8.0",
    "NVIDIA A100-SXM4-40GB": "8.0",
    "NVIDIA A100-PCIE-40GB": "8.0",
    "NVIDIA A100 80GB PCIe": "8.0",
    "NVIDIA A10": "8.6",
    "NVIDIA A10G": "8.6",
    "NVIDIA L4": "8.9",
    "NVIDIA L40": "8.9",
    "NVIDIA L40S": "8.9",
    "NVIDIA GeForce RTX 4090": "8.9",
    "NVIDIA RTX 6000 Ada Generation": "8.9",
    "NVIDIA H100 80GB HBM3": "9.0",
    "NVIDIA H100 PCIe": "9.0",
    "NVIDIA H100 NVL": "9.0",
    "NVIDIA H200": "9.0",
    "NVIDIA H200 NVL": "9.0",
    "NVIDIA GH200 480GB": "9.0",
    "NVIDIA B200": "10.0",
    "NVIDIA GB200": "10.0",
    "NVIDIA B300": "10.3",
    "NVIDIA GeForce RTX 5090": "12.0",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "12.0",
}


def device_capabilities(device: DeviceSpec) -> dict[str, str]:
    """What a plan's device entry stands for: {what it is called: compute capability}, from its
    own compute_capability when stated, else from the known devices its name pattern matches."""
    from fnmatch import fnmatchcase

    if device.compute_capability is not None:
        return {device.name or f"compute capability {device.compute_capability}": device.compute_capability}
    pattern = device.name or ""
    return {name: cc for name, cc in KNOWN_DEVICES.items() if fnmatchcase(name, pattern)}


def unrunnable_device(declared: list[str], device: DeviceSpec) -> str | None:
    """Why a plan's device can run none of its architectures, or None when it can (or qualify
    cannot tell: a name it does not know)."""
    known = device_capabilities(device)
    if not known:
        return None
    archs = {name: f"sm_{cc.replace('.', '')}" for name, cc in known.items()}
    if any(target_for(declared, arch) is not None for arch in archs.values()):
        return None
    name, cc = next(iter(known.items()))
    what = name if device.compute_capability is None or device.name else "a device"
    reason = refusal(declared, archs[name], cc).replace("this device", what, 1)
    return f"{reason}; add {archs[name]} to hardware.architectures or remove the device"


MAX_THREADS_PER_BLOCK = 1024


class DeviceSpec(Strict):
    name: Annotated[PlainText, Field(max_length=200)] | None = Field(
        default=None,
        description="fnmatch pattern for the device name as CUDA reports it ('NVIDIA H200*').",
    )
    compute_capability: str | None = Field(default=None, pattern=r"^\d{1,2}\.\d$", description="'9.0' for sm_90.")

    @model_validator(mode="after")
    def _one_needed(self) -> DeviceSpec:
        if self.name is None and self.compute_capability is None:
            raise ValueError("give a name pattern, a compute_capability, or both")
        return self


class Hardware(Strict):
    devices: list[DeviceSpec] = Field(
        min_length=1, description="Devices the plan is for; others are refused unless exploratory."
    )
    architectures: list[str] = Field(
        min_length=1, description="Architectures every CUDA arm is compiled for ('sm_90')."
    )

    @field_validator("architectures")
    @classmethod
    def _known_arch(cls, value: list[str]) -> list[str]:
        for arch in value:
            if arch not in MAX_SHARED_PER_BLOCK:
                known = ", ".join(MAX_SHARED_PER_BLOCK)
                raise ValueError(f"unsupported architecture {arch!r} (supported: {known})")
        if len(set(value)) != len(value):
            raise ValueError("architectures are listed twice")
        return value
