"""benchmarks/python-arms/bench.py's pure half on the CPU: coverage, the change, the table and the
derived plan (which must still be a valid plan with the protocol's arms, cases and bound)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from qualify.plan.load import validate_plan

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("pyarms_bench", ROOT / "benchmarks" / "python-arms" / "bench.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_coverage_counts_the_runs_whose_interval_holds_the_mean_of_log_ratios():
    intervals = [(0.90, 0.86, 0.92), (0.92, 0.91, 0.93), (0.80, 0.79, 0.81)]
    mean_pct, held, n = bench.coverage(intervals)
    expected = math.exp(sum(math.log(r) for r, _, _ in intervals) / 3)
    assert mean_pct == pytest.approx((expected - 1) * 100) and n == 3
    assert held == pytest.approx(1 / 3)  # only the first interval holds 0.873...


def test_a_run_without_an_interval_does_not_cover():
    _, held, _ = bench.coverage([(1.0, None, None), (1.0, 0.99, 1.01)])
    assert held == 0.5


def test_the_table_states_changes_and_marks_missing_measures():
    text = bench.table("COLS=4096", [("qualify", 100.0, 90.0), ("ncu", None, None)], ["a note"])
    assert "| qualify | 100.00 | 90.00 | -10.00 |" in text and "| ncu | n/a | n/a | n/a |" in text
    assert text.rstrip().endswith("- a note")


@pytest.mark.parametrize("graph", [False, True])
def test_the_derived_plan_is_the_protocols_pair_with_a_smaller_schedule(graph, tmp_path):
    protocol = json.loads(bench.PROTOCOL.read_text())
    plan = bench.derived_plan(protocol, graph)
    validate_plan(plan, tmp_path / "plan.json")
    assert plan["workload"] == protocol["workload"]
    assert plan["acceptance"]["fidelity"] == protocol["acceptance"]["fidelity"]
    assert [a["callable"] for a in plan["arms"].values()] == [a["callable"] for a in protocol["arms"].values()]
    assert all(a["graph"] is graph for a in plan["arms"].values())
    assert plan["schedule"]["trials"] == bench.TRIALS and plan["acceptance"]["sanitizer"] == []


def test_per_case_reads_a_records_results_from_complete_trials_only():
    def trial(status, base_ns, cand_ns, null):
        timing = {"base": {"median_ns": base_ns}, "candidate": {"median_ns": cand_ns}}
        python = {s: {"null_call_ns": null, "call_ns": 2 * null} for s in ("base", "candidate")}
        return {"status": status, "cases": [{"case": "COLS=4096", "timing": timing}], "python": python}

    results = {
        "pooled": {"NVIDIA H200": {"COLS=4096": {"ratio": 0.9, "ci_low": 0.88, "ci_high": 0.92}}},
        "trials": [
            trial("complete", 100_000, 90_000, 500),
            trial("failed", 1, 1, 1),
            trial("complete", 110_000, 99_000, 700),
        ],
    }
    (case,) = bench.per_case(results).values()
    assert case["interval"] == (0.9, 0.88, 0.92)
    assert case["us"] == {"base": 105.0, "candidate": 94.5}
    assert case["host"]["base"] == [(500, 1000), (700, 1400)]
