"""NVML telemetry, read only: SM clock, clock-event (throttle) reasons and temperature per sample.

qualify never sets clocks, power limits or persistence. Queries a VM does not support are caught
one by one and reported as missing (0), never as a failure of the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Reading:
    sm_mhz: float
    throttle: int
    temp_c: float


def _nvml():
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML library or no permission: telemetry is optional
        return None
    return pynvml


@lru_cache(maxsize=1)
def driver_version() -> str | None:
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        v = nvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:  # noqa: BLE001
        return None


class Telemetry:
    """Reads one device, matched by UUID (NVML's index order can differ from CUDA's)."""

    def __init__(self, uuid: str):
        self._nvml = _nvml()
        self._handle = None
        if self._nvml is not None:
            try:
                self._handle = self._nvml.nvmlDeviceGetHandleByUUID(uuid)
            except Exception:  # noqa: BLE001
                self._handle = None

    @property
    def available(self) -> bool:
        return self._handle is not None

    def read(self) -> Reading:
        if self._handle is None:
            return Reading(0.0, 0, 0.0)
        n, h = self._nvml, self._handle
        return Reading(
            sm_mhz=float(self._try(lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM), 0)),
            throttle=int(self._try(lambda: n.nvmlDeviceGetCurrentClocksEventReasons(h), 0)),
            temp_c=float(self._try(lambda: n.nvmlDeviceGetTemperature(h, 0), 0)),
        )

    @staticmethod
    def _try(fn, default):
        try:
            return fn()
        except Exception:  # noqa: BLE001 - unsupported in this VM
            return default
