"""The run engine on the fake device: ABBA order, fidelity, controls, ledger and budget rules."""

from __future__ import annotations

import json

import fakes
import pytest
from plans import make_repo, plan_copy

from qualify.errors import FrozenInputChanged
from qualify.plan.load import load_plan
from qualify.results.store import Record
from qualify.run.engine import BudgetExhausted, RunOptions, TrialRunner
from qualify.run.fake import FakeDevice, FakeTelemetry


def small_plan(**changes) -> dict:
    plan = plan_copy()
    plan["schedule"] = {"warmup": 2, "samples_per_block": 3, "blocks": 2, "trials": 2, "cache": "cold"}
    plan["budget"] = {"max_trials": 3, "max_samples": 12, "max_wall_seconds": 60}
    plan["acceptance"]["sanitizer"] = []
    for key, value in changes.items():
        plan[key] = value
    return plan


def frozen(tmp_path, plan=None):
    return load_plan(make_repo(tmp_path, plan or small_plan(), freeze=True))


def run_trial(loaded, device, tmp_path, **kw):
    options = RunOptions(record_dir=tmp_path / "record", **kw)
    return TrialRunner(loaded, device, FakeTelemetry(), options).run()


def fake(kernel=fakes.axpy, base_ns=10_000.0, cand_ns=8_000.0, **kw):
    return FakeDevice({"axpy": kernel}, durations={"base": base_ns, "candidate": cand_ns}, **kw)


def alternate_fixed_plan() -> dict:
    """The design before placements rotated: one set of buffers, ABBA then BAAB."""
    plan = small_plan()
    plan["schedule"] |= {"order": "alternate", "placement": {"count": 1}}
    return plan


def test_samples_follow_abba_then_baab_order_exactly(tmp_path):
    loaded = frozen(tmp_path, alternate_fixed_plan())
    device = fake()
    trial = run_trial(loaded, device, tmp_path)
    assert trial.status == "complete"
    timed = [c for c in device.calls if c[0] == "sample" and c[3] and c[1]]
    spb, blocks = 3, 2
    abba = ["base"] * spb + ["candidate"] * spb + ["candidate"] * spb + ["base"] * spb
    baab = ["candidate"] * spb + ["base"] * spb + ["base"] * spb + ["candidate"] * spb
    aa = ["base"] * (4 * spb)
    per_case = abba + baab + (aa * blocks)
    assert [c[1] for c in timed] == [(label,) for label in per_case * 2]  # two cases
    assert all(c[2] is True for c in timed)  # cold: each sample flushes
    # each pair's timing says why it stopped, the A/A's under its own name
    assert all(set(case.stopped) == {"comparison", "aa"} for case in trial.cases)


def test_seeded_blocks_follow_the_block_plan_on_the_placement_each_block_drew(tmp_path):
    from qualify.plan.schedule import block_plan
    from qualify.results import samples

    plan = small_plan()
    plan["schedule"] |= {"blocks": 6}
    plan["budget"]["max_samples"] = 36
    loaded = frozen(tmp_path, plan)
    device = fake()
    trial = run_trial(loaded, device, tmp_path)
    assert trial.status == "complete"
    arrays = samples.load(tmp_path / "record" / trial.samples_file)
    timed = [c[1][0] for c in device.calls if c[0] == "sample" and c[3] and c[1]]
    expected = []
    for case in trial.cases:
        assert case.placements["used"] == 6  # per block: as many placements as blocks
        draws = block_plan(loaded.plan.seeds.base, trial.index, case.case, 6, 6, 4)
        assert sorted(d.placement for d in draws) == list(range(6))
        assert sorted(d.order for d in draws) == ["ABBA"] * 3 + ["BAAB"] * 3
        for series in ("base", "candidate", "aa_a", "aa_b"):
            blocks = arrays[f"{case.case}/{series}/block"]
            placed = arrays[f"{case.case}/{series}/placement"]
            assert [int(p) for p in placed] == [draws[int(b)].placement for b in blocks]
        for pair in (("base", "candidate"), ("base", "base")):  # the comparison, then the A/A
            for d in draws:
                a, b = pair if d.order == "ABBA" else pair[::-1]
                expected += [a] * 3 + [b] * 6 + [a] * 3
        assert len(case.placement_spread_pct) == 6
    assert timed == expected


def test_every_placement_after_the_first_sits_after_a_spacer_at_an_aligned_offset(tmp_path):
    plan = small_plan()
    plan["schedule"] |= {"blocks": 4}
    plan["budget"]["max_samples"] = 24
    loaded = frozen(tmp_path, plan)
    device = fake()
    trial = run_trial(loaded, device, tmp_path)
    assert trial.status == "complete"
    for case in trial.cases:
        layouts = case.placements["placements"]
        assert len(layouts) == 4 and case.placements["granularity"] == 256
        assert layouts[0]["spacer_bytes"] == 0 and all(p["spacer_bytes"] > 0 for p in layouts[1:])
        assert all(b["offset_bytes"] == 0 for b in layouts[0]["buffers"])
        offsets = [b["offset_bytes"] for p in layouts[1:] for b in p["buffers"]]
        assert all(o % 256 == 0 for o in offsets) and len(set(offsets)) > 1
    assert ("flush_slots", 4) in device.calls


def test_one_placement_draws_no_spacer_and_keeps_one_flush_buffer(tmp_path):
    loaded = frozen(tmp_path, alternate_fixed_plan())
    device = fake()
    trial = run_trial(loaded, device, tmp_path)
    assert trial.status == "complete"
    assert all(case.placements["used"] == 1 and case.placement_spread_pct is None for case in trial.cases)
    assert not any(c[0] == "flush_slots" for c in device.calls)
    from qualify.results import samples

    arrays = samples.load(tmp_path / "record" / trial.samples_file)
    # the samples file of the fixed design is the one it always was: no placement, no drawn half
    assert not any(k.endswith(("/placement", "/half")) for k in arrays)


def test_two_placements_are_recorded_per_sample(tmp_path):
    """The smallest pool that rotates (two placements) records each sample's placement, as six do."""
    from qualify.results import samples

    plan = small_plan()
    plan["schedule"] |= {"blocks": 2, "placement": {"count": 2}}
    loaded = frozen(tmp_path, plan)
    trial = run_trial(loaded, fake(), tmp_path)
    assert trial.status == "complete"
    arrays = samples.load(tmp_path / "record" / trial.samples_file)
    for case in trial.cases:
        assert case.placements["used"] == 2
        assert sorted({int(p) for p in arrays[f"{case.case}/base/placement"]}) == [0, 1]


def test_samples_are_batched_from_the_warm_ups_median_not_their_mean():
    """One slow warm-up (a cold first launch) lifts the mean past BATCH_MIN_NS; the median stays
    below it, and the case is timed one sample per blocking kernel."""
    import numpy as np

    from qualify.results.samples import key
    from qualify.run.stages.timing import BATCH_MIN_NS, batch_size

    short = np.array([0.5, 0.5, 0.5, 0.5, 10.0]) * BATCH_MIN_NS  # median 0.5x, mean 2.4x
    arrays = {key("N=1", side, "warmup_ns"): short for side in ("base", "candidate")}
    assert batch_size(arrays, "N=1", 10, 1) == 1
    long = np.array([1.0, 1.0, 1.0, 0.0, 0.0]) * BATCH_MIN_NS  # median at the bound, mean below it
    arrays = {key("N=1", side, "warmup_ns"): long for side in ("base", "candidate")}
    assert batch_size(arrays, "N=1", 10, 1) == 10


def test_each_arms_warm_ups_are_kept_under_its_case_and_side(tmp_path):
    from qualify.results import samples

    loaded = frozen(tmp_path)
    trial = run_trial(loaded, fake(), tmp_path)
    arrays = samples.load(tmp_path / "record" / trial.samples_file)
    for case in trial.cases:
        for side in ("base", "candidate"):
            assert arrays[f"{case.case}/{side}/warmup_ns"].size == 2  # the plan's two warm-up launches


def test_a_warm_up_the_wall_budget_cannot_hold_stops_the_trial_naming_the_arm(tmp_path):
    plan = small_plan()
    plan["schedule"] |= {"warmup": 5}
    plan["budget"]["max_wall_seconds"] = 60
    loaded = frozen(tmp_path, plan)
    trial = run_trial(loaded, fake(base_ns=20e9), tmp_path)  # a 20 s launch: two fit in 60 s, not five
    assert trial.status == "failed"
    (failure,) = [f for f in trial.failures if f.kind == "budget"]
    assert (failure.case, failure.side) == (loaded.cases[0].id, "base")
    assert "spent during warm-up" in failure.message and "of 5 launches" in failure.message


def test_floor_and_warmup_come_before_timing_and_outside_the_blocking_kernel(tmp_path):
    loaded = frozen(tmp_path)
    device = fake()
    run_trial(loaded, device, tmp_path)
    samples = [c for c in device.calls if c[0] == "sample"]
    assert all(c[1] == () and c[3] for c in samples[:100])  # the empty-window floor
    first_case = samples[100:]
    escape_checks, warm = first_case[:6], first_case[6:10]
    assert [c[1] for c in escape_checks] == [("base",)] * 3 + [("candidate",)] * 3
    assert [c[1] for c in warm] == [("base",), ("base",), ("candidate",), ("candidate",)]
    assert all(c[3] is False for c in escape_checks + warm)  # no blocking kernel before timing


def test_kernels_load_before_any_sample(tmp_path):
    loaded = frozen(tmp_path)
    device = fake()
    run_trial(loaded, device, tmp_path)
    kinds = [c[0] for c in device.calls]
    assert kinds[:2] == ["load", "load"]
    assert kinds.index("sample") > 1


def test_faster_candidate_statistics(tmp_path):
    loaded = frozen(tmp_path)
    # two blocks give a t-interval with one degree of freedom (t = 12.7): only a quiet device
    # lets the A/A resolve "same" within ±0.5 % from them
    trial = run_trial(loaded, fake(noise=0.0005), tmp_path)
    for case in trial.cases:
        assert case.stats.case_class == "faster"
        assert case.stats.ratio == pytest.approx(0.8, rel=0.01)
        assert case.timing["base"].median_ns == pytest.approx(10_000, rel=0.01)  # floor subtracted
        assert case.aa.case_class == "same"
        assert all(p.equal for p in case.parity)
        assert case.deterministic == {"base": True, "candidate": True}
        assert case.timed_outputs_match
    assert trial.timer["floor_ns"] == pytest.approx(1300, rel=0.01)
    assert [c.caught for c in trial.controls] == [True, True]  # the flip control, both cases


@pytest.mark.parametrize(
    "kernel, expect",
    [
        (fakes.axpy_one_wrong, lambda p: p.differing_elements == 1 and p.first_difference == 512),
        (fakes.axpy_skips_last, lambda p: p.differing_elements == 1 and p.first_difference == 1023),
    ],
    ids=["one-wrong-element", "unwritten-element"],
)
def test_parity_catches_wrong_and_unwritten_elements(tmp_path, kernel, expect):
    loaded = frozen(tmp_path)
    trial = run_trial(loaded, fake(kernel), tmp_path)
    assert trial.status == "failed"  # fail-fast on fidelity
    assert trial.failures[0].kind == "fidelity" and trial.failures[0].case == "N=1024"
    assert "1 of 1024 elements differ from base" in trial.failures[0].message
    assert trial.cases == []  # stopped before timing
    record = Record(tmp_path / "record")
    assert record.trial_path(1).exists()


def test_nondeterminism_is_caught(tmp_path):
    loaded = frozen(tmp_path)
    trial = run_trial(loaded, fake(fakes.Nondeterministic()), tmp_path)
    assert trial.failures[0].kind == "fidelity"


def test_build_control_is_compiled_and_caught(tmp_path):
    plan = small_plan()
    plan["controls"]["negative"].append(
        {"kind": "build", "name": "off_by_one", "defines": {"QUALIFY_CONTROL_OFF_BY_ONE": 1}, "cases": ["N=4096"]}
    )
    loaded = frozen(tmp_path, plan)
    device = fake()
    trial = run_trial(loaded, device, tmp_path)
    caught = {(c.name, c.case): (c.caught, c.differing_elements) for c in trial.controls}
    assert caught[("off_by_one", "N=4096")] == (True, 1)
    assert ("load", "candidate+off_by_one", "axpy<4>", 0) in device.calls


def test_vacuous_control_is_reported_not_caught(tmp_path):
    plan = small_plan()
    # flipping the sign bit of an element of y = 0 (zeros) gives -0.0: a*x + (-0) == a*x + 0
    plan["controls"]["negative"] = [
        {"kind": "input", "name": "neg_zero", "buffer": "y", "mutation": {"op": "flip_bit", "index": 3, "bit": 31}}
    ]
    loaded = frozen(tmp_path, plan)
    trial = run_trial(loaded, fake(), tmp_path)
    assert [c.caught for c in trial.controls] == [False, False]


def test_ledger_budget_and_digest_rules(tmp_path):
    loaded = frozen(tmp_path)
    for expected in (1, 2, 3):
        assert run_trial(loaded, fake(), tmp_path).index == expected
    with pytest.raises(BudgetExhausted, match="3 of 3 trials"):
        run_trial(loaded, fake(), tmp_path)
    events = [json.loads(line) for line in (tmp_path / "record" / "ledger.jsonl").read_text().splitlines()]
    assert [(e["event"], e["trial"]) for e in events] == [
        ("trial_started", 1),
        ("trial_ended", 1),
        ("trial_started", 2),
        ("trial_ended", 2),
        ("trial_started", 3),
        ("trial_ended", 3),
    ]
    # another device has its own budget
    other = fake(info=fake().info.model_copy(update={"uuid": "GPU-11111111-0000-0000-0000-000000000000"}))
    assert run_trial(loaded, other, tmp_path).index == 4


def test_record_refuses_a_plan_with_another_digest(tmp_path):
    loaded = frozen(tmp_path)
    run_trial(loaded, fake(), tmp_path)
    plan = small_plan()
    plan["seeds"]["base"] = 99
    changed = frozen(tmp_path / "other", plan)
    with pytest.raises(FrozenInputChanged, match="plan digest"):
        run_trial(changed, fake(), tmp_path)


def test_interrupted_trial_keeps_its_samples(tmp_path):
    loaded = frozen(tmp_path)
    trial = run_trial(loaded, fake(fakes.InterruptAfter(40)), tmp_path)
    assert trial.status == "interrupted"
    assert trial.failures[-1].kind == "interrupted"
    record = Record(tmp_path / "record")
    from qualify.results.samples import load

    arrays = load(record.samples_path(1))
    assert arrays["N=1024/base/ns"].size > 0  # what was measured before the interrupt is kept
    assert record.trials_in_ledger()[0].status == "interrupted"


def test_dangling_trial_is_closed_as_interrupted_and_counts(tmp_path):
    loaded = frozen(tmp_path)
    record = Record(tmp_path / "record")
    record.bind(loaded.path, loaded.digest)
    record.append({"event": "trial_started", "trial": 1, "digest": loaded.digest, "device_uuid": fake().info.uuid})
    trial = run_trial(loaded, fake(), tmp_path)
    assert trial.index == 2
    statuses = [t.status for t in record.trials_in_ledger()]
    assert statuses == ["interrupted", "complete"]


def test_unlisted_device_is_refused_unless_exploratory(tmp_path):
    from qualify.errors import DeviceError

    loaded = frozen(tmp_path)
    l40 = fake(
        info=fake().info.model_copy(update={"name": "NVIDIA L40S", "compute_capability": "8.9", "arch": "sm_89"})
    )
    with pytest.raises(DeviceError, match="not among the plan's devices"):
        run_trial(loaded, l40, tmp_path)
    assert not (tmp_path / "record" / "ledger.jsonl").exists()
    trial = run_trial(loaded, l40, tmp_path, exploratory=True)
    assert trial.provenance.planned is False


def test_inputs_are_reproducible_and_hashed(tmp_path):
    loaded = frozen(tmp_path)
    a = run_trial(loaded, fake(), tmp_path / "a")
    b = run_trial(loaded, fake(seed=5), tmp_path / "b")
    assert [c.input_sha256 for c in a.cases] == [c.input_sha256 for c in b.cases]
    assert a.cases[0].input_sha256["x"] != a.cases[1].input_sha256["x"]


def test_buffers_are_freed(tmp_path):
    loaded = frozen(tmp_path)
    device = fake()
    run_trial(loaded, device, tmp_path)
    assert device.live_buffers == 0


def test_a_sample_that_hangs_in_the_timing_process_is_a_timeout(tmp_path):
    from qualify.run.device import LaunchHang

    class Hangs(FakeDevice):
        def time_sample(self, enqueue, cold, block_stream=True, timeout_s=60.0):
            ns = super().time_sample(enqueue, cold, block_stream, timeout_s)
            if self.calls[-1][1] == ("candidate",) and block_stream:
                raise LaunchHang("a sample did not finish within 60 s: the launch hangs")
            return ns

    loaded = frozen(tmp_path)
    device = Hangs({"axpy": fakes.axpy}, durations={"base": 10_000.0, "candidate": 8_000.0})
    trial = run_trial(loaded, device, tmp_path)
    assert trial.status == "failed"
    assert (trial.failures[-1].kind, trial.failures[-1].side) == ("timeout", "candidate")
    from qualify.evaluate.verdict import verdict

    assert verdict(loaded.plan, [trial]).status == "not_qualified"


def test_a_build_failure_mid_trial_keeps_the_trial_and_closes_the_ledger(tmp_path):
    from qualify.errors import BuildError

    class BuildFails(FakeDevice):
        def load_kernel(self, label, compiled, dynamic_shared_bytes):
            if label == "candidate":
                raise BuildError("module rejected by the driver")
            return super().load_kernel(label, compiled, dynamic_shared_bytes)

    loaded = frozen(tmp_path)
    with pytest.raises(BuildError):
        run_trial(loaded, BuildFails({"axpy": fakes.axpy}), tmp_path)
    record = Record(tmp_path / "record")
    (trial,) = record.trials()
    assert trial.status == "failed" and "module rejected" in trial.failures[0].message
    assert trial.failures[0].side == "candidate"
    assert [t.status for t in record.trials_in_ledger()] == ["failed"]


def test_one_timed_output_that_differs_among_several_is_enough(tmp_path):
    plan = small_plan()
    plan["workload"]["buffers"].append({"name": "spare", "dtype": "f32", "shape": ["N"], "role": "output"})
    loaded = frozen(tmp_path, plan)

    class FirstOutputDiffers(type(fake())):
        checked: set = set()  # the first comparison with a reference is the determinism check: the truth

        def differs(self, a, b):
            truth = super().differs(a, b)
            if b.ptr not in self.checked:
                self.checked.add(b.ptr)
                return truth
            # as if "out" (written) came out wrong while "spare" (never written: all 0xFF) matched
            return not (self.memory.view(b.ptr, b.nbytes) == 0xFF).all()

    device = FirstOutputDiffers({"axpy": fakes.axpy}, durations={"base": 10_000.0, "candidate": 8_000.0})
    trial = run_trial(loaded, device, tmp_path)
    assert trial.cases and not any(case.timed_outputs_match for case in trial.cases)


def test_the_wall_cap_of_a_case_counts_from_the_cases_own_start(tmp_path, monkeypatch):
    from qualify.run.stages.clock import StageClock

    real = StageClock.elapsed
    monkeypatch.setattr(StageClock, "elapsed", lambda self: real(self) + 1000.0)  # a trial 1000 s old
    plan = small_plan()
    plan["schedule"] |= {"blocks": 4}
    plan["budget"] |= {"max_samples": 24, "max_wall_seconds": 5000}
    plan["stop"] = {"rule": "precision", "target_ci_pct": 1e-6, "min_blocks": 3, "max_case_seconds": 100}
    trial = run_trial(frozen(tmp_path, plan), fake(), tmp_path)
    assert trial.status == "complete"
    # the cases take milliseconds: none reaches its 100 s cap, however long the trial ran before
    assert all(case.stopped["comparison"] == "block cap" for case in trial.cases)


def test_a_case_without_both_arms_warm_ups_is_timed_one_sample_per_blocking_kernel():
    import numpy as np

    from qualify.results.samples import key
    from qualify.run.stages.timing import BATCH_MIN_NS, batch_size

    long = np.full(5, 2 * BATCH_MIN_NS)
    assert batch_size({key("N=1", "base", "warmup_ns"): long}, "N=1", 10, 1) == 1  # the candidate's missing
    empty = {key("N=1", "base", "warmup_ns"): long, key("N=1", "candidate", "warmup_ns"): np.empty(0)}
    assert batch_size(empty, "N=1", 10, 1) == 1
