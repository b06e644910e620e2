"""Provenance of a trial: git_dirty counts the plan's untracked, edited and ignored files."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from plans import HEADER, make_repo


@pytest.fixture
def git_repo(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("needs git")
    root = tmp_path / "g"
    path = make_repo(root)
    shutil.rmtree(root / ".git")

    def git(*args):
        subprocess.run(
            ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args],
            check=True,
            capture_output=True,
        )

    git("init", "-q")
    return root, path, git


def test_an_uncommitted_plan_is_dirty(git_repo):
    from qualify.run.provenance import plan_files_dirty

    root, path, git = git_repo
    git("add", "kernels")
    git("commit", "-qm", "kernels only")
    assert plan_files_dirty(root, [path, root / "kernels" / "k.cu"]) is True


def test_a_committed_plan_is_clean_and_an_edit_makes_it_dirty(git_repo):
    from qualify.run.provenance import plan_files_dirty

    root, path, git = git_repo
    git("add", "-A")
    git("commit", "-qm", "all")
    files = [path, root / "kernels" / "k.cu", root / "kernels" / "common.cuh"]
    assert plan_files_dirty(root, files) is False
    (root / "kernels" / "common.cuh").write_text(HEADER + "// edit\n")
    assert plan_files_dirty(root, files) is True


def test_an_ignored_header_is_dirty(git_repo):
    from qualify.run.provenance import plan_files_dirty

    root, path, git = git_repo
    (root / ".gitignore").write_text("*.cuh\n")
    git("add", "-A")
    git("commit", "-qm", "header ignored")
    assert plan_files_dirty(root, [path, root / "kernels" / "common.cuh"]) is True
