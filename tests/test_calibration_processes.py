"""Calibration across processes, the CPU half: variants, plans, orders, a replicate on the fake
device, and the rates and tables over processes.

No rate measured on a GPU is asserted here: the JSON below is fabricated to exercise the
arithmetic and the rendering.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "benchmarks" / "calibration"))
sys.path.insert(0, str(HERE))

import across_processes  # noqa: E402
import calib_processes as cp  # noqa: E402

from qualify.build.arms import kernel_spec  # noqa: E402
from qualify.build.nvrtc import compile_kernel  # noqa: E402
from qualify.evaluate.pooled import pool  # noqa: E402
from qualify.plan.load import load_plan  # noqa: E402
from qualify.results.model import CaseStats  # noqa: E402

SCRIPT = HERE.parent / "benchmarks" / "calibration" / "across_processes.py"


def test_every_family_runs_each_planted_point_under_the_new_design_and_the_aa_under_the_old():
    keys = [v.key for v in cp.variants()]
    assert keys == [
        "vecload/new/0",
        "vecload/new/1",
        "vecload/new/2",
        "vecload/old/0",
        "attention/new/0",
        "attention/new/1",
        "attention/new/2",
        "attention/old/0",
    ]
    assert all(cp.Variant.from_key(k).key == k for k in keys)


@pytest.mark.parametrize("variant", cp.variants(), ids=lambda v: v.key)
def test_plans_are_frozen_and_differ_only_where_the_variant_says(tmp_path, variant):
    spin = 37 if variant.planted_pct else 0
    loaded = load_plan(cp.write_plan(tmp_path, variant, spin, "sm_90", quick=False))
    plan = loaded.plan
    assert loaded.lock is not None and loaded.lock["digest"] == loaded.digest
    assert [c.id for c in loaded.cases] == list(cp.LABELS[variant.family])
    # spin 0 leaves the hook undefined: the candidate is the base build itself
    assert plan.arms.candidate.defines == ({"QUALIFY_SPIN_CYCLES": 37} if spin else {})
    assert plan.arms.base.defines == {} and plan.arms.base.kernel == plan.arms.candidate.kernel
    s = plan.schedule
    assert (s.warmup, s.samples_per_block, s.blocks, s.traced_calls) == (5, 10, 20, 0)
    assert s.trials == plan.budget.max_trials == cp.MAX_PROCESSES
    assert plan.stop.rule == "fixed" and not plan.controls.aa and plan.controls.negative == []
    if variant.design == "new":
        assert (s.placement.count, s.order) == ("per_block", "seeded")
    else:
        assert (s.placement.count, s.order) == (1, "alternate")


def test_quick_plans_are_shorter(tmp_path):
    plan = load_plan(cp.write_plan(tmp_path, cp.Variant("vecload", 1.0, "new"), 40, "sm_90", quick=True)).plan
    assert (plan.schedule.blocks, plan.schedule.samples_per_block) == (6, 5)


def test_vecload_spin_hook_is_absent_by_default_and_compiles_when_defined(tmp_path):
    import dataclasses
    import re

    loaded = load_plan(cp.write_plan(tmp_path, cp.Variant("vecload", 1.0, "new"), 64, "sm_90", quick=True))
    base = compile_kernel(kernel_spec(loaded, "base", "sm_90"))
    spun = compile_kernel(kernel_spec(loaded, "candidate", "sm_90"))
    # without the definition the kernel compiles as the file without the hook does (the cubins
    # differ only in what NVRTC records of the source text)
    stripped = tmp_path / "vecload-without-hook.cu"
    source = base.spec.source.read_text()
    stripped.write_text(re.sub(r"#ifdef QUALIFY_SPIN_CYCLES.*?#endif\n", "", source, count=1, flags=re.S))
    assert "QUALIFY_SPIN_CYCLES" in source and "QUALIFY_SPIN_CYCLES" not in stripped.read_text()
    plain = compile_kernel(dataclasses.replace(base.spec, source=stripped, frozen=(), locked=False))
    assert plain.resources == base.resources and plain.lowered_name == base.lowered_name
    assert spun.cubin != base.cubin


def test_each_process_draws_its_own_variant_order_and_a_rerun_draws_the_same():
    keys = [v.key for v in cp.variants()]
    orders = [cp.process_order(7, p, keys) for p in range(12)]
    assert all(sorted(o) == sorted(keys) for o in orders)
    assert len({tuple(o) for o in orders}) > 1
    assert orders == [cp.process_order(7, p, keys) for p in range(12)]


def test_help_works_without_a_gpu():
    done = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--processes" in done.stdout and "--quick" in done.stdout


# ---------------------------------------------------------------------------------------------
# a replicate on the fake device


def test_a_replicate_runs_one_trial_of_each_variant_as_its_own_trial_index(tmp_path, monkeypatch, capsys):
    import fakes
    import run_calibration

    from qualify.run import device as device_module
    from qualify.run import telemetry as telemetry_module
    from qualify.run.fake import FakeDevice, FakeTelemetry

    class FakeCuda(FakeDevice):
        def __init__(self, ordinal):
            super().__init__({"axpy": fakes.axpy}, durations={"base": 300_000.0, "candidate": 303_000.0})

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    monkeypatch.setattr(device_module, "CudaDevice", FakeCuda)
    monkeypatch.setattr(telemetry_module, "Telemetry", lambda uuid: FakeTelemetry())
    monkeypatch.setattr(run_calibration, "install_caches", lambda: None)
    wanted = [cp.Variant("vecload", 0.0, "new"), cp.Variant("vecload", 1.0, "old")]
    plans = {
        v.key: str(cp.write_plan(tmp_path / "plans", v, 9 if v.planted_pct else 0, "sm_90", quick=True)) for v in wanted
    }
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"plans": plans, "seed": 3}))
    assert across_processes.replicate(spec, 4) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(across_processes.LINE_MARK))
    entry = json.loads(line[len(across_processes.LINE_MARK) :])
    assert entry["process"] == 4 and sorted(entry["order"]) == sorted(plans)
    rows = entry["rows"]
    assert {(r["variant"], r["case"]) for r in rows} == {(k, c) for k in plans for c in ("N=1048576", "N=4194304")}
    assert all(r["status"] == "complete" and r["blocks"] for r in rows)
    placements = {r["variant"]: r["placements"] for r in rows}
    assert placements["vecload/old/1"] == 1 and placements["vecload/new/0"] > 1


# ---------------------------------------------------------------------------------------------
# rates over processes, from a fabricated result


def _row(family, case, planted, design, delta, half, cls, mde=0.5, blocks=20):
    ratio = 1 + delta / 100
    lo, hi = ratio - half / 100, ratio + half / 100
    sd = (math.log(hi) - math.log(lo)) / 2 * math.sqrt(blocks) / 2.093
    return {
        "variant": f"{family}/{design}/{planted:g}",
        "family": family,
        "planted_pct": planted,
        "design": design,
        "case": case,
        "status": "complete",
        "ratio": ratio,
        "delta_pct": delta,
        "ci_low": lo,
        "ci_high": hi,
        "mde_pct": mde,
        "case_class": cls,
        "blocks": blocks,
        "placements": 20 if design == "new" else 1,
        "log_mean": math.log(ratio),
        "log_sd": sd,
        "reason": "fabricated",
    }


def _result(points: dict) -> dict:
    """points: (family, case, planted, design) -> one (delta, half, class[, mde]) per process."""
    n = max(len(v) for v in points.values())
    processes = []
    for p in range(n):
        rows = [_row(*key, *values[p]) for key, values in points.items() if p < len(values)]
        processes.append({"process": p, "order": [], "rows": rows, "elapsed_s": 10.0, "error": None})
    return {
        "version": 1,
        "ladders": {},
        "spins": {"vecload": {"0": 0, "1": 40, "2": 90}},
        "processes": processes,
        "meta": {
            "started": "2026-12-02T00:00:00+00:00",
            "device": "fake",
            "processes_planned": n,
            "blocks": 20,
            "samples_per_block": 10,
            "elapsed_s": 300.0,
        },
    }


V1 = ("vecload", "N=1048576")


def test_coverage_counts_processes_whose_interval_holds_the_mean_over_processes():
    # mean of the log-ratios is ~ +0.0 %; the third process's ±0.3 around +2 % misses it
    rows = [
        _row(*V1, 0.0, "new", d, h, c)
        for d, h, c in [(-1.0, 1.5, "cant_tell"), (-1.0, 1.5, "cant_tell"), (2.0, 0.3, "slower")]
    ]
    s = cp.point_summary(0.0, rows)
    assert s["processes"] == 3 and s["covered"] == 2 and s["coverage"] == pytest.approx(2 / 3)
    mean = math.exp(sum(math.log(r["ratio"]) for r in rows) / 3)
    assert s["mean_delta_pct"] == pytest.approx((mean - 1) * 100)
    assert s["sd_pp"] == pytest.approx(math.sqrt(3.0))
    assert s["median_half_width_pct"] == pytest.approx(1.5)
    assert s["false_rate"] == pytest.approx(1 / 3) and not s["opposite"]
    assert s["counts"] == {"faster": 0, "same": 0, "cant_tell": 2, "slower": 1}


def test_opposite_classes_and_detection_among_processes_that_resolve_one_percent():
    rows = [
        _row(*V1, 1.0, "new", 1.1, 0.4, "slower", mde=0.8),
        _row(*V1, 1.0, "new", 0.2, 0.9, "cant_tell", mde=1.2),
        _row(*V1, 1.0, "new", -1.1, 0.4, "faster", mde=0.8),
    ]
    s = cp.point_summary(1.0, rows)
    assert s["opposite"] and s["false_rate"] is None
    assert s["resolving"] == 2 and s["detect_rate"] == pytest.approx(0.5)
    assert s["median_mde_pct"] == pytest.approx(0.8)


def test_the_pooled_interval_is_qualifys_over_the_processes_trial_statistics():
    rows = [_row(*V1, 0.0, "new", d, 0.5, "same") for d in (-0.4, 0.1, 0.6, 0.0)]
    s = cp.point_summary(0.0, rows)
    expected = pool(
        [
            CaseStats(
                ratio=r["ratio"],
                ci_low=r["ci_low"],
                ci_high=r["ci_high"],
                delta_pct=r["delta_pct"],
                case_class=r["case_class"],
                reason="",
                blocks=r["blocks"],
                mde_pct=r["mde_pct"],
                log_mean=r["log_mean"],
                log_sd=r["log_sd"],
            )
            for r in rows
        ]
    )
    assert s["pooled"]["delta_pct"] == pytest.approx(expected.delta_pct)
    assert (s["pooled"]["ci_low"], s["pooled"]["ci_high"]) == pytest.approx((expected.ci_low, expected.ci_high))
    assert s["pooled"]["between_pct"] == pytest.approx(expected.between_pct)
    assert s["pooled"]["within_pct"] == pytest.approx(expected.within_pct)


def test_rows_of_failed_trials_are_left_out_of_every_point():
    result = _result({(*V1, 0.0, "new"): [(0.0, 0.5, "same")] * 2})
    result["processes"][1]["rows"][0]["status"] = "failed"
    assert [len(v) for v in cp.point_rows(result).values()] == [1]


def test_targets_are_computed_from_the_new_design_only():
    good = {
        (*V1, 0.0, "new"): [(0.0, 0.6, "same")] * 12,
        (*V1, 1.0, "new"): [(1.0, 0.6, "slower", 0.8)] * 12,
        (*V1, 2.0, "new"): [(2.0, 0.6, "slower")] * 12,
        # the old design misses everything: no target looks at it
        (*V1, 0.0, "old"): [(d, 0.1, "faster" if d < 0 else "slower") for d in (-3, 3) * 6],
    }
    points = cp.point_rows(_result(good))
    new = [cp.point_summary(p, points[(*V1, p, "new")]) for p in cp.PLANTED_NEW]
    assert cp.case_targets(new) == {"coverage": True, "aa_false": True, "no_opposite": True, "detect_one_pct": True}
    bad = dict(good)
    bad[(*V1, 0.0, "new")] = [(0.0, 0.6, "same")] * 10 + [(-2.0, 0.2, "faster")] * 2  # 10 of 12 cover
    points = cp.point_rows(_result(bad))
    new = [cp.point_summary(p, points[(*V1, p, "new")]) for p in cp.PLANTED_NEW]
    t = cp.case_targets(new)
    assert t["aa_false"] is False and t["coverage"] is False and t["no_opposite"] is True
    # no process resolves 1 %: not measured rather than met
    unresolved = {(*V1, 1.0, "new"): [(1.0, 2.0, "cant_tell", 3.0)] * 12}
    points = cp.point_rows(_result(unresolved))
    assert cp.case_targets([cp.point_summary(1.0, points[(*V1, 1.0, "new")])])["detect_one_pct"] is None


def test_render_puts_computed_targets_under_each_case_and_the_cli_renders_a_saved_result(tmp_path):
    result = _result(
        {
            (*V1, 0.0, "new"): [(0.0, 0.6, "same")] * 12,
            (*V1, 0.0, "old"): [(d, 0.1, "faster" if d < 0 else "slower") for d in (-3, 3) * 6],
        }
    )
    text = cp.render(result)
    section = text.split("### ")[1]
    assert section.startswith(cp.LABELS["vecload"]["N=1048576"])
    assert "| new | 0 % | 12 |" in section and "| old | 0 % | 12 |" in section and "| new | 1 % | 0 |" in section
    assert "12/12 (100%)" in section and "0/12 (0%)" in section
    assert "A/A (planted 0 %) false faster/slower ≤ 5%: met" in section
    assert "opposite classes (faster against slower) at any point: met" in section
    assert "MDE ≤ 1 %: not measured" in section
    assert text.count("### ") == 4
    path = tmp_path / "r.json"
    path.write_text(json.dumps(result))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--render", str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout == text


def test_a_result_of_another_version_is_refused(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"version": 99}))
    with pytest.raises(ValueError, match="version 99"):
        cp.load_result(path)
