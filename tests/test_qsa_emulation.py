"""The qsa-keyload plan's bounds and control expectations, checked on the CPU against
kernels/qsa/emulate.py (qsa.cu's own order and roundings in float32) through
protocols/qsa-keyload/calibrate.py: the emulated kernel passes every bound with margin, the short
cases are bit-exact, and every control does what the plan declares, case by case."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from qualify.dtypes import bf16_bits_to_f32, to_bf16_bits

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "protocols/qsa-keyload/plan.json"


def _module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


calibrate = _module("qsa_calibrate", ROOT / "protocols/qsa-keyload/calibrate.py")
emulate = calibrate.emulate
reference = _module("qsa_reference", ROOT / "kernels/qsa/reference.py")


@pytest.fixture(scope="module")
def evaluated():
    return calibrate.evaluate(PLAN)


def test_emulated_kernel_passes_every_bound_with_margin(evaluated):
    candidate, _, _ = evaluated
    assert len(candidate) == 10  # five cases, two outputs
    for r in candidate:
        assert r.passed, r
        assert r.fraction is not None and r.fraction < 0.5, r  # half the bound left for the GPU's expf


def test_short_cases_are_bit_exact_and_held_so(evaluated):
    candidate, _, _ = evaluated
    short = [r for r in candidate if r.case in ("R=8,S=8", "R=10,S=10")]
    assert len(short) == 4
    assert all(r.atol == 0 and r.rtol == 0 and r.identical == r.elements for r in short)
    long = [r for r in candidate if r not in short]
    assert all(r.rtol > 0 and r.atol > 0 for r in long)


def _outcomes(controls):
    return {(r.control, r.case, r.output): (r.declared, "pass" if r.passed else "fail") for r in controls}


def test_every_control_behaves_as_declared(evaluated):
    _, controls, _ = evaluated
    assert len(controls) == 4 * 5 * 2
    wrong = [r for r in controls if ("pass" if r.passed else "fail") != r.declared]
    assert not wrong


@pytest.mark.parametrize(
    "control, case, output, outcome",
    [
        ("causal_mask", "R=6,S=2055", "out", "fail"),  # the only case whose mask hides keys
        ("causal_mask", "R=6,S=2055", "weights", "fail"),
        ("causal_mask", "R=64,S=64", "out", "pass"),  # an all-visible mask: nothing changes
        ("swap_key_heads", "R=8,S=8", "weights", "fail"),
        ("swap_key_heads", "R=16,S=2048", "out", "fail"),
        ("saturate_gate", "R=16,S=2048", "weights", "pass"),
        ("saturate_gate", "R=16,S=2048", "out", "fail"),
        ("unrounded_gate", "R=8,S=8", "out", "fail"),  # seen by the bit-exact cases only
        ("unrounded_gate", "R=10,S=10", "out", "fail"),
        ("unrounded_gate", "R=64,S=64", "out", "pass"),  # within a quantum: the seed's blind spot
        ("unrounded_gate", "R=6,S=2055", "weights", "pass"),
    ],
)
def test_control_outcome_per_case(evaluated, control, case, output, outcome):
    _, controls, _ = evaluated
    assert _outcomes(controls)[(control, case, output)] == (outcome, outcome)


def test_the_gate_resolves_a_few_quanta_everywhere(evaluated):
    _, _, resolutions = evaluated
    assert len(resolutions) == 10
    for r in resolutions:
        assert r.smallest_caught is not None and r.smallest_caught.quanta <= 4, r.smallest_caught
        if r.case in ("R=8,S=8", "R=10,S=10"):
            assert (r.smallest_caught.quanta, r.smallest_caught.elements) == (1, 1)


def test_calibrate_reports_ok_and_exits_zero(capsys):
    assert calibrate.main(["--plan", str(PLAN)]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("OK")


def test_calibrate_names_what_misses_a_tighter_margin(evaluated):
    lines = calibrate.report(*evaluated, margin=0.05)
    assert lines[-1].startswith("PROBLEM: ") and any(line.startswith("PROBLEM: R=16,S=2048") for line in lines)


# the emulation's pieces against plain loops written as the kernel runs them


def test_round_bf16_matches_qualify_rounding():
    x = np.random.default_rng(1).normal(size=4096).astype(np.float32) * np.float32(3)
    assert np.array_equal(emulate.to_bits(emulate.round_bf16(x)), to_bf16_bits(x))


def test_dot_matches_the_reference_kernel_order():
    rng = np.random.default_rng(2)
    q = bf16_bits_to_f32(to_bf16_bits(rng.normal(size=(3, 256))))
    k = bf16_bits_to_f32(to_bf16_bits(rng.normal(size=(5, 256))))
    assert np.array_equal(emulate.dot_scores(q, k), reference.kernel_order_dot(q, k))


def _block_sum_loop(p):
    """qsa.cu's block_sum after its stride loop, thread by thread and lane by lane."""
    f = np.float32
    partial = [f(0)] * 256
    for t in range(256):
        for j in range(t, len(p), 256):
            partial[t] = f(partial[t] + p[j])

    def warp(values):
        v = list(values)
        for o in (16, 8, 4, 2, 1):
            v = [f(v[i] + v[i ^ o]) for i in range(32)]
        return v[0]

    warps = [warp(partial[32 * w : 32 * w + 32]) for w in range(8)]
    return warp(warps + [f(0)] * 24)


@pytest.mark.parametrize("S", [8, 300, 2055])
def test_block_sum_follows_the_kernels_order(S):
    p = np.random.default_rng(S).exponential(size=S).astype(np.float32)
    assert emulate.block_sum(p[None])[0] == _block_sum_loop(p)


def test_unrounded_sigmoid_changes_some_outputs_by_one_quantum_at_most():
    rng = np.random.default_rng(3)
    bf = lambda shape: bf16_bits_to_f32(to_bf16_bits(rng.normal(size=shape)))  # noqa: E731
    q, gate, k, v = bf((4, 2, 256)), bf((4, 2, 256)), bf((1, 16, 256)), bf((1, 16, 256))
    mask = np.ones((4, 16), np.uint8)
    _, rounded = emulate.forward(q, k, v, gate, mask, 0.0625)
    _, unrounded = emulate.forward(q, k, v, gate, mask, 0.0625, round_sigmoid=False)
    steps = np.abs(emulate.to_bits(rounded).astype(np.int32) - emulate.to_bits(unrounded).astype(np.int32))
    assert steps.max() == 1 and steps.sum() > 0


readme = _module("qsa_readme", ROOT / "protocols/qsa-keyload/readme.py")


def test_protocol_readme_generated_sections_are_current():
    record = ROOT / "records/qsa-keyload"
    args = ["--check"] + (["--record", str(record)] if (record / "results.json").exists() else [])
    assert readme.main(args) == 0, "run python protocols/qsa-keyload/readme.py [--record records/qsa-keyload]"


def test_grid_geometry_agrees_with_the_seeds_profile():
    """The seed profiled its four-head 2048-token launch as a 12,288-CTA grid."""
    from qualify.plan.load import load_plan

    loaded = load_plan(PLAN)
    params = {**loaded.plan.workload.params, "R": 2048, "S": 2048}
    assert readme._arm_geometry(loaded, params, "candidate")["blocks"] == 12288
    assert readme._arm_geometry(loaded, params, "base")["blocks"] == 4 * 12288
    small = readme._arm_geometry(loaded, {**loaded.plan.workload.params, "R": 16, "S": 2048}, "candidate")
    assert small["blocks"] < readme.H200_SMS  # the case where the candidate leaves SMs idle


def test_calibrate_prints_a_records_measured_fractions_beside_the_emulated(evaluated):
    """The first H200 record (made under the plan's first, global bound) read back: its own verdicts per output."""
    import json

    folder = ROOT / "tests/fixtures/qsa-keyload-first-plan"
    trial = json.loads((folder / "trials/trial-1.json").read_text())
    case = next(c for c in trial["cases"] if c["case"] == "R=64,S=64")
    out = next(n for n in case["tolerance"]["counts"]["candidate"] if n["output"] == "out")
    lines = calibrate.report(*evaluated, margin=0.5, record=folder)
    row = next(line for line in lines if line.startswith("R=64,S=64 | out |"))
    assert f"t1 {out['worst_bound_fraction']:.3g} FAIL" in row  # failed under that record's own, global bound
    assert row.count("FAIL") == 2  # both trials'
    swap = next(o for o in trial["control_outcomes"] if o["control"] == "swap_key_heads" and o["case"] == "R=8,S=8")
    control = next(line for line in lines if line.startswith("swap_key_heads | R=8,S=8 | weights |"))
    assert f"t1 {swap['worst_bound_fraction']['weights']:.3g} FAIL" in control
