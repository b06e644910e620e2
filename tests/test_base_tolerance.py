"""Mode 'tolerance' against the base arm, on the fake device: the same entries as against a golden
(atol + rtol, per-case and per-output rules, exact selectors), with the base arm's outputs as the
expected values; a record made this way renders and passes report --check."""

from __future__ import annotations

import fakes
import numpy as np
import pytest
from plans import make_repo, plan_copy

from qualify.plan.load import load_plan
from qualify.run.engine import RunOptions, TrialRunner
from qualify.run.fake import FakeDevice, FakeTelemetry


def axpy_reordered(memory, args, kernel):
    """The candidate's sums in another order: every output one f32 step away from the base's."""
    fakes.axpy(memory, args, kernel)
    if kernel.label == "candidate":
        _, _, out, _, _ = fakes._arrays(memory, args)
        out[:] = np.nextafter(out, np.float32(np.inf))


def base_plan(fidelity: dict) -> dict:
    plan = plan_copy()
    plan["schedule"] = {"warmup": 2, "samples_per_block": 3, "blocks": 2, "trials": 1, "cache": "cold"}
    plan["budget"] = {"max_trials": 2, "max_samples": 12, "max_wall_seconds": 60}
    plan["acceptance"]["sanitizer"] = []
    plan["stop"] = {"rule": "fixed", "fail_fast": ["fault"]}
    plan["acceptance"]["fidelity"] = fidelity
    plan["controls"]["negative"] = [
        {"kind": "input", "name": "bump_x", "buffer": "x", "mutation": {"op": "set", "index": 0, "value": 1000.0}}
    ]
    return plan


def trial(tmp_path, fidelity: dict, kernel=axpy_reordered):
    loaded = load_plan(make_repo(tmp_path, base_plan(fidelity), freeze=True))
    device = FakeDevice({"axpy": kernel}, durations={"base": 10_000.0, "candidate": 8_000.0})
    return TrialRunner(loaded, device, FakeTelemetry(), RunOptions(record_dir=tmp_path / "record")).run()


def fidelity_failures(t) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in t.failures:
        if f.kind == "fidelity":
            out.setdefault(f.case, []).append(f.message)
    return out


def test_atol_plus_rtol_against_base_accepts_a_reordered_sum(tmp_path):
    t = trial(tmp_path, {"mode": "tolerance", "atol": 1e-6, "rtol": 1e-6})
    assert t.status == "complete" and fidelity_failures(t) == {}
    counts = {c.case: c.tolerance.counts for c in t.cases}
    assert set(counts["N=1024"]) == {"candidate"}  # the base arm is the expectation, not a side
    out = counts["N=1024"]["candidate"][0]
    assert (out.identical, out.one_quantum, out.atol, out.rtol) == (0, 1024, 1e-6, 1e-6)
    # the control is judged by the same counts, and caught
    assert [(o.control, o.passed["out"], o.as_declared) for o in t.control_outcomes][0] == ("bump_x", False, True)


def test_a_zero_bound_against_base_fails_the_reordered_sum(tmp_path):
    t = trial(tmp_path, {"mode": "tolerance", "atol": 0.0, "rtol": 0.0})
    failures = fidelity_failures(t)
    assert failures["N=1024"][0].startswith("out: 1024 of 1024 differ from the base arm, worst bound fraction")


@pytest.mark.parametrize(
    "entries",
    [
        {"tolerances": [{"cases": ["N=1024"], "bit_exact": True}]},
        {"tolerances": [{"where": "N < 2048", "outputs": ["out"], "rtol": 0.0, "atol": 0.0}]},
        {"exact": [{"cases": ["N=1024"], "outputs": ["out"]}]},
    ],
)
def test_per_case_entries_against_base(tmp_path, entries):
    t = trial(tmp_path, {"mode": "tolerance", "atol": 1e-6, "rtol": 1e-6, **entries})
    failures = fidelity_failures(t)
    assert set(failures) == {"N=1024"}, failures
    bounds = {
        c.case: (c.tolerance.counts["candidate"][0].atol, c.tolerance.counts["candidate"][0].rtol) for c in t.cases
    }
    assert bounds == {"N=1024": (0.0, 0.0), "N=4096": (1e-6, 1e-6)}


def test_atol_in_quanta_against_base_is_derived_from_the_base_outputs(tmp_path):
    t = trial(
        tmp_path, {"mode": "tolerance", "atol": 0.0, "rtol": 0.0, "tolerances": [{"rtol": 0.0, "atol_quanta": 4}]}
    )
    assert fidelity_failures(t) == {}
    assert all(c.tolerance.counts["candidate"][0].atol > 0 for c in t.cases)


def test_a_base_tolerance_record_renders_and_checks(tmp_path):
    from qualify.commands.pipeline import run_plan
    from qualify.record.check import check_record

    fidelity = {
        "mode": "tolerance",
        "atol": 1e-6,
        "rtol": 1e-6,
        "tolerances": [{"cases": ["N=4096"], "rtol": 2e-6, "atol": 0.0}],
    }
    loaded = load_plan(make_repo(tmp_path, base_plan(fidelity), freeze=True))
    device = FakeDevice({"axpy": axpy_reordered}, durations={"base": 10_000.0, "candidate": 8_000.0})
    record = tmp_path / "records" / "tiny"
    run_plan(loaded, record, lambda: device, lambda uuid: FakeTelemetry())
    readme = (record / "README.md").read_text()
    assert "outputs within their case's bound of the base arm's outputs" in readme
    assert "Trial 1, the candidate against the base arm:" in readme
    assert "| N=4096 | `out` | \\|err\\| ≤ 0 + 2e-06·\\|expected\\| |" in readme
    assert check_record(record) == []
