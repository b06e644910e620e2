"""Command-line input that broke a promise (issue 25 item 14): each is one `qualify: error:` line
with a documented exit code, and nothing hangs or writes where it should not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from plans import make_repo
from test_refreeze import frozen_then_changed
from test_scaffold import SOFTMAX, repo

from qualify.cli import main
from qualify.errors import UsageError
from qualify.procs.fleet import parse_devices

ROOT = Path(__file__).resolve().parents[1]


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def one_line(err: str) -> bool:
    return err.startswith("qualify: error: ") and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("text", ["²", "0,²", "١"])  # superscript two, Arabic-Indic one: digits to str.isdigit
def test_a_unicode_digit_is_not_a_device_ordinal(text):
    with pytest.raises(UsageError, match="not a device ordinal") as info:
        parse_devices(text, 4)
    assert info.value.field == "--devices"


def test_devices_into_a_record_that_is_a_file_is_refused_before_any_device(tmp_path, capsys, monkeypatch):
    path = make_repo(tmp_path, freeze=True)
    record = tmp_path / "not-a-folder"
    record.write_text("x")

    def no_device():
        raise AssertionError("devices counted before the record was checked")

    monkeypatch.setattr("qualify.run.device.device_count", no_device)
    code, _, err = run_cli(["run", str(path), "--devices", "all", "--record", str(record)], capsys)
    assert code == 2 and one_line(err) and f"{record}: --record: not a folder" in err


def test_plan_new_onto_a_dangling_symlink_is_refused_and_the_link_left_alone(tmp_path, capsys, monkeypatch):
    root = repo(tmp_path, {"k.cu": SOFTMAX})
    monkeypatch.chdir(root)
    target = tmp_path / "elsewhere" / "plan.json"
    (root / "p.json").symlink_to(target)
    code, _, err = run_cli(["plan", "new", "p.json", "--cuda", "k.cu", "--kernel", "softmax_rows<0>"], capsys)
    assert code == 3 and one_line(err) and "p.json: is a symbolic link" in err
    assert (root / "p.json").is_symlink() and not target.exists()


def test_plan_new_for_an_unknown_architecture_is_a_usage_error_before_any_compile(tmp_path, capsys, monkeypatch):
    root = repo(tmp_path, {"k.cu": SOFTMAX})
    monkeypatch.chdir(root)

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled for an architecture qualify does not support")

    monkeypatch.setattr("qualify.commands.scaffold.compiled_sizes", no_compile)
    argv = ["plan", "new", "p.json", "--cuda", "k.cu", "--kernel", "softmax_rows<0>", "--arch", "sm_1"]
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and one_line(err) and "--arch: unsupported architecture 'sm_1'" in err
    assert not (root / "p.json").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_summary_to_a_fifo_is_refused_instead_of_hanging(tmp_path):
    fifo = tmp_path / "summary"
    os.mkfifo(fifo)
    done = subprocess.run(
        [sys.executable, "-m", "qualify", "summary", "records/vecload", "-o", str(fifo)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,  # on main the open() blocks until a reader comes: this expires
    )
    assert done.returncode == 2 and one_line(done.stderr) and "not a regular file" in done.stderr


def test_summary_to_a_folder_is_refused(tmp_path, capsys):
    code, _, err = run_cli(["summary", str(ROOT / "records" / "vecload"), "-o", str(tmp_path)], capsys)
    assert code == 2 and one_line(err) and "not a regular file" in err


def test_freeze_replace_with_a_record_that_is_no_folder_is_refused(tmp_path, capsys):
    path, _ = frozen_then_changed(tmp_path / "repo")
    missing = tmp_path / "no-such-record"
    code, _, err = run_cli(["plan", "freeze", "--replace", "--record", str(missing), str(path)], capsys)
    assert code == 2 and one_line(err) and f"{missing}: --record: not a record folder" in err
