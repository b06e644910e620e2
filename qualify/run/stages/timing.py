"""Timing: the floor (empty windows), each arm's warm-ups, and the ABBA blocks of a pair with the
stop rule, every half a batch of samples on the device, checked against the reference after.

Each block draws its order (ABBA or BAAB), its placement of the case's buffers and its flush
buffer from the block plan (`block_plan`: seeded by the plan, the trial and the case, balanced in
every prefix); both arms of a block run on that placement, and every sample records it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from qualify.evaluate.stopping import stop_reason
from qualify.plan.checks import warmup_launches
from qualify.plan.model import ARM_SIDES, Plan
from qualify.plan.resolve import ResolvedCase
from qualify.plan.schedule import AA, block_halves, block_plan
from qualify.results.model import Failure
from qualify.results.samples import TrialSamples, key
from qualify.run.device import MAX_BATCH, DeviceBuffer
from qualify.run.device_protocol import Device
from qualify.run.stages.case_setup import CaseSetup
from qualify.run.stages.clock import StageClock
from qualify.run.stages.fidelity import CaseFacts
from qualify.run.stages.where import watch

FLOOR_SAMPLES = 100
# Samples of kernels at least this long are queued a whole ABBA half behind one blocking kernel;
# shorter ones one sample per blocking kernel. Measured on the H200 (benchmarks/timer/boundary.py):
# a launch queued behind other samples reads 0.2-0.5 µs longer than one queued alone, whatever
# pause separates them - 5-10 % of a 5 µs kernel, under 0.2 % from here up.
BATCH_MIN_NS = 250_000.0


@dataclass(frozen=True)
class Bench:
    """What every timing step uses: the device, where samples and readings go, the trial's clock."""

    plan: Plan
    device: Device
    telemetry: object
    samples: TrialSamples
    clock: StageClock
    progress: Callable[[int, str], None]
    trial: int = 0  # the trial's index: with the plan's seed and the case, it seeds the block plan
    flush_slots: int = 1  # flush buffers the device has ready (each block draws one)


FLUSH_SLOTS = 4  # flush buffers at different places, drawn per block where placements rotate


def prepare_flush(bench: Bench) -> int:
    """The flush buffers the blocks draw from: FLUSH_SLOTS where the buffers' placement rotates
    (where the flush buffer sits is one more thing that differs between processes), else one."""
    if bench.plan.schedule.cache != "cold" or bench.plan.schedule.placement.count == 1:
        return 1
    return bench.device.prepare_flush_slots(FLUSH_SLOTS)


def time_floor(bench: Bench) -> None:
    """The empty window, measured the way samples are."""
    cold = bench.plan.schedule.cache == "cold"
    for ns in bench.device.time_samples(lambda: None, FLOOR_SAMPLES, cold=cold):
        bench.samples.add_floor(ns)


def warm_up(bench: Bench, case: ResolvedCase, setup: CaseSetup) -> Failure | None:
    """The plan's warm-up launches per arm, inside the trial's wall budget: one is timed, and only
    as many more as the budget has room for run. A Failure: no room left (the trial stops).

    Without the blocking kernel: a first launch may load lazily, which deadlocks behind it.
    A few host round trips per arm and case; not worth batching."""
    planned = bench.plan.schedule.warmup
    budget = bench.plan.budget.max_wall_seconds
    dev = bench.device
    for side, ex in setup.arms.items():
        if planned == 0:
            continue
        with watch(case.id, side):
            enqueue = lambda ex=ex: ex.enqueue(dev)  # noqa: E731
            first = dev.time_sample(enqueue, cold=False, block_stream=False)
            bench.samples.add_warmup(case.id, side, first)
            more = warmup_launches(planned - 1, bench.clock.elapsed(), first / 1e9, budget)
            for _ in range(more):
                bench.samples.add_warmup(case.id, side, dev.time_sample(enqueue, cold=False, block_stream=False))
        if more < planned - 1:
            message = f"wall-time budget of {budget:g} s spent during warm-up ({1 + more} of {planned} launches)"
            return Failure(kind="budget", case=case.id, side=side, message=message)
    return None


def time_pair(
    bench: Bench,
    case: ResolvedCase,
    setup: CaseSetup,
    refs: Mapping[str, Mapping[str, DeviceBuffer]],
    facts: CaseFacts,
    pair,
) -> Failure | None:
    """The ABBA blocks of one pair until the stop rule ends them. A Failure: the wall-time budget
    ran out (the trial stops).

    Per half: one batch on the device (device.time_samples), one telemetry reading shared by the
    half's samples, and one read-back of the outputs, compared with the reference.
    """
    sched, dev, plan = bench.plan.schedule, bench.device, bench.plan
    cold = sched.cache == "cold"
    iterations = sched.iterations_per_sample
    batch = batch_size(bench.samples.arrays(case.id), case.id, sched.samples_per_block, iterations)
    started = bench.clock.elapsed()
    draws = block_plan(plan.seeds.base, bench.trial, case.id, sched.blocks, setup.placements, bench.flush_slots)
    for draw in draws:
        block = draw.block
        arms = setup.arms_at(draw.placement)
        order = draw.order if sched.order == "seeded" else None
        for half in block_halves(block, pair, order):
            ex = arms[half.side]
            with watch(case.id, half.side):
                enqueue = lambda ex=ex: ex.enqueue(dev, iterations)  # noqa: E731
                slot = draw.flush_slot if bench.flush_slots > 1 else 0
                if cold:  # poisoned before each sample, outside its window
                    poison = lambda ex=ex: ex.poison_outputs(dev)  # noqa: E731
                    times = dev.time_samples(
                        enqueue,
                        sched.samples_per_block,
                        cold=True,
                        before_each=poison,
                        max_batch=batch,
                        flush_slot=slot,
                    )
                else:
                    ex.poison_outputs(dev)
                    times = dev.time_samples(enqueue, sched.samples_per_block, cold=False, max_batch=batch)
                with bench.clock.stage("telemetry"):
                    r = bench.telemetry.read()
                placed = {"placement": draw.placement} if setup.placements > 1 else {}
                if order is not None:
                    placed["half"] = half.position
                for ns in times:
                    reading = {"sm_mhz": r.sm_mhz, "throttle": r.throttle, "temp_c": r.temp_c}
                    bench.samples.add(case.id, half.series, ns=ns, block=block, **reading, **placed)
                bench.progress(sched.samples_per_block, f"{case.id} {half.series}")
                with bench.clock.stage("readback"):
                    expected = refs[half.side]
                    if any(dev.differs(ex.buffers[n], expected[n]) for n in ex.outputs):
                        facts.timed_outputs_match = False
        if bench.clock.elapsed() > plan.budget.max_wall_seconds:
            message = f"wall-time budget of {plan.budget.max_wall_seconds:g} s spent"
            return Failure(kind="budget", case=case.id, message=message)
        elapsed_s = bench.clock.elapsed() - started
        reason = stop_reason(bench.samples.arrays(case.id), case.id, pair, block + 1, plan, elapsed_s=elapsed_s)
        if reason is not None:
            facts.stopped["aa" if pair == AA else "comparison"] = reason
            break
    return None


def batch_size(arrays: dict[str, np.ndarray], case_id: str, samples_per_block: int, iterations: int) -> int:
    """Samples per blocking kernel for a case: a whole half when both arms' warm-up medians reach
    BATCH_MIN_NS per launch, else 1. Both arms get the same size, so whatever offset batching adds
    is the same on both sides. Derived from the warm-ups kept in the samples file."""
    medians = []
    for side in ARM_SIDES:
        warm = arrays.get(key(case_id, side, "warmup_ns"))
        if warm is None or warm.size == 0:
            return 1
        medians.append(float(np.median(warm)))
    return min(samples_per_block, MAX_BATCH) if min(medians) >= BATCH_MIN_NS else 1
