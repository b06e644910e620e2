"""qualify history: records read from a folder of artifacts or from git, where each record's
commit comes from, one measurement never counted twice, bad input refused in one line, and the
page written whole, never through a link."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from history_records import N_RECORDS, STEP_AT, STEP_CASE, planted_values, record_json, revision_of, write_artifacts

from qualify.cli import main
from qualify.commands.history import HistoryInputError, from_artifacts, from_git, history_page, write_page
from qualify.io import LinkRefused, UnreadableFile


def _run(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_a_planted_step_is_flagged_at_its_record_and_flat_cases_are_not(tmp_path):
    write_artifacts(tmp_path / "a", planted_values())
    history, page = history_page(artifacts=tmp_path / "a")
    assert history.protocol == "vecload" and len(history.records) == N_RECORDS
    flagged = {c.case: [cp.index for cp in c.changes.points] for c in history.cases}
    assert flagged.pop(STEP_CASE) == [STEP_AT]
    assert flagged and all(found == [] for found in flagged.values())
    step = next(c for c in history.cases if c.case == STEP_CASE)
    assert step.changes.points[0].after - step.changes.points[0].before == pytest.approx(4.0, abs=0.6)
    assert page.count('class="change"') == 1 and f'class="change" data-index="{STEP_AT}"' in page
    # each point's MDE is the record's own, shown beside its interval
    assert step.points[0].mde_pct is not None
    assert f'<td class="num">{step.points[0].mde_pct:.2f} %</td>' in page


def test_records_are_ordered_by_their_first_trial_not_by_folder_name(tmp_path):
    folder = tmp_path / "a"
    for name, index in (("zz-first", 0), ("aa-second", 1), ("mm-third", 2)):
        (folder / name).mkdir(parents=True)
        data = record_json(index, dict.fromkeys(planted_values(1), -2.0))
        (folder / name / "results.json").write_text(json.dumps(data))
    _, records, notes = from_artifacts(folder)
    assert [Path(info.source).parent.name for info, _ in records] == ["zz-first", "aa-second", "mm-third"]
    assert [info.commit_source for info, _ in records] == ["record"] * 3
    assert records[0][0].commit == revision_of(0) and notes == []


def test_a_record_without_a_revision_takes_the_manifests_and_says_so(tmp_path):
    folder = tmp_path / "a"
    write_artifacts(folder, planted_values(3), revision=None)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"records": {"run-001/vecload": {"commit": "abcdef1", "message": "fix: tile"}}}))
    _, records, _ = from_artifacts(folder, manifest=manifest)
    sources = [(info.commit, info.commit_source, info.message) for info, _ in records]
    assert sources[1] == ("abcdef1", "manifest", "fix: tile")
    # tmp_path is no git repository: the others have no commit, and the page says unknown
    assert sources[0] == (None, "unknown", "") and sources[2][1] == "unknown"


def test_a_manifest_that_contradicts_the_record_is_refused_naming_its_field(tmp_path, capsys):
    folder = tmp_path / "a"
    write_artifacts(folder, planted_values(2))
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"records": {"run-000/vecload": {"commit": "deadbeef"}}}))
    code, _, err = _run(["history", "--artifacts", str(folder), "--manifest", str(manifest), "-o", "x.html"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert 'manifest.json: records["run-000/vecload"].commit: commit deadbeef disagrees' in err


@pytest.mark.parametrize(
    "manifest, field",
    [
        ({"records": {"run-000/vecload": {"commit": "XYZ"}}}, 'records["run-000/vecload"].commit'),
        ({"records": {"nowhere": {"commit": "abcdef1"}}}, "records.nowhere"),
        ({"records": {"run-000/vecload": {"commit": "abcdef1", "extra": 1}}}, 'records["run-000/vecload"]'),
        ({"runs": {}}, "records"),
    ],
)
def test_bad_manifests_are_refused_naming_the_field(tmp_path, manifest, field):
    write_artifacts(tmp_path / "a", planted_values(2), revision=None)
    (tmp_path / "m.json").write_text(json.dumps(manifest))
    with pytest.raises(HistoryInputError) as exc:
        from_artifacts(tmp_path / "a", manifest=tmp_path / "m.json")
    assert exc.value.field == field and exc.value.file.endswith("m.json")


def test_a_copied_record_is_one_measurement(tmp_path):
    folder = tmp_path / "a"
    write_artifacts(folder, planted_values(3))
    (folder / "copy").mkdir()
    (folder / "copy" / "results.json").write_bytes((folder / "run-001" / "vecload" / "results.json").read_bytes())
    _, records, notes = from_artifacts(folder)
    assert len(records) == 3 and len(notes) == 1 and "the same trials as" in notes[0]


def test_a_malformed_record_is_one_line_naming_file_and_field(tmp_path, capsys):
    folder = tmp_path / "a"
    write_artifacts(folder, planted_values(2))
    path = folder / "run-001" / "vecload" / "results.json"
    data = json.loads(path.read_text())
    next(iter(data["pooled"].values()))[STEP_CASE]["ratio"] = "fast"
    path.write_text(json.dumps(data))
    code, _, err = _run(["history", "--artifacts", str(folder), "-o", str(tmp_path / "p.html")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "run-001/vecload/results.json" in err and f"{STEP_CASE}" in err and ".ratio" in err
    assert not (tmp_path / "p.html").exists()


@pytest.mark.parametrize("text", ["{", '{"results_version": 1, "results_version": 1}', "[]", '{"results_version": 9}'])
def test_unreadable_records_are_refused(tmp_path, text):
    (tmp_path / "a" / "r").mkdir(parents=True)
    (tmp_path / "a" / "r" / "results.json").write_text(text)
    with pytest.raises(HistoryInputError) as exc:
        from_artifacts(tmp_path / "a")
    assert exc.value.file.endswith("results.json")


def test_several_protocols_need_one_named(tmp_path, capsys):
    folder = tmp_path / "a"
    write_artifacts(folder / "x", planted_values(2))
    write_artifacts(folder / "y", planted_values(2), plan_name="softmax")
    code, _, err = _run(["history", "--artifacts", str(folder), "-o", str(tmp_path / "p.html")], capsys)
    assert code == 2 and "--protocol" in err and "softmax, vecload" in err
    code, out, _ = _run(
        ["history", "--artifacts", str(folder), "--protocol", "softmax", "-o", str(tmp_path / "p.html")], capsys
    )
    assert code == 0 and "history of softmax: 2 records" in out


def test_an_empty_folder_and_a_missing_one_are_refused(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    for folder in ("empty", "missing"):
        code, _, err = _run(["history", "--artifacts", str(tmp_path / folder), "-o", "p.html"], capsys)
        assert code == 2 and "--artifacts" in err
    code, _, err = _run(["history", "-o", "p.html"], capsys)
    assert code == 2 and "exactly one of --artifacts DIR and --git RECORD" in err


def test_a_link_out_of_the_artifacts_folder_is_not_followed(tmp_path):
    outside = tmp_path / "outside"
    write_artifacts(outside, planted_values(2))
    folder = tmp_path / "a"
    write_artifacts(folder, planted_values(2))
    (folder / "sneaky").mkdir()
    os.symlink(outside / "run-000" / "vecload" / "results.json", folder / "sneaky" / "results.json")
    with pytest.raises(UnreadableFile) as exc:
        from_artifacts(folder)
    assert "outside" in exc.value.message and exc.value.file.endswith("sneaky/results.json")


def test_the_page_is_never_written_through_a_link(tmp_path, capsys):
    write_artifacts(tmp_path / "a", planted_values(2))
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "out").mkdir()
    os.symlink(victim, tmp_path / "out" / "page.html")
    with pytest.raises(LinkRefused):
        write_page("<html></html>", tmp_path / "out" / "page.html")
    code, _, err = _run(
        ["history", "--artifacts", str(tmp_path / "a"), "-o", str(tmp_path / "out" / "page.html")], capsys
    )
    assert code == 2 and "symbolic link" in err
    assert victim.read_text() == "keep me"


def test_the_page_is_written_whole(tmp_path, capsys):
    write_artifacts(tmp_path / "a", planted_values())
    out = tmp_path / "site" / "history.html"
    code, stdout, _ = _run(["history", "--artifacts", str(tmp_path / "a"), "-o", str(out)], capsys)
    assert code == 0 and "1 with change points" in stdout
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert not [p for p in out.parent.iterdir() if p.name != "history.html"]  # no temporary left


# ---- git ----------------------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_DATE": "2026-11-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-11-01T00:00:00Z"}
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True)
    return done.stdout


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    _git(repo, "config", "commit.gpgsign", "false")
    return repo


def _commit_record(repo: Path, data: dict | None, message: str) -> None:
    path = repo / "records" / "vecload" / "results.json"
    if data is None:
        path.unlink()
        _git(repo, "rm", "-q", "--cached", "records/vecload/results.json")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1))
        _git(repo, "add", "records/vecload/results.json")
    _git(repo, "commit", "-q", "--allow-empty", "-m", message)


def test_git_history_reads_every_version_oldest_first_and_counts_a_rerender_once(tmp_path, monkeypatch):
    repo = _repo(tmp_path)
    series = planted_values(4)
    versions = [record_json(i, {c: v[i] for c, v in series.items()}) for i in range(4)]
    _commit_record(repo, versions[0], "first")
    _commit_record(repo, versions[1], "second")
    rerendered = dict(versions[1], verdict=dict(versions[1]["verdict"], reasons=["re-rendered"]))
    _commit_record(repo, rerendered, "re-render only")
    _commit_record(repo, None, "remove the record")
    _commit_record(repo, versions[2], "third")
    _commit_record(repo, versions[3], "fourth")
    monkeypatch.chdir(repo)
    name, records, notes = from_git(Path("records/vecload"))
    assert name == "vecload"
    assert [info.message for info, _ in records] == ["first", "second", "third", "fourth"]
    assert all(info.commit_source == "git" and len(info.commit) == 40 for info, _ in records)
    assert records[0][0].measured == revision_of(0)  # what the trials state, beside the commit that landed it
    assert len(notes) == 1 and "the same trials as" in notes[0]


def test_git_history_outside_a_repository_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "records" / "vecload").mkdir(parents=True)
    code, _, err = _run(["history", "--git", "records/vecload", "-o", "p.html"], capsys)
    assert code == 2 and "--git" in err and "not inside a git repository" in err


def test_git_history_of_a_path_never_committed_is_refused(tmp_path, capsys, monkeypatch):
    repo = _repo(tmp_path)
    _commit_record(repo, record_json(0, dict.fromkeys(planted_values(1), -1.0)), "first")
    monkeypatch.chdir(repo)
    code, _, err = _run(["history", "--git", "records/softmax", "-o", "p.html"], capsys)
    assert code == 2 and "no commit holds this record's results.json" in err


def test_artifacts_inside_a_repository_take_the_commit_that_added_them(tmp_path):
    repo = _repo(tmp_path)
    write_artifacts(repo / "artifacts", planted_values(2), revision=None)
    _git(repo, "add", "artifacts")
    _git(repo, "commit", "-q", "-m", "nightly <b>artifacts</b>")
    head = _git(repo, "rev-parse", "HEAD").strip()
    _, records, _ = from_artifacts(repo / "artifacts")
    assert [(i.commit, i.commit_source, i.message) for i, _ in records] == [
        (head, "git", "nightly <b>artifacts</b>")
    ] * 2


def test_without_git_on_the_path_git_history_exits_6(tmp_path, capsys, monkeypatch):
    repo = _repo(tmp_path)
    _commit_record(repo, record_json(0, dict.fromkeys(planted_values(1), -1.0)), "first")
    monkeypatch.chdir(repo)
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools-here"))
    code, _, err = _run(["history", "--git", "records/vecload", "-o", "p.html"], capsys)
    assert code == 6 and "git not found on PATH" in err


def test_artifacts_need_no_git_when_git_is_missing(tmp_path, monkeypatch):
    write_artifacts(tmp_path / "a", planted_values(2), revision=None)
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools-here"))
    _, records, _ = from_artifacts(tmp_path / "a")
    assert [i.commit_source for i, _ in records] == ["unknown", "unknown"]


@pytest.mark.parametrize("value", [0.0, -1.0])
@pytest.mark.parametrize("where", ["pooled", "trial"])
def test_a_ratio_that_is_no_positive_number_is_refused_naming_it(tmp_path, value, where):
    write_artifacts(tmp_path / "a", planted_values(2))
    path = tmp_path / "a" / "run-000" / "vecload" / "results.json"
    data = json.loads(path.read_text())
    if where == "pooled":
        device = next(iter(data["pooled"]))  # the committed record's device, whichever H200 it was
        data["pooled"][device][STEP_CASE]["ci_low"] = value
        field = f'pooled["{device}"]["{STEP_CASE}"].ci_low'
    else:
        data["trials"][1]["cases"][0]["stats"]["ratio"] = value
        field = "trials[1].cases[0].stats.ratio"
    path.write_text(json.dumps(data))
    with pytest.raises(HistoryInputError) as exc:
        from_artifacts(tmp_path / "a")
    assert exc.value.field == field and "not a positive ratio" in exc.value.message
