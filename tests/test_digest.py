"""The plan digest: stable under key order, sensitive to one byte of any used file, enforced."""

from __future__ import annotations

import json

import pytest

from plans import make_repo, plan_copy
from qualify.errors import FrozenInputChanged
from qualify.plan.digest import freeze, lock_path, verify_frozen
from qualify.plan.load import load_plan


def _reversed_keys(value):
    if isinstance(value, dict):
        return {k: _reversed_keys(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reversed_keys(v) for v in value]
    return value


def test_digest_stable_under_key_reordering_and_whitespace(tmp_path):
    a = load_plan(make_repo(tmp_path / "a"))
    path = make_repo(tmp_path / "b")
    path.write_text(json.dumps(_reversed_keys(plan_copy()), indent=7, sort_keys=False))
    b = load_plan(path)
    assert a.digest == b.digest
    assert len(a.digest) == 64


def test_digest_covers_included_headers(tmp_path):
    loaded = load_plan(make_repo(tmp_path))
    assert set(loaded.files.files) == {"kernels/k.cu", "kernels/common.cuh"}


@pytest.mark.parametrize("name", ["k.cu", "common.cuh"])
def test_one_byte_of_one_file_changes_the_digest(tmp_path, name):
    path = make_repo(tmp_path)
    before = load_plan(path).digest
    target = tmp_path / "kernels" / name
    data = bytearray(target.read_bytes())
    data[-2] ^= 0x01
    target.write_bytes(bytes(data))
    assert load_plan(path).digest != before


def test_a_plan_value_changes_the_digest(tmp_path):
    plan = plan_copy()
    before = load_plan(make_repo(tmp_path / "a", plan)).digest
    plan["seeds"]["base"] = 8
    assert load_plan(make_repo(tmp_path / "b", plan)).digest != before


def test_defaults_are_part_of_the_digest(tmp_path):
    """Spelling out a default gives the same protocol, hence the same digest."""
    plan = plan_copy()
    before = load_plan(make_repo(tmp_path / "a", plan)).digest
    plan["schedule"]["cache"] = "cold"
    assert load_plan(make_repo(tmp_path / "b", plan)).digest == before


def test_freeze_then_change_is_refused_naming_the_file(tmp_path):
    path = make_repo(tmp_path)
    loaded = load_plan(path)
    lock, written = freeze(loaded.path, loaded.freeze)
    assert written and lock == lock_path(loaded.path) and lock.exists()
    again = load_plan(path)
    verify_frozen(again.path, again.freeze, again.lock)  # unchanged: accepted
    assert freeze(again.path, again.freeze) == (lock, False)  # never rewritten

    (tmp_path / "kernels" / "common.cuh").write_text("// edited\n" + "x" * 3)
    changed = load_plan(path)
    with pytest.raises(FrozenInputChanged) as exc:
        verify_frozen(changed.path, changed.freeze, changed.lock)
    assert exc.value.file == "kernels/common.cuh"
    assert exc.value.exit_code == 3


def test_freeze_then_edit_plan_is_refused(tmp_path, capsys):
    from qualify.cli import main

    path = make_repo(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["plan", "freeze", str(path)])
    assert exc.value.code == 0
    plan = plan_copy()
    plan["schedule"]["blocks"] = 5
    path.write_text(json.dumps(plan))
    with pytest.raises(SystemExit) as exc:
        main(["plan", "check", "--no-compile", str(path)])
    err = capsys.readouterr().err
    assert exc.value.code == 3
    assert f"{path.resolve()}: changed after freezing" in err


def test_tampered_lock_is_a_plan_error(tmp_path):
    from qualify.errors import PlanError

    path = make_repo(tmp_path)
    lock_path(path).write_text('{"lock_version": 1, "files": []}')
    with pytest.raises(PlanError, match="plan_sha256"):
        load_plan(path)
