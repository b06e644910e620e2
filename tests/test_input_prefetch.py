"""A case's inputs generated ahead of it (qualify.run.stages.case_setup.InputPrefetch): the bytes
every case gets are the plan's, the cases ahead stay within the byte budget (the next one always),
and cases ahead are generated at the same time, not one after another."""

from __future__ import annotations

import hashlib
import threading

import pytest
from plans import make_repo, plan_copy

from qualify.plan.load import load_plan
from qualify.run import golden_stage
from qualify.run.stages import case_setup
from qualify.run.stages.case_setup import InputPrefetch


@pytest.fixture
def loaded(tmp_path):
    plan = plan_copy()
    plan["workload"]["cases"] = [{"N": n} for n in (1024, 2048, 4096, 8192)]
    plan["acceptance"]["gates"] = []
    return load_plan(make_repo(tmp_path, plan))


def _bytes(loaded, case) -> int:
    """The case's input bytes: x and y, f32."""
    return 2 * 4 * case.values["N"]


def test_every_case_gets_the_plans_inputs_and_their_digests(loaded):
    prefetch = InputPrefetch(loaded.plan, None, loaded.cases)
    try:
        for case in loaded.cases:
            got = prefetch.take(case)
            for side in ("base", "candidate"):
                want = golden_stage.case_inputs(loaded.plan, None, case.id, case.arms[side])
                assert {n: a.tobytes() for n, a in got.inputs[side].items()} == {
                    n: a.tobytes() for n, a in want.items()
                }
            assert got.sha256 == {n: hashlib.sha256(a.tobytes()).hexdigest() for n, a in want.items()}
    finally:
        prefetch.close()


def test_one_arms_inputs_without_digests_for_the_worker(loaded):
    prefetch = InputPrefetch(loaded.plan, None, loaded.cases, sides=("candidate",), hashed=False)
    try:
        got = prefetch.take(loaded.cases[0])
    finally:
        prefetch.close()
    assert set(got.inputs) == {"candidate"} and got.sha256 == {}
    assert set(got.inputs["candidate"]) == {"x", "y"}


@pytest.mark.parametrize(
    "budget, started",
    [
        (0, ["N=2048"]),  # the next case always, nothing beyond it
        (2 * 4 * (2048 + 4096) - 1, ["N=2048"]),  # one byte short of the second case ahead
        (2 * 4 * (2048 + 4096), ["N=2048", "N=4096"]),
        (1 << 30, ["N=2048", "N=4096", "N=8192"]),
    ],
)
def test_cases_ahead_stay_within_the_byte_budget(loaded, monkeypatch, budget, started):
    gate = threading.Event()  # nothing finishes while the test looks at what was started
    calls = []

    def slow(plan, golden, case_id, arm, store=None):
        calls.append(case_id)
        gate.wait(10)
        return {}

    monkeypatch.setattr(case_setup.golden_stage, "case_inputs", slow)
    prefetch = InputPrefetch(loaded.plan, None, loaded.cases, sides=("base",), ahead_bytes=budget)
    assert sum(_bytes(loaded, c) for c in loaded.cases[1:3]) == 2 * 4 * (2048 + 4096)
    try:
        waiter = threading.Thread(target=prefetch.take, args=(loaded.cases[0],))
        waiter.start()
        for _ in range(500):  # until the started ones have all begun (four workers: at once)
            if len(calls) >= 1 + len(started):
                break
            threading.Event().wait(0.01)
        threading.Event().wait(0.1)  # and a moment for any that should not have
        assert sorted(calls, key=lambda c: int(c[2:])) == ["N=1024", *started]
    finally:
        gate.set()
        prefetch.close()


def test_cases_ahead_are_generated_at_the_same_time(loaded, monkeypatch):
    """Three cases' generation meet at a barrier: one after another, it would time out."""
    barrier = threading.Barrier(3, timeout=10)

    def meeting(plan, golden, case_id, arm, store=None):
        if case_id != "N=8192":
            barrier.wait()
        return {}

    monkeypatch.setattr(case_setup.golden_stage, "case_inputs", meeting)
    prefetch = InputPrefetch(loaded.plan, None, loaded.cases, sides=("base",), ahead_bytes=1 << 30)
    try:
        prefetch.take(loaded.cases[0])  # raises BrokenBarrierError if the three never ran together
    finally:
        prefetch.close()
