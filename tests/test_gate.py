"""`qualify gate` on real temporary git repositories and the fake device: the gate tests itself.

A noop gate (`--base HEAD`, a change touching only comments) is unchanged or identical machine code
in every case; a slowdown planted in the kernel file is called slower. The fake device's durations
come from the compiled code (`fake.text_bytes_ns`), so a planted slowdown is visible to it only
through the machine code it adds, as it would be on a GPU."""

from __future__ import annotations

import json
import subprocess

import fakes
import pytest
from plans import KERNEL, make_repo
from test_engine import small_plan

from qualify.cli import main
from qualify.commands.gate import GATE_JSON, GATE_MD, run_gate
from qualify.commands.pipeline import load_frozen, run_plan
from qualify.errors import ExitCode, UsageError
from qualify.record.evidence import ledger_problems
from qualify.results.gate import GateDocument
from qualify.results.store import Record
from qualify.run.fake import FakeDevice, FakeTelemetry, text_bytes_ns

# a slowdown planted in the kernel: redundant fences add instructions and change no output
PLANTED = KERNEL.replace(
    "for (int k = 0;",
    "for (int r = 0; r < 16; ++r) __threadfence_block();\n    for (int k = 0;",
)
assert PLANTED != KERNEL


def gate_plan() -> dict:
    plan = small_plan()
    plan["schedule"] = {"warmup": 1, "samples_per_block": 5, "blocks": 8, "trials": 2, "cache": "cold"}
    plan["budget"] = {"max_trials": 4, "max_samples": 400, "max_wall_seconds": 120}
    plan["acceptance"]["gates"] = []
    plan["controls"] = {"aa": False}
    return plan


def _git(root, *args):
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.email", "gate@example.invalid")
    _git(root, "config", "user.name", "gate")
    path = make_repo(root, gate_plan())
    with pytest.raises(SystemExit) as exc:
        main(["plan", "freeze", str(path)])
    assert exc.value.code == 0
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "base")
    return root


class FakeRunner:
    """The runner `qualify gate` hands each derived plan to, on the fake device; it keeps each
    device so a test can see which machine ran what."""

    def __init__(self, uuids=None):
        self.devices = []
        self.added = []  # each call's `added`: None for the planned trials, a reason for an added one
        self.uuids = list(uuids or [])

    def __call__(self, plan_path, record, libraries, added=None):
        loaded = load_frozen(plan_path, checked=False)
        device = FakeDevice({"axpy": fakes.axpy}, code_ns=text_bytes_ns(), seed=len(self.devices))
        if self.uuids:
            device.info = device.info.model_copy(update={"uuid": self.uuids.pop(0)})
        self.devices.append(device)
        self.added.append(added)
        return run_plan(loaded, record, lambda: device, lambda u: FakeTelemetry(), added=added).results


def _gate(repo, tmp_path, base="HEAD", runner=None, **kw) -> GateDocument:
    return run_gate(repo, base, tmp_path / "gate-out", runner or FakeRunner(), **kw)


def _classes(doc: GateDocument) -> list[str]:
    return [c.gate_class for p in doc.protocols for a in p.arms for c in a.cases]


def test_a_noop_gate_on_head_touches_nothing_and_passes(repo, tmp_path):
    doc = _gate(repo, tmp_path)
    assert doc.protocols == [] and doc.outcome == "pass" and doc.exit_code == 0
    assert json.loads((tmp_path / "gate-out" / GATE_JSON).read_text())["gate_version"] == 1


def test_a_noop_gate_named_protocol_is_identical_machine_code_with_no_timing(repo, tmp_path):
    runner = FakeRunner()
    doc = _gate(repo, tmp_path, runner=runner, protocols=("tiny",))
    assert _classes(doc) == ["identical_code"] * 4  # two arms × two cases
    assert all(not a.timed and a.record is None for p in doc.protocols for a in p.arms)
    assert runner.devices == []  # nothing was timed
    assert doc.exit_code == ExitCode.QUALIFIED


def test_a_comment_only_change_is_identical_code_and_times_unchanged(repo, tmp_path):
    (repo / "kernels" / "k.cu").write_text(
        "// only a comment changes\n" + KERNEL.replace("{\n", "{  /* and here */\n", 1)
    )
    doc = _gate(repo, tmp_path)
    assert [p.name for p in doc.protocols] == ["tiny"]
    assert doc.protocols[0].reasons == ["kernels/k.cu"]
    assert _classes(doc) == ["identical_code"] * 4
    timed = run_gate(repo, "HEAD", tmp_path / "timed", FakeRunner(), time_identical=True)
    assert _classes(timed) == ["unchanged"] * 4, [c.reason for p in timed.protocols for a in p.arms for c in a.cases]
    assert all(c.bytes == "identical" and c.trials == 2 for p in timed.protocols for a in p.arms for c in a.cases)
    assert timed.exit_code == ExitCode.QUALIFIED


def test_a_planted_slowdown_is_called_slower_and_fails_the_gate(repo, tmp_path):
    (repo / "kernels" / "k.cu").write_text(PLANTED)
    doc = _gate(repo, tmp_path)
    cases = [c for p in doc.protocols for a in p.arms for c in a.cases]
    assert [c.gate_class for c in cases] == ["slower"] * 4, [c.reason for c in cases]
    assert all(c.ci_low > 1.0 and c.bytes == "identical" for c in cases)
    assert all(a.code == "differs" and a.timed for p in doc.protocols for a in p.arms)
    assert doc.outcome == "fail" and doc.exit_code == ExitCode.NOT_QUALIFIED
    # each arm's record is a real record, linked from the table
    table = (tmp_path / "gate-out" / GATE_MD).read_text()
    for arm in doc.protocols[0].arms:
        assert (tmp_path / "gate-out" / arm.record / "results.json").is_file()
        assert f"]({arm.record})" in table
    assert table.count("**slower**") == 4


def test_a_speedup_is_faster(repo, tmp_path):
    (repo / "kernels" / "k.cu").write_text(PLANTED)
    _git(repo, "commit", "-qam", "slow")
    (repo / "kernels" / "k.cu").write_text(KERNEL)
    doc = _gate(repo, tmp_path)
    assert _classes(doc) == ["faster"] * 4
    assert doc.exit_code == ExitCode.QUALIFIED


def _change_outputs(repo, fidelity=None):
    """The working tree's arms built with the define under which the fake kernel moves the last
    output element by one ulp (fakes.axpy), and the plan's fidelity bound, refrozen."""
    path = repo / "protocols" / "tiny" / "plan.json"
    plan = json.loads(path.read_text())
    for side in ("base", "candidate"):
        plan["arms"][side]["defines"] = {"QUALIFY_CONTROL_OFF_BY_ONE": 1}
    if fidelity is not None:
        plan["acceptance"]["fidelity"] = fidelity
    path.write_text(json.dumps(plan))
    (repo / "protocols" / "tiny" / "plan.lock.json").unlink()
    with pytest.raises(SystemExit):
        main(["plan", "freeze", str(path)])


def test_outputs_beyond_the_bound_are_their_own_finding_and_fail(repo, tmp_path):
    _change_outputs(repo)  # the default bound: identical bytes
    doc = _gate(repo, tmp_path, time_identical=True)
    cases = [c for p in doc.protocols for a in p.arms for c in a.cases]
    assert {c.bytes for c in cases} == {"beyond_tolerance"}, [c.bytes_detail for c in cases]
    assert doc.outcome == "fail" and doc.exit_code == ExitCode.NOT_QUALIFIED


def test_outputs_within_the_bound_are_reported_and_pass(repo, tmp_path):
    _change_outputs(repo, {"mode": "ulp", "bound": 4, "against": "base"})
    doc = _gate(repo, tmp_path, time_identical=True)
    cases = [c for p in doc.protocols for a in p.arms for c in a.cases]
    assert {c.bytes for c in cases} == {"within_tolerance"}, [c.bytes_detail for c in cases]
    assert "1 of" in cases[0].bytes_detail
    assert doc.outcome == "pass"


def test_the_gate_never_mixes_machines(repo, tmp_path):
    """A record whose trials ran on two machines is not judged: before and after are compared
    only within one machine."""
    (repo / "kernels" / "k.cu").write_text(PLANTED)

    class TwoMachines(FakeRunner):
        def __call__(self, plan_path, record, libraries, added=None):
            loaded = load_frozen(plan_path, checked=False)
            for n, uuid in enumerate(
                ("GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-0000-0000-0000-000000000000")
            ):
                device = FakeDevice({"axpy": fakes.axpy}, code_ns=text_bytes_ns(), seed=n)
                device.info = device.info.model_copy(update={"uuid": uuid})
                outcome = run_plan(loaded, record, lambda d=device: d, lambda u: FakeTelemetry(), trials=1)
            return outcome.results

    doc = _gate(repo, tmp_path, runner=TwoMachines())
    arms = [a for p in doc.protocols for a in p.arms]
    assert all(a.error and "2 machines" in a.error and a.cases == [] for a in arms)
    assert doc.outcome == "incomplete" and doc.exit_code == ExitCode.INCOMPLETE


def test_one_machine_is_named_for_each_arm(repo, tmp_path):
    (repo / "kernels" / "k.cu").write_text(PLANTED)
    doc = _gate(repo, tmp_path)
    assert all(a.device and a.device.startswith("NVIDIA H200 (fake)") for p in doc.protocols for a in p.arms)


def test_the_gate_reads_the_base_from_git_and_leaves_the_working_tree_alone(repo, tmp_path):
    (repo / "kernels" / "k.cu").write_text(PLANTED)
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts}
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True).stdout
    _gate(repo, tmp_path)
    after = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert after == before
    assert (
        subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True).stdout
        == status
    )


def test_an_output_folder_that_is_not_fresh_is_refused(repo, tmp_path):
    out = tmp_path / "gate-out"
    out.mkdir()
    (out / "old").write_text("x")
    with pytest.raises(UsageError, match="fresh"):
        run_gate(repo, "HEAD", out, FakeRunner())


def test_a_base_that_is_no_commit_is_refused(repo, tmp_path):
    for rev in ("--output=/tmp/x", "no-such-branch", ""):
        with pytest.raises(UsageError):
            run_gate(repo, rev or "-", tmp_path / "o", FakeRunner())


def test_the_default_base_is_the_merge_base_with_main(repo, tmp_path):
    _git(repo, "checkout", "-q", "-b", "topic")
    (repo / "kernels" / "k.cu").write_text(PLANTED)
    _git(repo, "commit", "-qam", "slow")
    doc = run_gate(repo, None, tmp_path / "o", FakeRunner())
    main_sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "main"], capture_output=True, text=True).stdout
    assert doc.base_commit == main_sha.strip()
    assert _classes(doc) == ["slower"] * 4


def test_a_new_protocol_has_nothing_to_compare(repo, tmp_path):
    plan = gate_plan()
    plan["name"] = "other"
    folder = repo / "protocols" / "other"
    folder.mkdir()
    (folder / "plan.json").write_text(json.dumps(plan))
    doc = _gate(repo, tmp_path)
    assert [(p.name, p.status) for p in doc.protocols] == [("other", "new")]


def test_the_cli_writes_the_step_summary_and_exits_with_the_outcome(repo, tmp_path, monkeypatch, capsys):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.chdir(repo)
    with pytest.raises(SystemExit) as exc:
        main(["gate", "--base", "HEAD", "--out", str(tmp_path / "cli-out"), "--protocol", "tiny"])
    assert exc.value.code == 0, capsys.readouterr().err
    assert "identical machine code" in summary.read_text()
    assert "| tiny | base | N=1024 |" in summary.read_text()


def test_the_committed_schema_is_the_models(tmp_path):
    from pathlib import Path

    from qualify.commands.gate import gate_schema

    committed = json.loads((Path(__file__).parents[1] / "qualify" / "schemas" / "gate.schema.json").read_text())
    assert committed == gate_schema()
    assert committed["properties"]["gate_version"]["const"] == 1


def _underpowered_repo(repo, detect_pct):
    """The repository with the plan's gate policy asking to see `detect_pct`, committed and frozen."""
    path = repo / "protocols" / "tiny" / "plan.json"
    plan = json.loads(path.read_text())
    plan["gate"] = {"detect_pct": detect_pct}
    path.write_text(json.dumps(plan, indent=2))
    with pytest.raises(SystemExit) as exc:
        main(["plan", "freeze", "--replace", str(path)])
    assert exc.value.code == 0
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "a gate that must see more")


def test_an_underpowered_case_gets_trials_added_up_to_the_budget_each_saying_why(repo, tmp_path):
    """No fake interval resolves 0.0001 %: each arm's planned 2 trials, then one added at a time
    until budget.max_trials (4); every added trial is in the record, with its reason, and the
    record still passes its own checks."""
    _underpowered_repo(repo, 0.0001)
    loaded = load_frozen(repo / "protocols" / "tiny" / "plan.json")
    (repo / "kernels" / "k.cu").write_text(PLANTED)
    runner = FakeRunner()
    doc = _gate(repo, tmp_path, runner=runner)
    arms = [a for p in doc.protocols for a in p.arms]
    assert len(arms) == 2 and all(a.timed for a in arms)
    assert [a is None for a in runner.added] == [True, False, False] * 2
    assert all(r.startswith("added by qualify gate: after ") and "0.0001% the gate must see" for r in runner.added[1:3])
    assert runner.added[1].startswith("added by qualify gate: after 2 trial(s)")
    assert runner.added[2].startswith("added by qualify gate: after 3 trial(s)")
    table = (tmp_path / "gate-out" / GATE_MD).read_text()
    assert "Trials added beyond the plan's (each is in its record):" in table
    assert "- tiny (base arm), trial 3: added by qualify gate: after 2 trial(s), " in table
    for arm in arms:
        assert [line.split(":")[0] for line in arm.added_trials] == ["trial 3", "trial 4"]
        assert all(c.trials == 4 and c.underpowered for c in arm.cases)
        trials = sorted((tmp_path / "gate-out" / arm.record / "trials").glob("trial-*.json"))
        added = [json.loads(t.read_text()).get("added") for t in trials]
        assert [a is None for a in added] == [True, True, False, False]
        readme = (tmp_path / "gate-out" / arm.record / "README.md").read_text()
        assert "Trial 3 ran beyond the plan's 2 trials: added by qualify gate: after 2 trial(s)" in readme
        # the record's own trial rules (the derived plan has the working plan's schedule and budget)
        record = Record(tmp_path / "gate-out" / arm.record)
        events = [json.loads(line) for line in record.ledger_path.read_text().splitlines()]
        problems = [str(p) for p in ledger_problems(events, record.trials(), loaded.plan, loaded.lock or {})]
        assert not [p for p in problems if "trials" in p], problems


def test_cases_that_resolve_the_change_the_gate_must_see_get_no_added_trial(repo, tmp_path):
    (repo / "kernels" / "k.cu").write_text(PLANTED)
    runner = FakeRunner()
    doc = _gate(repo, tmp_path, runner=runner)
    assert runner.added == [None, None]  # one call per arm, the planned trials only
    assert all(a.added_trials == [] and all(c.trials == 2 for c in a.cases) for p in doc.protocols for a in p.arms)
