"""Hostile records, plans and libraries, driven through the CLI as a user would meet them.

Each input is refused with its documented exit code (2: bad plan or record, 3: a frozen input
changed or a record would be overwritten) and exactly one stderr line that names the file and,
where there is one, the field; never a traceback. The plan cases here are beyond those of
tests/test_malformed_plans.py: they attack the JSON reader, the expression evaluator, the file
resolver, the lock and the library arm rather than the plan's schema.

Records are synthetic (tests/test_record.py's builders): two H200 trials with raw samples, a
ledger, results.json and README.md that `report --check` accepts as they are.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
from plans import make_repo, plan_copy
from test_record import h200_trials, l40s_trials, new_record

from qualify.cli import main
from qualify.plan.digest import freeze_from_hashes, sha256_file
from qualify.plan.load import validate_plan
from qualify.record.assemble import write_record


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in argv])
    captured = capsys.readouterr()
    return exc.value.code, captured.out, captured.err


def refused(capsys, argv, code: int, *fragments: str) -> str:
    """Run the CLI; assert the exit code and one error line per error (a plan whose base and
    candidate share a fault gets one for each), the first holding every fragment."""
    got, out, err = run_cli(argv, capsys)
    assert "Traceback" not in err + out
    # the error lines; `plan check`'s summary of stages ('qualify: 2 errors in 1 stage') aside
    lines = [line for line in err.splitlines() if not re.match(r"qualify: (\d+ errors? in|not checked:)", line)]
    assert got == code, err
    assert lines and all(line.startswith(lines[0][:15]) for line in lines), err
    assert len(lines) == 1 or lines[0].startswith("qualify: error: "), err
    assert lines[0].startswith(("qualify: error: ", "qualify: check: ")), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


# ---------------------------------------------------------------------------------------------
# records


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    record, plan, lock = new_record(tmp_path_factory.mktemp("hostile") / "vecwidth")
    h200_trials(record, lock)
    write_record(record, plan, lock)
    return record.folder


@pytest.fixture(scope="module")
def other_device(tmp_path_factory) -> Path:
    record, plan, lock = new_record(tmp_path_factory.mktemp("hostile") / "l40s")
    l40s_trials(record, lock)
    write_record(record, plan, lock)
    return record.folder


@pytest.fixture
def rec(pristine, tmp_path) -> Path:
    return Path(shutil.copytree(pristine, tmp_path / "rec"))


def test_the_pristine_record_checks_and_re_renders(rec, capsys):
    """Guards the record table: each case fails because of its damage, not the record."""
    code, out, err = run_cli(["report", "--check", rec], capsys)
    assert code == 0, err
    code, out, err = run_cli(["report", rec], capsys)
    assert code == 1 and err == ""  # re-rendered; the synthetic H200 misses a gate: a verdict, not an error


def _edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=1))


def _rehash(folder: Path, index: int) -> None:
    """Point trial `index` (its file and its copy in results.json) at the samples now on disk."""
    trial = folder / "trials" / f"trial-{index}.json"
    old = json.loads(trial.read_text())["samples_sha256"]
    new = sha256_file(folder / "trials" / f"trial-{index}.npz")
    for path in (trial, folder / "results.json"):
        path.write_text(path.read_text().replace(old, new))


def _npz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buf.getvalue()


def _npy(header: str, payload: bytes = b"") -> bytes:
    head = header.encode("latin1")
    return b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head + payload


def _replace_samples(data: bytes):
    def damage(folder: Path) -> None:
        (folder / "trials" / "trial-1.npz").write_bytes(data)
        _rehash(folder, 1)

    return damage


def _object_samples(folder: Path) -> None:
    buf = io.BytesIO()
    np.savez(buf, **{"N=1024/base/ns": np.array([{"pickled": "payload"}], dtype=object)})
    _replace_samples(buf.getvalue())(folder)


def _results_text(text: str):
    def damage(folder: Path) -> None:
        (folder / "results.json").write_text(text)

    return damage


def _truncate(name: str):
    def damage(folder: Path) -> None:
        path = folder / name
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])

    return damage


def _append_ledger(raw: bytes):
    def damage(folder: Path) -> None:
        with open(folder / "ledger.jsonl", "ab") as f:
            f.write(raw)

    return damage


def _samples_at(where: str):
    def damage(folder: Path) -> None:
        for path in (folder / "trials" / "trial-1.json", folder / "results.json"):
            path.write_text(path.read_text().replace('"trials/trial-1.npz"', json.dumps(where)))

    return damage


def _plan_edited(folder: Path) -> None:
    _edit_json(folder / "plan.json", lambda p: p["acceptance"]["gates"][0].update(min_speedup_pct=0.1))


def _lock_digest(folder: Path) -> None:
    _edit_json(folder / "plan.lock.json", lambda lock: lock.update(digest="0" * 64))


def _swap_trial_files(folder: Path) -> None:
    trials = folder / "trials"
    one, two = (trials / "trial-1.json").read_bytes(), (trials / "trial-2.json").read_bytes()
    (trials / "trial-1.json").write_bytes(two)
    (trials / "trial-2.json").write_bytes(one)


# (id, damage to a copy of the pristine record, command, exit code, fragments of the error line)
RECORD_CASES = [
    ("results-truncated", _truncate("results.json"), "check", 2, ["results.json", "invalid JSON"]),
    (
        "results-number-tampered",
        lambda f: _edit_json(
            f / "results.json", lambda d: d["trials"][0]["cases"][1]["timing"]["base"].update(median_ns=1.0)
        ),
        "check",
        2,
        ["results.json", "trial 1 differs from its trial file", "cases[1].timing.base.median_ns"],
    ),
    (
        "results-version-2",
        lambda f: _edit_json(f / "results.json", lambda d: d.update(results_version=2)),
        "check",
        2,
        ["results.json: results_version: ", "not 1"],
    ),
    ("results-not-an-object", _results_text("[1, 2, 3]"), "check", 2, ["results.json: expected a JSON object"]),
    (
        "results-nan",
        lambda f: (f / "results.json").write_text(
            (f / "results.json").read_text().replace('"ratio": ', '"ratio": NaN, "x": ', 1)
        ),
        "check",
        2,
        ["results.json: trials[0].cases[0].stats.ratio: ", "not a finite number"],
    ),
    (
        "results-duplicate-key",
        lambda f: (f / "results.json").write_text(
            (f / "results.json").read_text().replace("{", '{"plan_name": "forged",', 1)
        ),
        "check",
        2,
        ["results.json: plan_name: ", "given twice"],
    ),
    (
        "results-nested-too-deeply",
        _results_text("[" * 100_000 + "]" * 100_000),
        "check",
        2,
        ["results.json: JSON nested too deeply"],
    ),
    (
        "results-huge-integer",
        _results_text('{"results_version": 1' + "0" * 5000 + "}"),
        "check",
        2,
        ["results.json: invalid JSON"],
    ),
    (
        "trial-unknown-field",
        lambda f: _edit_json(f / "trials/trial-1.json", lambda d: d.update(colour="blue")),
        "check",
        2,
        ["trial-1.json: colour: unknown field"],
    ),
    (
        "trial-missing-field",
        lambda f: _edit_json(f / "trials/trial-2.json", lambda d: d.pop("samples_sha256")),
        "check",
        2,
        ["trial-2.json: samples_sha256: required field is missing"],
    ),
    (
        "trial-wrong-type",
        lambda f: _edit_json(f / "trials/trial-1.json", lambda d: d.update(cases="all")),
        "report",
        2,
        ["trial-1.json: cases: "],
    ),
    ("trial-truncated", _truncate("trials/trial-2.json"), "check", 2, ["trial-2.json: invalid JSON"]),
    ("trial-files-swapped", _swap_trial_files, "report", 2, ["trial-1.json: index: holds trial 2"]),
    (
        "trial-renamed-with-leading-zero",
        lambda f: (f / "trials/trial-1.json").rename(f / "trials/trial-01.json"),
        "check",
        2,
        ["trial-01.json: index: holds trial 1"],
    ),
    ("ledger-line-not-json", _append_ledger(b"this is not json\n"), "check", 2, ["ledger.jsonl: line 5 is not JSON"]),
    (
        "ledger-line-cut-short",
        _append_ledger(b'{"event": "trial_started", "tri'),
        "check",
        2,
        ["ledger.jsonl: line 5 is not JSON"],
    ),
    (
        "ledger-trial-not-a-number",
        _append_ledger(b'{"event": "trial_started", "trial": "3"}\n'),
        "check",
        2,
        ["ledger.jsonl: line 5 is not a ledger event"],
    ),
    ("ledger-not-utf8", _append_ledger(b"\xff\xfe\x00\x00\n"), "check", 2, ["ledger.jsonl: unreadable ledger"]),
    (
        "samples-missing",
        lambda f: (f / "trials/trial-1.npz").unlink(),
        "check",
        2,
        ["trials/trial-1.json: its raw samples trials/trial-1.npz are missing"],
    ),
    (
        "samples-not-a-zip",
        _replace_samples(b"PK? not a zip at all"),
        "check",
        2,
        ["trial-1.npz: unreadable raw samples"],
    ),
    ("samples-object-dtype", _object_samples, "check", 2, ["trial-1.npz: unreadable raw samples", "object arrays"]),
    (
        "samples-header-cut-short",
        _replace_samples(_npz({"N=1024/base/ns.npy": _npy("{'descr': '<f8', 'fortran_order': False, 'sha")})),
        "check",
        2,
        ["trial-1.npz: unreadable raw samples", "unreadable .npy header"],
    ),
    (
        "samples-unknown-dtype",
        _replace_samples(
            _npz({"N=1024/base/ns.npy": _npy("{'descr': 'no-such-type', 'fortran_order': False, 'shape': (1,)}")})
        ),
        "check",
        2,
        ["trial-1.npz: unreadable raw samples", "unknown dtype"],
    ),
    (
        "samples-file-outside-record",
        _samples_at("../../../etc/hostname"),
        "check",
        2,
        ["trial-1.json: samples_file", "outside the record"],
    ),
    (
        "samples-file-is-a-folder",
        _samples_at("trials"),
        "check",
        2,
        ["trial-1.json: its raw samples trials are not a file"],
    ),
    (
        "readme-edited-by-hand",
        lambda f: (f / "README.md").write_text((f / "README.md").read_text() + "It is faster.\n"),
        "check",
        2,
        ["README.md line", "extra line", "It is faster."],
    ),
    ("record-plan-edited", _plan_edited, "report", 3, ["plan.json: its digest is", "edited after freezing"]),
    ("record-lock-wrong-digest", _lock_digest, "report", 3, ["plan.lock.json: digest 0000000000000000"]),
    (
        "record-lock-missing",
        lambda f: (f / "plan.lock.json").unlink(),
        "check",
        2,
        ["plan.json: no plan.lock.json beside it"],
    ),
    (
        "record-lock-version-9",
        lambda f: _edit_json(f / "plan.lock.json", lambda lock: lock.update(lock_version=9)),
        "report",
        2,
        ["plan.lock.json: lock_version: "],
    ),
]


@pytest.mark.parametrize(
    "damage, command, code, fragments", [c[1:] for c in RECORD_CASES], ids=[c[0] for c in RECORD_CASES]
)
def test_damaged_record_is_refused(rec, capsys, damage, command, code, fragments):
    damage(rec)
    argv = ["report", "--check", rec] if command == "check" else ["report", rec]
    line = refused(capsys, argv, code, *fragments)
    assert str(rec) in line


def test_record_plan_edited_is_a_check_problem_too(rec, capsys):
    _plan_edited(rec)
    code, _, err = run_cli(["report", "--check", rec], capsys)
    assert code == 3 and "Traceback" not in err
    assert f"qualify: check: {rec}: plan.json: its digest is " in err.splitlines()[0]


def test_record_folder_that_does_not_exist(tmp_path, capsys):
    refused(
        capsys, ["report", "--check", tmp_path / "nowhere"], 2, f"{tmp_path / 'nowhere' / 'plan.json'}: no such file"
    )


def test_record_that_is_a_file(tmp_path, capsys):
    (tmp_path / "record").write_text("not a folder")
    refused(capsys, ["report", tmp_path / "record"], 2, str(tmp_path / "record"), "cannot read")


def _another_plan(folder: Path) -> None:
    """The same record re-bound to a plan with another hypothesis (a consistent plan and lock)."""
    lock = json.loads((folder / "plan.lock.json").read_text())
    data = json.loads((folder / "plan.json").read_text())
    data["hypothesis"] = "another protocol"
    frozen = freeze_from_hashes(validate_plan(data, folder / "plan.json"), lock["files"])
    lock["plan_sha256"], lock["digest"] = frozen.plan_sha256, frozen.digest
    (folder / "plan.json").write_text(json.dumps(data))
    (folder / "plan.lock.json").write_text(json.dumps(lock))


def test_merging_records_of_different_plans(rec, other_device, tmp_path, capsys):
    other = Path(shutil.copytree(other_device, tmp_path / "other"))
    _another_plan(other)
    dest = tmp_path / "merged"
    refused(
        capsys, ["report", "--merge", dest, rec, other], 3, str(other / "plan.lock.json"), "only records of one plan"
    )
    assert not dest.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".merged")]  # no staging left behind


def test_merging_into_an_existing_record(rec, other_device, tmp_path, capsys):
    dest = Path(shutil.copytree(other_device, tmp_path / "dest"))
    before = {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    refused(capsys, ["report", "--merge", dest, rec, other_device], 3, str(dest), "not empty")
    assert {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()} == before


def test_merging_into_a_file(rec, other_device, tmp_path, capsys):
    dest = tmp_path / "results.txt"
    dest.write_text("keep me")
    refused(capsys, ["report", "--merge", dest, rec, other_device], 3, str(dest))
    assert dest.read_text() == "keep me"


def test_merging_a_record_with_a_damaged_ledger(rec, other_device, tmp_path, capsys):
    _append_ledger(b'{"event": "trial_ended", "trial": 2, "sta')(rec)
    refused(capsys, ["report", "--merge", tmp_path / "m", other_device, rec], 2, str(rec / "ledger.jsonl"), "line 5")
    assert not (tmp_path / "m").exists()


def test_merging_a_record_whose_samples_lie_outside_it(rec, other_device, tmp_path, capsys):
    # a forger pointing samples_file at another record's evidence (its sha256 would then match)
    elsewhere = other_device / "trials" / "trial-1.npz"
    _samples_at(str(Path("..") / ".." / elsewhere.relative_to(rec.parent.parent)))(rec)
    _edit_json(rec / "trials" / "trial-1.json", lambda d: d.update(samples_sha256=sha256_file(elsewhere)))
    refused(
        capsys,
        ["report", "--merge", tmp_path / "m", rec],
        2,
        f"{rec / 'trials' / 'trial-1.json'}: samples_file: ",
        "lies outside the record",
    )
    assert not (tmp_path / "m").exists()


def test_merging_a_record_with_tampered_samples(rec, other_device, tmp_path, capsys):
    path = rec / "trials" / "trial-2.npz"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    refused(capsys, ["report", "--merge", tmp_path / "m", rec, other_device], 2, str(path), "sha256 differs")
    assert not (tmp_path / "m").exists()


# ---------------------------------------------------------------------------------------------
# plans


def _freeze(path: Path, capsys) -> None:
    code, out, err = run_cli(["plan", "freeze", path], capsys)
    assert code == 0, err


def _plan_with(tmp_path, change) -> Path:
    plan = plan_copy()
    change(plan)
    return make_repo(tmp_path, plan)


def _shape(value):
    return lambda p: p["workload"]["buffers"][0].update(shape=[value])


def _raw_plan(tmp_path, transform) -> Path:
    """A plan written as text, so that JSON Python would not emit (NaN, repeated keys) can be planted."""
    path = make_repo(tmp_path)
    path.write_text(transform(path.read_text()))
    return path


# (id, build the plan under tmp_path -> path, field, fragments of the message)
PLAN_CASES = [
    ("expr-overflow", lambda t: _plan_with(t, _shape("2**62 * 4")), "workload.buffers[0].shape[0]", ["exceeds"]),
    (
        "expr-overflow-beyond-float-range",
        lambda t: _plan_with(t, _shape("(2**62) ** 64")),
        "workload.buffers[0].shape[0]",
        ["exceeds"],
    ),
    (
        "expr-absurd-allocation",
        lambda t: _plan_with(t, _shape("2 ** 40")),
        "workload.buffers[0].shape",
        ["bytes exceeds the 68,719,476,736-byte limit"],
    ),
    (
        "expr-complex-result",
        lambda t: _plan_with(t, _shape("(N - 2 * N) ** 0.5")),
        "workload.buffers[0].shape[0]",
        ["not a real number"],
    ),
    (
        "expr-deeply-nested",
        lambda t: _plan_with(t, _shape("(" * 1000 + "N" + ")" * 1000)),
        "workload.buffers[0].shape[0]",
        ["longer than 200 characters"],
    ),
    (
        "expr-very-long",
        lambda t: _plan_with(t, _shape(" + ".join(["N"] * 500))),
        "workload.buffers[0].shape[0]",
        ["longer than 200 characters"],
    ),
    ("expr-unicode-identifier", lambda t: _plan_with(t, _shape("Ｎ")), "workload.buffers[0].shape[0]", ["only ASCII"]),
    (
        "expr-unicode-function",
        lambda t: _plan_with(t, lambda p: p["workload"]["launch"].update(grid=["ｃｄｉｖ(N, THREADS * VEC)"])),
        "workload.launch.grid[0]",
        ["only ASCII"],
    ),
    (
        "param-beyond-float-range",
        lambda t: _plan_with(
            t,
            lambda p: (
                p["workload"]["params"].update(BIG=1e308),
                p["workload"]["launch"]["args"][3].update(value="BIG * BIG"),
            ),
        ),
        "workload.launch.args[3].value",
        ["exceeds"],
    ),
    (
        "json-nan",
        lambda t: _raw_plan(t, lambda s: s.replace('"min_speedup_pct": 1.0', '"min_speedup_pct": NaN')),
        "acceptance.gates[0].min_speedup_pct",
        ["nan is not a finite number"],
    ),
    (
        "json-infinity",
        lambda t: _raw_plan(t, lambda s: s.replace('"max_wall_seconds": 60', '"max_wall_seconds": Infinity')),
        "budget.max_wall_seconds",
        ["inf is not a finite number"],
    ),
    (
        "json-minus-infinity",
        lambda t: _raw_plan(t, lambda s: s.replace('"value": 0.5', '"value": -Infinity')),
        "workload.launch.args[3].value",
        ["-inf is not a finite number"],
    ),
    (
        "json-float-overflow",
        lambda t: _raw_plan(t, lambda s: s.replace('"kind": "normal"', '"kind": "normal", "std": 1e400')),
        "workload.buffers[0].init.std",
        ["inf is not a finite number"],
    ),
    (
        "json-duplicate-top-level-key",
        lambda t: _raw_plan(t, lambda s: s.replace("{", '{"name": "forged",', 1)),
        "name",
        ["given twice"],
    ),
    (
        "json-duplicate-nested-key",
        lambda t: _raw_plan(t, lambda s: s.replace('"name": "y",', '"name": "y", "dtype": "f64",')),
        "workload.buffers[1].dtype",
        ["given twice"],
    ),
    ("name-path-traversal", lambda t: _plan_with(t, lambda p: p.update(name="../../etc")), "name", []),
    (
        "pre-include-option",
        lambda t: _plan_with(t, lambda p: p["arms"]["base"].update(options=["--pre-include=/etc/hostname"])),
        "arms.base.options[0]",
        ["pre-included header is not frozen"],
    ),
    (
        "pre-include-short-option",
        lambda t: _plan_with(t, lambda p: p["arms"]["candidate"].update(options=["-include", "/etc/hostname"])),
        "arms.candidate.options[0]",
        ["pre-included header is not frozen"],
    ),
    (
        "include-dir-outside",
        lambda t: _plan_with(t, lambda p: p["arms"]["base"].update(include_dirs=["../../.."])),
        "arms.base.include_dirs[0]",
        ["not a folder inside the repository"],
    ),
]


@pytest.mark.parametrize("build, field, fragments", [c[1:] for c in PLAN_CASES], ids=[c[0] for c in PLAN_CASES])
def test_hostile_plan_exits_2_naming_the_field(tmp_path, capsys, build, field, fragments):
    path = build(tmp_path)
    refused(capsys, ["plan", "check", "--no-compile", path], 2, f"qualify: error: {path}: {field}: ", *fragments)


def test_huge_integer_literal(tmp_path, capsys):
    path = _raw_plan(tmp_path, lambda s: s.replace('"base": 7', '"base": 7' + "0" * 5000))
    refused(capsys, ["plan", "check", "--no-compile", path], 2, f"{path}: invalid JSON")


def test_five_megabyte_plan(tmp_path, capsys):
    path = make_repo(tmp_path, {**plan_copy(), "hypothesis": "x" * (5 * 2**20)})
    refused(capsys, ["plan", "check", "--no-compile", path], 2, f"{path}: larger than")


def test_plan_path_that_is_a_folder(tmp_path, capsys):
    path = make_repo(tmp_path)
    refused(capsys, ["plan", "check", "--no-compile", path.parent], 2, f"{path.parent}: cannot read")


def test_deep_but_short_nesting_is_plain_arithmetic(tmp_path, capsys):
    """The 200-character cap is what bounds nesting; inside it, parentheses are just arithmetic."""
    path = _plan_with(tmp_path, _shape("(" * 99 + "N" + ")" * 99))
    code, _, err = run_cli(["plan", "check", "--no-compile", path], capsys)
    assert code == 0, err


def test_source_symlinked_outside_the_repository(tmp_path, capsys):
    outside = tmp_path / "elsewhere.cu"
    outside.write_text((Path(__file__).parent / "plans.py").read_text())
    path = make_repo(tmp_path / "repo")
    (tmp_path / "repo" / "kernels" / "k.cu").unlink()
    (tmp_path / "repo" / "kernels" / "k.cu").symlink_to(outside)
    refused(capsys, ["plan", "check", "--no-compile", path], 2, f"{path}: arms.base.source: ", "outside the repository")


def test_source_that_is_a_folder(tmp_path, capsys):
    path = _plan_with(tmp_path, lambda p: p["arms"]["base"].update(source="../../kernels"))
    refused(capsys, ["plan", "check", "--no-compile", path], 2, f"{path}: arms.base.source: ", "not a regular file")


def test_unreadable_header(tmp_path, capsys, monkeypatch):
    path = make_repo(tmp_path)
    header = (tmp_path / "kernels" / "common.cuh").resolve()
    real_open = os.open

    def refuse(file, *args, **kwargs):  # chmod 000 would not stop root, who runs some CI
        if Path(file).resolve() == header:
            raise PermissionError(13, "Permission denied")
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    refused(
        capsys,
        ["plan", "check", "--no-compile", path],
        2,
        f"{path}: arms.base.source: ",
        "cannot read common.cuh: Permission denied",
    )


def test_include_cycle_ends_and_freezes_both_headers(tmp_path, capsys):
    path = make_repo(tmp_path)
    kernels = tmp_path / "kernels"
    (kernels / "common.cuh").write_text('#pragma once\n#include "b.cuh"\n' + (kernels / "common.cuh").read_text())
    (kernels / "b.cuh").write_text('#pragma once\n#include "common.cuh"\n#include "b.cuh"\n')
    _freeze(path, capsys)
    lock = json.loads(path.with_name("plan.lock.json").read_text())
    assert sorted(lock["files"]) == ["kernels/b.cuh", "kernels/common.cuh", "kernels/k.cu"]


def test_include_of_a_file_outside_the_repository(tmp_path, capsys):
    (tmp_path / "outside.cuh").write_text("#define LEAK 1\n")
    path = make_repo(tmp_path / "repo")
    source = tmp_path / "repo" / "kernels" / "k.cu"
    source.write_text('#include "../../outside.cuh"\n' + source.read_text())
    refused(
        capsys,
        ["plan", "check", "--no-compile", path],
        2,
        f"{path}: arms.base.source: ",
        "includes '../../outside.cuh', which is outside the repository",
    )


def test_header_symlinked_outside_the_repository(tmp_path, capsys):
    (tmp_path / "outside.cuh").write_text("#define LEAK 1\n")
    path = make_repo(tmp_path / "repo")
    header = tmp_path / "repo" / "kernels" / "common.cuh"
    header.unlink()
    header.symlink_to(tmp_path / "outside.cuh")
    refused(capsys, ["plan", "check", "--no-compile", path], 2, f"{path}: arms.base.source: ", "outside the repository")


def test_header_named_in_angle_brackets_is_frozen(tmp_path, capsys):
    """NVRTC finds <common.cuh> through the source folder qualify passes as an include path."""
    path = make_repo(tmp_path)
    source = tmp_path / "kernels" / "k.cu"
    source.write_text(source.read_text().replace('#include "common.cuh"', "#include <common.cuh>"))
    _freeze(path, capsys)
    (tmp_path / "kernels" / "common.cuh").write_text("#define CHANGED 1\n")
    refused(capsys, ["plan", "check", "--no-compile", path], 3, "kernels/common.cuh: changed after freezing")


def test_header_of_a_header_found_through_the_source_folder_is_frozen(tmp_path, capsys):
    path = make_repo(tmp_path)
    kernels = tmp_path / "kernels"
    (kernels / "detail").mkdir()
    (kernels / "detail" / "inner.cuh").write_text('#include "common.cuh"\n')  # resolved by -I kernels/
    source = kernels / "k.cu"
    source.write_text(source.read_text().replace('#include "common.cuh"', '#include "detail/inner.cuh"'))
    _freeze(path, capsys)
    lock = json.loads(path.with_name("plan.lock.json").read_text())
    assert "kernels/common.cuh" in lock["files"]


# frozen inputs


@pytest.fixture
def frozen_plan(tmp_path, capsys) -> Path:
    path = make_repo(tmp_path)
    _freeze(path, capsys)
    return path


def test_plan_edited_after_freezing(frozen_plan, capsys):
    _edit_json(frozen_plan, lambda p: p["acceptance"]["gates"][0].update(min_speedup_pct=0.5))
    refused(capsys, ["plan", "check", "--no-compile", frozen_plan], 3, f"{frozen_plan}: changed after freezing")
    refused(capsys, ["plan", "freeze", frozen_plan], 3, f"{frozen_plan}: changed after freezing")


def test_source_edited_after_freezing(frozen_plan, tmp_path, capsys):
    source = tmp_path / "kernels" / "k.cu"
    source.write_text(source.read_text() + "// harmless?\n")
    refused(capsys, ["plan", "check", "--no-compile", frozen_plan], 3, "kernels/k.cu: changed after freezing")


def test_header_edited_after_freezing(frozen_plan, tmp_path, capsys):
    (tmp_path / "kernels" / "common.cuh").write_text(
        "#define SNEAKY 1\n" + (tmp_path / "kernels" / "common.cuh").read_text()
    )
    refused(capsys, ["plan", "freeze", frozen_plan], 3, "kernels/common.cuh: changed after freezing")


def test_lock_that_is_not_json(frozen_plan, capsys):
    lock = frozen_plan.with_name("plan.lock.json")
    lock.write_text("digest = 'abc'\n")
    refused(capsys, ["plan", "check", "--no-compile", frozen_plan], 2, f"{lock}: unreadable lock file")


def test_lock_version_9(frozen_plan, capsys):
    lock = frozen_plan.with_name("plan.lock.json")
    _edit_json(lock, lambda d: d.update(lock_version=9))
    refused(capsys, ["plan", "check", "--no-compile", frozen_plan], 2, f"{lock}: lock_version: ")


def test_lock_with_a_wrong_digest(frozen_plan, capsys):
    lock = frozen_plan.with_name("plan.lock.json")
    _edit_json(lock, lambda d: d.update(digest="f" * 64))
    refused(capsys, ["plan", "check", "--no-compile", frozen_plan], 3, f"{lock}: digest differs from the lock")


def test_lock_files_not_an_object(frozen_plan, capsys):
    lock = frozen_plan.with_name("plan.lock.json")
    _edit_json(lock, lambda d: d.update(files=list(d["files"])))
    refused(capsys, ["plan", "check", "--no-compile", frozen_plan], 2, f"{lock}: files: ")


def test_lock_with_a_repeated_key(frozen_plan, capsys):
    lock = frozen_plan.with_name("plan.lock.json")
    lock.write_text(lock.read_text().replace("{", '{"digest": "' + "0" * 64 + '",', 1))
    refused(capsys, ["plan", "check", "--no-compile", frozen_plan], 2, f"{lock}: digest: ", "given twice")


# ---------------------------------------------------------------------------------------------
# shared-library arms


def _elf(e_type: int) -> bytes:
    """A 64-byte little-endian ELF header of the given type (3: shared object, 2: executable)."""
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    return ident + e_type.to_bytes(2, "little") + (62).to_bytes(2, "little") + bytes(44)


def library_plan(**arm) -> dict:
    plan = plan_copy()
    call = plan["workload"].pop("launch")["args"]
    plan["workload"]["call"] = call
    for side in ("base", "candidate"):
        plan["arms"][side] = {
            "kind": "library",
            "library": f"../../lib/lib{side}.so",
            "symbol": "axpy_run",
            "signature": ["ptr", "ptr", "ptr", "f32", "i64"],
            "params": {"VEC": 1 if side == "base" else 4},
            **arm,
        }
    return plan


def library_repo(tmp_path, plan: dict, base: bytes = _elf(3)) -> Path:
    path = make_repo(tmp_path, plan)
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libbase.so").write_bytes(base)
    (tmp_path / "lib" / "libcandidate.so").write_bytes(_elf(3))
    return path


def test_a_valid_library_plan_checks(tmp_path, capsys):
    """Guards the library table: each case fails because of its one change."""
    path = library_repo(tmp_path, library_plan())
    code, out, err = run_cli(["plan", "check", "--no-compile", path], capsys)
    assert code == 0, err


LIBRARY_CASES = [
    ("library-missing", library_plan(), None, "arms.base.library", ["no such file"]),
    ("library-not-elf", library_plan(), b"INPUT(-lc)\n", "arms.base.library", ["not an ELF file"]),
    ("library-is-an-executable", library_plan(), _elf(2), "arms.base.library", ["not a shared object"]),
    ("library-elf-header-cut-short", library_plan(), b"\x7fELF\x02", "arms.base.library", ["truncated ELF header"]),
    ("library-is-a-folder", library_plan(library="../../lib"), _elf(3), "arms.base.library", ["not a regular file"]),
    (
        "library-outside-repository",
        library_plan(library="/bin/sh"),
        _elf(3),
        "arms.base.library",
        ["outside the repository"],
    ),
    (
        "signature-too-short",
        library_plan(signature=["ptr", "ptr", "ptr", "f32"]),
        _elf(3),
        "arms.base.signature",
        ["4 types for 5 arguments"],
    ),
    (
        "signature-wrong-type",
        library_plan(signature=["ptr", "ptr", "ptr", "f64", "i64"]),
        _elf(3),
        "arms.base.signature[3]",
        ["'f64' but workload.call[3] is 'f32'"],
    ),
    (
        "signature-unknown-type",
        library_plan(signature=["ptr", "ptr", "ptr", "f32", "i128"]),
        _elf(3),
        "arms.base.signature[4]",
        [],
    ),
    ("symbol-not-an-identifier", library_plan(symbol="axpy_run; rm -rf ~"), _elf(3), "arms.base.symbol", ["pattern"]),
    (
        "abi-symbol-without-version",
        library_plan(abi_symbol="axpy_abi"),
        _elf(3),
        "arms.base.abi_version",
        ["go together"],
    ),
]


@pytest.mark.parametrize(
    "plan, base, field, fragments", [c[1:] for c in LIBRARY_CASES], ids=[c[0] for c in LIBRARY_CASES]
)
def test_hostile_library_arm_exits_2_naming_the_field(tmp_path, capsys, plan, base, field, fragments):
    path = library_repo(tmp_path, plan, base if base is not None else _elf(3))
    if base is None:
        (tmp_path / "lib" / "libbase.so").unlink()
    refused(capsys, ["plan", "check", "--no-compile", path], 2, f"qualify: error: {path}: {field}: ", *fragments)


# ---------------------------------------------------------------------------------------------


NOT_ONE_INPUT = {  # guards of the tables, the tables' own runners, and this count
    "test_the_pristine_record_checks_and_re_renders",
    "test_deep_but_short_nesting_is_plain_arithmetic",
    "test_a_valid_library_plan_checks",
    "test_damaged_record_is_refused",
    "test_hostile_plan_exits_2_naming_the_field",
    "test_hostile_library_arm_exits_2_naming_the_field",
    "test_at_least_40_distinct_hostile_inputs",
    "test_record_plan_edited_is_a_check_problem_too",  # record-plan-edited again, through --check
}


def test_at_least_40_distinct_hostile_inputs():
    tabled = [c[0] for c in RECORD_CASES + PLAN_CASES + LIBRARY_CASES]
    single = [name for name in globals() if name.startswith("test_") and name not in NOT_ONE_INPUT]
    assert len(set(tabled)) == len(tabled)
    assert len(tabled) + len(single) >= 40
