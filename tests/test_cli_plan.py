"""`qualify plan check` / `schema` on the committed protocols, without a GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qualify.cli import SCHEMA_PATH, main
from qualify.plan.model import Plan
from qualify.plan.schema import plan_json_schema

ROOT = Path(__file__).resolve().parents[1]
PROTOCOLS = sorted(ROOT.glob("protocols/*/plan.json"))


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_checked_in_schema_is_current():
    """Fails when the models change without `qualify plan schema -o qualify/schemas/plan.schema.json`."""
    assert json.loads(SCHEMA_PATH.read_text()) == plan_json_schema()


def test_schema_command_writes_the_schema(tmp_path, capsys):
    target = tmp_path / "s.json"
    code, _, _ = run_cli(["plan", "schema", "-o", str(target)], capsys)
    assert code == 0
    assert json.loads(target.read_text())["title"] == "Plan"


def test_schema_round_trip(tmp_path):
    from plans import make_repo

    from qualify.plan.load import load_plan

    loaded = load_plan(make_repo(tmp_path))
    dumped = loaded.plan.model_dump(mode="json")
    assert Plan.model_validate(dumped) == loaded.plan
    assert Plan.model_validate_json(json.dumps(dumped)).model_dump(mode="json") == dumped


def test_protocols_exist():
    assert PROTOCOLS, "protocols/ holds no plan"


@pytest.mark.slow
@pytest.mark.parametrize("plan", PROTOCOLS, ids=[p.parent.name for p in PROTOCOLS])
def test_protocol_passes_plan_check_for_every_architecture(plan, capsys):
    code, out, err = run_cli(["plan", "check", str(plan)], capsys)
    assert code == 0, err
    data = json.loads(plan.read_text())
    if all(data["arms"][side]["kind"] in ("library", "python") for side in ("base", "candidate")):
        # built elsewhere (nvcc), or compiled by a Python arm's JIT on the GPU: nothing to compile here
        assert "digest" in out and "frozen  yes" in out
        return
    loaded_archs = data["hardware"]["architectures"]
    if any(arch.endswith("a") for arch in loaded_archs):  # arch-specific code runs on its own target only
        assert all(arch in out for arch in loaded_archs)
        assert "digest" in out and "every launch fits" in out
        return
    for arch in ("sm_89", "sm_90", "sm_120"):
        assert arch in loaded_archs
        assert arch in out
    assert "digest" in out and "every launch fits" in out


def test_arch_not_in_plan_is_refused(capsys):
    code, _, err = run_cli(["plan", "check", "--arch", "sm_80", str(PROTOCOLS[0])], capsys)
    assert code == 2 and "hardware.architectures" in err


def test_launch_that_does_not_fit_exits_4(tmp_path, capsys):
    from plans import make_repo, plan_copy

    plan = plan_copy()
    plan["workload"]["launch"]["shared_bytes"] = "200 * 1024"
    plan["hardware"]["architectures"] = ["sm_89", "sm_90"]
    code, out, _ = run_cli(["plan", "check", str(make_repo(tmp_path, plan))], capsys)
    assert code == 4
    assert "SOME LAUNCHES DO NOT FIT" in out
    assert out.count("NOT") == 3  # the verdict, and the base and candidate rows of sm_89 (99 KiB)


def test_version(capsys):
    code, out, _ = run_cli(["--version"], capsys)
    assert code == 0 and "qualify" in out


def _property_names(schema: dict) -> set[str]:
    names: set[str] = set()
    for definition in [schema, *schema.get("$defs", {}).values()]:
        names |= set(definition.get("properties", {}))
    return names


def test_every_plan_field_is_documented():
    doc = (ROOT / "docs" / "plan.md").read_text()
    import re

    missing = sorted(n for n in _property_names(plan_json_schema()) if not re.search(rf"[`.\"]{n}\b", doc))
    assert not missing, f"docs/plan.md does not mention: {missing}"
