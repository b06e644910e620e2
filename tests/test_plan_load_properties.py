"""Property-based tests of the plan loader (hypothesis): whatever a plan file holds, loading it
either succeeds or raises PlanError, and the CLI answers with a documented exit code and no
traceback. The profile is fuzzing.py's.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path

import pytest
from fuzzing import PROFILE
from hypothesis import example, given
from hypothesis import strategies as st
from plans import PLAN, make_repo

from qualify.cli import main
from qualify.errors import PlanError
from qualify.plan.load import load_plan

DOCUMENTED_EXITS = {0, 2, 3, 4}  # `plan check --no-compile` never reaches 1, 5-7

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=25,
)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """One repository (kernels and plan folder) reused by every example; each rewrites the plan."""
    return make_repo(tmp_path_factory.mktemp("fuzz"))


def load_or_plan_error(path: Path, data) -> str:
    """Write `data` as the plan, load it; 'ok' or 'refused', anything else fails the property."""
    path.write_text(json.dumps(data))  # NaN and Infinity are written as such, as a hand could
    try:
        load_plan(path)
    except PlanError as exc:
        assert exc.file is not None, exc.one_line()
        assert "\n" not in exc.one_line()
        return "refused"
    return "ok"


def cli_check(path: Path) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exc:
        main(["plan", "check", "--no-compile", str(path)])
    return exc.value.code, err.getvalue()


def assert_cli_answers(path: Path, outcome: str) -> None:
    code, err = cli_check(path)
    assert code in DOCUMENTED_EXITS, err
    assert "Traceback" not in err and "internal error" not in err, err
    if outcome == "refused":
        # one line per field at fault, each naming the file; then the stages not reached, a summary
        lines = [line for line in err.splitlines() if not line.startswith(("qualify: not checked: ", "qualify: "))]
        errors = [line for line in err.splitlines() if line.startswith("qualify: error: ")]
        assert code == 2 and errors and not lines, err
        assert all(line.startswith(f"qualify: error: {path}: ") for line in errors), err
    else:
        assert code == 0, err


# -- (a) arbitrary JSON ------------------------------------------------------------------------


@PROFILE
@given(data=json_values)
@example(data={**PLAN, "two\nlines": 1})  # the unknown field's path must stay on one line
def test_any_json_value_loads_or_is_refused(repo, data):
    assert_cli_answers(repo, load_or_plan_error(repo, data))


@PROFILE
@given(data=st.dictionaries(st.sampled_from(sorted(PLAN)), json_values, max_size=len(PLAN)))
def test_any_object_with_plan_keys_loads_or_is_refused(repo, data):
    """Objects with the plan's own top-level keys get past the first unknown-field check."""
    assert_cli_answers(repo, load_or_plan_error(repo, data))


# -- (b) mutations of a valid plan -------------------------------------------------------------


def _paths(node, prefix=()):
    """Every (path, value) in the plan, containers included."""
    yield prefix, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


ALL_PATHS = [p for p, _ in _paths(PLAN) if p]
LEAF_PATHS = [p for p, v in _paths(PLAN) if p and not isinstance(v, (dict, list))]
KEY_PATHS = [p for p in ALL_PATHS if isinstance(p[-1], str)]
OBJECT_PATHS = [p for p, v in _paths(PLAN) if isinstance(v, dict)]


def _parent(plan, path):
    node = plan
    for key in path[:-1]:
        node = node[key]
    return node


@st.composite
def mutated_plans(draw):
    plan = copy.deepcopy(PLAN)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        how = draw(st.sampled_from(["replace-leaf", "replace-any", "delete", "insert"]))
        if how == "replace-leaf":
            path = draw(st.sampled_from(LEAF_PATHS))
        elif how == "replace-any":
            path = draw(st.sampled_from(ALL_PATHS))
        elif how == "delete":
            path = draw(st.sampled_from(KEY_PATHS))
        else:
            path = (*draw(st.sampled_from(OBJECT_PATHS)), draw(st.text(min_size=1, max_size=12)))
        try:
            parent = _parent(plan, path)
            if how == "delete":
                del parent[path[-1]]
            else:
                parent[path[-1]] = draw(json_values)
        except (KeyError, IndexError, TypeError):  # an earlier mutation removed or reshaped the way
            continue
    return plan


def _planted(path: str, value) -> dict:
    plan = copy.deepcopy(PLAN)
    keys = path.split("/")
    node = _parent(plan, [int(k) if k.isdigit() else k for k in keys])
    node[int(keys[-1]) if keys[-1].isdigit() else keys[-1]] = value
    return plan


@PROFILE
@given(plan=mutated_plans())
@example(plan=_planted("acceptance/gates/0/min_speedup_pct", float("nan")))  # once an internal error
@example(plan=_planted("workload/buffers/0/shape/0", "(N - 2 * N) ** 0.5"))  # once a complex size
@example(plan=_planted("workload/params/BIG", 10**400))
def test_mutated_plan_loads_or_is_refused(repo, plan):
    assert_cli_answers(repo, load_or_plan_error(repo, plan))


def test_the_unmutated_plan_loads(repo):
    """Guards the mutation test: without a mutation the plan is valid, so refusals are earned."""
    assert load_or_plan_error(repo, PLAN) == "ok"
