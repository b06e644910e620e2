"""Both arms' machine code compared in a trial: the engine's record of it, the verdict's free-A/A
rule and the README's section. NVRTC arms are compiled here; library arms are the nvcc fixtures."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import fakes
import pytest
from plans import HEADER, KERNEL, make_repo, plan_copy

from qualify.build.machine_code import CubinCode, FunctionCode
from qualify.evaluate.verdict import verdict
from qualify.plan.load import load_plan
from qualify.render.readme import render_readme
from qualify.results.model import BufferParity, KernelActivity, Results, TracedCall
from qualify.run import code_identity
from qualify.run.engine import RunOptions, TrialRunner
from qualify.run.fake import FakeDevice, FakeTelemetry

FATBINS = Path(__file__).parent / "fixtures" / "fatbin"
COMMENTED = "// the candidate: a comment, nothing else\n" + KERNEL


def plan_for(candidate: dict, gates: list[dict] | None = None) -> dict:
    plan = plan_copy()
    plan["schedule"] = {"warmup": 1, "samples_per_block": 3, "blocks": 2, "trials": 1}
    plan["budget"] = {"max_trials": 2, "max_samples": 12, "max_wall_seconds": 60}
    plan["acceptance"]["sanitizer"] = []
    if gates is not None:
        plan["acceptance"]["gates"] = gates
    plan["controls"] = {"aa": False}
    plan["arms"]["candidate"] = {**plan["arms"]["candidate"], **candidate}
    return plan


def trial_of(tmp_path, plan: dict, base_ns=10_000.0, cand_ns=8_000.0):
    files = {"kernels/k.cu": KERNEL, "kernels/k2.cu": COMMENTED, "kernels/common.cuh": HEADER}
    loaded = load_plan(make_repo(tmp_path, plan, files=files, freeze=True))
    device = FakeDevice({"axpy": fakes.axpy}, durations={"base": base_ns, "candidate": cand_ns})
    trial = TrialRunner(loaded, device, FakeTelemetry(), RunOptions(record_dir=tmp_path / "record")).run()
    assert trial.status == "complete", trial.failures
    return loaded, trial


def readme(loaded, trial) -> str:
    v = verdict(loaded.plan, [trial])
    results = Results(plan_name=loaded.plan.name, plan_digest=loaded.digest, files={}, trials=[trial], verdict=v)
    return render_readme(results, loaded.plan)


SAME_AS_BASE = {"source": "../../kernels/k2.cu", "kernel": "axpy<1>", "params": {"VEC": 1}}


def test_different_kernels_differ_and_the_verdict_judges_the_measurement(tmp_path):
    loaded, trial = trial_of(tmp_path, plan_for({}))  # axpy<1> against axpy<4>
    code = trial.code
    assert code.status == "differs" and code.arms == "nvrtc" and code.arch == "sm_90"
    assert code.digests["base"] != code.digests["candidate"]
    assert code.launches_match is False and not code.free_aa
    assert code.scope == "launched" and [f.name for f in code.launched["base"]] == ["_Z4axpyILi1EEvPKfS1_Pffx"]
    # the launched functions first, then the modules' own differences: the template's two
    # instantiations paired, then each as compared
    launched, pair, *rest = code.differences
    assert launched.startswith("the launched function: base axpy<1> ↔ candidate axpy<4>: different functions")
    assert pair.startswith("pair axpy<1> ↔ axpy<4>: instructions ")
    assert sorted(d.split(": ")[1] for d in rest) == ["only in base", "only in candidate"]
    assert verdict(loaded.plan, [trial]).gates[0].passed  # measured 20 % faster, the gate asks 1 %
    text = readme(loaded, trial)
    assert "## Machine code" in text and "machine code (compiled by NVRTC) differs" in text


def test_a_comment_only_candidate_is_a_free_aa(tmp_path):
    loaded, trial = trial_of(tmp_path, plan_for(SAME_AS_BASE))
    code = trial.code
    assert code.status == "identical" and code.launches_match is True and code.free_aa
    assert code.digests["base"] == code.digests["candidate"] and code.differences == []
    v = verdict(loaded.plan, [trial])
    # the fake timed the candidate 20 % faster: the gate reads the constructed ratio of 1, and the
    # measured difference is a timer that does not resolve the case
    assert v.status == "not_qualified"
    assert all(not g.passed and g.value_pct == 0.0 for g in v.gates)
    assert any("no change by construction" in r for r in v.reasons)
    assert any("identical machine code and launches measured faster" in r for r in v.reasons)
    text = readme(loaded, trial)
    assert "**Identical machine code: a free A/A.**" in text
    # the headline states the construction, and the measured difference only as the timer's
    assert "no change by construction (a free A/A); the timer measured it faster at both cases" in text
    assert "The candidate is faster" not in text


def test_a_free_aa_meets_a_regression_bound_whatever_was_measured(tmp_path):
    gates = [{"name": "no_regression", "where": "N >= 4096", "max_regression_pct": 1.0}]
    loaded, trial = trial_of(tmp_path, plan_for(SAME_AS_BASE, gates), base_ns=10_000.0, cand_ns=12_000.0)
    v = verdict(loaded.plan, [trial])
    assert [g.passed for g in v.gates] == [True]
    # measured 20 % slower; judged as measured it would miss
    measured = trial.model_copy(update={"code": trial.code.model_copy(update={"free_aa": False})})
    assert [g.passed for g in verdict(loaded.plan, [measured]).gates] == [False]


def test_identical_code_launched_differently_is_judged_as_measured(tmp_path):
    # the same kernel, but VEC=2 halves the grid (grid = cdiv(N, THREADS * VEC))
    loaded, trial = trial_of(tmp_path, plan_for({**SAME_AS_BASE, "params": {"VEC": 2}}))
    assert trial.code.status == "identical" and trial.code.launches_match is False and not trial.code.free_aa
    v = verdict(loaded.plan, [trial])
    assert not any("construction" in r for r in v.reasons)
    assert "launched differently" in readme(loaded, trial)


def test_library_fixtures():
    base, comment, change = (FATBINS / f"{n}.so" for n in ("base", "comment", "change"))
    same = code_identity.library(base, comment, "sm_90")
    assert same.status == "identical" and same.arms == "library" and same.functions == 2
    assert same.launches_match is None and not same.free_aa  # the launches are not known until traced
    differs = code_identity.library(base, change, "sm_89")
    assert differs.status == "differs" and differs.differences[-1].startswith("_Z5scalePfi: instructions")


def test_library_identity_that_cannot_be_decided_says_why(tmp_path, monkeypatch):
    base = FATBINS / "base.so"
    missing = code_identity.library(base, FATBINS / "comment.so", "sm_80")
    assert missing.status == "unknown" and "embeds no sm_80 code" in missing.reason
    host = code_identity.library(base, Path(sys.executable).resolve(), "sm_90")
    assert host.status == "unknown" and host.reason.startswith("the candidate library's device code: ")
    monkeypatch.setitem(sys.modules, "zstandard", None)
    zstd = code_identity.library(FATBINS / "zstd.so", base, "sm_90")
    assert zstd.status == "unknown" and "zstandard" in zstd.reason
    absent = code_identity.library(base, tmp_path / "nowhere.so", "sm_90")
    assert absent.status == "unknown" and "candidate" in absent.reason


def test_library_readme_says_the_timing_is_judged_as_measured(tmp_path):
    loaded, trial = trial_of(tmp_path, plan_for({}))
    code = code_identity.library(FATBINS / "base.so", FATBINS / "comment.so", "sm_90")
    text = readme(loaded, trial.model_copy(update={"code": code}))
    assert "**Identical machine code** for sm_90 in both libraries" in text
    assert "not known to match (no kernel inventory was taken), so the timing is judged as measured" in text


# --- library arms: the kernel inventory says whether the launches match --------------------------


def _call(name="fwd", grid=(4, 1, 1), regs=64, dyn=0, start=0):
    k = KernelActivity(
        name=name,
        grid=grid,
        block=(128, 1, 1),
        registers_per_thread=regs,
        static_shared_bytes=0,
        dynamic_shared_bytes=dyn,
        local_bytes_per_thread=0,
        start_ns=start,
        end_ns=start + 500,
        correlation_id=1,
        stream_id=1,
    )
    return TracedCall(event_ns=2_000.0, kernels=[k])


def _case(base_calls, cand_calls, equal=True):
    parity = [
        BufferParity(
            buffer="out",
            equal=equal,
            elements=8,
            differing_elements=0 if equal else 1,
            first_difference=None if equal else 3,
            max_ulp=None,
            max_abs=None,
            max_rel=None,
        )
    ]
    return SimpleNamespace(trace={"base": base_calls, "candidate": cand_calls}, parity=parity)


def _library_identical():
    return code_identity.library(FATBINS / "base.so", FATBINS / "comment.so", "sm_90")


def test_identical_library_code_with_the_same_traced_launches_is_a_free_aa():
    cases = [
        _case([_call(), _call(start=9_000)], [_call(start=100)]),
        _case([_call(grid=(8, 1, 1))], [_call(grid=(8, 1, 1))]),
    ]
    code = code_identity.with_traced_launches(_library_identical(), cases)
    assert code.launches_match is True and code.free_aa


@pytest.mark.parametrize(
    "change",
    [
        {"grid": (5, 1, 1)},
        {"regs": 65},
        {"dyn": 16},
        {"name": "other"},
    ],
)
def test_a_traced_launch_that_differs_in_any_part_keeps_the_timing_as_measured(change):
    cases = [_case([_call()], [_call(**change)])]
    code = code_identity.with_traced_launches(_library_identical(), cases)
    assert code.launches_match is False and not code.free_aa


def test_different_output_bytes_or_an_extra_kernel_are_not_a_free_aa():
    assert not code_identity.with_traced_launches(
        _library_identical(), [_case([_call()], [_call()], equal=False)]
    ).free_aa
    two = TracedCall(event_ns=1.0, kernels=_call().kernels * 2)
    assert not code_identity.with_traced_launches(_library_identical(), [_case([_call()], [two])]).free_aa
    # one arm whose calls disagree among themselves is not "the same launches" either
    assert not code_identity.with_traced_launches(
        _library_identical(), [_case([_call(), _call(grid=(2, 1, 1))], [_call(), _call(grid=(2, 1, 1))])]
    ).free_aa


def test_without_a_trace_of_every_case_the_launches_stay_unknown():
    code = _library_identical()
    assert code_identity.with_traced_launches(code, [_case([_call()], [_call()]), _case([], [_call()])]) == code
    assert code_identity.with_traced_launches(code, []) == code
    known = code.model_copy(update={"launches_match": False})
    assert code_identity.with_traced_launches(known, [_case([_call()], [_call()])]) == known  # an answer given stands


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs a C compiler")
def test_host_only_libraries_in_compare_record_an_unknown(tmp_path):
    from test_compare import build, compare

    outcome = compare(tmp_path, build(tmp_path, "v1"), build(tmp_path, "v2"))
    (trial,) = outcome.trials
    assert trial.code.status == "unknown" and trial.code.arms == "library"
    assert "no .nv_fatbin" in trial.code.reason


def test_a_gate_pooled_over_free_aa_trials_reads_the_constructed_ratio(tmp_path):
    gates = [{"name": "faster", "where": "N >= 4096", "min_speedup_pct": 1.0, "every_trial": False}]
    loaded, trial = trial_of(tmp_path, plan_for(SAME_AS_BASE, gates))
    v = verdict(loaded.plan, [trial])
    (gate,) = v.gates
    assert gate.trial is None and not gate.passed and gate.value_pct == 0.0
    assert any("pooled over 1 trial" in r and "no change by construction" in r for r in v.reasons)
    measured = trial.model_copy(update={"code": trial.code.model_copy(update={"free_aa": False})})
    judged = verdict(loaded.plan, [measured])
    assert not any(g.value_pct == 0.0 for g in judged.gates)  # the fake's 20 %, as measured
    assert not any("construction" in r for r in judged.reasons)


# --- what the record says about differing code, on synthetic identities -------------------------


def _fn(name: str, text: bytes) -> FunctionCode:
    return FunctionCode(name=name, text=text, facts=(("registers", "32"),))


def _libraries(tmp_path, monkeypatch, base: CubinCode, candidate: CubinCode) -> tuple[Path, Path]:
    """Two 'libraries' whose embedded code for sm_90 is `base` and `candidate`; the instruction
    nvdisasm would print is stood in for by the bytes of the CUBIN it was read from."""
    files = {b"base cubin": base, b"candidate cubin": candidate}
    monkeypatch.setattr(code_identity, "read_cubins", lambda path, sm: [Path(path).read_bytes()] if sm == 90 else [])
    monkeypatch.setattr(code_identity, "machine_code", lambda cubin: files[cubin])
    monkeypatch.setattr(
        code_identity,
        "first_instructions",
        lambda cubin, function, offset, tool=None: f"{cubin.decode()}:{function}+{offset:#x}",
    )
    paths = []
    for side, data in (("base", b"base cubin"), ("candidate", b"candidate cubin")):
        (tmp_path / f"{side}.so").write_bytes(data)
        paths.append(tmp_path / f"{side}.so")
    return paths[0], paths[1]


def test_the_first_differing_instruction_is_shown_as_each_arm_holds_it(tmp_path, monkeypatch):
    same = b"\x01" * 32
    base = CubinCode(sm=90, functions={"a_gone": _fn("a_gone", same), "k": _fn("k", same + b"\x02" * 16)}, module=())
    candidate = CubinCode(sm=90, functions={"k": _fn("k", same + b"\x03" * 16)}, module=())
    code = code_identity.library(*_libraries(tmp_path, monkeypatch, base, candidate), "sm_90")
    assert code.status == "differs" and code.functions == 2
    # the function only base defines has no instruction to show; k's first difference does
    assert code.differences == [
        "k at 0x0020: base base cubin:k+0x20 / candidate candidate cubin:k+0x20",
        "a_gone: only in base",
        "k: instructions differ, first at instruction offset 0x0020",
    ]


def test_a_long_list_of_differences_names_the_first_twenty_and_counts_the_rest(tmp_path, monkeypatch):
    names = [f"f{i:02d}" for i in range(25)]
    base = CubinCode(sm=90, functions={n: _fn(n, b"\x01" * 16) for n in names} | {"old": _fn("old", b"")}, module=())
    candidate = CubinCode(
        sm=90, functions={n: _fn(n, b"\x01" * 16) for n in names[:23]} | {"new": _fn("new", b"")}, module=()
    )
    code = code_identity.library(*_libraries(tmp_path, monkeypatch, base, candidate), "sm_90")
    # every function either arm defines is counted, the ones only one of them does included
    assert code.functions == 27
    # f23, f24, old only in base, new only in candidate: four lines; no cap reached
    assert code.differences == ["f23: only in base", "f24: only in base", "new: only in candidate", "old: only in base"]
    many = CubinCode(sm=90, functions={n: _fn(n, b"\x02" * 16) for n in names}, module=())
    code = code_identity.library(*_libraries(tmp_path, monkeypatch, base, many), "sm_90")
    lines = code.differences
    # 25 differing functions, `old`, and the instruction shown first: 27 lines, 20 kept
    assert len(lines) == 21 and lines[-1] == "... and 7 more"
    assert lines[0] == "f00 at 0x0000: base base cubin:f00+0x0 / candidate candidate cubin:f00+0x0"
    assert lines[1:20] == [f"f{i:02d}: instructions differ, first at instruction offset 0x0000" for i in range(19)]


def test_nvdisasm_is_looked_for_in_the_toolkits_home_when_not_on_the_path(monkeypatch):
    home = "/usr/local/cuda/bin/nvdisasm"
    monkeypatch.setattr(code_identity.shutil, "which", lambda tool: None)
    monkeypatch.setattr(Path, "is_file", lambda self: str(self) == home)
    assert code_identity.nvdisasm_tool() == home
    monkeypatch.setattr(Path, "is_file", lambda self: False)
    assert code_identity.nvdisasm_tool() is None
    monkeypatch.setattr(code_identity.shutil, "which", lambda tool: f"/opt/bin/{tool}")
    assert code_identity.nvdisasm_tool() == "/opt/bin/nvdisasm"


# --- report --check: the machine-code fact must follow from what the trial holds ---------------


def test_an_edited_free_aa_or_status_is_named_by_the_evidence_check(tmp_path):
    from qualify.record.code_facts import _code_problems

    _, trial = trial_of(tmp_path, plan_for(SAME_AS_BASE))
    assert trial.code.free_aa and _code_problems(trial) == []
    claimed = trial.model_copy(update={"code": trial.code.model_copy(update={"launches_match": False})})
    assert any("code.free_aa is True" in p for p in _code_problems(claimed))
    _, differs = trial_of(tmp_path / "two", plan_for({}))
    forged = differs.model_copy(
        update={
            "code": differs.code.model_copy(update={"status": "identical", "launches_match": True, "free_aa": True})
        }
    )
    assert any("code.status is 'identical', but its digests" in p for p in _code_problems(forged))


def test_a_library_launch_claim_the_trace_does_not_bear_is_named():
    from qualify.record.code_facts import _code_problems

    code = _library_identical()
    same = [_case([_call()], [_call()])]
    honest = SimpleNamespace(code=code_identity.with_traced_launches(code, same), cases=same)
    assert honest.code.free_aa and _code_problems(honest) == []
    other = [_case([_call()], [_call(grid=(9, 1, 1))])]
    forged = SimpleNamespace(code=honest.code, cases=other)
    assert any("the kernel trace and outputs say False" in p for p in _code_problems(forged))


# --- Python arms: the cubins each arm's JIT wrote --------------------------------------------------


def _python_cubins(monkeypatch, codes: dict[bytes, CubinCode]) -> None:
    from qualify.build.elf import ElfProblem

    def read(cubin: bytes) -> CubinCode:
        if cubin not in codes:
            raise ElfProblem("not an ELF file")
        return codes[cubin]

    monkeypatch.setattr(code_identity, "machine_code", read)
    monkeypatch.setattr(code_identity, "first_instructions", lambda cubin, function, offset, tool=None: None)


def test_python_arms_compare_the_cubins_each_jit_wrote_base_first(monkeypatch):
    base = CubinCode(sm=90, functions={"k": _fn("k", b"\x01" * 32)}, module=())
    cand = CubinCode(sm=90, functions={"k": _fn("k", b"\x02" * 32)}, module=())
    _python_cubins(monkeypatch, {b"base": base, b"cand": cand})
    code = code_identity.python([b"base"], [b"cand"], "sm_90")
    assert (code.status, code.arms) == ("differs", "python")
    assert code.digests == {"base": base.digest, "candidate": cand.digest}
    same = code_identity.python([b"base"], [b"base"], "sm_90")
    assert same.status == "identical" and same.digests["base"] == same.digests["candidate"] == base.digest


@pytest.mark.parametrize("side", ["base", "candidate"])
def test_a_python_arm_without_a_cubin_or_with_an_unreadable_one_is_unknown_saying_which(monkeypatch, side):
    base = CubinCode(sm=90, functions={"k": _fn("k", b"\x01" * 32)}, module=())
    _python_cubins(monkeypatch, {b"good": base})
    lists = {"base": [b"good"], "candidate": [b"good"]}
    code = code_identity.python(**{**lists, side: []}, arch="sm_90")
    assert (code.status, code.arms, code.arch) == ("unknown", "python", "sm_90")
    assert code.reason == f"the {side} arm's JIT wrote no cubin to its cache (not Triton, or cached elsewhere)"
    code = code_identity.python(**{**lists, side: [b"good", b"garbage"]}, arch="sm_90")
    assert code.status == "unknown" and code.reason == f"a cubin of the {side} arm is unreadable: not an ELF file"
