"""The placement pool and the flush slots, against the fake device."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from qualify.errors import DeviceError
from qualify.plan.resolve import ResolvedBuffer
from qualify.run.device import DeviceBuffer
from qualify.run.fake import FakeDevice
from qualify.run.placement import (
    OFFSET_LIMIT,
    PlacementPool,
    check_granularity,
    draw_layouts,
    layout_rng,
    shared_keys,
)

N = 1024


class Recording(FakeDevice):
    """The fake, logging every allocation, free and upload (which buffer: its allocation's rank)."""

    def __init__(self, **kw):
        super().__init__({}, **kw)
        self.ops: list[tuple] = []
        self._rank: dict[int, int] = {}

    def alloc(self, nbytes):
        buf = super().alloc(nbytes)
        self._rank[buf.ptr] = len(self._rank)
        self.ops.append(("alloc", nbytes))
        return buf

    def free(self, buf):
        super().free(buf)
        self.ops.append(("free", self._rank[buf.ptr]))

    def upload(self, buf, data):
        super().upload(buf, data)
        base = max(p for p in self._rank if p <= buf.ptr)  # the allocation a view sits in
        self.ops.append(("upload", self._rank[base], buf.ptr - base, hashlib.sha256(data).hexdigest()))


def buf(name, dtype="f32", shape=(N,), role="input"):
    return ResolvedBuffer(name, dtype, shape, role)


# x and y shared; the candidate's out is f16 (another buffer), its scratch its own
ARMS = {
    "base": [buf("x"), buf("y"), buf("out", role="output")],
    "candidate": [buf("x"), buf("y"), buf("out", "f16", role="output"), buf("scratch", "u8", (300,), "output")],
}


def inputs():
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    return {"base": {"x": x, "y": y}, "candidate": {"x": x, "y": y}}


def todays_setup(dev, arms, host):
    """The case set-up as the engine allocates it without a pool: one buffer per (name, dtype,
    shape), arm by arm, each arm's inputs uploaded after its buffers (an input the other arm
    already put in a shared buffer, the same array, not again)."""
    shared, per_arm, allocations, written = {}, {}, [], {}
    for side, specs in arms.items():
        per_arm[side] = {}
        for b in specs:
            k = (b.name, b.dtype, b.shape)
            if k not in shared:
                shared[k] = dev.alloc(b.nbytes)
                allocations.append(shared[k])
            per_arm[side][b.name] = shared[k]
        for name, data in host[side].items():
            if written.get(id(per_arm[side][name])) is not data:
                written[id(per_arm[side][name])] = data
                dev.upload(per_arm[side][name], data)
    return per_arm, allocations


def test_one_placement_makes_the_device_calls_of_todays_setup():
    today, pooled = Recording(), Recording()
    per_arm, allocations = todays_setup(today, ARMS, inputs())
    for b in allocations:
        today.free(b)
    with PlacementPool(pooled, ARMS, inputs(), 1, np.random.default_rng(0)) as pool:
        assert pool.count == 1
        for side in ARMS:
            got = pool.buffers(0, side)
            assert {n: b.nbytes for n, b in got.items()} == {n: b.nbytes for n, b in per_arm[side].items()}
            assert all(type(b) is DeviceBuffer for b in got.values())  # the allocations themselves
        assert pool.buffers(0, "base")["x"] is pool.buffers(0, "candidate")["x"]  # shared by both arms
        assert pool.buffers(0, "base")["out"] is not pool.buffers(0, "candidate")["out"]
    assert pooled.ops == today.ops
    assert pool.facts.used == pool.facts.requested == 1 and pool.facts.fewer_because is None
    assert pool.facts.placements[0].spacer_bytes == 0
    assert {b.offset_bytes for b in pool.facts.placements[0].buffers} == {0}


@pytest.mark.parametrize("granularity", [256, 4096, 65536])
def test_eight_placements_sit_apart_at_offsets_of_the_granularity(granularity):
    dev = Recording()
    with PlacementPool(dev, ARMS, inputs(), 8, np.random.default_rng(3), granularity=granularity) as pool:
        assert pool.count == 8
        sets = {tuple(sorted((n, b.ptr) for side in ARMS for n, b in pool.buffers(p, side).items())) for p in range(8)}
        assert len(sets) == 8
        assert len({b.ptr for p in range(8) for side in ARMS for b in pool.buffers(p, side).values()}) == 8 * 5
        for layout in pool.facts.placements:
            for b in layout.buffers:
                assert b.offset_bytes % granularity == 0 and 0 <= b.offset_bytes < 2 * 1024 * 1024
            assert (layout.spacer_bytes > 0) == (layout.index > 0)
            assert layout.spacer_bytes <= 64 * 1024 * 1024  # a spacer is at most 64 MiB
        assert any(b.offset_bytes for layout in pool.facts.placements for b in layout.buffers)
        for p in range(8):
            for side, specs in ARMS.items():
                assert {n: b.nbytes for n, b in pool.buffers(p, side).items()} == {b.name: b.nbytes for b in specs}
        assert pool.differing_inputs() == []
        for p in range(8):  # the same inputs in every placement, byte for byte
            got = dev.download(pool.buffers(p, "base")["x"]).view(np.float32)
            assert np.array_equal(got, inputs()["base"]["x"])
    sha = pool.facts.inputs_sha256
    assert sha == {n: hashlib.sha256(d).hexdigest() for n, d in inputs()["base"].items()}
    uploads = [op for op in dev.ops if op[0] == "upload"]
    copies = [c for c in dev.calls if c[0] == "copy"]
    # x and y, shared by the arms, are uploaded from the host into the first placement once and
    # copied on the device into every other one once
    assert len(uploads) == 2 and len(copies) == 7 * 2
    assert pool.facts.granularity == granularity
    spacers = sum(layout.spacer_bytes for layout in pool.facts.placements)
    assert pool.facts.pool_bytes == spacers + sum(
        b.nbytes + b.offset_bytes for layout in pool.facts.placements for b in layout.buffers
    )


def test_every_allocation_is_freed_on_exit_spacers_included():
    dev = Recording()
    with PlacementPool(dev, ARMS, inputs(), 5, np.random.default_rng(1)) as pool:
        live = dev.live_buffers
        assert live == 5 + 6 * 4  # placement 0's five buffers; then a spacer and five per placement
    assert dev.live_buffers == 0 and dev.live_bytes == 0
    assert sorted(op[1] for op in dev.ops if op[0] == "free") == list(range(live))
    pool.close()  # twice is harmless
    assert dev.live_buffers == 0


def test_every_allocation_is_freed_when_the_case_raises():
    dev = Recording()
    with pytest.raises(RuntimeError, match="the case failed"):
        with PlacementPool(dev, ARMS, inputs(), 4, np.random.default_rng(1)):
            raise RuntimeError("the case failed")
    assert dev.live_buffers == 0


def test_a_copy_that_fails_mid_pool_leaves_nothing_allocated():
    class FailsFourthCopy(Recording):  # placement 2's first, of 3 × 2
        def copy(self, dst, src):
            if sum(c[0] == "copy" for c in self.calls) == 3:
                raise DeviceError("cuMemcpyDtoDAsync: CUDA_ERROR_UNKNOWN (999)")
            super().copy(dst, src)

    dev = FailsFourthCopy()
    with pytest.raises(DeviceError):
        PlacementPool(dev, ARMS, inputs(), 4, np.random.default_rng(1))
    assert dev.live_buffers == 0


def test_a_further_placement_that_cannot_be_allocated_is_dropped_and_said():
    class OutOfMemoryAfter(Recording):
        def alloc(self, nbytes):
            if sum(op[0] == "alloc" for op in self.ops) == 5 + 6 + 2:  # inside placement 2
                raise DeviceError("cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2)")
            return super().alloc(nbytes)

    dev = OutOfMemoryAfter()
    with PlacementPool(dev, ARMS, inputs(), 6, np.random.default_rng(1)) as pool:
        assert pool.count == pool.facts.used == 2
        assert dev.live_buffers == 5 + 6
        assert "6 placements requested, 2 allocated" in pool.facts.fewer_because
        assert "OUT_OF_MEMORY" in pool.facts.fewer_because
    assert dev.live_buffers == 0


def test_the_memory_cap_reduces_the_placements_and_says_so():
    sizes = shared_keys(ARMS)
    layouts = draw_layouts(sizes, 8, np.random.default_rng(5))
    room = sum(layout.total_bytes for layout in layouts[:3])  # exactly three fit in a quarter
    dev = Recording(free_bytes=4 * room)
    with PlacementPool(dev, ARMS, inputs(), 8, np.random.default_rng(5), memory_fraction=0.25) as pool:
        assert pool.count == 3
        facts = pool.facts
        assert (facts.requested, facts.used, facts.free_bytes) == (8, 3, 4 * room)
        assert facts.pool_bytes == room and dev.live_bytes == room
        assert "8 placements requested, 3 fit within the pool's memory cap" in facts.fewer_because
        assert [layout.index for layout in facts.placements] == [0, 1, 2]
        assert facts.to_json()["fewer_because"] == facts.fewer_because
    assert dev.live_buffers == 0


def test_placement_zero_is_kept_whatever_the_cap():
    dev = Recording(free_bytes=1000)
    with PlacementPool(dev, ARMS, inputs(), 4, np.random.default_rng(5)) as pool:
        assert pool.count == 1 and "1 fit" in pool.facts.fewer_because


def test_the_same_seed_draws_the_same_layouts_and_another_seed_others():
    sizes = shared_keys(ARMS)
    one = draw_layouts(sizes, 8, np.random.default_rng(11))
    assert one == draw_layouts(sizes, 8, np.random.default_rng(11))
    assert one != draw_layouts(sizes, 8, np.random.default_rng(12))
    assert draw_layouts(sizes, 3, np.random.default_rng(11)) == one[:3]


def test_a_cases_layouts_follow_from_the_plan_seed_the_trial_and_the_case():
    sizes = shared_keys(ARMS)
    one = draw_layouts(sizes, 8, layout_rng(5, 0, "N=1"))
    assert one == draw_layouts(sizes, 8, layout_rng(5, 0, "N=1"))
    for other in ((6, 0, "N=1"), (5, 1, "N=1"), (5, 0, "N=2")):
        assert draw_layouts(sizes, 8, layout_rng(*other)) != one


def test_the_facts_are_plain_json():
    import json

    with PlacementPool(Recording(), ARMS, inputs(), 3, np.random.default_rng(2), granularity=4096) as pool:
        facts = json.loads(json.dumps(pool.facts.to_json()))
    assert facts["used"] == 3 and facts["granularity"] == 4096 and len(facts["placements"]) == 3
    assert facts["placements"][1]["spacer_bytes"] > 0
    assert {b["name"] for b in facts["placements"][2]["buffers"]} == {"x", "y", "out", "scratch"}


@pytest.mark.parametrize("granularity", [0, 128, 300, -256, OFFSET_LIMIT])
def test_a_granularity_that_breaks_alignment_is_refused(granularity):
    with pytest.raises(ValueError, match="multiple of 256"):
        check_granularity(granularity)
    with pytest.raises(ValueError):
        PlacementPool(Recording(), ARMS, inputs(), 2, np.random.default_rng(0), granularity=granularity)


def test_a_view_at_an_offset_is_never_freed_as_an_allocation():
    dev = Recording()
    with PlacementPool(dev, ARMS, inputs(), 8, np.random.default_rng(3)) as pool:
        views = [b for p in range(8) for b in pool.buffers(p, "base").values()]
        raw = {op for op in dev.memory.blocks}
        offset_views = [b for b in views if b.ptr not in raw]
        assert offset_views  # some buffers do sit at an offset
    assert dev.live_buffers == 0  # every free named a raw allocation (the fake refuses any other)


def test_free_memory_counts_what_is_allocated():
    dev = FakeDevice({}, free_bytes=1 << 30)
    b = dev.alloc(1 << 20)
    assert dev.free_memory() == (1 << 30) - (1 << 20)
    dev.free(b)
    assert dev.free_memory() == 1 << 30


# -- flush slots ------------------------------------------------------------------------------


def test_samples_flush_slot_zero_unless_told():
    dev = FakeDevice({})
    dev.time_samples(lambda: None, 3, cold=True)
    assert [c for c in dev.calls if c[0] == "flush"] == [("flush", 0)] * 3


def test_samples_name_the_flush_slot_they_use():
    dev = FakeDevice({})
    assert dev.prepare_flush_slots(4) == 4
    dev.time_samples(lambda: None, 2, cold=True, flush_slot=3)
    dev.time_sample(lambda: None, cold=True, flush_slot=2)
    dev.time_samples(lambda: None, 2, cold=False, flush_slot=1)  # warm: no flush at all
    assert [c for c in dev.calls if c[0] == "flush"] == [("flush", 3), ("flush", 3), ("flush", 2)]


def test_an_unprepared_flush_slot_is_refused_before_anything_is_queued():
    dev = FakeDevice({})
    with pytest.raises(ValueError, match="flush slot 1: 1 prepared"):
        dev.time_samples(lambda: None, 2, cold=True, flush_slot=1)
    assert not any(c[0] in ("hold", "sample") for c in dev.calls)


def test_the_device_spaces_its_flush_slots_apart():
    from qualify.run.device import FLUSH_SLOTS, flush_spacer_bytes

    spacers = [flush_spacer_bytes(s) for s in range(1, FLUSH_SLOTS)]
    assert len(set(spacers)) == len(spacers) and all(s % 256 == 0 for s in spacers)


def test_the_memory_cap_keeps_exactly_the_leading_placements_that_fit():
    from qualify.run.placement import PlacementLayout, fitting

    layouts = [PlacementLayout(p, size, ()) for p, size in enumerate((0, 100, 50, 400, 10))]
    assert fitting(layouts, 1000) == (5, None)
    used, why = fitting(layouts, 250)  # placements 0-2 take 150 B; the fourth would bring 550
    assert used == 3 and why is not None and "3" in why


def test_an_input_that_differs_in_one_placement_is_named_with_that_placement():
    dev = Recording()
    with PlacementPool(dev, ARMS, inputs(), 4, np.random.default_rng(1)) as pool:
        assert pool.differing_inputs() == []
        wrong = inputs()["base"]["y"].copy()
        wrong[5] += 1.0
        dev.upload(pool.buffers(2, "candidate")["y"], wrong)
        assert pool.differing_inputs() == [(2, "y")]


def test_each_input_is_hashed_once_however_many_placements(monkeypatch):
    import qualify.run.placement as placement

    hashed = []
    real = placement.hashlib.sha256

    class Counting:
        @staticmethod
        def sha256(data):
            hashed.append(len(data))
            return real(data)

    monkeypatch.setattr(placement, "hashlib", Counting)
    with PlacementPool(Recording(), ARMS, inputs(), 6, np.random.default_rng(1)) as pool:
        assert pool.count == 6
    assert len(hashed) == 2  # x and y, whichever arm and placement uploads them


def test_the_pool_takes_the_inputs_digests_it_is_given_and_hashes_the_rest_once(monkeypatch):
    import hashlib

    import qualify.run.placement as placement
    from qualify.run.stages.case_setup import digests

    given = inputs()
    want = {name: hashlib.sha256(data).hexdigest() for side in given for name, data in given[side].items()}
    assert digests(given) == want
    hashed = []
    real = hashlib.sha256

    class Counting:  # the pool's own hashing only (the recording device hashes what it is sent)
        @staticmethod
        def sha256(data):
            hashed.append(1)
            return real(data)

    monkeypatch.setattr(placement, "hashlib", Counting)
    with PlacementPool(Recording(), ARMS, given, 3, np.random.default_rng(0), digests=want) as pool:
        assert dict(pool.facts.inputs_sha256) == want
    assert hashed == []  # nothing hashed again on the set-up's path
    with PlacementPool(Recording(), ARMS, given, 3, np.random.default_rng(0)) as pool:
        assert dict(pool.facts.inputs_sha256) == want
    assert len(hashed) == len(want)  # without them: once per input, not per placement


def test_a_shared_buffer_gets_each_arms_input_unless_it_is_the_same_array():
    """Both arms' x is one array (the input cache hands both the same): sent once per placement.
    An arm whose x is another array with other bytes gets its own upload, so no arm ever times
    bytes it was not given."""
    same = Recording()
    with PlacementPool(same, ARMS, inputs(), 2, np.random.default_rng(0)):
        pass
    assert [op[0] for op in same.ops].count("upload") == 2
    other = inputs()
    other["candidate"] = {"x": other["base"]["x"] + np.float32(1), "y": other["base"]["y"]}
    dev = Recording()
    with PlacementPool(dev, ARMS, other, 2, np.random.default_rng(0)) as pool:
        assert [op[0] for op in dev.ops].count("upload") == 3  # x twice (base's, then candidate's), y once
        for p in range(2):
            got = dev.download(pool.buffers(p, "candidate")["x"]).view(np.float32)
            assert np.array_equal(got, other["candidate"]["x"])


def test_a_pools_facts_cannot_be_changed_after_they_are_drawn():
    """The placements a record states are the ones the blocks ran on: the layout, each buffer's
    place and the pool's facts are frozen once drawn."""
    import dataclasses

    with PlacementPool(Recording(), ARMS, inputs(), 2, np.random.default_rng(0)) as pool:
        facts = pool.facts
    layout = facts.placements[1]
    for obj, field in ((facts, "used"), (layout, "spacer_bytes"), (layout.buffers[0], "offset_bytes")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, field, 0)
