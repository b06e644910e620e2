"""The invocation file a run hands its processes (qualify.procs.invocation) is strict JSON with a
version, validated on read: every committed protocol comes back as it went, and a damaged or
hostile file is one line naming the file and the field, exit 6, never a traceback, never code run
(a pickle in its place is not unpickled)."""

from __future__ import annotations

import copy
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from plans import make_repo

from qualify.errors import ExitCode, ToolError
from qualify.plan.load import load_plan
from qualify.procs import invocation
from qualify.procs.invocation import FILE, MAX_INVOCATION_BYTES, Invocation
from qualify.strict_json import join_field

ROOT = Path(__file__).resolve().parents[1]
PROTOCOLS = sorted(ROOT.glob("protocols/*/plan.json"))


@pytest.fixture(scope="module")
def document(tmp_path_factory) -> dict:
    """The JSON a parent writes for a frozen, checked plan, on a device, with a scratch folder."""
    root = tmp_path_factory.mktemp("repo")
    plan = make_repo(root, freeze=True)
    resolved = invocation.resolve(plan, root / "rec", False, None, 2, ["run", str(plan)])
    resolved = Invocation(**{**resolved.__dict__, "ordinal": 0, "device_uuid": "GPU-1", "workdir": root / "scratch"})
    folder = tmp_path_factory.mktemp("private")
    return json.loads(invocation.write(resolved, folder).read_text())


def refusal(path: Path) -> ToolError:
    with pytest.raises(ToolError) as caught:
        invocation.read(path)
    error = caught.value
    assert error.exit_code == ExitCode.TOOL == 6 and error.file == str(path)
    assert "\n" not in error.one_line()
    return error


def written(tmp_path: Path, data) -> Path:
    path = tmp_path / FILE
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.mark.parametrize("plan_path", PROTOCOLS, ids=lambda p: p.parent.name)
def test_every_committed_protocol_comes_back_as_it_went(tmp_path, plan_path):
    loaded = load_plan(plan_path)
    sent = Invocation(loaded, tmp_path / "rec", True, {}, 3, ("run", str(plan_path)), 1, "GPU-x", tmp_path / "w")
    back = invocation.read(invocation.write(sent, tmp_path))
    assert back == sent
    assert back.loaded.cases == loaded.cases and back.loaded.freeze == loaded.freeze
    assert back.workdir == sent.workdir  # not part of equality, carried all the same


def test_the_gates_reason_for_an_added_trial_comes_back_as_it_went(tmp_path):
    loaded = load_plan(PROTOCOLS[0])
    sent = Invocation(loaded, tmp_path / "rec", False, {}, None, ("gate",), 0, "GPU-x", added="N=1 resolves 3.00%")
    assert invocation.read(invocation.write(sent, tmp_path)).added == "N=1 resolves 3.00%"


def test_the_parents_document_reads_back(tmp_path, document):
    back = invocation.read(written(tmp_path, document))
    assert back.trials == 2 and back.ordinal == 0 and back.device_uuid == "GPU-1"
    assert back.loaded.digest == document["digest"] and back.workdir is not None


def test_a_pickle_in_its_place_is_never_unpickled(tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    path = tmp_path / FILE
    path.write_bytes(pickle.dumps(Payload()))
    assert "cannot read" in refusal(path).message
    assert not marker.exists()
    path.write_bytes(pickle.dumps(Payload(), protocol=0))  # the text protocol: ASCII, still no JSON
    assert refusal(path).message.startswith("not an invocation")
    assert not marker.exists()


def _without(key):
    def mutate(doc):
        del doc[key]

    return mutate


def _set(*keys_and_value):
    *keys, value = keys_and_value

    def mutate(doc):
        target = doc
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return mutate


def _first_file(doc) -> str:
    return next(iter(doc["file_sha256"]))


DAMAGE = {
    "a later version": (_set("invocation_version", 2), "invocation_version"),
    "version as text": (_set("invocation_version", "1"), "invocation_version"),
    "version as float": (_set("invocation_version", 1.0), "invocation_version"),
    "version as true": (_set("invocation_version", True), "invocation_version"),
    "no version": (_without("invocation_version"), "invocation_version"),
    "an unknown field": (_set("run_this", "os.system"), "run_this"),
    "no digest": (_without("digest"), "digest"),
    "trials as text": (_set("trials", "3"), "trials"),
    "trials as true": (_set("trials", True), "trials"),
    "no trial": (_set("trials", 0), "trials"),
    "a negative ordinal": (_set("ordinal", -1), "ordinal"),
    "a float ordinal": (_set("ordinal", 0.5), "ordinal"),
    "exploratory as 1": (_set("exploratory", 1), "exploratory"),
    "a number in argv": (_set("argv", ["run", 7]), "argv[1]"),
    "argv as text": (_set("argv", "run plan.json"), "argv"),
    "a third side": (_set("libraries", {"middle": "/x.so"}), "libraries.middle"),
    "a library as a number": (_set("libraries", {"base": 1}), "libraries.base"),
    "an empty plan path": (_set("plan_path", ""), "plan_path"),
    "a NUL in the record": (_set("record", "rec\0/../x"), "record"),
    "an empty device uuid": (_set("device_uuid", ""), "device_uuid"),
    "an empty reason for an added trial": (_set("added", ""), "added"),
    "a reason as a number": (_set("added", 3), "added"),
    "a lock that is text": (_set("lock", "frozen"), "lock"),
    "a plan that is a list": (_set("plan", []), "plan"),
    "fewer files than hashes": (_set("files", {}), "file_sha256"),
}


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_a_damaged_field_is_one_line_naming_it(tmp_path, document, name):
    mutate, field = DAMAGE[name]
    doc = copy.deepcopy(document)
    mutate(doc)
    assert refusal(written(tmp_path, doc)).field == field


def test_a_hash_that_is_no_sha256_is_refused(tmp_path, document):
    doc = copy.deepcopy(document)
    rel = _first_file(doc)
    doc["file_sha256"][rel] = "0" * 63 + "g"
    assert refusal(written(tmp_path, doc)).field == join_field("file_sha256", rel)


def test_a_plan_the_schema_refuses_names_the_plans_field(tmp_path, document):
    doc = copy.deepcopy(document)
    doc["plan"]["schedule"]["trials"] = "many"
    assert refusal(written(tmp_path, doc)).field == "plan.schedule.trials"


@pytest.mark.parametrize(
    "change",
    [
        _set("plan", "schedule", "trials", 9),  # a valid plan, not the one the parent checked
        _set("plan", "name", "other"),
        lambda doc: doc["file_sha256"].update({_first_file(doc): "0" * 64}),  # another file's bytes
        _set("digest", "0" * 64),
    ],
    ids=["trials", "name", "a file's hash", "the digest"],
)
def test_a_plan_that_is_not_the_digest_its_parent_froze_is_refused(tmp_path, document, change):
    doc = copy.deepcopy(document)
    change(doc)
    error = refusal(written(tmp_path, doc))
    assert error.field == "digest" and "do not make the digest" in error.message


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "[1, 2]",
        "null",
        '{"invocation_version": NaN}',
        '{"invocation_version": 1, "invocation_version": 1}',
        '{"trials": ' + "9" * 30 + "}",
        "[" * 100_000 + "]" * 100_000,
    ],
    ids=["empty", "truncated", "a list", "null", "NaN", "a repeated key", "a 30-digit integer", "deep nesting"],
)
def test_text_that_is_no_invocation_is_one_line(tmp_path, text):
    assert refusal(written(tmp_path, text)).message.startswith(("not an invocation", "cannot read"))


def test_bytes_that_are_no_text_and_a_file_over_the_cap_are_refused(tmp_path):
    path = tmp_path / FILE
    path.write_bytes(b'{"a": "\xff"}')
    assert "UTF-8" in refusal(path).message
    with open(path, "wb") as f:  # sparse: no disk spent
        f.truncate(MAX_INVOCATION_BYTES + 1)
    assert "cannot read" in refusal(path).message


def test_a_trial_process_given_a_damaged_invocation_exits_6_in_one_line(tmp_path, document):
    doc = copy.deepcopy(document)
    doc["invocation_version"] = 0
    path = written(tmp_path, doc)
    done = subprocess.run(
        [sys.executable, "-m", "qualify", "trial-process", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 6, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "invocation_version" in done.stderr and "not a version-1 invocation" in done.stderr
