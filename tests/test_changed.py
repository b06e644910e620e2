"""`qualify changed`: the protocols a diff touches, from plans, locks, includes and declared sources."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from plans import HEADER, KERNEL, make_repo, plan_copy

from qualify.cli import main
from qualify.commands.changed import ChangedReport, changed_paths, touched_protocols
from qualify.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "qualify" / "schemas" / "changed.schema.json"  # published for machines reading --json

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def names(touched) -> list[str]:
    return [t.name for t in touched]


def second_protocol(root: Path) -> None:
    """protocols/other uses kernels/other.cu only, so a change to the tiny plan's files leaves it alone."""
    (root / "kernels" / "other.cu").write_text(KERNEL.replace('#include "common.cuh"\n', HEADER))
    plan = plan_copy()
    plan["name"] = "other"
    for side in ("base", "candidate"):
        plan["arms"][side]["source"] = "../../kernels/other.cu"
    folder = root / "protocols" / "other"
    folder.mkdir(parents=True)
    (folder / "plan.json").write_text(json.dumps(plan))


@pytest.fixture
def repo(tmp_path) -> Path:
    make_repo(tmp_path, freeze=True)
    second_protocol(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    "path, expected",
    [
        ("protocols/tiny/plan.json", ["tiny"]),
        ("protocols/tiny/plan.lock.json", ["tiny"]),
        ("kernels/k.cu", ["tiny"]),
        ("kernels/common.cuh", ["tiny"]),  # a local header the kernel includes
        ("./kernels/common.cuh", ["tiny"]),
        ("kernels/other.cu", ["other"]),
        ("README.md", []),
        ("kernels/common.cuh.bak", []),
        ("protocols/tiny/notes.md", []),
    ],
)
def test_a_path_touches_the_protocols_that_use_it(repo, path, expected):
    assert names(touched_protocols(repo, [path])) == expected


def test_reasons_list_every_changed_path_that_touches(repo):
    (touched,) = touched_protocols(repo, ["kernels/common.cuh", "kernels/k.cu", "docs/x.md"])
    assert touched.reasons == ["kernels/common.cuh", "kernels/k.cu"]
    assert touched.plan == "protocols/tiny/plan.json"
    assert touched.problem is None


def test_a_header_included_after_freezing_touches_the_protocol(repo):
    """Not in the lock yet, but the plan uses it now: exactly the change a reviewer must see qualified."""
    (repo / "kernels" / "extra.cuh").write_text("// new\n")
    source = repo / "kernels" / "k.cu"
    source.write_text('#include "extra.cuh"\n' + source.read_text())
    assert names(touched_protocols(repo, ["kernels/extra.cuh"])) == ["tiny"]


def test_a_file_dropped_from_the_plan_still_touches_it_through_the_lock(repo):
    source = repo / "kernels" / "k.cu"
    source.write_text(source.read_text().replace('#include "common.cuh"\n', HEADER))
    assert names(touched_protocols(repo, ["kernels/common.cuh"])) == ["tiny"]


def test_a_plan_broken_by_the_change_is_listed_with_its_problem(repo):
    (repo / "protocols" / "tiny" / "plan.json").write_text("{ not json")
    (touched,) = touched_protocols(repo, ["protocols/tiny/plan.json"])
    assert touched.name == "tiny"
    assert touched.problem and "plan.json" in touched.problem
    # its frozen files still count, from the lock alone
    assert names(touched_protocols(repo, ["kernels/k.cu"])) == ["tiny"]


def test_declared_sources_cover_a_folder_and_nothing_beside_it(repo):
    extra = {"other": ["lib/attention/"]}
    assert names(touched_protocols(repo, ["lib/attention/a.cu"], extra)) == ["other"]
    assert names(touched_protocols(repo, ["lib/attention"], extra)) == ["other"]
    assert names(touched_protocols(repo, ["lib/attention_v2/a.cu"], extra)) == []


def test_declared_sources_of_an_unknown_protocol_are_refused(repo):
    with pytest.raises(UsageError, match="no protocol named 'nope'"):
        touched_protocols(repo, ["x"], {"nope": ["x"]})


def test_the_repository_protocols(tmp_path):
    """On this repository: the vecload kernel touches vecload only; the attention kernel touches
    the kernel-arm protocol, and the entry-point protocol only through its declared sources."""
    assert names(touched_protocols(ROOT, ["kernels/vecload/vecload.cu"])) == ["vecload"]
    assert names(touched_protocols(ROOT, ["kernels/attention/attention.cu"])) == ["attention-wide"]
    extra = {"attention-wide-entry": ["kernels/attention/"]}
    assert names(touched_protocols(ROOT, ["kernels/attention/Makefile"], extra)) == ["attention-wide-entry"]


# -- git ------------------------------------------------------------------------------------


def git(root: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "HOME": str(root),
        "PATH": "/usr/bin:/bin:/usr/local/bin",
    }
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, env=env, check=True)
    return done.stdout


@pytest.fixture
def git_repo(repo) -> Path:
    shutil.rmtree(repo / ".git")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    git(repo, "checkout", "-qb", "change")
    return repo


@needs_git
def test_changed_paths_is_the_pull_request_diff(git_repo):
    (git_repo / "kernels" / "common.cuh").write_text(HEADER + "// tuned\n")
    git(git_repo, "commit", "-qam", "tune")
    git(git_repo, "checkout", "-q", "main")
    (git_repo / "README.md").write_text("moved on\n")
    git(git_repo, "add", "README.md")
    git(git_repo, "commit", "-qm", "unrelated change on main")
    git(git_repo, "checkout", "-q", "change")
    # base...head: from the merge base, so main's later commit is not part of the change
    assert changed_paths(git_repo, "main") == ["kernels/common.cuh"]


@needs_git
def test_a_rename_counts_as_both_paths(git_repo):
    git(git_repo, "mv", "kernels/other.cu", "kernels/renamed.cu")
    git(git_repo, "commit", "-qm", "rename")
    assert changed_paths(git_repo, "main") == ["kernels/other.cu", "kernels/renamed.cu"]


def run_cli(argv, capsys, cwd: Path, monkeypatch):
    monkeypatch.chdir(cwd)
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


@needs_git
def test_cli_json_follows_its_schema(git_repo, capsys, monkeypatch):
    (git_repo / "kernels" / "k.cu").write_text(KERNEL + "// faster\n")
    git(git_repo, "commit", "-qam", "faster")
    code, out, _ = run_cli(["changed", "--base", "main", "--json"], capsys, git_repo, monkeypatch)
    assert code == 0
    document = json.loads(out)
    import jsonschema  # here, not at the top: a GPU host running only `pytest -m gpu` may lack it

    jsonschema.validate(document, json.loads(SCHEMA.read_text()))
    assert document["changed_version"] == 1
    assert [p["plan"] for p in document["protocols"]] == ["protocols/tiny/plan.json"]


@needs_git
def test_cli_lists_plan_paths_one_per_line(git_repo, capsys, monkeypatch):
    code, out, _ = run_cli(
        ["changed", "--path", "kernels/other.cu", "--path", "kernels/k.cu"], capsys, git_repo, monkeypatch
    )
    assert (code, out) == (0, "protocols/other/plan.json\nprotocols/tiny/plan.json\n")


def test_cli_says_when_no_protocol_is_touched(git_repo, capsys, monkeypatch):
    code, out, err = run_cli(["changed", "--path", "docs/unrelated.md"], capsys, git_repo, monkeypatch)
    assert (code, out) == (0, "")
    assert err == "qualify: no protocol is touched by the 1 changed path(s)\n"


@needs_git
@pytest.mark.parametrize(
    "argv, message",
    [
        (["changed", "--base", "no-such-branch"], "--base: git cannot diff no-such-branch...HEAD"),
        (["changed"], "--base: say what changed: --base REV (the revision a pull request starts from"),
        (["changed", "--base", "main", "--path", "x"], "--base and --path do not combine"),
        (["changed", "--path", "x", "--sources", "tiny"], "--sources: expected NAME=PATH"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(git_repo, capsys, monkeypatch, argv, message):
    code, out, err = run_cli(argv, capsys, git_repo, monkeypatch)
    assert code == 2
    assert err.count("\n") == 1 and message in err
    assert "Traceback" not in err


def test_the_published_json_schema_is_current():
    """Fails when the model changes without regenerating the file:
    python -c 'import json; from qualify.commands.changed import ChangedReport; print(json.dumps(ChangedReport.model_json_schema(), indent=2))' \\
      > qualify/schemas/changed.schema.json"""
    assert json.loads(SCHEMA.read_text()) == ChangedReport.model_json_schema()


# -- hostile input (issue 25 item 8) ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["plan.json", "plan.lock.json"])
def test_a_symlinked_plan_or_lock_is_listed_with_the_link_as_its_problem(repo, tmp_path_factory, name):
    """A plan or lock linked to a file outside the repository ended `changed` in exit 70 and listed
    nothing; it is named by its own path, not followed, and the protocol stays listed."""
    link = repo / "protocols" / "tiny" / name
    outside = tmp_path_factory.mktemp("elsewhere") / name
    outside.write_bytes(link.read_bytes())
    link.unlink()
    link.symlink_to(outside)
    (touched,) = touched_protocols(repo, [f"protocols/tiny/{name}"])
    assert touched.name == "tiny" and touched.reasons == [f"protocols/tiny/{name}"]
    assert touched.problem and "symbolic link" in touched.problem and str(outside) not in touched.problem


@needs_git
@pytest.mark.parametrize("option", ["--base", "--head"])
def test_a_revision_that_reads_as_an_option_is_refused_and_git_writes_nothing(
    git_repo, tmp_path_factory, capsys, monkeypatch, option
):
    target = tmp_path_factory.mktemp("out") / "written"
    argv = ["changed", "--base", "main"] if option == "--head" else ["changed"]
    code, _, err = run_cli([*argv, f"{option}=--output={target}"], capsys, git_repo, monkeypatch)
    assert code == 2 and err.count("\n") == 1 and f"{option}:" in err
    assert not target.exists()
