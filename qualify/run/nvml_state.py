"""What NVML says about one GPU, for `qualify doctor`: read only, never set (qualify sets no clock,
persistence or power state). Every query a GPU or VM may not support reads as None; a host without
NVML reads as the one-line reason, so doctor's decisions stay testable on the CPU with a fake state.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class NvmlState:
    """What NVML says about one GPU; None where this GPU or VM does not support the query."""

    persistence: bool | None = None
    sm_mhz: int | None = None
    sm_max_mhz: int | None = None
    clock_reasons: int | None = None
    applications_clocks_set: bool | None = None
    ecc: bool | None = None
    mig: bool | None = None
    other_processes: list[int] | None = None


def read_nvml_state(uuid: str) -> NvmlState | str:
    try:
        import pynvml as n
    except ImportError:
        return "nvidia-ml-py is not installed"
    try:
        n.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no library, no permission: NVML is optional
        return f"NVML unavailable ({type(exc).__name__})"
    try:
        h = n.nvmlDeviceGetHandleByUUID(uuid)
    except Exception as exc:  # noqa: BLE001
        return f"NVML does not know {uuid} ({type(exc).__name__})"

    def read(fn, default=None):
        try:
            return fn()
        except Exception:  # noqa: BLE001 - a query this GPU or VM does not support
            return default

    def pids() -> list[int]:
        found = []
        for query in (n.nvmlDeviceGetComputeRunningProcesses, n.nvmlDeviceGetGraphicsRunningProcesses):
            found += [p.pid for p in read(lambda q=query: q(h), []) or []]
        return sorted({p for p in found if p != os.getpid()})

    apps = read(lambda: n.nvmlDeviceGetApplicationsClock(h, n.NVML_CLOCK_SM))
    default_apps = read(lambda: n.nvmlDeviceGetDefaultApplicationsClock(h, n.NVML_CLOCK_SM))
    ecc = read(lambda: n.nvmlDeviceGetEccMode(h))
    mig = read(lambda: n.nvmlDeviceGetMigMode(h))
    return NvmlState(
        persistence=flag(read(lambda: n.nvmlDeviceGetPersistenceMode(h))),
        sm_mhz=read(lambda: int(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))),
        sm_max_mhz=read(lambda: int(n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM))),
        clock_reasons=read(lambda: int(n.nvmlDeviceGetCurrentClocksEventReasons(h))),
        applications_clocks_set=None if apps is None or default_apps is None else apps != default_apps,
        ecc=flag(ecc[0] if isinstance(ecc, (list, tuple)) else ecc),
        mig=flag(mig[0] if isinstance(mig, (list, tuple)) else mig),
        other_processes=read(pids),
    )


def flag(value) -> bool | None:
    """An NVML mode as a bool; None where the query was not supported."""
    return None if value is None else bool(value)
