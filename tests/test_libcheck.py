"""Library arms checked without a GPU: in `plan check` and at the start of `compare`, before the
driver is opened (the fake-free path: a missing driver must not be what the user sees)."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
from plans import make_repo
from test_compare import ARM, LIB, PLAN, arm, build

from qualify.build.elf import HOST_MACHINES, parse
from qualify.build.libcheck import check_library, host_machine
from qualify.cli import main
from qualify.errors import PlanError

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs a C compiler")


def test_symbols_and_machine_are_read_without_loading(tmp_path):
    elf = parse(build(tmp_path, "v1").read_bytes())
    symbols = elf.dynamic_symbols()
    assert {"scale", "abi_version", "error_string", "helper"} <= set(symbols)
    assert "printf" not in symbols  # imported names are not exports
    assert elf.machine == host_machine()


def test_a_good_library_passes(tmp_path):
    check_library(build(tmp_path, "v1"), arm(), "arms.base", need_load=True)


def with_machine(path: Path, machine: int) -> Path:
    data = bytearray(path.read_bytes())
    data[18:20] = machine.to_bytes(2, "little")
    out = path.with_name("libother.so")
    out.write_bytes(bytes(data))
    return out


@pytest.mark.parametrize(
    "make, changes, field, fragment",
    [
        (lambda p: p.with_name("nope.so"), {}, "arms.base.library", "no such library"),
        (
            lambda p: (p.with_name("t.so").write_text("text"), p.with_name("t.so"))[1],
            {},
            "arms.base.library",
            "not a shared library: not an ELF file",
        ),
        (lambda p: with_machine(p, 183 if host_machine() != 183 else 62), {}, "arms.base.library", "built for"),
        (lambda p: p, {"symbol": "scale_v2"}, "arms.base.symbol", "exports no function 'scale_v2'"),
        (lambda p: p, {"abi_symbol": "abi"}, "arms.base.abi_symbol", "exports no function 'abi'"),
        (lambda p: p, {"error_symbol": "strerr"}, "arms.base.error_symbol", "exports no function 'strerr'"),
        (lambda p: p, {"abi_version": 4}, "arms.base.abi_version", "ABI version 3, the plan requires 4"),
    ],
    ids=["missing", "not-elf", "machine", "entry", "abi-symbol", "error-symbol", "abi-version"],
)
def test_each_problem_names_its_field(tmp_path, make, changes, field, fragment):
    path = make(build(tmp_path, "v1"))
    with pytest.raises(PlanError) as exc:
        check_library(path, arm(**changes), "arms.base", need_load=True)
    assert exc.value.field == field
    assert fragment in exc.value.message


def test_an_executable_is_not_a_shared_library(tmp_path):
    src = tmp_path / "main.c"
    src.write_text("int main(void) { return 0; }\n")
    exe = tmp_path / "main.so"
    import subprocess

    subprocess.run(["gcc", "-no-pie", str(src), "-o", str(exe)], check=True)
    with pytest.raises(PlanError, match="not a shared object"):
        check_library(exe, arm(), "arms.base")


def test_a_library_whose_constructor_crashes_is_named_not_fatal(tmp_path):
    crashing = build(
        tmp_path, "boom", source=LIB + "__attribute__((constructor)) static void boom(void) { __builtin_trap(); }\n"
    )
    with pytest.raises(PlanError, match="cannot load to read its ABI version: abi_version\\(\\) ended the process"):
        check_library(crashing, arm(), "arms.base", need_load=True)
    check_library(crashing, arm(), "arms.base")  # plan check leaves the ABI to the run; no crash here


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return exc.value.code, capsys.readouterr().err


def test_plan_check_reads_a_library_the_plan_names(tmp_path, capsys):
    plan = copy.deepcopy(PLAN)
    plan["arms"]["base"] = {**ARM, "library": "../../lib/libv1.so"}
    plan["arms"]["candidate"] = {**ARM, "library": "../../lib/libv2.so", "symbol": "scale_fast"}
    lib = build(tmp_path, "v1")
    path = make_repo(tmp_path / "repo", plan, files={"lib/libv1.so": lib, "lib/libv2.so": lib})
    code, err = run_cli(["plan", "check", str(path)], capsys)
    assert code == 2
    assert (
        err
        == "qualify: error: ../../lib/libv2.so: arms.candidate.symbol: the library exports no function 'scale_fast'\n"
    )


def test_compare_refuses_a_wrong_file_before_the_driver(tmp_path, capsys, monkeypatch):
    from test_compare import frozen_plan

    import qualify.run.device as device

    def no_driver(*a, **k):
        raise AssertionError("the driver was opened before the libraries were checked")

    monkeypatch.setattr(device, "CudaDevice", no_driver)
    path = frozen_plan(tmp_path)
    good = build(tmp_path, "v1")
    bogus = tmp_path / "libbogus.so"
    bogus.write_text("#!/bin/sh\n")
    code, err = run_cli(["compare", str(good), str(bogus), "--plan", str(path)], capsys)
    assert code == 2 and "arms.candidate.library: not a shared library: not an ELF file" in err
    v4 = build(tmp_path, "v4", source=LIB.replace("return 3;", "return 4;"))
    code, err = run_cli(["compare", str(good), str(v4), "--plan", str(path)], capsys)
    assert code == 2 and "arms.candidate.abi_version: ABI version 4, the plan requires 3" in err


def test_host_machine_is_known_here():
    import platform

    assert platform.machine().lower() in HOST_MACHINES
