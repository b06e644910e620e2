"""Every malformed plan exits 2 with one line naming the file and the field, and no traceback."""

from __future__ import annotations

import json
import re

import pytest
from plans import make_repo, plan_copy

from qualify.cli import main


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    captured = capsys.readouterr()
    return exc.value.code, captured.out, captured.err


def _set(path: str, value):
    def mutate(plan):
        node = plan
        keys = path.split("/")
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node[key]
        last = keys[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


def _twice(path: str):
    """The list's first entry declared again after it (the same name, the same everything)."""

    def mutate(plan):
        node = plan
        for key in path.split("/"):
            node = node[key]
        node.append(dict(node[0]))

    return mutate


def _drop(path: str):
    def mutate(plan):
        node = plan
        keys = path.split("/")
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node[key]
        del node[keys[-1]]

    return mutate


def _both(*mutations):
    def mutate(plan):
        for m in mutations:
            m(plan)

    return mutate


# (id, mutation of the valid plan, field path expected in the message, message fragment)
CASES = [
    ("missing-name", _drop("name"), "name", "required"),
    ("missing-budget", _drop("budget"), "budget", "required"),
    ("missing-arm-source", _drop("arms/base/source"), "arms.base.source", "required"),
    ("unknown-top-key", _set("colour", "blue"), "colour", "unknown field"),
    ("unknown-buffer-key", _set("workload/buffers/0/stride", 4), "workload.buffers[0].stride", "unknown field"),
    ("wrong-type-trials", _set("schedule/trials", "two"), "schedule.trials", "integer"),
    ("boolean-as-integer", _set("schedule/trials", True), "schedule.trials", "integer"),
    ("graph-timing", _set("schedule/timing", "graph"), "schedule.timing", "blocking-kernel"),
    ("wrong-type-cases", _set("workload/cases", {"N": 1}), "workload.cases", "list"),
    ("wrong-schema-version", _set("schema_version", 2), "schema_version", "1"),
    ("zero-samples", _set("schedule/samples_per_block", 0), "schedule.samples_per_block", "greater"),
    ("negative-trials", _set("budget/max_trials", -1), "budget.max_trials", "greater"),
    ("zero-size", _set("workload/buffers/0/shape", ["N - 1024"]), "workload.buffers[0].shape[0]", "at least 1"),
    ("negative-size", _set("workload/buffers/2/shape", ["N - 2 * N"]), "workload.buffers[2].shape[0]", "at least 1"),
    (
        "unknown-name-in-expr",
        _set("workload/launch/grid", ["cdiv(M, THREADS)"]),
        "workload.launch.grid[0]",
        "unknown name 'M'",
    ),
    (
        "division-by-zero",
        _set("workload/launch/block", ["THREADS // (VEC - VEC)"]),
        "workload.launch.block[0]",
        "division by zero",
    ),
    (
        "code-injection",
        _set("workload/launch/shared_bytes", "__import__('os').system('true')"),
        "workload.launch.shared_bytes",
        "unknown function",
    ),
    (
        "attribute-injection",
        _set("workload/buffers/0/shape", ["N.__class__"]),
        "workload.buffers[0].shape[0]",
        "Attribute",
    ),
    (
        "path-outside-repo",
        _set("arms/base/source", "../../../../etc/hostname"),
        "arms.base.source",
        "outside the repository",
    ),
    ("missing-source", _set("arms/candidate/source", "../../kernels/nope.cu"), "arms.candidate.source", "no such file"),
    (
        "kernel-not-in-source",
        _set("arms/candidate/kernel", "axpy_wide<4>"),
        "arms.candidate.kernel",
        "no __global__ function 'axpy_wide'",
    ),
    ("bad-kernel-name", _set("arms/base/kernel", "axpy<1>; system()"), "arms.base.kernel", "pattern"),
    (
        "unsupported-arch",
        _set("hardware/architectures", ["sm_90", "sm_95"]),
        "hardware.architectures",
        "unsupported architecture 'sm_95'",
    ),
    (
        "gate-undeclared-case",
        _set("acceptance/gates/0", {"name": "g", "cases": ["N=99"], "min_speedup_pct": 1}),
        "acceptance.gates[0].cases[0]",
        "undeclared case 'N=99'",
    ),
    (
        "gate-selects-nothing",
        _set("acceptance/gates/0/where", "N > 10 ** 9"),
        "acceptance.gates[0].where",
        "selects no case",
    ),
    (
        "sanitizer-undeclared-case",
        _set("acceptance/sanitizer/0/cases", ["N=5"]),
        "acceptance.sanitizer[0].cases[0]",
        "undeclared case",
    ),
    ("budget-below-one-block", _set("budget/max_samples", 9), "budget.max_samples", "smaller than one ABBA block"),
    ("budget-below-schedule", _set("budget/max_samples", 39), "budget.max_samples", "needs 40 samples"),
    ("trials-over-budget", _set("schedule/trials", 3), "schedule.trials", "exceed budget.max_trials"),
    (
        "unknown-buffer-arg",
        _set("workload/launch/args/0/name", "z"),
        "workload.launch.args[0].name",
        "unknown buffer 'z'",
    ),
    ("unknown-arm-kind", _set("arms/base/kind", "rust"), "arms.base", "kind"),
    ("unknown-dtype", _set("workload/buffers/0/dtype", "f8"), "workload.buffers[0].dtype", "f8"),
    ("input-without-init", _drop("workload/buffers/0/init"), "workload.buffers[0]", "needs init"),
    ("duplicate-buffer", _set("workload/buffers/1/name", "x"), "workload.buffers[1].name", "declared twice"),
    ("duplicate-gate", _twice("acceptance/gates"), "acceptance.gates[1].name", "gate 'faster' is declared twice"),
    ("duplicate-control", _twice("controls/negative"), "controls.negative[1].name", "control 'flip' is declared twice"),
    ("block-too-large", _set("workload/params/THREADS", 2048), "workload.launch.block", "exceed 1024"),
    ("absurd-allocation", _set("workload/buffers/2/shape", ["N", "N", "N"]), "workload.buffers[2].shape", "exceeds"),
    ("overflow", _set("workload/buffers/2/shape", ["N ** 64"]), "workload.buffers[2].shape[0]", "exceeds"),
    (
        "scalar-out-of-range",
        _set("workload/launch/args/4", {"kind": "i32", "value": "2 ** 40"}),
        "workload.launch.args[4].value",
        "does not fit i32",
    ),
    ("control-on-output", _set("controls/negative/0/buffer", "out"), "controls.negative[0].buffer", "not an input"),
    ("noise-without-target", _set("stop", {"rule": "noise"}), "stop", "target_ci_pct"),
    ("params-clash", _set("workload/params/N", 3), "workload.cases", "also set"),
    ("arch-option-smuggled", _set("arms/base/options", ["-arch=sm_80"]), "arms.base.options[0]", "architectures"),
    ("no-output-buffer", _set("workload/buffers/2/role", "scratch"), "workload.buffers", "no buffer has role 'output'"),
    ("device-spec-empty", _set("hardware/devices", [{}]), "hardware.devices[0]", "name pattern"),
    (
        "bytes-with-bound",
        _set("acceptance/fidelity", {"mode": "bytes", "bound": 1}),
        "acceptance.fidelity",
        "takes no bound",
    ),
    (
        "golden-outside",
        _set("acceptance/fidelity", {"mode": "abs", "bound": 0.1, "against": "golden", "golden": "/etc/passwd"}),
        "acceptance.fidelity.golden",
        "outside the repository",
    ),
]


@pytest.mark.parametrize("mutate, field, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_plan_exits_2_naming_field(tmp_path, capsys, mutate, field, fragment):
    plan = plan_copy()
    mutate(plan)
    path = make_repo(tmp_path, plan)
    code, out, err = run_cli(["plan", "check", "--no-compile", str(path)], capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    errors = [line for line in lines if line.startswith("qualify: error: ")]
    assert "Traceback" not in err
    assert errors[0].startswith(f"qualify: error: {path}: {field}: "), errors[0]
    assert fragment in errors[0], errors[0]
    # one mistake, one error line (a renamed buffer is also an unknown one where it is passed)
    assert len(errors) == (2 if field == "workload.buffers[1].name" else 1), err
    if len(lines) > len(errors):  # a summary when there are several errors or stages not checked
        assert re.fullmatch(
            rf"qualify: {len(errors)} errors? in \d stages? \(.+\)(; \d stages? not checked)?", lines[-1]
        )


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("", "empty file"),
        ("   \n", "empty file"),
        ("{", "invalid JSON at line 1"),
        ('{"name": "x",}', "invalid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ("null", "expected a JSON object"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
    ids=["empty", "blank", "truncated", "trailing-comma", "array", "null", "deep"],
)
def test_unparseable_plan_exits_2(tmp_path, capsys, content, fragment):
    path = make_repo(tmp_path)
    path.write_text(content)
    code, _, err = run_cli(["plan", "check", str(path)], capsys)
    assert code == 2
    assert err.count("qualify: error:") == 1 and "Traceback" not in err
    assert str(path) in err and fragment in err


def test_missing_plan_file(tmp_path, capsys):
    code, _, err = run_cli(["plan", "check", str(tmp_path / "none.json")], capsys)
    assert code == 2 and "none.json: no such file" in err


def test_binary_plan_file(tmp_path, capsys):
    path = make_repo(tmp_path)
    path.write_bytes(b"\xff\xfe\x00garbage")
    code, _, err = run_cli(["plan", "check", str(path)], capsys)
    assert code == 2 and "not UTF-8" in err


def test_at_least_25_distinct_malformed_plans():
    assert len({c[0] for c in CASES}) == len(CASES) >= 25


def test_the_unmutated_plan_is_valid(tmp_path, capsys):
    """Guards the table above: each case fails because of its mutation, not the base plan."""
    path = make_repo(tmp_path)
    code, out, err = run_cli(["plan", "check", "--no-compile", str(path)], capsys)
    assert code == 0, err
    assert "digest" in out


def test_usage_error_exits_2(capsys):
    code, _, err = run_cli(["plan", "check"], capsys)
    assert code == 2 and "Missing argument" in err


def test_plan_json_roundtrip_through_file(tmp_path):
    from qualify.plan.load import load_plan

    path = make_repo(tmp_path)
    loaded = load_plan(path)
    again = make_repo(tmp_path / "again", json.loads(loaded.plan.model_dump_json()))
    assert load_plan(again).plan == loaded.plan
