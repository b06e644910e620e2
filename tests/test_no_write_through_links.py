"""No file qualify creates or rewrites is written through a symbolic link (issue 36, items 1 and 5).

Each test plants a link where qualify writes (a record's owner file, a rehearsal's REHEARSAL.md,
a golden's name) pointing out of the folder qualify was given, and checks that the command is
refused with one line naming the file, and that nothing outside changed or appeared.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from qualify.io import LinkRefused, atomic_write_bytes
from qualify.results.store import Record

UUID = "GPU-5f0e1c2a-0000-4000-8000-000000000001"


@pytest.fixture
def outside(tmp_path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


def test_an_owner_file_link_to_an_existing_file_is_refused_and_the_file_kept(tmp_path, outside):
    victim = outside / "precious.txt"
    victim.write_text("not qualify's\n")
    record = Record(tmp_path / "rec")
    (tmp_path / "rec").mkdir()
    record.owner_path(UUID).symlink_to(victim)
    with pytest.raises(LinkRefused, match="symbolic link"):
        with record.owned(UUID):
            pass
    assert victim.read_text() == "not qualify's\n"


def test_a_dangling_owner_file_link_creates_nothing_outside(tmp_path, outside):
    record = Record(tmp_path / "rec")
    (tmp_path / "rec").mkdir()
    record.owner_path(UUID).symlink_to(outside / "created")
    with pytest.raises(LinkRefused, match="symbolic link"):
        with record.owned(UUID):
            pass
    assert list(outside.iterdir()) == []


def test_an_owner_file_is_written_and_removed_when_no_trial_started(tmp_path):
    record = Record(tmp_path / "rec")
    with record.owned(UUID) as fd:
        assert fd is not None
        assert '"device_uuid"' in record.owner_path(UUID).read_text()
    assert not record.owner_path(UUID).exists()


@pytest.mark.parametrize("plain", [True, False])
def test_the_writer_refuses_a_final_link_without_a_root(tmp_path, outside, plain):
    """A plain write (an --output file, a lock file) replaces no link: the link is refused, the
    file it points to untouched, a dangling link's target never created."""
    target = outside / "t"
    if plain:
        target.write_text("kept")
    (tmp_path / "out.json").symlink_to(target)
    with pytest.raises(LinkRefused, match="symbolic link"):
        atomic_write_bytes(tmp_path / "out.json", b"new")
    assert (target.read_text() == "kept") if plain else not target.exists()


def test_the_writer_refuses_a_path_that_leaves_its_root(tmp_path, outside):
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(LinkRefused, match="outside"):
        atomic_write_bytes(root / ".." / "outside" / "x", b"new", root=root)
    with pytest.raises(LinkRefused, match="outside"):
        atomic_write_bytes(outside / "x", b"new", root=root)
    assert list(outside.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# goldens and rehearsals stay where they were sent (item 5)


def _golden_repo(tmp_path: Path, golden: str, **changes) -> Path:
    from test_golden_make import GOLDEN
    from test_rehearse import softmax_repo

    return softmax_repo(tmp_path / "repo", {**GOLDEN, "golden": golden, **changes})


def _ref(tmp_path: Path, name: str = "softmax") -> str:
    return f"{tmp_path / 'repo' / 'kernels/softmax/reference.py'}:{name}"


def test_golden_make_refuses_a_golden_named_outside_the_repository(tmp_path, capsys):
    from test_refused_inputs import refused

    plan = _golden_repo(tmp_path, "../../../x.safetensors")
    assert (plan.parent / "../../../x.safetensors").resolve() == (tmp_path / "x.safetensors")
    refused(capsys, ["golden", "make", plan, "--reference", _ref(tmp_path)], 2, "outside the repository")
    assert not (tmp_path / "x.safetensors").exists()


def test_golden_make_refuses_a_dangling_golden_link(tmp_path, outside, capsys):
    from test_refused_inputs import refused

    plan = _golden_repo(tmp_path, "golden.safetensors")
    (plan.parent / "golden.safetensors").symlink_to(outside / "x.safetensors")
    refused(capsys, ["golden", "make", plan, "--reference", _ref(tmp_path)], 2, "symbolic link")
    assert list(outside.iterdir()) == []


def test_golden_make_refuses_a_linked_folder_on_the_way(tmp_path, outside, capsys):
    from test_refused_inputs import refused

    plan = _golden_repo(tmp_path, "goldens/golden.safetensors")
    (plan.parent / "goldens").symlink_to(outside, target_is_directory=True)
    refused(capsys, ["golden", "make", plan, "--reference", _ref(tmp_path)], 2, "symbolic link")
    assert list(outside.iterdir()) == []


def test_a_reference_that_calls_sys_exit_is_an_error_not_a_golden(tmp_path, capsys):
    from test_refused_inputs import refused

    plan = _golden_repo(tmp_path, "golden.safetensors", golden_script=None)
    quits = tmp_path / "quits.py"
    quits.write_text("import sys\ndef quit(params, inputs):\n    sys.exit(0)\n")
    refused(capsys, ["golden", "make", plan, "--reference", f"{quits}:quit"], 2, "SystemExit")
    assert not (plan.parent / "golden.safetensors").exists()


def test_a_reference_that_exits_on_import_is_an_error(tmp_path, capsys):
    from test_refused_inputs import refused

    plan = _golden_repo(tmp_path, "golden.safetensors", golden_script=None)
    quits = tmp_path / "quits_early.py"
    quits.write_text("import sys\nsys.exit(0)\ndef quit(params, inputs):\n    return {}\n")
    refused(capsys, ["golden", "make", plan, "--reference", f"{quits}:quit"], 2, "SystemExit")
    assert not (plan.parent / "golden.safetensors").exists()


def test_rehearse_refuses_a_planted_rehearsal_link(tmp_path, outside, capsys):
    from test_refused_inputs import refused
    from test_rehearse import REFERENCE, softmax_repo

    plan = softmax_repo(tmp_path / "repo")
    out = tmp_path / "rehearsal"
    out.mkdir()
    victim = outside / "victim.md"
    victim.write_text("kept\n")
    (out / "REHEARSAL.md").symlink_to(victim)
    refused(capsys, ["plan", "rehearse", plan, "--reference", f"{REFERENCE}:softmax", "--out", out], 2, "symbolic link")
    assert victim.read_text() == "kept\n"


@pytest.fixture(scope="module")
def record_folder(tmp_path_factory) -> Path:
    from test_record import h200_trials, new_record

    from qualify.record.assemble import write_record

    record, plan, lock = new_record(tmp_path_factory.mktemp("links") / "vecwidth")
    h200_trials(record, lock)
    write_record(record, plan, lock)
    return record.folder


def test_summary_appends_to_a_file_and_refuses_a_link(record_folder, tmp_path, outside, capsys):
    from qualify.cli import main

    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    with pytest.raises(SystemExit):
        main(["summary", str(record_folder), "-o", str(summary)])
    assert summary.read_text().startswith("earlier step\n") and len(summary.read_text()) > 20
    victim = outside / "victim.md"
    victim.write_text("kept\n")
    linked = tmp_path / "linked.md"
    linked.symlink_to(victim)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["summary", str(record_folder), "-o", str(linked)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "symbolic link" in err and str(linked) in err, err
    assert victim.read_text() == "kept\n"
