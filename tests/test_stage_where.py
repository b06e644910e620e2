"""Where a fault happened is carried by the exception (stages/where.py) and lands in the trial's
failure: the case and the arm, never a position kept elsewhere."""

from __future__ import annotations

import fakes
import pytest
from test_engine import fake, frozen, run_trial, small_plan

from qualify.run.device import KernelFault
from qualify.run.stages.where import Located, Where, watch


def test_the_innermost_watch_names_the_place():
    with pytest.raises(Located) as raised:
        with watch("N=1"), watch("N=1", "candidate"):
            raise ValueError("bad")
    assert raised.value.where == Where("N=1", "candidate")
    assert isinstance(raised.value.cause, ValueError)


def test_an_interrupt_is_not_located():
    with pytest.raises(KeyboardInterrupt):
        with watch("N=1", "base"):
            raise KeyboardInterrupt


def test_a_fault_in_the_candidates_control_names_the_case_and_the_candidate(tmp_path):
    plan = small_plan()
    plan["controls"]["negative"].append(
        {"kind": "build", "name": "off_by_one", "defines": {"QUALIFY_CONTROL_OFF_BY_ONE": 1}, "cases": ["N=4096"]}
    )

    def faults_under_the_control(memory, args, kernel):
        if kernel.label == "candidate+off_by_one":
            raise KernelFault("illegal address", 700)
        fakes.axpy(memory, args, kernel)

    trial = run_trial(frozen(tmp_path, plan), fake(faults_under_the_control), tmp_path)
    assert trial.status == "failed"
    (failure,) = trial.failures
    assert (failure.kind, failure.case, failure.side) == ("fault", "N=4096", "candidate")


def test_a_fault_while_timing_names_the_arm_of_that_half(tmp_path):
    class FaultsInTheSecondBlock(type(fake())):
        batches = 0

        def time_samples(self, enqueue, count, cold, **kw):
            self.batches += 1
            if self.batches == 1 + 4 + 1:  # after the floor and block 0's four halves
                raise KernelFault("misaligned address", 716)
            return super().time_samples(enqueue, count, cold, **kw)

    device = FaultsInTheSecondBlock({"axpy": fakes.axpy}, durations={"base": 10_000.0, "candidate": 8_000.0})
    plan = small_plan()
    plan["schedule"] |= {"order": "alternate"}
    trial = run_trial(frozen(tmp_path, plan), device, tmp_path)
    (failure,) = trial.failures
    # block 1 runs B A A B: its first half is the candidate's
    assert (failure.kind, failure.case, failure.side) == ("fault", trial.cases[0].case, "candidate")


def test_a_fault_during_warm_up_names_the_case_and_the_arm(tmp_path):
    class FaultsInTheFirstWarmUp(type(fake())):
        unblocked = 0

        def time_sample(self, enqueue, cold, block_stream=True, *args, **kw):
            if not block_stream:
                self.unblocked += 1
                # the first case's stream-escape check takes three calls per arm, unblocked;
                # the base arm's first warm-up is the next unblocked call
                if self.unblocked == 7:
                    raise KernelFault("illegal address", 700)
            return super().time_sample(enqueue, cold, block_stream, *args, **kw)

    device = FaultsInTheFirstWarmUp({"axpy": fakes.axpy}, durations={"base": 10_000.0, "candidate": 8_000.0})
    loaded = frozen(tmp_path)
    trial = run_trial(loaded, device, tmp_path)
    faults = [f for f in trial.failures if f.kind == "fault"]
    assert [(f.case, f.side) for f in faults] == [(loaded.cases[0].id, "base")]
