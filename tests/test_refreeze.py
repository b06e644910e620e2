"""`qualify plan freeze --replace`: allowed before any trial ran under the old lock, refused after."""

from __future__ import annotations

import json

import pytest
from plans import make_repo, plan_copy

from qualify.cli import main
from qualify.plan.digest import lock_path
from qualify.results.store import Record


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def frozen_then_changed(tmp_path):
    path = make_repo(tmp_path, freeze=True)
    old = json.loads(lock_path(path).read_text())["digest"]
    plan = plan_copy()
    plan["acceptance"]["gates"][0]["min_speedup_pct"] = 2.0
    path.write_text(json.dumps(plan, indent=2))
    return path, old


def test_a_changed_plan_is_refused_with_the_remedy(tmp_path, capsys):
    path, _ = frozen_then_changed(tmp_path)
    for argv in (["plan", "freeze", str(path)], ["plan", "check", "--no-compile", str(path)]):
        code, _, err = run_cli(argv, capsys)
        assert code == 3
        assert "changed after freezing" in err and "plan freeze --replace" in err and "new name" in err
        assert err.count("qualify: error:") == 1


def test_replace_before_any_trial(tmp_path, capsys):
    path, old = frozen_then_changed(tmp_path)
    (tmp_path / "records" / "tiny").mkdir(parents=True)  # an empty record folder holds no evidence
    code, out, _ = run_cli(["plan", "freeze", "--replace", str(path)], capsys)
    assert code == 0 and "re-frozen" in out and old[:16] in out
    new = json.loads(lock_path(path).read_text())["digest"]
    assert new != old
    code, out, _ = run_cli(["plan", "check", "--no-compile", str(path)], capsys)
    assert code == 0 and new in out
    code, out, _ = run_cli(["plan", "freeze", "--replace", str(path)], capsys)
    assert code == 0 and "already frozen, unchanged" in out


def test_replace_without_a_lock_freezes(tmp_path, capsys):
    path = make_repo(tmp_path)
    code, out, _ = run_cli(["plan", "freeze", "--replace", str(path)], capsys)
    assert code == 0 and out.startswith("frozen") and lock_path(path).exists()


def started(folder, digest, index=1):
    Record(folder).append({"event": "trial_started", "trial": index, "digest": digest, "device_uuid": "GPU-x"})


def test_refused_once_a_trial_ran_under_the_old_digest(tmp_path, capsys):
    path, old = frozen_then_changed(tmp_path)
    before = lock_path(path).read_bytes()
    started(tmp_path / "records" / "tiny", old)
    code, _, err = run_cli(["plan", "freeze", "--replace", str(path)], capsys)
    assert code == 3
    assert "records/tiny holds trial 1 run under digest" in err and "new name" in err
    assert "protocols/tiny/plan.lock.json" in err and str(tmp_path) not in err  # relative to the repository
    assert lock_path(path).read_bytes() == before


def test_trials_under_another_digest_do_not_block(tmp_path, capsys):
    path, old = frozen_then_changed(tmp_path)
    started(tmp_path / "records" / "tiny", "0" * 64)
    code, _, _ = run_cli(["plan", "freeze", "--replace", str(path)], capsys)
    assert code == 0


def test_a_trial_file_counts_without_its_ledger(tmp_path, capsys):
    path, old = frozen_then_changed(tmp_path)
    trials = tmp_path / "records" / "renamed" / "trials"
    trials.mkdir(parents=True)
    (trials / "trial-2.json").write_text(json.dumps({"index": 2, "plan_digest": old}))
    code, _, err = run_cli(["plan", "freeze", "--replace", str(path)], capsys)
    assert code == 3 and "records/renamed holds trial 2" in err


def test_a_record_folder_elsewhere_is_searched_when_named(tmp_path, capsys):
    path, old = frozen_then_changed(tmp_path / "repo")
    elsewhere = tmp_path / "elsewhere"
    started(elsewhere, old)
    code, _, _ = run_cli(["plan", "freeze", "--replace", "--record", str(elsewhere), str(path)], capsys)
    assert code == 3


def test_paths_in_errors_are_relative_to_the_working_folder(tmp_path, capsys, monkeypatch):
    path, _ = frozen_then_changed(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["plan", "freeze", str(path)], capsys)  # an absolute path given
    assert code == 3 and err.startswith("qualify: error: protocols/tiny/plan.json: changed after freezing")


def test_run_on_a_changed_plan_names_the_remedy(tmp_path):
    from qualify.commands.pipeline import load_frozen
    from qualify.errors import FrozenInputChanged

    path, _ = frozen_then_changed(tmp_path)
    with pytest.raises(FrozenInputChanged, match="plan freeze --replace"):
        load_frozen(path)


def test_a_record_bound_to_the_old_lock_without_trials_is_named(tmp_path, capsys):
    path, _ = frozen_then_changed(tmp_path)
    folder = tmp_path / "records" / "tiny"
    folder.mkdir(parents=True)
    (folder / "plan.lock.json").write_bytes(lock_path(path).read_bytes())  # what bind() copies
    code, _, err = run_cli(["plan", "freeze", "--replace", str(path)], capsys)
    assert code == 3 and "records/tiny holds a copy of the old lock but no trial" in err
