"""The engine with a golden, on the fake device: golden inputs reach the kernel, both arms are
counted against the golden, controls are judged against their declarations, the gate is calibrated."""

from __future__ import annotations

import fakes
import numpy as np
from plans import HEADER, KERNEL, make_repo, plan_copy

from qualify.plan.golden import tensor_name, write_golden
from qualify.plan.load import load_plan
from qualify.plan.model import Plan
from qualify.plan.resolve import resolve_cases
from qualify.run.engine import RunOptions, TrialRunner
from qualify.run.fake import FakeDevice, FakeTelemetry
from qualify.run.inputs import generate

A = np.float32(0.5)


def golden_plan() -> dict:
    plan = plan_copy()
    plan["schedule"] = {"warmup": 2, "samples_per_block": 3, "blocks": 2, "trials": 2, "cache": "cold"}
    plan["budget"] = {"max_trials": 3, "max_samples": 12, "max_wall_seconds": 60}
    plan["acceptance"]["sanitizer"] = []
    plan["stop"] = {"rule": "fixed", "fail_fast": ["fault"]}  # a fidelity miss keeps its counts in the trial
    plan["workload"]["buffers"][1]["init"] = {"kind": "golden"}
    plan["acceptance"]["fidelity"] = {
        "mode": "tolerance",
        "atol": 0.0,
        "rtol": 1e-6,
        "against": "golden",
        "golden": "golden.safetensors",
        "golden_script": "make_golden.py",
        "calibration": {"ceiling_quanta": 64, "elements": [1, 4], "seed": 5},
    }
    plan["controls"]["negative"] = [
        # y[0] + 1000 moves out[0] far outside the bound: must fail everywhere
        {"kind": "input", "name": "bump_y", "buffer": "y", "mutation": {"op": "set", "index": 0, "value": 1000.0}},
        # scaling by one changes nothing: declared to pass
        {
            "kind": "input",
            "name": "noop",
            "buffer": "x",
            "mutation": {"op": "scale", "index": 0, "value": 1.0},
            "expect": [{"outcome": "pass"}],
        },
        # declared to pass but it cannot: a control that misbehaves must fail the verdict
        {
            "kind": "input",
            "name": "misdeclared",
            "buffer": "x",
            "mutation": {"op": "set", "index": 1, "value": 99.0},
            "cases": ["N=1024"],
            "expect": [{"outcome": "pass"}],
        },
    ]
    return plan


def frozen_golden_repo(tmp_path, plan_json=None):
    plan_json = plan_json or golden_plan()
    path = make_repo(
        tmp_path,
        plan_json,
        files={
            "kernels/k.cu": KERNEL,
            "kernels/common.cuh": HEADER,
            "protocols/tiny/make_golden.py": "#\n",
            "protocols/tiny/golden.safetensors": "",
        },
    )
    plan = Plan.model_validate(plan_json)
    x_spec = plan.workload.buffers[0]
    tensors = {}
    for case in resolve_cases(plan):
        n = case.values["N"]
        x = generate(plan.seeds, case.id, x_spec, case.arms["candidate"].buffer("x")).view(np.float32)
        y = np.linspace(-2, 2, n, dtype=np.float32)
        tensors[tensor_name(case.id, "y")] = ("f32", y)
        tensors[tensor_name(case.id, "out")] = ("f32", A * x + y)
    write_golden(path.parent / "golden.safetensors", plan, tensors, "protocols/tiny/make_golden.py")
    from qualify.plan.digest import freeze

    loaded = load_plan(path)
    freeze(loaded.path, loaded.freeze)
    return load_plan(path)


def run(loaded, kernel, tmp_path):
    device = FakeDevice({"axpy": kernel}, durations={"base": 10_000.0, "candidate": 8_000.0})
    return TrialRunner(loaded, device, FakeTelemetry(), RunOptions(record_dir=tmp_path / "record")).run()


def test_golden_trial_counts_controls_and_calibration(tmp_path):
    loaded = frozen_golden_repo(tmp_path)
    trial = run(loaded, fakes.axpy, tmp_path)
    assert trial.status == "complete"
    by_case = {c.case: c for c in trial.cases}
    counts = by_case["N=4096"].tolerance.counts["candidate"][0]
    assert (counts.output, counts.identical, counts.elements, counts.worst_bound_fraction) == ("out", 4096, 4096, 0.0)
    resolution = by_case["N=1024"].tolerance.calibration[0]
    assert not resolution.vacuous and resolution.smallest_caught.quanta >= 4  # 2 f32 quanta < 1e-6 relative
    outcomes = {(o.control, o.case): o for o in trial.control_outcomes}
    assert outcomes[("bump_y", "N=1024")].as_declared and not outcomes[("bump_y", "N=1024")].passed["out"]
    assert outcomes[("noop", "N=4096")].as_declared and outcomes[("noop", "N=4096")].passed["out"]
    assert not outcomes[("misdeclared", "N=1024")].as_declared
    assert {(c.name, c.case): c.caught for c in trial.controls}[("misdeclared", "N=1024")] is False
    messages = [f.message for f in trial.failures if f.kind == "fidelity"]
    assert messages == [
        "negative control misdeclared is not as declared: out declared pass but failed "
        f"(worst bound fraction {outcomes[('misdeclared', 'N=1024')].worst_bound_fraction['out']:.3g})"
    ]


def test_candidate_outside_the_golden_is_a_fidelity_failure(tmp_path):
    loaded = frozen_golden_repo(tmp_path)
    trial = run(loaded, fakes.axpy_one_wrong, tmp_path)
    messages = [f.message for f in trial.failures if f.kind == "fidelity" and f.case == "N=1024"]
    assert "out: 1 of 1024 differ from the golden, worst bound fraction 1.05e+06 at index 512" in messages, messages


def test_record_tables_from_a_golden_trial(tmp_path):
    from qualify.plan.model import Mutation
    from qualify.render.tolerance_text import (
        controls_table,
        counts_table,
        fidelity_text,
        mutation_text,
        resolution_lines,
    )

    loaded = frozen_golden_repo(tmp_path)
    trial = run(loaded, fakes.axpy_one_wrong, tmp_path)
    table = counts_table(trial)
    assert table[0] == "| case | `out` |"
    assert table[2].startswith("| N=1024 | 1023/1024 bit-identical (1 over one, 1 over two, max abs 1")
    assert table[3].startswith("| N=4096 | 4095/4096 bit-identical (1 over one, 1 over two, max abs 1, max rel 1.9")
    assert (
        counts_table(run(loaded, fakes.axpy, tmp_path / "good"))[3] == "| N=4096 | 4096/4096 bit-identical (bound 0) |"
    )
    rows = controls_table(trial)
    noop = next(r for r in rows if r.startswith("| noop | N=1024 |"))
    assert noop.startswith("| noop | N=1024 | `out` | pass | fail |") and noop.endswith("| **no** |")
    assert rows[2].startswith("| bump_y | N=1024 | `out` | fail | fail |") and rows[2].endswith("| yes |")
    resolution = resolution_lines(trial)
    assert len(resolution) == 2 and resolution[0].startswith("- N=1024, `out`: caught from ")
    assert fidelity_text(loaded.plan.acceptance.fidelity) == (
        "outputs within |err| ≤ 0 + 1e-06·|expected| of the golden file `golden.safetensors` (written by `make_golden.py`)"
    )
    assert (
        mutation_text(Mutation(op="swap", index=0, other="S * D", length="S * D"))
        == "S * D elements at 0 exchanged with those at S * D"
    )


def test_per_case_tolerances_reach_the_counts_and_the_record(tmp_path):
    """A bit-exact rule for one case and a bound in quanta at the golden's RMS for the other: the
    trial's counts carry each case's own bound, and the record states it in words."""
    from types import SimpleNamespace

    from qualify.evaluate.headline import contract
    from qualify.evaluate.tolerance_gate import quantum_at_rms
    from qualify.plan.golden import load_golden
    from qualify.render.readme import fidelity_text
    from qualify.render.tolerance_text import bounds_table

    plan = golden_plan()
    plan["acceptance"]["fidelity"]["tolerances"] = [
        {"cases": ["N=1024"], "bit_exact": True},
        {"outputs": ["out"], "rtol": 0.0, "atol_quanta": 2},
    ]
    loaded = frozen_golden_repo(tmp_path, plan)
    trial = run(loaded, fakes.axpy_one_wrong, tmp_path)
    counts = {c.case: c.tolerance.counts["candidate"][0] for c in trial.cases}
    expected = load_golden(loaded.plan, loaded.path, loaded.files.root, loaded.cases).expected("N=4096", "out")
    assert (counts["N=1024"].atol, counts["N=1024"].rtol) == (0.0, 0.0)
    assert counts["N=4096"].atol == 2 * quantum_at_rms("f32", expected) and counts["N=4096"].rtol == 0.0
    table = bounds_table(loaded.plan, SimpleNamespace(trials=[trial]))
    assert table[2] == "| N=1024 | `out` | bit-exact |"
    assert table[3] == (
        f"| N=4096 | `out` | \\|err\\| ≤ 2 quanta of the output's dtype at the golden's RMS "
        f"({counts['N=4096'].atol:.3g}) + 0·\\|expected\\| |"
    )
    assert "the first rule that selects it: (1) N=1024, every output: bit-exact; (2) every case, out:" in fidelity_text(
        loaded.plan
    )
    assert contract(loaded.plan) == "within each case's bound (the plan's tolerances) of the golden file"


def test_a_record_with_per_case_tolerances_renders_and_checks(tmp_path):
    """The whole path on the fake device: run, record, README with each case's bound, report --check."""
    from qualify.commands.pipeline import run_plan
    from qualify.record.check import check_record

    plan = golden_plan()
    plan["acceptance"]["fidelity"]["tolerances"] = [
        {"cases": ["N=1024"], "bit_exact": True},
        {"rtol": 1e-6, "atol_quanta": 1},
    ]
    plan["controls"]["negative"] = plan["controls"]["negative"][:2]  # the two that behave as declared
    loaded = frozen_golden_repo(tmp_path, plan)
    device = FakeDevice({"axpy": fakes.axpy}, durations={"base": 10_000.0, "candidate": 8_000.0})
    record = tmp_path / "records" / "tiny"
    run_plan(loaded, record, lambda: device, lambda uuid: FakeTelemetry())
    readme = (record / "README.md").read_text()
    assert "Each case's bound, per output:" in readme
    assert "| N=1024 | `out` | bit-exact |" in readme
    assert "| N=4096 | `out` | \\|err\\| ≤ 1 quantum of the output's dtype at the golden's RMS (" in readme
    assert "| noop | input | N=1024 | as declared |" in readme
    assert check_record(record) == []
