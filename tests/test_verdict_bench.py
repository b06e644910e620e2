"""benchmarks/startup/verdict.py's pure half on the CPU: its Satterthwaite interval is qualify's
own pooled interval, the Knapp–Hartung one is what its docstring says, and coverage counts runs."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from qualify.evaluate.pooled import pool
from qualify.evaluate.stats import t_quantile
from qualify.results.base import CaseStats

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("verdict_bench", ROOT / "benchmarks" / "startup" / "verdict.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def moments(*triples):
    return [{"log_mean": m, "log_sd": s, "blocks": n} for m, s, n in triples]


def stats_of(m: dict) -> CaseStats:
    ratio = math.exp(m["log_mean"])
    return CaseStats(
        ratio=ratio,
        ci_low=ratio * 0.99,
        ci_high=ratio * 1.01,
        delta_pct=(ratio - 1) * 100,
        case_class="faster",
        reason="r",
        blocks=m["blocks"],
        log_mean=m["log_mean"],
        log_sd=m["log_sd"],
    )


@pytest.mark.parametrize(
    "triples",
    [
        ((-0.030, 0.004, 20), (-0.025, 0.005, 18)),  # trials apart: a between part
        ((-0.030, 0.010, 20), (-0.0301, 0.012, 20), (-0.029, 0.011, 9)),  # close: between floored at 0
    ],
)
def test_the_satterthwaite_interval_is_qualifys_pooled_interval(triples):
    ms = moments(*triples)
    pooled = pool([stats_of(m) for m in ms])
    ratio, lo, hi = bench.interval(ms, "satterthwaite")
    assert (ratio, lo, hi) == pytest.approx((pooled.ratio, pooled.ci_low, pooled.ci_high), rel=1e-12)


def test_knapp_hartung_uses_the_trial_means_spread_with_k_minus_one_df_floored_at_the_within_part():
    apart = moments((-0.030, 0.004, 20), (-0.020, 0.004, 20))
    ratio, lo, hi = bench.interval(apart, "knapp-hartung")
    spread = (0.005**2 + 0.005**2) / 1
    half = t_quantile(0.975, 1.0) * math.sqrt(spread / 2)
    assert (math.log(lo), math.log(hi)) == pytest.approx((-0.025 - half, -0.025 + half))
    close = moments((-0.030, 0.02, 20), (-0.030, 0.02, 20))  # no spread: the within part decides
    _, lo, hi = bench.interval(close, "knapp-hartung")
    assert math.log(hi) - (-0.030) == pytest.approx(t_quantile(0.975, 1.0) * math.sqrt(0.02**2 / 20 / 2))
    with pytest.raises(ValueError):
        bench.interval(close, "dersimonian")


def test_coverage_counts_runs_holding_the_mean_of_all_centres_using_the_first_k_trials():
    wide = moments((0.0, 0.05, 10), (0.001, 0.05, 10), (0.5, 0.05, 10))
    narrow = moments((0.02, 0.001, 10), (0.0201, 0.001, 10))
    held, n, centre, half = bench.coverage([wide, narrow], "satterthwaite", 2)
    centres = [bench.interval(r[:2], "satterthwaite")[0] for r in (wide, narrow)]
    assert n == 2 and centre == pytest.approx(100 * (math.exp(sum(map(math.log, centres)) / 2) - 1))
    assert held == 1  # the wide run holds the centre, the narrow one does not
    assert half > 0
    # a run with fewer trials than asked is left out, not counted as a miss
    assert bench.coverage([wide, narrow], "satterthwaite", 3)[:2] == (1, 1)


def test_the_table_compares_both_estimators_on_the_runs_and_survives_a_call_cut_short():
    run = {"ratio": 0.97, "ci_low": 0.96, "ci_high": 0.98, "case_class": "faster", "trials": 2, "wall_s": 5.0}
    doc = {
        "measured_at": "t",
        "device": {"name": "H200", "uuid": "GPU-0123456789ab"},
        "runs": [
            run | {"moments": moments((-0.03, 0.01, 20), (-0.031, 0.01, 20), (-0.029, 0.01, 20))},
            run | {"moments": moments((-0.032, 0.01, 20), (-0.03, 0.01, 20), (-0.03, 0.01, 20))},
        ],
    }
    text = "\n".join(bench.table(doc))
    for k in (2, 3):
        for method in ("satterthwaite", "knapp-hartung"):
            assert f"| {k} | {method} | " in text
    assert "no independent run finished" in "\n".join(bench.table({**doc, "runs": []}))


def test_nvbench_summary_reads_means_and_the_medians_of_its_raw_samples(tmp_path):
    import json
    import struct
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks" / "timer"))
    import margin

    def state(label: str, mean_s: float, samples: list[float], name: str) -> dict:
        (tmp_path / "nvbench.json-bin").mkdir(exist_ok=True)
        (tmp_path / "nvbench.json-bin" / name).write_bytes(struct.pack(f"<{len(samples)}f", *samples))
        return {
            "axis_values": [{"name": "arm", "type": "string", "value": label}],
            "summaries": [
                {"tag": "nv/cold/time/gpu/mean", "data": [{"name": "value", "value": str(mean_s)}]},
                {"tag": "nv/cold/sample_size", "data": [{"name": "value", "value": str(len(samples))}]},
                {
                    "tag": margin.SAMPLES_TAG,
                    "data": [
                        {"name": "filename", "value": f"nvbench.json-bin/{name}"},
                        {"name": "size", "value": str(len(samples))},
                    ],
                },
            ],
        }

    # the base arm's rare slow samples pull its mean up; its median stays put
    base = [5.0e-6] * 9 + [50.0e-6]
    cand = [4.9e-6] * 10
    doc = {
        "benchmarks": [
            {
                "states": [
                    state("N=1|base", sum(base) / len(base), base, "0.bin"),
                    state("N=1|candidate", sum(cand) / len(cand), cand, "1.bin"),
                ]
            }
        ]
    }
    (tmp_path / "nvbench.json").write_text(json.dumps(doc))
    got = margin.nvbench_summary(tmp_path / "nvbench.json")["N=1"]
    assert got["ratio"] == pytest.approx((4.9e-6) / (sum(base) / 10))
    assert got["ratio_median"] == pytest.approx(4.9 / 5.0, rel=1e-6)
    assert got["base"]["samples"] == 10
    (tmp_path / "nvbench.json-bin" / "1.bin").write_bytes(b"\0" * 12)  # a truncated sidecar
    with pytest.raises(RuntimeError, match="3 float32s|12 bytes"):
        margin.nvbench_summary(tmp_path / "nvbench.json")
