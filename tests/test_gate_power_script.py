"""benchmarks/gate/power.py's pieces that need no GPU: the planted change, the narrowed plan, the counts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "gate"))

import power  # noqa: E402

from qualify.plan.model import Plan  # noqa: E402


def test_the_plant_is_a_define_at_the_top_of_the_kernel_file():
    source = (ROOT / "kernels" / "vecload" / "vecload.cu").read_text()
    planted = power.plant(source, 321)
    assert planted.startswith("#define QUALIFY_SPIN_CYCLES 321\n") and planted.endswith(source)
    assert "#ifdef QUALIFY_SPIN_CYCLES" in source  # the hook the define switches on
    with pytest.raises(ValueError):
        power.plant(source, 0)


def test_the_narrowed_plan_is_a_valid_plan_with_the_cases_asked_for():
    plan = json.loads((ROOT / "protocols" / "vecload" / "plan.json").read_text())
    small = power.narrowed(plan, ["N=1048576", "N=16777216"], trials=3, blocks=8)
    Plan.model_validate(small)
    assert small["workload"]["cases"] == [{"N": 1048576}, {"N": 16777216}]
    assert small["schedule"]["trials"] == 3 and small["budget"]["max_trials"] >= 3
    assert plan["workload"]["cases"] != small["workload"]["cases"]  # the original untouched
    with pytest.raises(SystemExit):
        power.narrowed(plan, ["N=7"], None, None)


def test_the_narrowed_plan_gives_the_gate_room_to_add_trials_never_less_than_its_schedule():
    plan = json.loads((ROOT / "protocols" / "vecload" / "plan.json").read_text())
    roomy = power.narrowed(plan, None, trials=2, blocks=None, max_trials=6)
    Plan.model_validate(roomy)
    assert (roomy["schedule"]["trials"], roomy["budget"]["max_trials"]) == (2, 6)
    assert power.narrowed(plan, None, trials=4, blocks=None, max_trials=3)["budget"]["max_trials"] == 4
    assert power.narrowed(plan, None, None, None)["budget"]["max_trials"] == plan["budget"]["max_trials"]


def test_counts_per_arm_and_case_over_runs():
    def doc(*classes):
        cases = [{"case": f"N={i}", "gate_class": c} for i, c in enumerate(classes)]
        return {"protocols": [{"name": "p", "arms": [{"side": "base", "cases": cases}]}]}

    found = power.counts([doc("slower", "unchanged"), doc("slower", "cant_tell")])
    assert found[("p", "base", "N=0")]["slower"] == 2
    assert found[("p", "base", "N=1")] == {"unchanged": 1, "cant_tell": 1}


def test_an_arm_named_is_the_only_one_calibrated_and_counted():
    doc = {
        "protocols": [
            {
                "name": "vecload",
                "arms": [
                    {"side": "base", "cases": [{"case": "N=1", "gate_class": "slower", "delta_pct": 2.1}]},
                    {"side": "candidate", "cases": [{"case": "N=1", "gate_class": "faster", "delta_pct": -1.7}]},
                ],
            }
        ]
    }
    assert power.mean_delta(doc, "base") == 2.1
    assert power.mean_delta(doc) == pytest.approx(0.2)
    assert list(power.counts([doc], "base")) == [("vecload", "base", "N=1")]
    assert len(power.counts([doc])) == 2


def test_a_skipped_noop_is_not_run_not_met_and_power_needs_nine_of_ten():
    from collections import Counter

    nine = {("vecload", "base", "N=1"): Counter(slower=9, cant_tell=1)}
    seven = {("vecload", "base", "N=1"): Counter(slower=7, cant_tell=3)}
    quiet = {("vecload", "base", "N=1"): Counter(unchanged=10)}
    loud = {("vecload", "base", "N=1"): Counter(unchanged=9, faster=1)}
    assert power.targets({}, nine, 10, skip_noop=True) == (None, True)
    assert power.targets({}, seven, 10, skip_noop=True) == (None, False)
    assert power.targets(quiet, nine, 10, skip_noop=False) == (True, True)
    assert power.targets(loud, nine, 10, skip_noop=False) == (False, True)
    assert power.targets({}, {}, 10, skip_noop=False) == (False, False)  # nothing measured meets nothing


def test_the_scratch_repository_is_the_working_tree_not_head(tmp_path, monkeypatch):
    """The gate runs the scratch repository's own qualify: it must be these files, whatever HEAD
    says (on the lent GPU machine `.git` can lag the files it receives)."""
    import subprocess

    src = tmp_path / "src"
    (src / "qualify").mkdir(parents=True)
    (src / "qualify" / "x.py").write_text("working tree\n")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref: refs/heads/stale\n")
    (src / "records" / "r").mkdir(parents=True)
    monkeypatch.setattr(power, "ROOT", src)
    clone = tmp_path / "clone"
    power.scratch_repository(clone)
    assert (clone / "qualify" / "x.py").read_text() == "working tree\n"
    assert not (clone / "records").exists()
    files = subprocess.run(["git", "-C", str(clone), "ls-files"], capture_output=True, text=True, check=True)
    assert files.stdout.split() == ["qualify/x.py"]


def test_an_output_folder_with_anything_in_it_is_refused_before_any_gate_runs(tmp_path):
    (tmp_path / "slow-0").mkdir()
    with pytest.raises(SystemExit, match="is not empty; give a fresh --out"):
        power.main(["--out", str(tmp_path), "--skip-noop", "--spin", "1"])
