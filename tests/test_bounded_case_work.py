"""Per-case work that stays per case (issue 36, item 3): the pieces a trial, a rehearsal and
`plan check` use so that their cost grows with the cases, not with their square. No timing is
asserted: each test checks that the bounded form gives what the whole one gave."""

from __future__ import annotations

import numpy as np
import pytest

from qualify.plan.model import Buffer, Seeds
from qualify.plan.resolve import ResolvedBuffer
from qualify.results.samples import TrialSamples
from qualify.run import inputs


def _samples() -> TrialSamples:
    s = TrialSamples()
    # 'N=1' is a prefix of 'N=10': a case's arrays must not take the other's
    for case, base in (("N=1", 100.0), ("N=10", 200.0), ("B=2,N=1", 300.0)):
        for i in range(4):
            for series in ("base", "candidate"):
                s.add(case, series, ns=base + i, block=i // 2, sm_mhz=1980.0, throttle=0, temp_c=40.0, placement=i % 2)
        s.add_warmup(case, "base", base * 2)
    s.add_floor(12.5)
    return s


@pytest.mark.parametrize("case", ["N=1", "N=10", "B=2,N=1"])
def test_one_cases_arrays_are_the_whole_sets_for_that_case(case):
    s = _samples()
    whole = s.arrays()
    one = s.arrays(case)
    expected = {k: v for k, v in whole.items() if k == "floor_ns" or k.startswith(f"{case}/")}
    assert list(one) == list(expected)  # the same keys, in the same (sorted) order
    for k in expected:
        assert one[k].dtype == expected[k].dtype and np.array_equal(one[k], expected[k])
    assert one["floor_ns"].tolist() == [12.5]


def test_a_case_never_seen_has_only_the_trial_wide_arrays():
    assert list(_samples().arrays("N=99")) == ["floor_ns"]


def _buffer(name: str, n: int) -> tuple[Buffer, ResolvedBuffer]:
    spec = Buffer.model_validate(
        {"name": name, "dtype": "f32", "shape": [n], "role": "input", "init": {"kind": "normal"}}
    )
    return spec, ResolvedBuffer(name, "f32", (n,), "input")


def test_the_input_cache_keeps_its_byte_count_and_bound(monkeypatch):
    """The running total of cached bytes is what the entries hold, and eviction keeps it under the
    bound (the total replaced a sum over every entry at each insert)."""
    inputs.clear_cache()
    assert inputs._cache_bytes == 0 and not inputs._cache
    monkeypatch.setattr(inputs, "CACHE_BYTES", 10 * 4 * 100)  # ten 100-element f32 inputs
    seeds = Seeds(base=3)
    spec, resolved = _buffer("x", 100)
    first = inputs.cached(seeds, "N=0", spec, resolved)
    for i in range(1, 25):
        inputs.cached(seeds, f"N={i}", spec, resolved)
        assert inputs._cache_bytes == sum(a.nbytes for a in inputs._cache.values())
        assert inputs._cache_bytes <= inputs.CACHE_BYTES
    assert len(inputs._cache) == 10  # the least recently used went first
    again = inputs.cached(seeds, "N=0", spec, resolved)  # evicted, generated again: the same bytes
    assert np.array_equal(again, first) and again is not first
    assert inputs._cache_bytes == sum(a.nbytes for a in inputs._cache.values())
    inputs.clear_cache()  # what this test cached goes with it
    assert inputs._cache_bytes == 0 and not inputs._cache


def test_small_cases_are_generated_without_a_pool_and_give_the_same_bytes(monkeypatch):
    seeds = Seeds(base=5)
    buffers = [_buffer("x", 64), _buffer("y", 64)]
    serial = inputs.generate_case(seeds, "N=64", buffers)
    monkeypatch.setattr(inputs, "SERIAL_ELEMENTS", 0)  # force the thread pool
    inputs.clear_cache()
    pooled = inputs.generate_case(seeds, "N=64", buffers)
    assert [a.tobytes() for a in serial] == [a.tobytes() for a in pooled]
