"""Pipelined sampling on the fake device: the exact order of operations inside a batch, the batch
limit, and what a trial records about its cost."""

from __future__ import annotations

import fakes
from plans import make_repo, plan_copy

from qualify.plan.load import load_plan
from qualify.run.device import MAX_BATCH
from qualify.run.engine import BATCH_MIN_NS, STAGES, RunOptions, TrialRunner
from qualify.run.fake import FakeDevice, FakeTelemetry


def plan(spb=3, blocks=2, cache="cold"):
    p = plan_copy()
    p["schedule"] = {"warmup": 1, "samples_per_block": spb, "blocks": blocks, "trials": 1, "cache": cache}
    p["budget"] = {"max_trials": 2, "max_samples": 4 * spb * blocks, "max_wall_seconds": 60}
    p["acceptance"]["sanitizer"] = []
    p["controls"]["negative"] = []
    return p


LONG = {"base": BATCH_MIN_NS * 1.2, "candidate": BATCH_MIN_NS * 1.1}  # ns per launch


def run(tmp_path, p, durations=LONG):
    loaded = load_plan(make_repo(tmp_path, p, freeze=True))
    device = FakeDevice({"axpy": fakes.axpy}, durations=durations)
    trial = TrialRunner(loaded, device, FakeTelemetry(), RunOptions(record_dir=tmp_path / "rec")).run()
    return trial, device


def batches(calls):
    """The calls between each hold and its release, as lists of call kinds."""
    out, current = [], None
    for c in calls:
        if c[0] == "hold":
            current = [c]
        elif c[0] == "release":
            out.append(current + [c])
            current = None
        elif current is not None:
            current.append(c)
    return out


def test_each_half_of_a_long_kernel_is_one_batch_poisoned_and_flushed_before_every_window(tmp_path):
    trial, device = run(tmp_path, plan(spb=3))
    timed = [b for b in batches(device.calls) if any(c[0] == "sample" and c[1] for c in b)]
    # 2 cases x (2 blocks x 4 halves of the main pair + the same for the A/A pair)
    assert len(timed) == 2 * 2 * 2 * 4
    for batch in timed:
        assert batch[0] == ("hold", 3)
        # one output buffer: poison, flush, then the window
        assert [c[0] for c in batch[1:-1]] == ["poison", "flush", "sample"] * 3
        assert all(c[2] is True and c[3] is True for c in batch if c[0] == "sample")
    assert trial.timer["batch_min_ns"] == BATCH_MIN_NS


def test_short_kernels_get_one_sample_per_blocking_kernel(tmp_path):
    # a launch queued behind other samples reads longer on the H200: short kernels are never batched
    _, device = run(tmp_path, plan(spb=3), durations={"base": 10_000.0, "candidate": 9_000.0})
    timed = [b for b in batches(device.calls) if any(c[0] == "sample" and c[1] for c in b)]
    assert len(timed) == 2 * 2 * 2 * 4 * 3
    assert all(b[0] == ("hold", 1) and [c[0] for c in b[1:-1]] == ["poison", "flush", "sample"] for b in timed)


def test_one_short_arm_keeps_both_arms_unbatched(tmp_path):
    _, device = run(tmp_path, plan(spb=3), durations={"base": BATCH_MIN_NS * 2, "candidate": 5_000.0})
    sizes = {b[0][1] for b in batches(device.calls) if any(c[0] == "sample" and c[1] for c in b)}
    assert sizes == {1}


def test_a_half_longer_than_the_batch_limit_is_split(tmp_path):
    spb = MAX_BATCH + 5
    trial, device = run(tmp_path, plan(spb=spb, blocks=2))
    sizes = [b[0][1] for b in batches(device.calls) if any(c[0] == "sample" and c[1] for c in b)]
    assert sizes[:2] == [MAX_BATCH, 5]
    assert trial.timer["max_batch"] == MAX_BATCH


def test_hot_cache_samples_are_poisoned_once_per_half_and_never_flushed(tmp_path):
    trial, device = run(tmp_path, plan(spb=4, cache="hot"))
    timed = [b for b in batches(device.calls) if any(c[0] == "sample" and c[1] for c in b)]
    for batch in timed:
        assert [c[0] for c in batch[1:-1]] == ["sample"] * 4
    # the poison of a hot half comes right before its hold
    holds = [
        i
        for i, c in enumerate(device.calls)
        if c[0] == "hold" and device.calls[i + 1][0] == "sample" and device.calls[i + 1][1]
    ]
    assert all(device.calls[i - 1][0] == "poison" for i in holds)


def test_floor_samples_are_batched_empty_windows(tmp_path):
    _, device = run(tmp_path, plan())
    first = batches(device.calls)[0]
    windows = [c for c in first if c[0] == "sample"]
    assert first[0] == ("hold", MAX_BATCH) and all(c[1] == () for c in windows)


def test_the_trial_records_its_cost(tmp_path):
    trial, _ = run(tmp_path, plan())
    cost = trial.cost
    assert cost is not None and set(cost.stages_s) == set(STAGES)
    # fake windows: 2 cases x 2 pairs x 24 samples of 275-300 µs + 100 floors of 1.3 µs + 4 warm-ups
    assert 0.025 < cost.gpu_busy_s < 0.03
    # the recorded figures agree with each other to the fraction's four decimals
    assert cost.wall_s > 0 and abs(cost.busy_fraction - cost.gpu_busy_s / cost.wall_s) <= 5e-5 + 1e-9
    assert sum(cost.stages_s.values()) <= cost.wall_s + 1e-3


class DriftsWhenTimed:
    """Right for the reference, determinism, escape-check and warm-up launches (6 per case), wrong
    from the first timed launch of the candidate on: only the timed launches' check can see it."""

    def __init__(self):
        self.launches = 0

    def __call__(self, memory, args, kernel):
        fakes.axpy(memory, args, kernel)
        if kernel.label == "candidate":
            self.launches += 1
            if self.launches > 6:
                _, _, out, _, _ = fakes._arrays(memory, args)
                out[0] += 1.0


def test_outputs_of_timed_launches_are_checked_on_the_device_after_every_half(tmp_path):
    loaded = load_plan(make_repo(tmp_path, plan(spb=3), freeze=True))
    device = FakeDevice({"axpy": DriftsWhenTimed()}, durations={"base": 10_000.0, "candidate": 9_000.0})
    trial = TrialRunner(loaded, device, FakeTelemetry(), RunOptions(record_dir=tmp_path / "rec")).run()
    # the second case's candidate is wrong from its first launch: parity stops the trial there
    assert [c.timed_outputs_match for c in trial.cases] == [False]
    # each half ends with one on-device comparison per output (2 pairs x 2 blocks x 4 halves), and
    # before them the fidelity stage's determinism check compares each arm's second run on the
    # device too (2 arms x 1 output, in each of the 2 cases the trial reached)
    assert sum(1 for c in device.calls if c[0] == "differs") == 2 * 2 * 4 + 2 * 2


def test_an_honest_candidate_matches_after_every_half(tmp_path):
    trial, _ = run(tmp_path, plan(spb=3))
    assert all(c.timed_outputs_match for c in trial.cases)


def test_preflight_runs_once_per_invocation_and_later_trials_say_they_reused_it(tmp_path):
    from qualify.commands.pipeline import run_plan
    from qualify.run.isolation import CaseOutcome

    calls = []

    def preflight(side, cases):
        calls.append(side)
        return [CaseOutcome(c, side, "ok") for c in cases]

    p = plan()
    p["schedule"]["trials"] = 2
    loaded = load_plan(make_repo(tmp_path, p, freeze=True))
    device = FakeDevice({"axpy": fakes.axpy}, durations=LONG)
    outcome = run_plan(loaded, tmp_path / "rec", lambda: device, lambda uuid: FakeTelemetry(), preflight=preflight)
    assert sorted(calls) == ["base", "candidate"]  # not four
    assert [t.timer["preflight"] for t in outcome.trials] == ["isolated workers", "reused from this run's first trial"]


def test_both_arms_time_on_the_same_device_buffers(tmp_path):
    """Two allocations of one size can run apart on a GPU: the arms share every buffer that agrees
    in name, type and shape, so placement cannot pass for a difference between them."""
    seen: dict[str, set] = {"base": set(), "candidate": set()}

    def recording_axpy(memory, args, kernel):
        seen[kernel.label.split("+")[0]].add(tuple(v for kind, v in args if kind == "ptr"))
        fakes.axpy(memory, args, kernel)

    loaded = load_plan(make_repo(tmp_path, plan(spb=2, blocks=2), freeze=True))
    device = FakeDevice({"axpy": recording_axpy}, durations=LONG)
    TrialRunner(loaded, device, FakeTelemetry(), RunOptions(record_dir=tmp_path / "rec")).run()
    # one pointer set per placement: two cases of two blocks, each block on a placement of its own
    assert seen["base"] == seen["candidate"] and len(seen["base"]) == 4
    assert device.live_buffers == 0
