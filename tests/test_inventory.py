"""The kernel inventory of library arms: the recorded CUPTI activity parsed into kernels, and
the inventory's rows (launches kept apart, medians, occupancy only with the device's limits)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qualify.evaluate.inventory import inventory
from qualify.evaluate.kernels import case_kernels
from qualify.results.model import DeviceLimits, KernelActivity, TracedCall
from qualify.run import cupti_tracer
from qualify.run.demangle import demangle_all
from qualify.run.fake import FAKE_LIMITS

FIXTURE = Path(__file__).parent / "fixtures" / "cupti" / "attention-wide-entry.json"


def load_fixture() -> dict:
    return json.loads(FIXTURE.read_text())


def fixture_trace(case: dict) -> dict[str, list[TracedCall]]:
    return {
        side: [
            TracedCall(event_ns=c["event_ns"], kernels=[cupti_tracer.from_raw(r) for r in c["records"]]) for c in calls
        ]
        for side, calls in case.items()
    }


# --- the recorded CUPTI activity (synthetic until the H200 recording replaces it) --------------


def test_fixture_records_parse_into_kernel_activity():
    fx = load_fixture()
    assert fx["cases"], "the fixture holds no case"
    for case in fx["cases"].values():
        assert set(case) == {"base", "candidate"}
        for calls in case.values():
            assert calls
            for call in calls:
                assert call["records"], "a traced call of the attention entry point launched no kernel"
                for raw in call["records"]:
                    k = cupti_tracer.from_raw(raw)
                    assert k.name == raw["name"] and k.name
                    assert k.end_ns > k.start_ns
                    assert k.grid == (raw["grid_x"], raw["grid_y"], raw["grid_z"])
                    assert k.dynamic_shared_bytes == raw["dynamic_shared_memory"]


def test_a_record_missing_a_field_is_refused():
    raw = dict(load_fixture()["cases"].popitem()[1]["base"][0]["records"][0])
    del raw["registers_per_thread"]
    with pytest.raises(KeyError):
        cupti_tracer.from_raw(raw)


def test_fixture_inventory_shows_each_builds_tile():
    """kernels/attention/Makefile: the base build runs 64-row tiles (4 warps, 67,584 B dynamic shared
    memory), the candidate 128-row tiles (8 warps, 101,376 B)."""
    fx = load_fixture()
    limits = DeviceLimits.model_validate(fx["limits"])
    names = demangle_all(
        [r["name"] for c in fx["cases"].values() for calls in c.values() for call in calls for r in call["records"]]
    )[1]
    for cid, case in fx["cases"].items():
        kernels = case_kernels(fixture_trace(case), names, limits, fx["floor_ns"])
        (fwd_base,) = [r for r in kernels.inventory["base"] if r.name.startswith("attention_gated_fwd")]
        (fwd_cand,) = [r for r in kernels.inventory["candidate"] if r.name.startswith("attention_gated_fwd")]
        assert fwd_base.name == "attention_gated_fwd<64>" and fwd_cand.name == "attention_gated_fwd<128>"
        assert (fwd_base.block, fwd_base.dynamic_shared_bytes) == ((128, 1, 1), 67_584)
        assert (fwd_cand.block, fwd_cand.dynamic_shared_bytes) == ((256, 1, 1), 101_376)
        for row in kernels.inventory["base"] + kernels.inventory["candidate"]:
            threads = row.block[0] * row.block[1] * row.block[2]
            assert row.blocks_per_sm >= 1 and row.warps_per_sm == row.blocks_per_sm * -(-threads // 32)
        # the same kernel with another tile: matched by its template's name, never "only in"
        assert all(c.outcome not in ("only in base", "only in candidate") for c in kernels.attribution)
        assert any(c.candidate_name == "attention_gated_fwd<128>" for c in kernels.attribution)
        for side, timers in kernels.timers.items():
            assert timers.agree, f"{cid} {side}: events and CUPTI disagree on the recorded fixture"


def test_inventory_keeps_two_launches_of_one_kernel_apart_and_takes_medians():
    def k(name, start, ns, corr):
        return KernelActivity(
            name=name,
            grid=(1, 1, 1),
            block=(64, 1, 1),
            registers_per_thread=40,
            static_shared_bytes=0,
            dynamic_shared_bytes=0,
            local_bytes_per_thread=0,
            start_ns=start,
            end_ns=start + ns,
            correlation_id=corr,
            stream_id=1,
        )

    calls = [
        TracedCall(event_ns=0, kernels=[k("b", 50, 30, 2), k("a", 0, 10, 1), k("a", 100, 70, 3)]),
        TracedCall(event_ns=0, kernels=[k("a", 0, 20, 4), k("b", 50, 40, 5), k("a", 100, 90, 6)]),
        TracedCall(event_ns=0, kernels=[k("a", 0, 60, 7), k("b", 70, 35, 8), k("a", 200, 80, 9)]),
    ]
    rows = inventory(calls, {}, FAKE_LIMITS)
    assert [(r.name, r.occurrence, r.median_ns, r.calls) for r in rows] == [
        ("a", 0, 20.0, 3),
        ("b", 0, 35.0, 3),
        ("a", 1, 80.0, 3),
    ]
    # 40 regs x 32 = 1,280 per warp; 16,384 // 1,280 = 12 warps per sub-partition, 48 per SM, 24 blocks of 2
    assert (rows[0].blocks_per_sm, rows[0].warps_per_sm, rows[0].limiter) == (24, 48, "registers")


def test_without_the_devices_limits_the_inventory_states_no_occupancy():
    """A trial that could not read the device's limits still lists its kernels; what the launch
    implies per SM is unknown, never computed from guessed limits."""
    call = TracedCall(
        event_ns=0,
        kernels=[
            KernelActivity(
                name="k",
                grid=(8, 1, 1),
                block=(128, 1, 1),
                registers_per_thread=64,
                static_shared_bytes=512,
                dynamic_shared_bytes=0,
                local_bytes_per_thread=0,
                start_ns=0,
                end_ns=2_000,
                correlation_id=1,
                stream_id=1,
            )
        ],
    )
    (known,) = inventory([call], {}, FAKE_LIMITS)
    (unknown,) = inventory([call], {}, None)
    assert known.blocks_per_sm and known.warps_per_sm and known.limiter
    assert (unknown.blocks_per_sm, unknown.warps_per_sm, unknown.limiter) == (None, None, None)
    assert unknown.model_dump(exclude={"blocks_per_sm", "warps_per_sm", "limiter"}) == known.model_dump(
        exclude={"blocks_per_sm", "warps_per_sm", "limiter"}
    )
