"""The plan digest and the lock: stable under key order, sensitive to one byte of any used file,
enforced; a pinned digest, the lock file's every refusal, and what each names."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from plans import make_repo, plan_copy

from qualify.errors import FrozenInputChanged, PlanError
from qualify.plan.digest import (
    LOCK_VERSION,
    Freeze,
    canonical_json,
    freeze,
    freeze_from_hashes,
    lock_path,
    read_lock,
    sha256_file,
    verify_frozen,
)
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


A, B = "a" * 64, "b" * 64


class _Plan:
    """Stands in for a validated plan: the digest sees only its JSON dump."""

    def __init__(self, data: dict):
        self.data = data

    def model_dump(self, mode: str) -> dict:
        assert mode == "json"
        return self.data


PLAN = {"seeds": {"base": 7}, "hypothesis": "größer ist schneller — 16-byte loads", "params": {"N": 1048576}}
HASHES = {"kernels/ü.cuh": B, "kernels/k.cu": A}


def test_the_digest_of_a_plan_with_non_ascii_text_is_pinned():
    """Any change to the canonical form (key order, separators, escaping) would orphan every lock."""
    f = freeze_from_hashes(_Plan(PLAN), dict(HASHES))
    assert f.plan_sha256 == "2f184304af1b8896d32627ca3ff8ad1fd71a825616bd8423424a8b64eef124ea"
    assert f.digest == "3a9568e4194d8e5da378b5f047e79b68df3d1690c89eb64a44b89207aef1f890"
    assert f.files == HASHES


def test_canonical_json_is_sorted_compact_utf8_and_refuses_nan():
    assert canonical_json({"b": "é", "a": [1, 2.5, None]}) == '{"a":[1,2.5,null],"b":"é"}'
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_a_real_plan_is_hashed_as_its_utf8_canonical_json(tmp_path):
    from plans import plan_copy

    plan = plan_copy()
    plan["hypothesis"] = "schnellere Ladevorgänge"
    loaded = load_plan(make_repo(tmp_path, plan))
    dumped = loaded.plan.model_dump(mode="json")
    text = json.dumps(dumped, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert "Ladevorgänge" in text
    assert loaded.freeze.plan_sha256 == hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_sha256_file_reads_past_its_chunk(tmp_path):
    path = tmp_path / "big.bin"
    data = bytes(range(256)) * (5 * 4096 + 3)  # over 5 MiB, not a whole number of MiB
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("name, lock", [("plan.json", "plan.lock.json"), ("a.b.json", "a.b.lock.json")])
def test_lock_path_sits_beside_the_plan(name, lock):
    assert lock_path(Path("/r/protocols") / name) == Path("/r/protocols") / lock


# --- reading a lock --------------------------------------------------------------------------------


def _write_lock(tmp_path: Path, content: bytes | str) -> Path:
    plan = tmp_path / "plan.json"
    data = content if isinstance(content, bytes) else content.encode()
    lock_path(plan).write_bytes(data)
    return plan


def _valid() -> dict:
    return {"lock_version": LOCK_VERSION, "plan": "plan.json", "plan_sha256": A, "files": {}, "digest": B}


def test_no_lock_is_none(tmp_path):
    assert read_lock(tmp_path / "plan.json") is None


def test_a_valid_lock_reads_back(tmp_path):
    assert read_lock(_write_lock(tmp_path, json.dumps(_valid()))) == _valid()


@pytest.mark.parametrize(
    "content, field",
    [
        (b"\xff\xfe{\x00}\x00", None),  # UTF-16, not UTF-8
        (b'{"lock_version": 1, "plan_sha256": "\xe9"}', None),  # Latin-1 byte
        ("{", None),
        ('{"lock_version": 1, "lock_version": 1}', None),
        ("[]", "lock_version"),
        ('{"lock_version": 2}', "lock_version"),
        ('{"lock_version": "1"}', "lock_version"),
    ],
)
def test_an_unreadable_lock_is_a_plan_error_not_a_crash(tmp_path, content, field):
    plan = _write_lock(tmp_path, content)
    with pytest.raises(PlanError) as exc:
        read_lock(plan)
    assert exc.value.file == str(lock_path(plan))
    assert exc.value.exit_code == 2
    if field:
        assert exc.value.field == field


def test_a_lock_that_is_a_folder_is_a_plan_error(tmp_path):
    plan = tmp_path / "plan.json"
    lock_path(plan).mkdir()
    with pytest.raises(PlanError, match="unreadable lock file"):
        read_lock(plan)


@pytest.mark.parametrize("key, bad", [("plan_sha256", 5), ("files", []), ("digest", None), ("files", "x")])
def test_each_malformed_lock_field_is_named(tmp_path, key, bad):
    lock = _valid()
    lock[key] = bad
    with pytest.raises(PlanError, match=f"missing or malformed {key}") as exc:
        read_lock(_write_lock(tmp_path, json.dumps(lock)))
    assert exc.value.field == key


@pytest.mark.parametrize("key", ["plan_sha256", "files", "digest"])
def test_each_missing_lock_field_is_named(tmp_path, key):
    lock = _valid()
    del lock[key]
    with pytest.raises(PlanError) as exc:
        read_lock(_write_lock(tmp_path, json.dumps(lock)))
    assert exc.value.field == key


# --- verifying what was frozen ---------------------------------------------------------------------

PLAN_PATH = Path("/r/protocols/p/plan.json")
FROZEN = Freeze(plan_sha256=A, files={"k.cu": A, "h.cuh": B}, digest="d" * 64)


def _lock(**changes) -> dict:
    return {**FROZEN.to_json("plan.json"), **changes}


def test_an_unchanged_freeze_is_accepted():
    verify_frozen(PLAN_PATH, FROZEN, _lock())  # raises on any difference


@pytest.mark.parametrize(
    "lock, file, message",
    [
        (_lock(plan_sha256=B), str(PLAN_PATH), "plan content differs"),
        (_lock(files={"k.cu": A, "h.cuh": A}), "h.cuh", "sha256 differs"),
        (_lock(files={"k.cu": A, "h.cuh": B, "gone.cuh": A}), "gone.cuh", "no longer used"),
        (_lock(files={"k.cu": A}), "h.cuh", "not frozen in its lock"),
        (_lock(digest="e" * 64), str(lock_path(PLAN_PATH)), "digest differs"),
    ],
)
def test_each_difference_is_refused_naming_its_file(lock, file, message):
    with pytest.raises(FrozenInputChanged, match=message) as exc:
        verify_frozen(PLAN_PATH, FROZEN, lock)
    assert exc.value.file == file
    assert exc.value.exit_code == 3


def test_freeze_writes_the_lock_once_and_never_again(tmp_path):
    plan = tmp_path / "plan.json"
    path, written = freeze(plan, FROZEN)
    assert (path, written) == (lock_path(plan), True)
    text = path.read_text(encoding="utf-8")
    assert text.endswith("}\n") and text.startswith('{\n  "lock_version": 1,')
    assert json.loads(text) == {
        "lock_version": 1,
        "plan": "plan.json",
        "plan_sha256": A,
        "files": {"k.cu": A, "h.cuh": B},
        "digest": "d" * 64,
    }
    assert freeze(plan, FROZEN) == (path, False)
    assert path.read_text(encoding="utf-8") == text


def test_freeze_over_a_different_lock_is_refused_and_leaves_it(tmp_path):
    plan = tmp_path / "plan.json"
    freeze(plan, FROZEN)
    before = lock_path(plan).read_bytes()
    with pytest.raises(FrozenInputChanged, match="plan content differs"):
        freeze(plan, Freeze(plan_sha256=B, files=FROZEN.files, digest=FROZEN.digest))
    assert lock_path(plan).read_bytes() == before


# --- gaps found, for the owner of qualify/plan/digest.py -------------------------------------------


@pytest.mark.parametrize("version", ["true", "1.0"])
def test_a_lock_version_that_only_equals_one_is_refused(tmp_path, version):
    text = json.dumps(_valid()).replace('"lock_version": 1', f'"lock_version": {version}')
    with pytest.raises(PlanError) as exc:
        read_lock(_write_lock(tmp_path, text))
    assert exc.value.field == "lock_version"


def test_a_lock_whose_file_hashes_are_not_strings_is_malformed(tmp_path):
    lock = _valid()
    lock["files"] = {"k.cu": 5}
    with pytest.raises(PlanError) as exc:
        read_lock(_write_lock(tmp_path, json.dumps(lock)))
    assert exc.value.field == 'files["k.cu"]'  # a PlanError (exit 2) naming the entry, not a changed file


def test_a_freeze_cannot_be_changed_once_made():
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        FROZEN.digest = "0" * 64  # type: ignore[misc]


def test_a_lock_made_before_placements_rotated_is_refused_saying_why(tmp_path):
    """A plan frozen before schedule.placement and schedule.order hashes as the plan without them:
    refused like any changed plan, with a message that names the protocol change."""
    from plans import make_repo, plan_copy

    from qualify.errors import FrozenInputChanged
    from qualify.plan.digest import read_lock, verify_frozen
    from qualify.plan.load import load_plan

    loaded = load_plan(make_repo(tmp_path, plan_copy(), freeze=True))
    old = {**read_lock(loaded.path), "plan_sha256": loaded.freeze.plan_sha256_before_v3}
    with pytest.raises(FrozenInputChanged, match="frozen before schedule.placement and schedule.order") as info:
        verify_frozen(loaded.path, loaded.freeze, old)
    assert info.value.field == "schedule"
    edited = {**old, "plan_sha256": "0" * 64}
    with pytest.raises(FrozenInputChanged, match="plan content differs from its lock"):
        verify_frozen(loaded.path, loaded.freeze, edited)
