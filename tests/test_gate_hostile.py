"""The gate reads trees a pull request names: links, `..`, `.git`, huge blobs and plans that point
outside are skipped or refused, and nothing is written or read outside the gate's private tree."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from test_gate import FakeRunner, _git, repo  # noqa: F401 - the fixture

from qualify.commands import gate_tree
from qualify.commands.gate import run_gate
from qualify.commands.gate_tree import materialize_revision, materialize_worktree, path_problem


def _head(root) -> str:
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def _listing(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


@pytest.mark.parametrize(
    "path",
    ["../x", "a/../../x", "/etc/passwd", ".git/config", "a/.GIT/hooks/x", "a//b", "./a", "a\\b", "a\nb", "", "a/."],
)
def test_unsafe_paths_are_named(path):
    assert path_problem(path) is not None


@pytest.mark.parametrize("path", ["kernels/k.cu", "a/b c/d.h", ".github/qualify-ci.json", "x..y"])
def test_plain_paths_pass(path):
    assert path_problem(path) is None


def test_links_in_the_base_are_skipped_never_created(repo, tmp_path):  # noqa: F811
    secret = tmp_path / "secret.txt"
    secret.write_text("outside")
    os.symlink(secret, repo / "kernels" / "abs.cuh")
    os.symlink("../../secret.txt", repo / "kernels" / "rel.cuh")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "links")
    found = materialize_revision(repo, _head(repo), tmp_path / "rev")
    skipped = {s.path: s.why for s in found.skipped}
    assert skipped == {"kernels/abs.cuh": "a symbolic link", "kernels/rel.cuh": "a symbolic link"}
    assert not any(p.is_symlink() for p in (tmp_path / "rev").rglob("*"))
    assert "kernels/k.cu" in found.files
    wt = materialize_worktree(repo, tmp_path / "now")
    assert {s.path for s in wt.skipped} == {"kernels/abs.cuh", "kernels/rel.cuh"}
    assert not any(p.is_symlink() for p in (tmp_path / "now").rglob("*"))


def test_a_crafted_tree_with_dotdot_and_dotgit_writes_nothing_outside(repo, tmp_path):  # noqa: F811
    blob = (
        subprocess.run(
            ["git", "-C", str(repo), "hash-object", "-w", "--stdin"], input=b"pwned\n", capture_output=True, check=True
        )
        .stdout.decode()
        .strip()
    )
    entries = b""
    for name in (b"..", b".git", b"ok.txt"):
        entries += b"100644 " + name + b"\0" + bytes.fromhex(blob)
    tree = (
        subprocess.run(
            ["git", "-C", str(repo), "hash-object", "-t", "tree", "-w", "--literally", "--stdin"],
            input=entries,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .strip()
    )
    commit = subprocess.run(
        ["git", "-C", str(repo), "commit-tree", tree, "-m", "hostile"], capture_output=True, check=True, text=True
    ).stdout.strip()
    dest = tmp_path / "deep" / "rev"
    found = materialize_revision(repo, commit, dest)
    assert sorted(s.path for s in found.skipped) == ["..", ".git"]
    assert _listing(dest) == ["ok.txt"]
    assert _listing(tmp_path / "deep") == ["rev", "rev/ok.txt"]


def test_huge_blobs_and_tree_caps_are_skipped(repo, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setattr(gate_tree, "MAX_BLOB_BYTES", 100)
    found = materialize_revision(repo, _head(repo), tmp_path / "rev")
    big = {s.path for s in found.skipped if "over 100" in s.why}
    assert "kernels/k.cu" in big and "kernels/k.cu" not in found.files
    assert all((tmp_path / "rev" / p).stat().st_size <= 100 for p in found.files)
    monkeypatch.setattr(gate_tree, "MAX_BLOB_BYTES", 1 << 20)
    monkeypatch.setattr(gate_tree, "MAX_TREE_FILES", 2)
    capped = materialize_revision(repo, _head(repo), tmp_path / "rev2")
    assert len(capped.files) == 2 and any("cap" in s.why for s in capped.skipped)


def test_a_base_plan_whose_source_is_a_link_cannot_be_gated_and_reads_nothing_outside(repo, tmp_path):  # noqa: F811
    secret = tmp_path / "secret.cu"
    secret.write_text("__global__ void axpy() {}\n")
    k = repo / "kernels" / "k.cu"
    text = k.read_text()
    k.unlink()
    os.symlink(secret, k)
    _git(repo, "commit", "-qam", "a link as the kernel")
    k.unlink()
    k.write_text(text)
    doc = run_gate(repo, "HEAD", tmp_path / "out", FakeRunner())
    [protocol] = doc.protocols
    assert protocol.status == "error" and "k.cu" in protocol.detail, protocol.detail
    assert any(s.path == "kernels/k.cu" and s.tree == "base" for s in doc.skipped)
    assert doc.exit_code != 0


def test_a_base_plan_pointing_outside_the_tree_is_refused(repo, tmp_path):  # noqa: F811
    path = repo / "protocols" / "tiny" / "plan.json"
    plan = json.loads(path.read_text())
    plan["arms"]["base"]["source"] = "../../../../../../../../etc/hostname"
    path.write_text(json.dumps(plan))
    _git(repo, "commit", "-qam", "hostile plan")
    _git(repo, "checkout", "-q", "HEAD~1", "--", "protocols/tiny/plan.json")
    doc = run_gate(repo, "HEAD", tmp_path / "out", FakeRunner())
    [protocol] = doc.protocols
    assert protocol.status == "error" and "outside the repository" in protocol.detail, protocol.detail
    assert doc.outcome == "incomplete" and doc.exit_code == 2


def test_hostile_labels_are_escaped_in_the_table(repo, tmp_path):  # noqa: F811
    from qualify.render.gate_table import gate_markdown
    from qualify.results.gate import GateDocument, GateProtocol

    doc = GateDocument(
        base_rev="main",
        base_commit="0" * 40,
        head_commit=None,
        dirty=False,
        outcome="incomplete",
        exit_code=7,
        summary="x",
        protocols=[GateProtocol(name="a|b", plan="p", reasons=[], status="error", detail="<img src=x>", arms=[])],
        skipped=[],
    )
    text = gate_markdown(doc)
    import re

    assert not re.search(r"(?<!\\)<img", text) and "a\\|b" in text


def test_library_builds_run_in_a_worktree_of_the_base_and_in_the_working_tree(repo, tmp_path):  # noqa: F811
    """The CI build command runs in both trees; the base's build reads the base's files."""
    import sys

    from qualify.commands.gate import build_libraries

    (repo / "lib.txt").write_text("base\n")
    _git(repo, "add", "lib.txt")
    _git(repo, "commit", "-qm", "lib")
    base = _head(repo)
    (repo / "lib.txt").write_text("now\n")
    script = "import shutil; shutil.copy('lib.txt', 'built-base.so'); shutil.copy('lib.txt', 'built-cand.so')"
    entry = {"build": [sys.executable, "-c", script], "base": "built-base.so", "candidate": "built-cand.so"}
    work = tmp_path / "work"
    work.mkdir()
    libs = build_libraries(repo, base, entry, work)
    assert libs["base"]["rev"].read_text() == "base\n" and libs["candidate"]["now"].read_text() == "now\n"
    assert (repo / "lib.txt").read_text() == "now\n"  # the working tree's files untouched
    from qualify.commands.gate_tree import git

    git(repo, "worktree", "remove", "--force", str(work / "rev-worktree"))
    assert str(work) not in git(repo, "worktree", "list").decode()


def test_a_build_command_that_is_not_a_list_is_refused(repo, tmp_path):  # noqa: F811
    from qualify.commands.gate import build_libraries
    from qualify.errors import UsageError

    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(UsageError, match="list of strings"):
        build_libraries(repo, _head(repo), {"build": "make && rm -rf /", "base": "a", "candidate": "b"}, work)
    assert not (work / "rev-worktree").exists()  # refused before any worktree was made
