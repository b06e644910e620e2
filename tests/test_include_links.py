"""A link inside the repository that points outside it is refused by the include resolver (issue 36,
"untested, though it holds"): the name is spelled inside the repository, so only a check of the
resolved path catches it; a resolver that checked the lexical path would read the file outside."""

from __future__ import annotations

from pathlib import Path

import pytest
from plans import KERNEL, make_repo
from test_refused_inputs import refused

from qualify.build import includes
from qualify.errors import PlanError

SECRET = "the file outside\n"


@pytest.fixture
def layout(tmp_path) -> tuple[Path, Path]:
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    (repo / "kernels").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.h").write_text(SECRET)
    return repo, outside


@pytest.mark.parametrize("how", ["file link", "folder link"])
def test_the_resolver_refuses_a_link_in_the_repository_to_a_file_outside(layout, how):
    repo, outside = layout
    if how == "file link":
        (repo / "kernels" / "evil.h").symlink_to(outside / "secret.h")
        name = "evil.h"
    else:
        (repo / "kernels" / "inc").symlink_to(outside, target_is_directory=True)
        name = "inc/secret.h"
    source = repo / "kernels" / "k.cu"
    source.write_text(f'#include "{name}"\n')
    with pytest.raises(PlanError, match="resolves outside the repository") as exc:
        includes.resolve_headers(source, source.read_bytes(), (source.parent,), (repo,), (), {})
    assert exc.value.field == "line 1"
    assert SECRET not in str(exc.value.message)


def test_a_link_inside_the_repository_to_a_file_inside_is_followed(layout):
    repo, _ = layout
    (repo / "kernels" / "real.h").write_text("#define REAL 1\n")
    (repo / "kernels" / "alias.h").symlink_to(repo / "kernels" / "real.h")
    source = repo / "kernels" / "k.cu"
    source.write_text('#include "alias.h"\n')
    found = includes.resolve_headers(source, source.read_bytes(), (source.parent,), (repo,), (), {})
    assert found.path_of("alias.h") == (repo / "kernels" / "real.h").resolve()


def test_plan_check_refuses_a_header_linked_out_of_the_repository(tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "common.cuh").write_text("__device__ inline float scaled(float a, float x, float y) { return a; }\n")
    plan = make_repo(tmp_path / "repo", files={"kernels/k.cu": KERNEL})
    (tmp_path / "repo" / "kernels" / "common.cuh").symlink_to(outside / "common.cuh")
    refused(capsys, ["plan", "check", plan, "--no-compile"], 2, "outside the repository")
