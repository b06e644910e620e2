"""`qualify compare`: shared-library arms, argument marshalling and error paths, with small
CPU-only libraries built here (the fake device hands them host memory at real addresses)."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from qualify.cli import main
from qualify.errors import PlanError
from qualify.plan.model import LibraryArm
from qualify.run.library import EntryPointFailed, load_library

LIB = r"""
/* `helper` has the same name in every build: with RTLD_GLOBAL one build's entry point would
   call the other's helper. */
float helper(void) { return FACTOR; }
int scale(const float* in, float* out, int n, float a, void* stream) {
    (void)stream;
    if (n < 0) return 1;
    for (int i = 0; i < n; ++i) out[i] = in[i] * a * helper();
    if (FAIL) return FAIL;
    return 0;
}
int abi_version(void) { return 3; }
const char* error_string(int status) { return status == 7 ? "invalid argument" : "unknown"; }
"""

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs a C compiler")


def build(tmp_path: Path, name: str, factor: float = 1.0, fail: int = 0, source: str = LIB) -> Path:
    src = tmp_path / f"{name}.c"
    src.write_text(source)
    out = tmp_path / f"lib{name}.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", f"-DFACTOR={factor}f", f"-DFAIL={fail}", str(src), "-o", str(out)],
        check=True,
    )
    return out


ARM = {
    "kind": "library",
    "symbol": "scale",
    "signature": ["ptr", "ptr", "i32", "f32"],
    "abi_symbol": "abi_version",
    "abi_version": 3,
    "error_symbol": "error_string",
}


def arm(**changes) -> LibraryArm:
    return LibraryArm.model_validate({**ARM, **changes})


def call(entry, values: np.ndarray, a: float = 2.0) -> np.ndarray:
    out = np.zeros_like(values)
    entry.call([("ptr", values.ctypes.data), ("ptr", out.ctypes.data), ("i32", values.size), ("f32", a)], 0)
    return out


def test_two_builds_with_the_same_symbols_stay_apart(tmp_path):
    a = load_library("base", build(tmp_path, "a", factor=1.0), arm(), "arms.base.library")
    b = load_library("candidate", build(tmp_path, "b", factor=3.0), arm(), "arms.candidate.library")
    x = np.arange(4, dtype=np.float32)
    assert np.array_equal(call(a, x), x * 2)
    assert np.array_equal(call(b, x), x * 6)  # b's own helper, not a's
    assert a.abi_version == b.abi_version == 3


def test_the_same_file_twice_gets_two_handles(tmp_path):
    lib = build(tmp_path, "same")
    a = load_library("base", lib, arm(), "arms.base.library")
    b = load_library("candidate", lib, arm(), "arms.candidate.library")
    assert a.handle._handle != b.handle._handle
    assert a.sha256 == b.sha256


def test_non_zero_status_carries_the_librarys_message(tmp_path):
    entry = load_library("candidate", build(tmp_path, "fails", fail=7), arm(), "arms.candidate.library")
    with pytest.raises(EntryPointFailed, match="returned 7: invalid argument") as exc:
        call(entry, np.ones(2, dtype=np.float32))
    assert exc.value.status == 7


@pytest.mark.parametrize(
    "changes, field, fragment",
    [
        ({"symbol": "scale_v2"}, "arms.base.symbol", "no symbol 'scale_v2'"),
        ({"abi_version": 4}, "arms.base.abi_version", "ABI version 3, the plan requires 4"),
        ({"abi_symbol": "abi_v9", "abi_version": 3}, "arms.base.abi_symbol", "no ABI symbol"),
    ],
)
def test_library_errors_name_the_file_and_field(tmp_path, changes, field, fragment):
    lib = build(tmp_path, "x")
    with pytest.raises(PlanError) as exc:
        load_library("base", lib, arm(**changes), "arms.base.library")
    assert exc.value.field == field and fragment in exc.value.message and exc.value.file == str(lib)


def test_not_a_library(tmp_path):
    bogus = tmp_path / "libnot.so"
    bogus.write_text("not an ELF file")
    with pytest.raises(PlanError, match="not a shared library: not an ELF file"):
        load_library("base", bogus, arm(), "arms.base.library")


# --- through the pipeline ------------------------------------------------------------------

PLAN = {
    "schema_version": 1,
    "name": "scale-entry",
    "hypothesis": "the candidate build is not slower",
    "independent_variable": "build of the library",
    "revisions": {"base": "v1", "candidate": "v2"},
    "hardware": {"devices": [{"compute_capability": "9.0"}], "architectures": ["sm_90"]},
    "arms": {"base": ARM, "candidate": ARM},
    "workload": {
        "cases": [{"N": 256}, {"N": 1000}],
        "buffers": [
            {"name": "x", "dtype": "f32", "shape": ["N"], "role": "input", "init": {"kind": "normal"}},
            {"name": "y", "dtype": "f32", "shape": ["N"], "role": "output"},
        ],
        "call": [
            {"kind": "buffer", "name": "x"},
            {"kind": "buffer", "name": "y"},
            {"kind": "i32", "value": "N"},
            {"kind": "f32", "value": 2.0},
        ],
    },
    "seeds": {"base": 3},
    "schedule": {"warmup": 1, "samples_per_block": 2, "blocks": 2, "trials": 1},
    "budget": {"max_trials": 2, "max_samples": 8, "max_wall_seconds": 60},
    "stop": {"min_blocks": 2},
    "controls": {"aa": False},
}


def frozen_plan(tmp_path, trials: int = 1) -> Path:
    from plans import make_repo

    plan = copy.deepcopy(PLAN)
    plan["schedule"]["trials"] = trials
    path = make_repo(tmp_path, plan)
    with pytest.raises(SystemExit):
        main(["plan", "freeze", str(path)])
    return path


def compare(tmp_path, base: Path, cand: Path, trials: int = 1, run_trials: int | None = None, **device_kw):
    from qualify.commands.pipeline import load_frozen, run_plan
    from qualify.run.fake import FakeDevice, FakeTelemetry

    loaded = load_frozen(frozen_plan(tmp_path, trials))
    device = FakeDevice({}, **device_kw)
    return run_plan(
        loaded,
        tmp_path / "record",
        lambda: device,
        lambda u: FakeTelemetry(),
        libraries={"base": base, "candidate": cand},
        trials=run_trials,
    )


def test_identical_builds_have_byte_parity_and_are_recorded(tmp_path):
    lib = build(tmp_path, "v1")
    outcome = compare(tmp_path, lib, build(tmp_path, "v2"))
    (trial,) = outcome.trials
    assert trial.status == "complete", trial.failures
    assert all(p.equal for c in trial.cases for p in c.parity)
    assert trial.libraries["base"].sha256 != trial.libraries["candidate"].sha256
    assert trial.libraries["candidate"].path.endswith("libv2.so")
    assert all(c.resources == {} for c in trial.cases)  # no kernel attributes for an entry point


def test_a_different_result_fails_parity(tmp_path):
    outcome = compare(tmp_path, build(tmp_path, "v1"), build(tmp_path, "v3", factor=1.5))
    (trial,) = outcome.trials
    assert trial.failures[0].kind == "fidelity"
    assert outcome.results.verdict.status == "not_qualified"


def test_a_failing_entry_point_is_recorded_with_its_status(tmp_path):
    outcome = compare(tmp_path, build(tmp_path, "v1"), build(tmp_path, "bad", fail=7))
    (trial,) = outcome.trials
    assert trial.status == "failed"
    assert "returned 7: invalid argument" in trial.failures[0].message
    assert trial.failures[0].side == "candidate"
    assert outcome.results.verdict.status == "not_qualified"


def test_work_escaping_the_stream_is_flagged(tmp_path):
    outcome = compare(tmp_path, build(tmp_path, "v1"), build(tmp_path, "v2"), busy_after_ns=300_000)
    (trial,) = outcome.trials
    escapes = [f for f in trial.failures if "escaped" in f.message]
    assert escapes and all(c.stream_escape_ns["candidate"] > 50_000 for c in trial.cases)
    assert outcome.results.verdict.status == "not_qualified"


def test_another_build_needs_a_new_record(tmp_path):
    from qualify.errors import FrozenInputChanged

    compare(tmp_path, build(tmp_path, "v1"), build(tmp_path, "v2"), trials=2, run_trials=1)
    with pytest.raises(FrozenInputChanged, match="another candidate library"):
        compare(tmp_path, build(tmp_path, "v1"), build(tmp_path, "v4", factor=2.0), trials=2)
    from qualify.results.store import Record

    assert [t.status for t in Record(tmp_path / "record").trials_in_ledger()] == ["complete"]


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return exc.value.code, capsys.readouterr().err


def test_compare_without_plan(capsys):
    code, err = run_cli(["compare", "a.so", "b.so"], capsys)
    assert code == 2 and "needs --plan PLAN" in err and err.count("\n") == 1


def test_compare_with_cuda_arms_is_refused(tmp_path, capsys):
    from plans import make_repo

    path = make_repo(tmp_path)
    run_cli(["plan", "freeze", str(path)], capsys)
    lib = build(tmp_path, "v1")
    code, err = run_cli(["compare", str(lib), str(lib), "--plan", str(path)], capsys)
    assert code == 2 and "arms.base.kind" in err


def test_compare_with_a_missing_library(tmp_path, capsys):
    path = frozen_plan(tmp_path)
    code, err = run_cli(["compare", str(tmp_path / "nope.so"), str(tmp_path / "nope.so"), "--plan", str(path)], capsys)
    assert code == 2 and "nope.so: no such library" in err


def test_signature_must_match_the_call(tmp_path, capsys):
    from plans import make_repo

    plan = copy.deepcopy(PLAN)
    plan["arms"]["candidate"] = {**ARM, "signature": ["ptr", "ptr", "i32", "f64"]}
    path = make_repo(tmp_path, plan)
    code, err = run_cli(["plan", "check", str(path)], capsys)
    assert code == 2 and "arms.candidate.signature[3]" in err


def test_run_on_a_plan_whose_libraries_come_from_compare(tmp_path):
    """`qualify run` on a compare plan: a usage error before the ledger moves."""
    from qualify.commands.pipeline import load_frozen, run_plan
    from qualify.errors import UsageError
    from qualify.run.fake import FakeDevice, FakeTelemetry

    loaded = load_frozen(frozen_plan(tmp_path))
    with pytest.raises(UsageError, match="give it to `qualify compare`"):
        run_plan(loaded, tmp_path / "record", lambda: FakeDevice({}), lambda u: FakeTelemetry())
    assert not (tmp_path / "record").exists()  # nothing half-written
