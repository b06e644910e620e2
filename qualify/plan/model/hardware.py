"""The devices and architectures a plan is for, and the launch limits qualify knows of them."""

from __future__ import annotations

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
