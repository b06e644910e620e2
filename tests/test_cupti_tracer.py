"""The CUPTI tracer without cupti-python: what a host without it is told, and the collector's records."""

from __future__ import annotations

import pytest
from test_inventory import load_fixture

from qualify.run import cupti_tracer


def test_a_host_without_cupti_says_what_is_missing(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_cupti(name, *args, **kw):
        if name == "cupti" or name.startswith("cupti."):
            raise ImportError("No module named 'cupti'")
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_cupti)
    why = cupti_tracer.missing()
    assert why is not None and "cupti-python is not installed" in why and "qualify[cupti-cu13]" in why
    from qualify.errors import DeviceError

    with pytest.raises(DeviceError, match="cupti-python is not installed"):
        cupti_tracer.Tracer()


def test_the_collector_keeps_kernel_records_only_and_their_raw_fields(monkeypatch):
    from types import SimpleNamespace

    raw = dict(load_fixture()["cases"].popitem()[1]["candidate"][0]["records"][0])
    record = SimpleNamespace(kind=10, **{**raw, "name": raw["name"].encode()})  # names may come as bytes
    other = SimpleNamespace(kind=5, name="memcpy")
    sink: list[dict] = []
    monkeypatch.setattr(cupti_tracer, "RAW_SINK", sink)
    collector = cupti_tracer._Collector()
    collector.kernel_kind = 10
    collector.completed([other, record])
    (kernel,) = collector.take()
    assert kernel == cupti_tracer.from_raw(raw) and sink == [raw]
    assert collector.take() == []  # taken once
