"""The kernel inventory of library arms: CUPTI records parsed, occupancy, attribution, the second
timer, the engine's inventory stage on the fake device, and the record's kernel section."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from qualify.evaluate.kernels import SAME_NS, SAME_PCT, attribute, case_kernels, change_text, label
from qualify.evaluate.occupancy import occupancy
from qualify.evaluate.second_timer import agreement, allowance
from qualify.results.model import DeviceLimits, KernelActivity, KernelRow, TracedCall
from qualify.run import cupti_tracer
from qualify.run.demangle import BUILTIN, builtin_demangle, demangle_all, short_name
from qualify.run.fake import FAKE_LIMITS
from qualify.evaluate.inventory import inventory

FIXTURE = Path(__file__).parent / "fixtures" / "cupti" / "attention-wide-entry.json"


def load_fixture() -> dict:
    return json.loads(FIXTURE.read_text())


def fixture_trace(case: dict) -> dict[str, list[TracedCall]]:
    return {side: [TracedCall(event_ns=c["event_ns"], kernels=[cupti_tracer.from_raw(r) for r in c["records"]])
                   for c in calls] for side, calls in case.items()}  # fmt: skip


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
    names = demangle_all([r["name"] for c in fx["cases"].values() for calls in c.values()
                          for call in calls for r in call["records"]])[1]  # fmt: skip
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


# --- occupancy, hand-computed for the H200's limits (FAKE_LIMITS holds what its driver reports) --


@pytest.mark.parametrize(
    "threads, regs, static, dynamic, blocks, warps, limiter",
    [
        # 32 regs x 32 lanes = 1,024 per warp; 16 warps per sub-partition, 64 per SM: warp slots bind
        (256, 32, 0, 0, 8, 64, "warps"),
        # one warp per block: 64 warp slots allow 64 blocks, the SM holds 32
        (32, 0, 0, 0, 32, 32, "blocks"),
        # 255 regs -> 8,160 -> 8,192 per warp; 16,384 per sub-partition holds 2 warps: 8 warps, 2 blocks of 4
        (128, 255, 0, 0, 2, 8, "registers"),
        # 101,376 + 1,024 reserved = 102,400 B per block; 233,472 // 102,400 = 2
        (128, 32, 0, 101_376, 2, 8, "shared memory"),
        # 168 regs -> 5,376 per warp; 3 warps per sub-partition, 12 per SM: one block of 8 warps
        (256, 168, 0, 67_584, 1, 8, "registers"),
        # 65 regs -> 2,080 -> 2,304 per warp; 32 warps need 73,728 > 65,536 registers per block
        (1024, 65, 0, 0, 0, 0, "registers per block"),
        (1025, 32, 0, 0, 0, 0, "threads per block"),
        (0, 32, 0, 0, 0, 0, "threads per block"),
        # one thread is one warp: the 32 block slots bind
        (1, 32, 0, 0, 32, 32, "blocks"),
        # 100 threads take 4 warps (a partial warp is a whole one): 64 // 4 = 16 blocks
        (100, 32, 0, 0, 16, 64, "warps"),
        # 3 warps per block: 64 // 3 = 21 blocks (registers would allow 42)
        (96, 16, 0, 0, 21, 63, "warps"),
        # 64 regs x 32 = 2,048 per warp x 32 warps = 65,536: exactly the per-block limit, so one block fits
        (1024, 64, 0, 0, 1, 32, "registers"),
        # exactly the opt-in maximum: 232,448 + 1,024 reserved = 233,472 B, the whole SM
        (128, 32, 0, 232_448, 1, 4, "shared memory"),
        (128, 32, 1024, 232_448 - 1023, 0, 0, "shared memory per block"),
        # static shared memory counts like dynamic: 48 KiB + 1 KiB reserved -> 4 blocks (16 by registers)
        (64, 64, 49_152, 0, 4, 8, "shared memory"),
    ],
)
def test_occupancy_on_sm90(threads, regs, static, dynamic, blocks, warps, limiter):
    occ = occupancy(FAKE_LIMITS, threads, regs, static, dynamic)
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.limiter) == (blocks, warps, limiter)


def test_shared_memory_is_rounded_up_to_its_allocation_unit():
    # 32,276 + 1,024 reserved = 33,300 B: 7 blocks would fit unrounded (233,472 // 33,300); rounded up to
    # 33,408 only 6 do
    assert occupancy(FAKE_LIMITS, 32, 16, 0, 32_276).blocks_per_sm == 6
    assert occupancy(FAKE_LIMITS, 32, 16, 0, 0).blocks_per_sm == 32


def test_an_occupancy_is_a_value_no_caller_can_change():
    """The inventory copies an occupancy into its row; the same launch must give an equal, hashable,
    unchangeable answer."""
    import dataclasses

    occ = occupancy(FAKE_LIMITS, 256, 32, 0, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        occ.blocks_per_sm = 1  # type: ignore[misc]
    assert len({occ, occupancy(FAKE_LIMITS, 256, 32, 0, 0)}) == 1


# --- attribution -------------------------------------------------------------------------------


def row(name: str, ns: float, occurrence: int = 0) -> KernelRow:
    return KernelRow(name=name, occurrence=occurrence, grid=(1, 1, 1), block=(128, 1, 1), registers=32,
                     static_shared_bytes=0, dynamic_shared_bytes=0, local_bytes=0, blocks_per_sm=16,
                     warps_per_sm=64, limiter="warps", calls=5, median_ns=ns)  # fmt: skip


def test_attribution_wording():
    changes = attribute([row("flash<128>", 100_000), row("prep", 10_000), row("gone", 500)],
                        [row("prep", 10_100), row("flash<128>", 112_100), row("tail", 900)])  # fmt: skip
    text = {label(c): change_text(c) for c in changes}
    assert text == {"flash<128>": "+12.1 %", "prep": "same", "gone": "only in base", "tail": "only in candidate"}
    assert [c.name for c in changes] == ["flash<128>", "prep", "gone", "tail"]  # base's order, then new ones


@pytest.mark.parametrize(
    "base, cand, outcome",
    [
        (100_000, 100_000 * (1 + SAME_PCT / 100), "same"),  # at the relative edge
        (100_000, 100_000 * (1 + SAME_PCT / 100) + 1, "slower"),
        (100_000, 100_000 * (1 - SAME_PCT / 100), "same"),
        (100_000, 100_000 * (1 - SAME_PCT / 100) - 1, "faster"),
        (2_000, 2_000 + SAME_NS, "same"),  # +15 %, but within the absolute band
        (2_000, 2_000 + SAME_NS + 1, "slower"),
        (2_000, 2_000 - SAME_NS - 1, "faster"),
    ],
)
def test_attribution_band_edges(base, cand, outcome):
    (change,) = attribute([row("k", base)], [row("k", cand)])
    assert change.outcome == outcome
    if outcome != "same":
        assert change_text(change) == f"{(cand - base) / base * 100:+.1f} %"


def test_duplicates_match_by_launch_order_and_templates_by_name():
    changes = attribute([row("prep", 1_000), row("prep", 5_000, 1), row("fwd<64>", 50_000)],
                        [row("prep", 1_000), row("prep", 8_000, 1), row("fwd<128>", 40_000)])  # fmt: skip
    assert [(label(c), change_text(c)) for c in changes] == [
        ("prep", "same"), ("prep #2", "+60.0 %"), ("fwd<64> → fwd<128>", "-20.0 %")]


def test_exact_names_are_matched_before_templates():
    changes = attribute([row("k<1>", 1_000), row("k<2>", 9_000)], [row("k<2>", 9_000), row("k<1>", 1_000)])
    assert [(label(c), c.outcome) for c in changes] == [("k<1>", "same"), ("k<2>", "same")]
    changes = attribute([row("k<1>", 1_000)], [row("k<1>", 1_000), row("k<2>", 5_000)])
    assert [(label(c), change_text(c)) for c in changes] == [("k<1>", "same"), ("k<2>", "only in candidate")]


def test_a_kernel_of_zero_duration_in_base_changes_by_nanoseconds_only():
    (tiny,) = attribute([row("k", 0)], [row("k", SAME_NS)])
    (grown,) = attribute([row("k", 0)], [row("k", SAME_NS + 1)])
    assert (tiny.outcome, tiny.change_pct) == ("same", None)
    assert (grown.outcome, grown.change_pct, change_text(grown)) == ("slower", None, "slower")


def test_a_case_traced_on_one_arm_keeps_its_inventory_and_attributes_nothing():
    """A trace that holds one arm (a hand-edited record, a tracer that failed on the other) still
    gives that arm's kernels and timers; there is nothing to attribute a change to."""
    call = TracedCall(event_ns=1_000 + 10_000, kernels=[
        KernelActivity(name="k", grid=(4, 1, 1), block=(64, 1, 1), registers_per_thread=32, static_shared_bytes=0,
                       dynamic_shared_bytes=0, local_bytes_per_thread=0, start_ns=0, end_ns=10_000,
                       correlation_id=1, stream_id=1)])  # fmt: skip
    kernels = case_kernels({"base": [call]}, {}, FAKE_LIMITS, 1_000.0)
    assert kernels.attribution == []
    assert [(r.name, r.median_ns) for r in kernels.inventory["base"]] == [("k", 10_000.0)]
    assert set(kernels.inventory) == set(kernels.timers) == {"base"} and kernels.timers["base"].agree


def test_the_band_is_the_one_the_record_states():
    from qualify.evaluate.kernels import BAND_TEXT

    assert BAND_TEXT == "same: within ±2 % or ±0.3 µs of base"


def test_inventory_keeps_two_launches_of_one_kernel_apart_and_takes_medians():
    def k(name, start, ns, corr):
        return KernelActivity(name=name, grid=(1, 1, 1), block=(64, 1, 1), registers_per_thread=40,
                              static_shared_bytes=0, dynamic_shared_bytes=0, local_bytes_per_thread=0,
                              start_ns=start, end_ns=start + ns, correlation_id=corr, stream_id=1)  # fmt: skip

    calls = [TracedCall(event_ns=0, kernels=[k("b", 50, 30, 2), k("a", 0, 10, 1), k("a", 100, 70, 3)]),
             TracedCall(event_ns=0, kernels=[k("a", 0, 20, 4), k("b", 50, 40, 5), k("a", 100, 90, 6)]),
             TracedCall(event_ns=0, kernels=[k("a", 0, 60, 7), k("b", 70, 35, 8), k("a", 200, 80, 9)])]  # fmt: skip
    rows = inventory(calls, {}, FAKE_LIMITS)
    assert [(r.name, r.occurrence, r.median_ns, r.calls) for r in rows] == [
        ("a", 0, 20.0, 3), ("b", 0, 35.0, 3), ("a", 1, 80.0, 3)]
    # 40 regs x 32 = 1,280 per warp; 16,384 // 1,280 = 12 warps per sub-partition, 48 per SM, 24 blocks of 2
    assert (rows[0].blocks_per_sm, rows[0].warps_per_sm, rows[0].limiter) == (24, 48, "registers")


def test_without_the_devices_limits_the_inventory_states_no_occupancy():
    """A trial that could not read the device's limits still lists its kernels; what the launch
    implies per SM is unknown, never computed from guessed limits."""
    call = TracedCall(event_ns=0, kernels=[
        KernelActivity(name="k", grid=(8, 1, 1), block=(128, 1, 1), registers_per_thread=64, static_shared_bytes=512,
                       dynamic_shared_bytes=0, local_bytes_per_thread=0, start_ns=0, end_ns=2_000,
                       correlation_id=1, stream_id=1)])  # fmt: skip
    (known,) = inventory([call], {}, FAKE_LIMITS)
    (unknown,) = inventory([call], {}, None)
    assert known.blocks_per_sm and known.warps_per_sm and known.limiter
    assert (unknown.blocks_per_sm, unknown.warps_per_sm, unknown.limiter) == (None, None, None)
    assert unknown.model_dump(exclude={"blocks_per_sm", "warps_per_sm", "limiter"}) == known.model_dump(
        exclude={"blocks_per_sm", "warps_per_sm", "limiter"})


# --- the second timer --------------------------------------------------------------------------


def traced(event_ns: float, spans: list[tuple[int, int]]) -> TracedCall:
    ks = [KernelActivity(name="k", grid=(1, 1, 1), block=(32, 1, 1), registers_per_thread=8, static_shared_bytes=0,
                         dynamic_shared_bytes=0, local_bytes_per_thread=0, start_ns=s, end_ns=e, correlation_id=i,
                         stream_id=1) for i, (s, e) in enumerate(spans)]  # fmt: skip
    return TracedCall(event_ns=event_ns, kernels=ks)


@pytest.mark.parametrize("sign", [1, -1])
def test_timer_agreement_at_both_sides_of_the_bound(sign):
    floor, spans = 1_300.0, [(0, 30_000), (31_000, 50_000)]  # span 50 µs, kernel sum 49 µs
    edge = allowance(50_000)
    inside = agreement([traced(floor + 50_000 + sign * edge, spans)], floor)
    outside = agreement([traced(floor + 50_000 + sign * (edge + 1), spans)], floor)
    assert inside.agree and not outside.agree
    assert outside.cupti_span_ns == [50_000.0] and outside.cupti_sum_ns == [49_000.0]
    assert outside.event_ns == [50_000 + sign * (edge + 1)]


def test_the_bound_is_the_one_the_record_states():
    # 1 µs + 3 % of the span, as docs/kernels.md and the record's text say
    assert (allowance(0), allowance(100_000)) == (1_000, 4_000)
    assert agreement([traced(0, [])], 0).bound == "|events − floor − traced offset − CUPTI span| ≤ 1 µs + 3 % of the span"


def test_the_worst_call_is_the_one_named():
    t = agreement([traced(1_000 + 10_000, [(0, 10_000)]), traced(1_000 + 19_000, [(0, 10_000)]),
                   traced(1_000 + 10_500, [(0, 10_000)])], 1_000.0)  # fmt: skip
    assert not t.agree and t.worst_call == 1


def test_a_call_without_kernels_agrees_only_if_its_window_is_empty():
    empty = agreement([traced(1_300.0 + 500, [])], 1_300.0)
    assert empty.agree and empty.cupti_span_ns == [0.0] and empty.cupti_sum_ns == [0.0]
    assert not agreement([traced(1_300.0 + 5_000, [])], 1_300.0).agree
    none = agreement([], 1_300.0)
    assert (none.calls, none.worst_call, none.agree) == (0, None, True)


def test_the_disagreement_reason_names_the_call_and_both_timers():
    from qualify.evaluate.second_timer import disagreement_text

    t = agreement([traced(1_000 + 10_000, [(0, 10_000)]), traced(1_000 + 25_500, [(0, 10_000)])], 1_000.0)
    assert disagreement_text("T=4096", "candidate", t) == (
        "timers disagree at T=4096 (candidate, traced call 2): events 25.50 µs less a traced offset of 0.00 µs, "
        "CUPTI 10.00 µs (bound |events − floor − traced offset − CUPTI span| ≤ 1 µs + 3 % of the span)")


def test_the_traced_offset_is_the_median_of_the_null_calls_and_is_subtracted():
    from qualify.evaluate.second_timer import traced_offset

    floor = 1_000.0
    nulls = [traced(floor + 600 + extra, [(0, 600)]) for extra in (1_300, 1_500, 1_400, 9_000)]
    assert traced_offset(nulls, floor) == 1_450.0  # median of four: a stray call does not move it
    assert traced_offset(nulls[:3], floor) == 1_400.0
    assert traced_offset([traced(floor + 5_000, [])], floor) == 0.0  # a null call CUPTI missed says nothing
    assert traced_offset([], floor) == 0.0
    # a 4.7 µs kernel whose traced window reads 1.4 µs over its span, as on the H200
    call = traced(floor + 4_700 + 1_400, [(0, 4_700)])
    assert not agreement([call], floor).agree
    t = agreement([call], floor, offset_ns=1_400.0)
    assert t.agree and t.offset_ns == 1_400.0 and t.event_ns == [6_100.0]
    # the offset does not excuse a timer fault beyond the bound
    assert not agreement([traced(floor + 4_700 + 1_400 + allowance(4_700) + 1, [(0, 4_700)])], floor, 1_400.0).agree


# --- demangling --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mangled, expected",
    [
        ("_Z4prepPKfPfi", "prep"),
        ("_ZN5flash6kernelILi128ELb1EEEvPK6__halfPS2_i", "flash::kernel<128, true>"),
        ("_Z19attention_gated_fwdILi64EEvPK13__nv_bfloat16S2_S2_iS2_PS0_iiifi", "attention_gated_fwd<64>"),
        ("_ZN12_GLOBAL__N_14prepEPf", "(anonymous namespace)::prep"),
        ("_Z3fwdILin2ELj7EEvv", "fwd<-2, 7u>"),
        ("attention_sigmoid_gate_kernel", None),  # extern "C": nothing to demangle
        ("_Z3fooILZ", None),  # cut short: left as launched
    ],
)
def test_builtin_demangler(mangled, expected):
    assert builtin_demangle(mangled) == expected


def test_unreadable_names_stay_as_launched():
    demangler, names = demangle_all(["_Z3fooILZ", "plain"], demangler=BUILTIN)
    assert demangler == BUILTIN and names == {"_Z3fooILZ": "_Z3fooILZ", "plain": "plain"}


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="c++filt not on PATH")
def test_cxxfilt_and_the_builtin_give_the_same_short_names():
    mangled = ["_Z4prepPKfPfi", "_ZN5flash6kernelILi128ELb1EEEvPK6__halfPS2_i", "plain_c_kernel"]
    assert demangle_all(mangled, "c++filt") == ("c++filt", demangle_all(mangled, BUILTIN)[1])


def test_short_name_drops_parameters_and_return_type():
    assert short_name("void flash<(Mode)1>(float const*, int)") == "flash<(Mode)1>"
    assert short_name("void ns::k<std::pair<int, int> >(int)") == "ns::k<std::pair<int, int> >"


# --- without cupti-python ----------------------------------------------------------------------


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
