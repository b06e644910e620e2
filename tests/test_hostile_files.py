"""Record files that are not what they claim: /dev/zero behind a link, 20 GiB sparse files, FIFOs,
links out of the record, and links planted where qualify writes (issue 25, items 2, 6, 11, 15).

Every reader is bounded (qualify.io): each hostile file is refused with one `qualify: error:` line
naming it and exit 2, before it is read. The commands that could read a file whole run in a child
process whose data segment is capped (RLIMIT_DATA) and whose time is capped, so a reader that
allocates the file, or blocks on a FIFO, fails the test instead of the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from plans import make_repo, plan_copy
from test_record import h200_trials, new_record

from qualify.cli import main
from qualify.io import LinkRefused
from qualify.plan.digest import lock_path, sha256_file
from qualify.record.assemble import write_record
from qualify.results.store import Record

SPARSE = 20 << 30  # 20 GiB: sparse, so it costs no disk
DATA_CAP = 1536 << 20  # the child's heap: qualify's own needs plus room, far below any hostile file
CHILD_TIMEOUT_S = 120  # a FIFO opened without O_NONBLOCK would block forever

_CAPPED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_DATA, (int(sys.argv[1]), int(sys.argv[1])))
"""
_CHILD = _CAPPED + "from qualify.cli import main\nmain(sys.argv[2:])\n"


def bounded(argv: list, tmp_path: Path) -> tuple[int, str]:
    """Run the CLI in a child with a capped heap and time: (exit code, stderr)."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(DATA_CAP), *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        env=env,
        cwd=Path(__file__).parent,
    )
    return done.returncode, done.stderr


def one_error(err: str, *fragments: str) -> str:
    lines = err.splitlines()
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("qualify: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    record, plan, lock = new_record(tmp_path_factory.mktemp("hostile-files") / "vecwidth")
    h200_trials(record, lock)
    write_record(record, plan, lock)
    return record.folder


@pytest.fixture
def rec(pristine, tmp_path) -> Path:
    return Path(shutil.copytree(pristine, tmp_path / "rec"))


def _dev_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def _sparse(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(SPARSE)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


# (file in the record, how it is made hostile, command, what the error says)
BOUNDED_CASES = [
    ("results.json", _dev_zero, "check", "outside"),
    ("results.json", _sparse, "summary", "more than the"),
    ("ledger.jsonl", _sparse, "check", "more than the"),
    ("trials/trial-1.json", _fifo, "report", "not a regular file"),
    ("trials/trial-2.npz", _sparse, "check", "more than the"),
    ("trials/trial-2.npz", _sparse, "merge", "more than the"),
    ("README.md", _sparse, "check", "more than the"),
    ("plots/device-1-ratio.svg", _dev_zero, "check", "outside"),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, damage, command, fragment",
    BOUNDED_CASES,
    ids=[f"{n}-{d.__name__[1:]}-{c}" for n, d, c, _ in BOUNDED_CASES],
)
def test_a_hostile_record_file_is_refused_unread(rec, tmp_path, name, damage, command, fragment):
    damage(rec / name)
    argv = {
        "check": ["report", "--check", rec],
        "report": ["report", rec],
        "summary": ["summary", rec],
        "merge": ["report", "--merge", tmp_path / "merged", rec],
    }[command]
    code, err = bounded(argv, tmp_path)
    assert code == 2, err
    one_error(err, str(rec / name), fragment)


@pytest.mark.parametrize("name", ["results.json", "ledger.jsonl", "trials/trial-1.json", "README.md"])
def test_a_link_out_of_the_record_is_refused_even_to_an_identical_file(rec, tmp_path, capsys, name):
    outside = tmp_path / "outside"
    outside.write_bytes((rec / name).read_bytes())
    (rec / name).unlink()
    (rec / name).symlink_to(outside)
    with pytest.raises(SystemExit) as exc:
        main(["report", "--check", str(rec)])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    one_error(err, str(rec / name), "outside")


def test_a_link_that_stays_inside_the_record_is_read(rec, capsys):
    (rec / "README.copy.md").write_bytes((rec / "README.md").read_bytes())
    (rec / "README.md").unlink()
    (rec / "README.md").symlink_to("README.copy.md")
    with pytest.raises(SystemExit) as exc:
        main(["report", "--check", str(rec)])
    assert exc.value.code == 0, capsys.readouterr().err


def test_freeze_replace_scans_records_without_reading_hostile_files_whole(tmp_path):
    plan = make_repo(tmp_path / "repo", freeze=True)
    changed = plan_copy()
    changed["acceptance"]["gates"][0]["min_speedup_pct"] = 2.0  # so --replace scans records/*
    plan.write_text(json.dumps(changed, indent=2))
    before = json.loads(lock_path(plan).read_text())["plan_sha256"]
    hostile = tmp_path / "repo" / "records" / "hostile"
    (hostile / "trials").mkdir(parents=True)
    (hostile / "trials" / "trial-1.json").symlink_to("/dev/zero")
    (hostile / "trials" / "trial-2.json").write_bytes(b"")
    _sparse(hostile / "trials" / "trial-2.json")
    (hostile / "ledger.jsonl").write_bytes(b"")
    _sparse(hostile / "ledger.jsonl")
    code, err = bounded(["plan", "freeze", "--replace", plan], tmp_path)
    assert code == 0, err  # nothing readable there ran under the old digest: the lock is rewritten
    assert json.loads(lock_path(plan).read_text())["plan_sha256"] != before


# ---------------------------------------------------------------------------------------------
# item 11: raw samples that are not a zip archive


def test_raw_samples_that_are_not_a_zip_are_one_line_in_the_check_and_undrawn_in_the_report(rec, capsys):
    path = rec / "trials" / "trial-1.npz"
    path.write_bytes(b"PK? not a zip at all")
    new = sha256_file(path)
    for name in ("trials/trial-1.json", "results.json"):
        data = (rec / name).read_text()
        old = json.loads((rec / "trials/trial-1.json").read_text())["samples_sha256"]
        (rec / name).write_text(data.replace(old, new))
    with pytest.raises(SystemExit) as exc:
        main(["report", str(rec)])
    out = capsys.readouterr()
    # re-rendered without plots (write_plots draws nothing from unreadable samples); the verdict's code
    assert exc.value.code == 1 and out.err == "", out.err
    with pytest.raises(SystemExit) as exc:
        main(["report", "--check", str(rec)])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    one_error(err, str(path), "not a readable .npz (zip) archive")


# ---------------------------------------------------------------------------------------------
# item 6: links planted where qualify writes


@pytest.fixture
def outside(tmp_path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


def _nothing_written(folder: Path) -> bool:
    return list(folder.iterdir()) == []


def test_a_lock_file_link_is_refused(rec, outside):
    (rec / ".lock").unlink(missing_ok=True)
    (rec / ".lock").symlink_to(outside / "lock")
    with pytest.raises(LinkRefused, match="symbolic link"):
        with Record(rec).locked():
            pass
    assert _nothing_written(outside)


def test_a_ledger_link_is_refused(rec, outside):
    target = outside / "ledger.jsonl"
    target.write_bytes((rec / "ledger.jsonl").read_bytes())
    before = target.read_bytes()
    (rec / "ledger.jsonl").unlink()
    (rec / "ledger.jsonl").symlink_to(target)
    with pytest.raises(LinkRefused, match="symbolic link"):
        Record(rec).append({"event": "trial_started", "trial": 3, "digest": "0" * 64, "device_uuid": "GPU-x"})
    assert target.read_bytes() == before


def test_a_dangling_plan_link_in_a_new_record_is_refused(tmp_path, outside):
    plan = make_repo(tmp_path / "repo", freeze=True)
    folder = tmp_path / "repo" / "records" / "new"
    folder.mkdir(parents=True)
    (folder / "plan.json").symlink_to(outside / "plan.json")  # dangling: a plain copy would create it
    with pytest.raises(LinkRefused, match="symbolic link"):
        Record(folder).bind(plan, json.loads(lock_path(plan).read_text())["digest"])
    assert _nothing_written(outside)


def test_a_trials_folder_link_is_refused(rec, outside):
    record = Record(rec)
    trial = record.trials()[0].model_copy(update={"index": 3})
    shutil.rmtree(rec / "trials")
    (rec / "trials").symlink_to(outside, target_is_directory=True)
    with pytest.raises(LinkRefused, match="symbolic link"):
        record.write_trial(trial)
    assert _nothing_written(outside)


def test_a_plots_folder_link_is_refused_and_nothing_beyond_it_removed(rec, outside, capsys):
    (outside / "device-9-ratio.svg").write_text("not qualify's")  # a stale plot's name, elsewhere
    shutil.rmtree(rec / "plots")
    (rec / "plots").symlink_to(outside, target_is_directory=True)
    with pytest.raises(SystemExit) as exc:
        main(["report", str(rec)])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    one_error(err, str(rec / "plots"), "symbolic link")
    assert [p.name for p in outside.iterdir()] == ["device-9-ratio.svg"]


# ---------------------------------------------------------------------------------------------
# item 15: --devices leaves no worker logs behind


@pytest.mark.slow
def test_devices_leaves_no_worker_logs_in_tmpdir(tmp_path, monkeypatch):
    from qualify.procs import fleet
    from qualify.run import device

    plan = make_repo(tmp_path / "repo", freeze=True)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setattr(device, "device_count", lambda: 1)
    said = []
    from qualify.procs.invocation import resolve

    resolved = resolve(plan, tmp_path / "record", False, None, None, ["run", str(plan)])
    fleet.run_on_devices(resolved, "0", said.append)
    assert len(said) == 1 and said[0].startswith("device 0: exit ")  # the worker's last line, kept
    # the worker read the invocation it was given and went as far as the device (none here: 5)
    assert "invocation" not in said[0] and said[0].startswith("device 0: exit 5: qualify: error:"), said[0]
    assert list(tmp.iterdir()) == []


def test_the_child_cap_would_catch_a_reader_that_allocates_the_file(tmp_path):
    """Guards the harness above: under the cap, reading a sparse file whole fails."""
    big = tmp_path / "big"
    big.write_bytes(b"")
    _sparse(big)
    done = subprocess.run(
        [sys.executable, "-c", _CAPPED + f"open({str(big)!r}, 'rb').read()", str(DATA_CAP)],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    assert done.returncode != 0 and "MemoryError" in done.stderr
