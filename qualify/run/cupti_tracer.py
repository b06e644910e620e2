"""CUPTI's activity API, the only module that imports NVIDIA's `cupti-python` (`from cupti import cupti`).

It is an optional extra (`pip install 'qualify[cupti-cu13]'`): without it every other part of
qualify works, `qualify doctor` says what is missing, and the record states that no kernel trace
was taken. Only CONCURRENT_KERNEL records are collected — one per kernel execution, with the
launch configuration and GPU start/end timestamps — and they are turned into `KernelActivity`
at once, so no CUPTI object outlives a flush.
"""

from __future__ import annotations

import threading
from importlib import metadata

from qualify.errors import DeviceError
from qualify.results.model import KernelActivity

PACKAGE = "cupti-python"
INSTALL = "pip install 'qualify[cupti-cu13]' ('qualify[cupti-cu12]' where the driver is CUDA 12)"
BUFFER_BYTES = 8 << 20


def _module():
    from cupti import cupti  # noqa: PLC0415 - the optional extra, imported only here

    return cupti


def missing() -> str | None:
    """Why no trace can be taken on this host, or None when cupti-python imports."""
    try:
        _module()
    except ImportError as exc:
        return f"{PACKAGE} is not installed ({exc.msg}); {INSTALL}"
    except Exception as exc:  # noqa: BLE001 - a broken install or a libcupti it cannot load
        return f"{PACKAGE} does not load: {exc!r}; {INSTALL}"
    return None


def version() -> str:
    try:
        return f"{PACKAGE} {metadata.version(PACKAGE)}"
    except metadata.PackageNotFoundError:
        return PACKAGE


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


# The CONCURRENT_KERNEL record fields qualify reads, by their cupti-python names.
RAW_FIELDS = (
    "name",
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "registers_per_thread",
    "static_shared_memory",
    "dynamic_shared_memory",
    "local_memory_per_thread",
    "start",
    "end",
    "correlation_id",
    "stream_id",
    "shared_memory_executed",
)
# tools/record_cupti_fixture.py sets a list here to keep every record's raw fields (a fixture);
# None in every run.
RAW_SINK: list[dict] | None = None


def raw_fields(record) -> dict:
    """A record's fields as plain values (names decoded); a field the record lacks is left out."""
    out = {}
    for name in RAW_FIELDS:
        value = getattr(record, name, None)
        if value is not None:
            out[name] = _text(value) if name == "name" else int(value)
    return out


def from_raw(raw: dict) -> KernelActivity:
    """One CONCURRENT_KERNEL record's fields (RAW_FIELDS) as qualify keeps them."""
    executed = raw.get("shared_memory_executed")
    return KernelActivity(
        name=raw["name"],
        grid=(raw["grid_x"], raw["grid_y"], raw["grid_z"]),
        block=(raw["block_x"], raw["block_y"], raw["block_z"]),
        registers_per_thread=raw["registers_per_thread"],
        static_shared_bytes=raw["static_shared_memory"],
        dynamic_shared_bytes=raw["dynamic_shared_memory"],
        local_bytes_per_thread=raw["local_memory_per_thread"],
        start_ns=raw["start"],
        end_ns=raw["end"],
        correlation_id=raw["correlation_id"],
        stream_id=raw["stream_id"],
        shared_memory_executed=executed,
    )


class _Collector:
    """The buffer callbacks CUPTI calls (on its own thread, or inside a flush) and what they got."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: list[KernelActivity] = []
        self.errors: list[str] = []
        self.kernel_kind: int | None = None

    def requested(self):
        return BUFFER_BYTES, 0  # 0: as many records as fit

    def completed(self, activities) -> None:
        got = []
        for a in activities:
            if int(a.kind) != self.kernel_kind:
                continue
            try:
                raw = raw_fields(a)
                got.append(from_raw(raw))
            except (KeyError, TypeError, ValueError) as exc:  # a record shape this code does not know
                self.errors.append(repr(exc))
                continue
            if RAW_SINK is not None:
                RAW_SINK.append(raw)
        with self.lock:
            self.records.extend(got)

    def take(self) -> list[KernelActivity]:
        with self.lock:
            out, self.records = self.records, []
        return out


_collector: _Collector | None = None  # callbacks are registered once per process


class Tracer:
    """Kernel activity on while inside `with`; `take()` flushes and returns what ran since the last."""

    def __init__(self) -> None:
        global _collector
        why = missing()
        if why is not None:
            raise DeviceError(why)
        self._cupti = _module()
        if _collector is None:
            _collector = _Collector()
            _collector.kernel_kind = int(self._cupti.ActivityKind.CONCURRENT_KERNEL)
            self._call(self._cupti.activity_register_callbacks, _collector.requested, _collector.completed)
        self._collector = _collector

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - cuptiResult errors arrive as the binding's own type
            raise DeviceError(f"CUPTI {fn.__name__}: {exc}") from None

    def __enter__(self) -> Tracer:
        self._call(self._cupti.activity_enable, self._cupti.ActivityKind.CONCURRENT_KERNEL)
        self._collector.take()  # nothing from before this trace
        return self

    def take(self) -> list[KernelActivity]:
        self._call(self._cupti.activity_flush_all, 1)  # forced: the call's buffer, complete or not
        if self._collector.errors:
            raise DeviceError(f"unreadable CUPTI kernel record: {self._collector.errors[0]}")
        return self._collector.take()

    def __exit__(self, *exc) -> None:
        self._call(self._cupti.activity_flush_all, 1)
        self._call(self._cupti.activity_disable, self._cupti.ActivityKind.CONCURRENT_KERNEL)
        self._collector.take()
