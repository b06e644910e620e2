"""Record stage on the CPU: README rendering (golden), record checking, merging.

Trials are synthetic: raw samples drawn with a seeded RNG in the ABBA order the runner uses, saved
as .npz, and every statistic derived from them by `recompute_trial`, exactly as the run stage does.
Set QUALIFY_REGEN_GOLDEN=1 to rewrite tests/golden/record-README.md after an intended change.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from plans import plan_copy

from qualify.errors import FrozenInputChanged, PlanError
from qualify.evaluate.recompute import recompute_trial
from qualify.plan.digest import freeze_from_hashes, sha256_bytes
from qualify.plan.load import validate_plan
from qualify.record.assemble import assemble_results, write_record
from qualify.record.check import check_record, differences, rebuild_record
from qualify.record.merge import merge_records
from qualify.render.markdown import duration, signed_pct
from qualify.render.readme import render_readme
from qualify.results.model import (
    ArmResources,
    BufferParity,
    CaseStats,
    CaseTrial,
    ControlResult,
    DeviceInfo,
    Failure,
    Provenance,
    SanitizerResult,
    TimingSummary,
    Trial,
)
from qualify.results.samples import TrialSamples, load, save
from qualify.results.store import Record

GOLDEN = Path(__file__).parent / "golden" / "record-README.md"

# the CPU tests' standard plan (tests/plans.py), with three devices and two gates
PLAN = plan_copy()
PLAN.update(
    name="vecwidth",
    hypothesis="four-wide loads make the copy faster from 4096 elements up",
    independent_variable="elements loaded per thread (1 against 4)",
)
PLAN["hardware"] = {
    "devices": [
        {"name": "NVIDIA H200*", "compute_capability": "9.0"},
        {"name": "NVIDIA L40S", "compute_capability": "8.9"},
        {"compute_capability": "12.0"},
    ],
    "architectures": ["sm_89", "sm_90", "sm_120"],
}
PLAN["schedule"] = {"warmup": 3, "iterations_per_sample": 2, "samples_per_block": 3, "blocks": 4, "trials": 2}
PLAN["budget"] = {"max_trials": 3, "max_samples": 100, "max_wall_seconds": 60}
PLAN["acceptance"] = {
    "gates": [
        {"name": "faster", "where": "N >= 4096", "min_speedup_pct": 1.0},
        {"name": "no_regression", "max_regression_pct": 2.0, "every_trial": False},
    ],
    "sanitizer": [{"tool": "memcheck", "cases": ["N=1024"]}, {"tool": "racecheck", "cases": ["N=1024"]}],
}
FILES = {"kernels/k.cu": sha256_bytes(b"kernel"), "kernels/common.cuh": sha256_bytes(b"header")}

H200 = DeviceInfo(
    name="NVIDIA H200",
    uuid="GPU-1111aaaa-0000-0000-0000-000000000001",
    ordinal=0,
    compute_capability="9.0",
    arch="sm_90",
    sm_count=132,
    l2_bytes=62_914_560,
    max_shared_per_block_optin=232_448,
    sm_clock_max_mhz=1980,
    mem_clock_max_mhz=3201,
    driver_version="580.65.06",
    cuda_driver_version="13.0",
)
L40S = DeviceInfo(
    name="NVIDIA L40S",
    uuid="GPU-2222bbbb-0000-0000-0000-000000000002",
    ordinal=0,
    compute_capability="8.9",
    arch="sm_89",
    sm_count=142,
    l2_bytes=100_663_296,
    max_shared_per_block_optin=101_376,
    sm_clock_max_mhz=2520,
    mem_clock_max_mhz=9001,
    driver_version="580.65.06",
    cuda_driver_version="13.0",
)
# true per-launch nanoseconds of (base, candidate) per case and device
TRUE_NS = {
    "sm_90": {"N=1024": (8_000.0, 7_600.0), "N=4096": (30_000.0, 29_900.0)},
    "sm_89": {"N=1024": (12_000.0, 11_000.0), "N=4096": (45_000.0, 43_000.0)},
}
FLOOR_NS = 2_000.0


# ---------------------------------------------------------------------------------------------
# synthetic records


def plan_and_lock() -> tuple:
    plan = validate_plan(json.loads(json.dumps(PLAN)), Path("plan.json"))
    frozen = freeze_from_hashes(plan, FILES)
    lock = {
        "lock_version": 1,
        "plan": "plan.json",
        "plan_sha256": frozen.plan_sha256,
        "files": FILES,
        "digest": frozen.digest,
    }
    return plan, lock


def raw_samples(device: DeviceInfo, cases: list[str], seed: int, throttled: int = 0) -> dict[str, np.ndarray]:
    """Samples in the runner's order: warm-ups, then per block base, candidate, candidate, base."""
    sched = PLAN["schedule"]
    iters, half = sched["iterations_per_sample"], sched["samples_per_block"]
    rng = np.random.default_rng(seed)
    s = TrialSamples()
    for _ in range(9):
        s.add_floor(FLOOR_NS + rng.normal(0, 10))
    for cid in cases:
        base, cand = TRUE_NS[device.arch][cid]
        truth = {"base": base, "candidate": cand, "aa_a": base, "aa_b": base}
        for series in ("base", "candidate"):
            for _ in range(sched["warmup"]):
                s.add_warmup(cid, series, iters * truth[series] * 1.5 + FLOOR_NS)
        for pair in (("base", "candidate"), ("aa_a", "aa_b")):
            for block in range(sched["blocks"]):
                for series in (pair[0], pair[1], pair[1], pair[0]):
                    for _ in range(half):
                        flag = 0x4 if throttled > 0 else 0
                        throttled -= 1 if flag else 0
                        ns = iters * truth[series] * (1 + rng.normal(0, 0.004)) + FLOOR_NS
                        s.add(cid, series, ns=ns, block=block, sm_mhz=1_900.0 + 10 * block, throttle=flag, temp_c=60.0)
    return s.arrays()


def make_case(cid: str, n: int) -> CaseTrial:
    """A case with placeholder statistics; recompute_trial derives the real ones from the samples."""
    nothing = TimingSummary(
        samples=0,
        warmup=0,
        median_ns=0,
        q1_ns=0,
        q3_ns=0,
        min_ns=0,
        max_ns=0,
        throttled_samples=0,
        mean_sm_clock_mhz=None,
    )
    unknown = CaseStats(ratio=1.0, ci_low=None, ci_high=None, delta_pct=0.0, case_class="cant_tell", reason="")
    res = {
        side: ArmResources(
            registers=regs,
            static_shared_bytes=0,
            dynamic_shared_bytes=0,
            local_bytes=0,
            max_threads_per_block=1024,
            threads_per_block=256,
            blocks_per_sm=8,
            warps_per_sm=64,
        )
        for side, regs in (("base", 16), ("candidate", 28))
    }
    return CaseTrial(
        case=cid,
        input_sha256={b: sha256_bytes(f"{b}:{cid}".encode()) for b in ("x", "y")},
        resources=res,
        timing={"base": nothing, "candidate": nothing},
        stats=unknown,
        aa=None,
        parity=[
            BufferParity(
                buffer="out",
                equal=True,
                elements=n,
                differing_elements=0,
                first_difference=None,
                max_ulp=0,
                max_abs=0.0,
                max_rel=0.0,
            )
        ],
        deterministic={"base": True, "candidate": True},
        timed_outputs_match=True,
    )


COMMAND = ["qualify", "run", "protocols/vecwidth/plan.json", "--record", "records/vecwidth"]


def add_trial(
    record: Record,
    lock: dict,
    device: DeviceInfo,
    seed: int,
    *,
    status: str = "complete",
    cases: tuple[str, ...] = ("N=1024", "N=4096"),
    throttled: int = 0,
    sanitizer=(),
    failures=(),
) -> Trial:
    index = record.next_trial_index()
    started = f"2026-03-0{index}T10:00:00.000+00:00"
    record.append({"event": "trial_started", "trial": index, "device_uuid": device.uuid, "digest": lock["digest"]})
    arrays = raw_samples(device, list(cases), seed, throttled)
    data = save(record.samples_path(index), arrays)
    provenance = Provenance(
        device=device,
        planned=True,
        nvrtc_version="13.0",
        cuda_bindings_version="13.0.1",
        qualify_version="0.1.0",
        python_version="3.11.9",
        numpy_version="2.4.6",
        git_revision="0123456789abcdef0123456789abcdef01234567",
        git_dirty=False,
        host=f"host-{device.arch}",
        command=COMMAND,
    )
    placeholder = Trial(
        index=index,
        status=status,
        plan_digest=lock["digest"],
        started_at=started,
        ended_at=started.replace("T10:00", "T10:05"),
        provenance=provenance,
        timer={"mode": "blocking-kernel", "cache": "cold", "floor_ns": 0.0},
        cases=[make_case(cid, int(cid.split("=")[1])) for cid in cases],
        controls=[ControlResult(name="flip", kind="input", case="N=1024", caught=True, differing_elements=1)],
        sanitizer=list(sanitizer),
        failures=list(failures),
        samples_file=record.samples_path(index).relative_to(record.folder).as_posix(),
        samples_sha256=sha256_bytes(data),
    )
    trial = recompute_trial(placeholder, arrays, PLAN["schedule"]["iterations_per_sample"])
    record.write_trial(trial)
    record.append({"event": "trial_ended", "trial": index, "status": status})
    return trial


def clean(tool: str, side: str) -> SanitizerResult:
    return SanitizerResult(
        tool=tool,
        case="N=1024",
        side=side,
        status="clean",
        errors=0,
        exit_code=0,
        summary=["========= ERROR SUMMARY: 0 errors"],
        excerpt=[],
        seconds=3.5,
    )


def new_record(folder: Path) -> tuple[Record, object, dict]:
    plan, lock = plan_and_lock()
    folder.mkdir(parents=True)
    (folder / "plan.json").write_text(json.dumps(PLAN, indent=2) + "\n")
    (folder / "plan.lock.json").write_text(json.dumps(lock, indent=2) + "\n")
    return Record(folder), plan, lock


def h200_trials(record: Record, lock: dict) -> None:
    add_trial(record, lock, H200, 1, sanitizer=[clean("memcheck", "base"), clean("memcheck", "candidate")])
    add_trial(record, lock, H200, 2)


def l40s_trials(record: Record, lock: dict) -> None:
    add_trial(record, lock, L40S, 3, throttled=2, sanitizer=[clean("memcheck", "base")])
    add_trial(record, lock, L40S, 4)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """Two devices, two complete trials each, and an interrupted third trial on the L40S."""
    record, plan, lock = new_record(tmp_path_factory.mktemp("built") / "vecwidth")
    h200_trials(record, lock)
    l40s_trials(record, lock)
    add_trial(
        record,
        lock,
        L40S,
        5,
        status="interrupted",
        cases=("N=1024",),
        failures=[Failure(kind="interrupted", message="SIGINT after case N=1024")],
    )
    write_record(record, plan, lock)
    return record.folder


@pytest.fixture
def copy(built, tmp_path) -> Path:
    """A private copy of the built record, to tamper with."""
    return Path(shutil.copytree(built, tmp_path / "vecwidth"))


def readme_lines(folder: Path) -> list[str]:
    return (folder / "README.md").read_text(encoding="utf-8").splitlines()


# ---------------------------------------------------------------------------------------------
# rendering


def test_readme_matches_golden(built):
    text = (built / "README.md").read_text(encoding="utf-8")
    if os.environ.get("QUALIFY_REGEN_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8"), "README changed; QUALIFY_REGEN_GOLDEN=1 if intended"


def test_verdict_headline_and_grouped_reasons_come_before_the_protocol(built):
    results = Record(built).results()
    lines = readme_lines(built)
    head = lines[: lines.index("## Protocol")]
    assert results.verdict.status == "not_qualified"
    assert head[:4] == ["# vecwidth: vec1 → vec4", "", "**Verdict: NOT QUALIFIED**", ""]
    # the answer in words before any list: one sentence per device, then fidelity, then checks
    assert head[4].startswith(
        "On NVIDIA H200 (GPU-1111aaaa), the candidate is faster at N=1024, by 5.2 %; "
        "inconsistent across trials at N=4096"
    )
    assert head[5].startswith("On NVIDIA L40S (GPU-2222bbbb), the candidate is faster at both cases")
    assert head[6] == "Outputs: byte-identical to the base arm in all 9 case-trial checks."
    # the two per-trial misses of gate faster at N=4096 are one line, worded for a speed-up too small
    gate_lines = [line for line in head if line.startswith("- gate ")]
    assert gate_lines == [
        "- gate faster missed at N=4096 on NVIDIA H200 (GPU-1111aaaa) "
        "(change <= -1%; 2 of 2 judgements): faster by only 0.3 %."
    ]
    # every other reason is kept as the verdict wrote it
    missed = sum(not g.passed for g in results.verdict.gates)
    reasons = head[head.index("Reasons for the verdict (changes are in time per launch: negative is faster):") :]
    assert len(results.verdict.reasons) == missed + len([line for line in reasons if line.startswith("- ")]) - 1
    # and before them, one line per device and case: why it moved, the arms side by side
    causes = [line for line in head[: head.index(reasons[0])] if line.startswith("- N=")]
    assert len(causes) == 4 and all(" CTAs on " in line and " registers" in line for line in causes)
    assert "- trial 5 on NVIDIA L40S (GPU-2222bbbb) is interrupted" in head
    # the forest plot of each device is on the first screen
    assert (
        "![NVIDIA H200 (GPU-1111aaaa): change in time per launch per case (negative is faster), 95 % interval "
        "per trial, against the gates' bounds](plots/device-1-ratio.svg)" in head
    )


def test_readme_has_one_results_table_per_device_with_every_trial(built):
    lines = readme_lines(built)
    headings = [line for line in lines if line.startswith("## Results on ")]
    assert headings == ["## Results on NVIDIA H200 (GPU-1111aaaa)", "## Results on NVIDIA L40S (GPU-2222bbbb)"]
    l40s = lines[lines.index(headings[1]) :]
    header = next(line for line in l40s if line.startswith("| case |"))
    assert "| trial 3 | trial 4 | trial 5 (interrupted) |" in header
    # the interrupted trial measured N=1024 only; its N=4096 cell says so instead of a number
    row = next(line for line in l40s if line.startswith("| N=4096 |"))
    assert "not measured" in row


def test_readme_numbers_come_from_the_results(built):
    results = Record(built).results()
    text = (built / "README.md").read_text(encoding="utf-8")
    c = results.trials[0].cases[1]  # H200, N=4096, trial 1
    cell = (
        f"{duration(c.timing['base'].median_ns)} → {duration(c.timing['candidate'].median_ns)} "
        f"({signed_pct(c.stats.delta_pct)})"
    )
    assert cell in text
    # the median column over trials 1 and 2 of H200 at N=1024
    rows = [t.cases[0] for t in results.trials[:2]]
    base = np.median([r.timing["base"].median_ns for r in rows])
    assert f"| N=1024 | {duration(float(base))} → " in text


def test_unverified_section_is_derived(built):
    lines = readme_lines(built)
    section = lines[lines.index("## What is unverified") : lines.index("## Reproduce")]
    text = "\n".join(section)
    assert "Compiled for sm_120 but not executed there" in text
    assert "Device compute capability 12.0: listed by the plan, no complete trial ran on it." in text
    assert "racecheck at N=1024 (base) not run on NVIDIA H200 (GPU-1111aaaa)" in text
    assert "memcheck at N=1024 (candidate) not run on NVIDIA L40S (GPU-2222bbbb)" in text
    assert "memcheck at N=1024 (base) not run on NVIDIA L40S" not in text  # it ran on trial 3
    assert "NVIDIA L40S (GPU-2222bbbb): 2 of " in text  # two throttled samples injected in trial 3


def test_sanitizer_table_marks_declared_checks_not_run(built):
    rows = [line for line in readme_lines(built) if line.startswith("| NVIDIA") and "racecheck" in line]
    assert len(rows) == 4  # 2 devices × 2 arms, none run
    assert all("| not run |" in row for row in rows)


def test_formatting_filters():
    assert duration(12_345.6) == "12.346 µs"
    assert duration(12_026_100.0) == "12.026 ms"
    assert signed_pct(-13.1994) == "-13.20 %"
    assert signed_pct(4.913) == "+4.91 %"


# ---------------------------------------------------------------------------------------------
# checking


def test_fresh_record_checks_out(built):
    assert check_record(built) == []


def test_readme_number_edited_by_hand_is_found_with_its_line(copy):
    lines = readme_lines(copy)
    n = next(i for i, line in enumerate(lines) if line.startswith("| N=4096 |"))
    edited = re.sub(r"\(([+-]\d+\.\d\d) %\)", "(-9.99 %)", lines[n], count=1)
    assert edited != lines[n]
    lines[n] = edited
    (copy / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    problems = check_record(copy)
    assert len(problems) == 1
    assert problems[0].startswith(f"README.md line {n + 1} ")
    assert "-9.99 %" in problems[0]


def test_tampered_samples_are_found_by_their_sha256(copy):
    path = copy / "trials" / "trial-2.npz"
    arrays = load(path)
    arrays["N=1024/candidate/ns"] = arrays["N=1024/candidate/ns"] * 0.9
    save(path, arrays)
    problems = check_record(copy)
    assert any(p.startswith("trials/trial-2.npz: sha256") for p in problems)


def test_tampered_samples_with_a_matching_sha_are_found_by_recomputing(copy):
    # a careful forger also updates the sha; the statistics no longer follow from the samples
    path = copy / "trials" / "trial-2.npz"
    arrays = load(path)
    arrays["N=1024/candidate/ns"] = arrays["N=1024/candidate/ns"] * 0.9
    data = save(path, arrays)
    for name in ("trials/trial-2.json", "results.json"):
        text = (copy / name).read_text()
        old = Record(copy).trials()[1].samples_sha256
        (copy / name).write_text(text.replace(old, sha256_bytes(data)))
    problems = check_record(copy)
    assert any(
        p.startswith("trials/trial-2.json: differs from its raw samples: cases[0].timing.candidate") for p in problems
    )


def test_results_json_number_edited_is_found(copy):
    path = copy / "results.json"
    data = json.loads(path.read_text())
    data["trials"][0]["cases"][1]["timing"]["base"]["median_ns"] *= 0.5
    path.write_text(json.dumps(data, indent=1))
    problems = check_record(copy)
    assert problems
    assert all(p.startswith("results.json") for p in problems)  # the README still matches the trials
    assert any("trial 1" in p and "cases[1].timing.base.median_ns" in p for p in problems)


def test_trial_file_median_edited_is_found(copy):
    path = copy / "trials" / "trial-3.json"
    data = json.loads(path.read_text())
    data["cases"][0]["timing"]["candidate"]["median_ns"] = 1.0
    path.write_text(json.dumps(data, indent=1))
    problems = check_record(copy)
    assert any(
        p.startswith("trials/trial-3.json: differs from its raw samples: cases[0].timing.candidate.median_ns")
        for p in problems
    )
    assert any(p.startswith("results.json: trial 3 differs from its trial file") for p in problems)


def test_plan_edited_after_the_run_is_found(copy):
    data = json.loads((copy / "plan.json").read_text())
    data["acceptance"]["gates"][0]["min_speedup_pct"] = 0.1  # loosen a gate after seeing the numbers
    (copy / "plan.json").write_text(json.dumps(data, indent=2))
    problems = check_record(copy)
    assert problems[0].startswith("plan.json: its digest is ")
    assert "edited after freezing" in problems[0]


def test_unreadable_results_raise_a_plan_error_naming_the_file(copy):
    (copy / "results.json").write_text('{"results_version": 1, "plan_name": ')
    with pytest.raises(PlanError) as info:
        check_record(copy)
    assert info.value.file == str(copy / "results.json")


@pytest.mark.slow
def test_rebuild_rewrites_the_derived_files(copy, built):
    (copy / "README.md").unlink()
    (copy / "results.json").unlink()
    results = rebuild_record(copy)
    assert results.verdict.status == "not_qualified"
    assert (copy / "README.md").read_text() == (built / "README.md").read_text()
    assert check_record(copy) == []


def test_differences_use_a_relative_tolerance():
    assert differences({"a": 1.0}, {"a": 1.0 + 1e-12}) == []
    assert differences({"a": [1.0, 2.0]}, {"a": [1.0, 2.001]}) == ["a[1]: found 2.0, expected 2.001"]
    assert differences({"a": True}, {"a": 1}) != []


# ---------------------------------------------------------------------------------------------
# merging


@pytest.fixture(scope="module")
def two_records(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("sources")
    a, plan, lock = new_record(root / "h200")
    h200_trials(a, lock)
    write_record(a, plan, lock)
    b, plan, lock = new_record(root / "l40s")
    l40s_trials(b, lock)
    write_record(b, plan, lock)
    return a.folder, b.folder


def test_merge_gives_one_record_with_a_table_per_device(two_records, tmp_path):
    a, b = two_records
    dest = tmp_path / "merged"
    results = merge_records([a, b], dest)
    assert [t.index for t in results.trials] == [1, 2, 3, 4]
    assert [t.provenance.device.name for t in results.trials] == ["NVIDIA H200"] * 2 + ["NVIDIA L40S"] * 2
    source = Record(b).trials()[0]
    moved = Record(dest).trials()[2]
    assert moved.samples_file == "trials/trial-3.npz"
    assert moved.samples_sha256 == source.samples_sha256
    assert moved.started_at == source.started_at
    headings = [line for line in readme_lines(dest) if line.startswith("## Results on ")]
    assert headings == ["## Results on NVIDIA H200 (GPU-1111aaaa)", "## Results on NVIDIA L40S (GPU-2222bbbb)"]
    assert (
        "| case | median of trials | trial 3 | trial 4 | 95 % CI of the change | class | smallest detectable | timing ended |"
        in readme_lines(dest)
    )
    ledger = Record(dest).ledger()
    assert [(e["event"], e["trial"]) for e in ledger][-2:] == [("trial_started", 4), ("trial_ended", 4)]
    assert ledger[-1]["merged_from"] == {"record": str(b), "trial": 2}
    assert check_record(dest) == []


def test_merge_takes_a_duplicate_trial_once(two_records, tmp_path):
    a, b = two_records
    results = merge_records([a, b, a], tmp_path / "merged")
    assert [t.index for t in results.trials] == [1, 2, 3, 4]
    assert len(Record(tmp_path / "merged").ledger()) == 8


def test_merge_refuses_records_of_another_plan(two_records, tmp_path):
    a, _ = two_records
    other = Path(shutil.copytree(a, tmp_path / "other"))
    lock = json.loads((other / "plan.lock.json").read_text())
    data = json.loads((other / "plan.json").read_text())
    data["hypothesis"] = "another protocol"
    plan = validate_plan(data, other / "plan.json")
    frozen = freeze_from_hashes(plan, lock["files"])
    lock["plan_sha256"], lock["digest"] = frozen.plan_sha256, frozen.digest
    (other / "plan.json").write_text(json.dumps(data))
    (other / "plan.lock.json").write_text(json.dumps(lock))
    with pytest.raises(FrozenInputChanged) as info:
        merge_records([a, other], tmp_path / "merged")
    assert "only records of one plan merge" in info.value.message
    assert not (tmp_path / "merged").exists()


def test_merge_refuses_a_non_empty_destination(two_records, tmp_path):
    a, b = two_records
    dest = tmp_path / "merged"
    dest.mkdir()
    (dest / "keep.txt").write_text("evidence")
    with pytest.raises(FrozenInputChanged):
        merge_records([a, b], dest)
    assert sorted(p.name for p in dest.iterdir()) == ["keep.txt"]


@pytest.mark.slow
def test_merge_keeps_a_trial_that_left_only_a_ledger_entry(two_records, tmp_path):
    a, b = two_records
    crashed = Path(shutil.copytree(a, tmp_path / "crashed"))
    # the process died during trial 3: started in the ledger, no trial file
    Record(crashed).append(
        {
            "event": "trial_started",
            "trial": 3,
            "device_uuid": H200.uuid,
            "digest": json.loads((crashed / "plan.lock.json").read_text())["digest"],
        }
    )
    results = merge_records([crashed, b], tmp_path / "merged")
    assert [t.index for t in results.trials] == [1, 2, 4, 5]
    started = [e for e in Record(tmp_path / "merged").ledger() if e["event"] == "trial_started"]
    assert [(e["trial"], e["merged_from"]["trial"]) for e in started] == [(1, 1), (2, 2), (3, 3), (4, 1), (5, 2)]


def test_failed_evidence_renders_in_every_section(built):
    plan, lock = plan_and_lock()
    trials = Record(built).trials()[:2]
    case = trials[0].cases[0]
    bad_parity = [
        BufferParity(
            buffer="out",
            equal=False,
            elements=1024,
            differing_elements=3,
            first_difference=17,
            max_ulp=2,
            max_abs=1e-6,
            max_rel=2e-7,
        )
    ]
    finding = SanitizerResult(
        tool="racecheck",
        case="N=1024",
        side="candidate",
        status="findings",
        errors=2,
        exit_code=1,
        summary=["RACECHECK SUMMARY: 2 hazards"],
        excerpt=["Race reported between Write access at axpy+0x40"],
        seconds=9.0,
    )
    broken = trials[0].model_copy(
        update={
            "cases": [case.model_copy(update={"parity": bad_parity})] + trials[0].cases[1:],
            "controls": [ControlResult(name="flip", kind="input", case="N=1024", caught=False, differing_elements=0)],
            "sanitizer": [finding],
        }
    )
    results = assemble_results(plan, lock, [broken, trials[1]])
    text = render_readme(results, plan)
    assert "**3 of 1,024 elements differ**, first at 17, max 2 ulp" in text
    assert "| NVIDIA H200 (GPU-1111aaaa) | 1 | flip | input | N=1024 | **NOT caught**: the gate is vacuous |" in text
    assert "| racecheck | N=1024 | candidate | findings | 2 | RACECHECK SUMMARY: 2 hazards |" in text
    assert "Race reported between Write access at axpy+0x40" in text
    head = text[: text.index("## Protocol")]
    assert "trial 1: negative control flip at N=1024 passed the fidelity gate" in head
    assert "racecheck at N=1024 (candidate) on NVIDIA H200 (GPU-1111aaaa): findings, 2 errors" in head


def test_a_record_without_trials_renders_as_incomplete():
    plan, lock = plan_and_lock()
    text = render_readme(assemble_results(plan, lock, []), plan)
    assert text.startswith(
        "# vecwidth: vec1 → vec4\n\n**Verdict: INCOMPLETE**\n\n"
        "No trial has run: there is nothing to report yet.\n"
        "Outputs: not compared (no case was measured).\n"
    )
    assert "\n- no trials\n" in text[: text.index("## Protocol")]
    assert "plots/" not in text  # no trial, no plot
    assert "No trial has run." in text
    assert "Device `NVIDIA H200*` with compute capability 9.0: listed by the plan, no complete trial ran on it." in text


def test_noise_stop_rule_is_stated_with_its_target():
    data = json.loads(json.dumps(PLAN))
    data["stop"] = {"rule": "noise", "target_ci_pct": 0.5, "min_blocks": 2}
    plan = validate_plan(data, Path("plan.json"))
    lock = plan_and_lock()[1]
    text = render_readme(assemble_results(plan, lock, []), plan)
    assert (
        "- **Stop rule:** noise (stop once the 95 % CI of the ratio is within ±0.5 %, after at least 2 blocks)" in text
    )


# ---------------------------------------------------------------------------------------------
# labels are plain text (issue 15, cause 8)

HOSTILE = (
    "x\n\n**Verdict: QUALIFIED**\n\n<!-- the real verdict is hidden -->\n# Heading <script>alert(1)</script>"
    " <img src=x onerror=alert(1)> [link](http://evil) ![img](http://evil/p.png) | cell | `code` *em* _em_ "
    "~~strike~~ $math$ &amp; \x1b[31mred\x1b[0m \u202eevil\u2028line"
)


def _hostile_results(built):
    plan, lock = plan_and_lock()
    plan = plan.model_copy(
        update={
            "hypothesis": HOSTILE,
            "independent_variable": HOSTILE,
            "revisions": plan.revisions.model_copy(update={"base": HOSTILE, "candidate": "`` ` ``|" + HOSTILE}),
        }
    )
    trials = Record(built).trials()[:2]
    device = trials[0].provenance.device.model_copy(update={"name": HOSTILE})
    finding = SanitizerResult(
        tool="racecheck",
        case="N=1024",
        side="candidate",
        status="findings",
        errors=1,
        exit_code=1,
        summary=[HOSTILE],
        excerpt=["```", HOSTILE, "````"],
        seconds=1.0,
    )
    first = trials[0].model_copy(
        update={
            "provenance": trials[0].provenance.model_copy(
                update={"device": device, "host": HOSTILE, "command": ["qualify", "run", HOSTILE]}
            ),
            "failures": [Failure(kind="error", case="N=1024", message=HOSTILE)],
            "sanitizer": [finding],
            "timer": {**trials[0].timer, HOSTILE: HOSTILE},
        }
    )
    return plan, assemble_results(plan, lock, [first, trials[1]])


def test_hostile_labels_render_as_plain_text(built):
    from markdown_it import MarkdownIt

    plan, results = _hostile_results(built)
    text = render_readme(results, plan)
    assert "\x1b" not in text and "\u202e" not in text and "\u2028" not in text
    lines = text.splitlines()
    assert sum(line.startswith("**Verdict:") for line in lines) == 1
    assert [line for line in lines if line.startswith("# ")] == [lines[0]]
    # every row of every table has as many cells as its header
    table: list[str] = []
    for line in lines + [""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table:
            widths = {len(re.findall(r"(?<!\\)\|", row)) for row in table}
            assert len(widths) == 1, table
        table = []
    html = MarkdownIt("commonmark").enable("table").enable("strikethrough").render(text)
    for injected in (
        "<script",
        "<img src=x",
        'src="http://evil',
        "<!--",
        "<h1>Heading",
        "<strong>Verdict: QUALIFIED",
        '<a href="http://evil',
        "<em>em</em>",
        "<s>strike</s>",
        "<code>code</code>",
    ):
        assert injected not in html, injected
    assert html.count("<h1>") == 1
    # the text itself survives, visibly
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "\\x1b[31mred" in html and "\\u202eevil" in html and "\\n\\n**Verdict: QUALIFIED**" in html
    # a sanitizer excerpt with fences of its own stays inside a longer fence
    fence = next(line for line in lines if re.fullmatch(r"`{5,}text", line))
    assert lines.count(fence[: -len("text")]) == 1


def test_markdown_escapes_keep_ordinary_labels_readable():
    from qualify.render.markdown import code, line_start, md

    assert md("attention_gated_fwd<64>") == "attention_gated_fwd<64>"
    assert md("regression <= 2 %") == "regression <= 2 %"
    assert (
        md("_a_ *b* <b> |c| &x; $y$ ~z~ [l](u) \\")
        == "\\_a\\_ \\*b\\* \\<b> \\|c\\| \\&x; \\$y\\$ \\~z\\~ \\[l\\](u) \\\\"
    )
    assert md("two\nlines\x1b") == "two\\\\nlines\\\\x1b"
    assert md(-1.5) == "-1.5"
    assert line_start("# h") == "\\# h" and line_start("12. x") == "12\\. x" and line_start("- y") == "\\- y"
    assert code("a`b") == "``a`b``" and code("`x`") == "`` `x` ``"
    assert code("a|b") == "`a|b`" and code("a|b", cell=True) == "`a\\|b`"


# ---------------------------------------------------------------------------------------------
# the pooled two-level statistics


def test_readme_shows_the_pooled_change_interval_parts_and_mde(built):
    results = Record(built).results()
    lines = readme_lines(built)
    assert set(results.pooled) == {"NVIDIA H200 (GPU-1111aaaa)", "NVIDIA L40S (GPU-2222bbbb)"}
    for device, cases in results.pooled.items():
        section = lines[lines.index(f"## Results on {device}") :]
        for cid, p in cases.items():
            assert p.trials == 2 and p.between_pct is not None  # the L40S's interrupted trial is left out
            row = (
                f"| {cid} | 2 | {p.delta_pct:+.2f} % | [{(p.ci_low - 1) * 100:+.2f} %, {(p.ci_high - 1) * 100:+.2f} %] | {p.case_class} | "
                f"{p.within_pct:.2f} % | {p.between_pct:.2f} % | {p.df:.1f} | {p.mde_pct:.2f} % |"
            )
            assert row in section
    assert not any("one process only" in line for line in lines)


def test_a_one_trial_readme_says_its_interval_covers_one_process_only(built):
    plan, lock = plan_and_lock()
    results = assemble_results(plan, lock, Record(built).trials()[:1])
    (p,) = {cid: p for cid, p in results.pooled["NVIDIA H200 (GPU-1111aaaa)"].items() if cid == "N=1024"}.values()
    assert p.trials == 1 and p.between_pct is None and p.reason.endswith("covers one process only")
    text = render_readme(results, plan)
    assert "From one trial the interval covers one process only" in text
    assert (
        f"| N=1024 | 1 | {p.delta_pct:+.2f} % | [{(p.ci_low - 1) * 100:+.2f} %, {(p.ci_high - 1) * 100:+.2f} %] |"
        in text
    )
    assert "| n/a (one trial) |" in text


@pytest.mark.slow
def test_a_tampered_pooled_figure_is_found(copy):
    data = json.loads((copy / "results.json").read_text())
    data["pooled"]["NVIDIA H200 (GPU-1111aaaa)"]["N=1024"]["ci_high"] *= 1.01
    (copy / "results.json").write_text(json.dumps(data, indent=1) + "\n")
    problems = check_record(copy)
    assert any(
        p.startswith(
            "results.json: the pooled statistics are not the ones its trials give: "
            "pooled.NVIDIA H200 (GPU-1111aaaa).N=1024.ci_high: found"
        )
        for p in problems
    )


@pytest.mark.slow
def test_a_results_json_without_pooled_figures_is_found(copy):
    data = json.loads((copy / "results.json").read_text())
    del data["pooled"]
    (copy / "results.json").write_text(json.dumps(data, indent=1) + "\n")
    assert any("pooled.NVIDIA H200 (GPU-1111aaaa): missing" in p for p in check_record(copy))


@pytest.mark.slow
def test_a_trial_whose_recorded_log_moments_were_edited_is_found(copy):
    path = copy / "trials" / "trial-1.json"
    data = json.loads(path.read_text())
    assert data["cases"][0]["stats"]["log_sd"] is not None
    data["cases"][0]["stats"]["log_sd"] *= 0.5
    path.write_text(json.dumps(data, indent=1) + "\n")
    assert any(
        p.startswith("trials/trial-1.json: differs from its raw samples: cases[0].stats.log_sd")
        for p in check_record(copy)
    )
