"""The calibration benchmark's CPU half: its plans, the spin hook, spin choice, rates and tables.

No rate measured on a GPU is asserted here: the JSON below is fabricated to exercise the
arithmetic and the rendering.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "calibration"))

import calib  # noqa: E402

from qualify.build.arms import kernel_spec  # noqa: E402
from qualify.build.nvrtc import compile_kernel  # noqa: E402
from qualify.plan.load import load_plan  # noqa: E402


@pytest.mark.parametrize("family", ["attention", "bandwidth"])
def test_plans_are_valid_frozen_and_plant_the_spin_in_the_candidate_only(tmp_path, family):
    path = calib.write_plan(tmp_path, family, 1.0, 37, "sm_90", trials=20, quick=False)
    loaded = load_plan(path)
    assert loaded.lock is not None and loaded.lock["digest"] == loaded.digest
    plan = loaded.plan
    assert plan.arms.candidate.defines == {"QUALIFY_SPIN_CYCLES": 37} and plan.arms.base.defines == {}
    assert plan.schedule.trials == plan.budget.max_trials == 20
    assert plan.budget.max_samples == plan.schedule.blocks * 2 * plan.schedule.samples_per_block
    assert not plan.controls.aa and plan.acceptance.sanitizer == []
    assert [c.id for c in loaded.cases] == list(calib.FAMILIES[family]["labels"])


def test_attention_cases_are_a_partial_and_a_full_wave(tmp_path):
    loaded = load_plan(calib.write_plan(tmp_path, "attention", 0.0, 0, "sm_90", trials=1, quick=True))
    blocks = {c.id: math.prod(c.arms["base"].launch.grid) for c in loaded.cases}
    per_wave = 2 * 132  # two 128-thread blocks of 67,584 B per SM on the H200
    assert blocks == {"T=1536": 384, "T=2112": 528}
    assert blocks["T=1536"] / per_wave == pytest.approx(1.45, abs=0.01)
    assert blocks["T=2112"] % per_wave == 0


def test_spin_hook_is_empty_by_default_and_compiles_when_set(tmp_path):
    """Spin 0 builds the same CUBIN as the base (the A/A point is a true A/A); a spin changes it."""
    loaded = load_plan(calib.write_plan(tmp_path, "bandwidth", 0.0, 0, "sm_90", trials=1, quick=True))
    base = compile_kernel(kernel_spec(loaded, "base", "sm_90")).cubin
    zero = compile_kernel(kernel_spec(loaded, "candidate", "sm_90")).cubin
    spun = compile_kernel(kernel_spec(loaded, "candidate", "sm_90", {"QUALIFY_SPIN_CYCLES": 40})).cubin
    assert base == zero and spun != base
    attention = load_plan(calib.write_plan(tmp_path, "attention", 1.0, 64, "sm_90", trials=1, quick=True))
    compiled = compile_kernel(kernel_spec(attention, "candidate", "sm_90"))
    assert compiled.cubin and compiled.resources.spill_store_bytes == 0


@pytest.mark.parametrize(
    "ladder, target, expected",
    [
        ([(10, 1.0), (20, 2.0), (40, 4.0)], 3.0, 30),  # interpolated between rungs
        ([(10, 1.0), (20, 2.0)], 0.5, 5),  # below the first rung: from (0, 0)
        ([(10, 1.0), (20, 2.0)], 3.0, 30),  # beyond the last: its slope
        ([(8, 0.0), (16, 0.0), (32, 1.0), (64, 2.0)], 0.5, 24),  # a flat start (spin hidden)
        ([(8, 0.3), (16, 0.1), (32, 1.3)], 0.2, 5),  # noise made monotone: 16 counts as 0.3
        ([(10, 1.0)], 0.0, 0),
    ],
)
def test_choose_spin(ladder, target, expected):
    assert calib.choose_spin(ladder, target) == expected


def test_paired_change_of_ncu_rounds():
    base = [10.0, 10.2, 9.9, 10.1]
    delta, spread = calib.paired_change(base, [b * 1.02 for b in base])
    assert delta == pytest.approx(2.0, abs=1e-9) and spread == pytest.approx(0.0, abs=1e-9)
    delta, spread = calib.paired_change([10.0, 10.0, 10.0], [10.1, 10.3, 10.2])
    logs = [math.log(1.01), math.log(1.03), math.log(1.02)]
    sd = math.sqrt(sum((x - sum(logs) / 3) ** 2 for x in logs) / 2)
    assert delta == pytest.approx(2.0, abs=0.01)
    assert spread == pytest.approx(math.expm1(4.302653 * sd / math.sqrt(3)) * 100, rel=1e-6)


def _trial(i, cls, delta, mde, reason=""):
    return {
        "trial": i,
        "status": "complete",
        "case_class": cls,
        "delta_pct": delta,
        "ci_low": None,
        "ci_high": None,
        "mde_pct": mde,
        "blocks": 10,
        "reason": reason,
    }


def fabricated() -> dict:
    aa = [_trial(i, "same", 0.1, 0.4) for i in range(19)] + [_trial(19, "slower", 0.7, 0.4)]
    one = [_trial(i, "slower", 1.1, 0.6) for i in range(18)]
    one += [
        _trial(18, "cant_tell", 0.4, 1.4, "...; the smallest change this case resolves is 1.40%"),
        _trial(19, "slower", 1.3, 1.2),
    ]
    three = [_trial(i, "slower", 3.2, 0.5) for i in range(19)] + [_trial(19, "faster", -0.6, 0.5)]
    return {
        "version": 1,
        "meta": {
            "started": "2026-12-01T09:00:00+00:00",
            "device": "NVIDIA H200 (GPU-x)",
            "quick": False,
            "trials_per_point": 20,
            "rounds_done": 20,
            "blocks": 10,
            "samples_per_block": 10,
            "elapsed_s": 301.0,
        },
        "cases": [
            {
                "family": "attention",
                "case": "T=1536",
                "label": "attention T=1536 (1.45 waves)",
                "ladder": [[8, 0.1], [16, 0.4]],
                "points": [
                    {
                        "nominal_pct": 0.0,
                        "spin": 0,
                        "trials": aa,
                        "ncu": {
                            "base_us": 90.0,
                            "variant_us": 90.0,
                            "delta_pct": 0.05,
                            "spread_pct": 0.2,
                            "launches": 15,
                        },
                    },
                    {
                        "nominal_pct": 1.0,
                        "spin": 21,
                        "trials": one,
                        "ncu": {
                            "base_us": 90.0,
                            "variant_us": 91.0,
                            "delta_pct": 1.05,
                            "spread_pct": 0.3,
                            "launches": 15,
                        },
                    },
                    {
                        "nominal_pct": 3.0,
                        "spin": 63,
                        "trials": three,
                        "ncu": {
                            "base_us": 90.0,
                            "variant_us": 92.7,
                            "delta_pct": 3.0,
                            "spread_pct": 0.9,
                            "launches": 15,
                        },
                    },
                ],
            }
        ],
    }


def test_rates_from_a_fabricated_result():
    case = fabricated()["cases"][0]
    aa, one, three = (calib.point_summary(p) for p in case["points"])
    assert aa["false_rate"] == pytest.approx(0.05) and aa["counts"]["same"] == 19
    assert one["resolvable"] == 18 and one["detect_rate_resolvable"] == 1.0 and one["unresolvable_honest"]
    assert one["detect_rate"] == pytest.approx(19 / 20)
    assert one["qualify_delta_pct"] == pytest.approx(1.1) and one["diff_pp"] == pytest.approx(0.05)
    assert one["agrees"] is True and one["mde_pct"] == pytest.approx(0.6)
    assert three["agrees"] is None  # ncu's own ± 0.9 is wider than the 0.5 pp asked for
    verdicts = calib.case_verdicts(case)
    assert verdicts == {"aa_false_ok": True, "one_pct_ok": True, "never_faster": False, "ncu_agrees": True}


def test_a_miss_without_the_mde_in_its_reason_fails_the_one_percent_criterion():
    data = fabricated()
    data["cases"][0]["points"][1]["trials"][18]["reason"] = "straddles 1"
    assert calib.case_verdicts(data["cases"][0])["one_pct_ok"] is False
    data["cases"][0]["points"][1]["trials"][0]["case_class"] = "same"  # a resolvable trial missed
    assert calib.point_summary(data["cases"][0]["points"][1])["detect_rate_resolvable"] == pytest.approx(17 / 18)


def test_render_from_json(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(fabricated()))
    text = calib.render(calib.load_result(path))
    assert "### attention T=1536 (1.45 waves)" in text
    assert (
        "| 0 % | 0 | +0.05 % (± 0.20) | +0.10 % [+0.10, +0.70] | +0.05 pp | 0/20 (0%) | 19/20 (95%) | 0/20 (0%) | 1/20 (5%) | 0.40 % |"
        in text
    )
    assert "| 3 % | 63 | +3.00 % (± 0.90) |" in text and "(ncu too wide)" in text
    assert "- A/A (0 %) false faster/slower: 1/20 (5%); at most 5%: met." in text
    assert "- Never called faster on a planted slowdown: **not met**." in text
    bad = dict(fabricated(), version=2)
    path.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="version 2"):
        calib.load_result(path)


def test_ncu_launches_are_split_by_case_variant_and_round():
    values = [float(v) for v in range(2 * 3 * 4)]  # 2 cases, 3 rounds of 4 variants, launch order
    split = calib.split_ncu(values, cases=2, rounds=3, width=4)
    assert split[0][0] == [0.0, 4.0, 8.0] and split[0][3] == [3.0, 7.0, 11.0]
    assert split[1][1] == [13.0, 17.0, 21.0]
    with pytest.raises(ValueError, match="expected 24"):
        calib.split_ncu(values[:-1], cases=2, rounds=3, width=4)
