"""Records that say why: throughput against the device's peak, an impossible rate in the verdict,
the per-case cause on the first screen, one sign convention on every surface, provenance and the
machine code of a template change in plain numbers."""

from __future__ import annotations

import io
import re
import subprocess
from pathlib import Path

import pytest

from qualify.commands.pipeline import RunOutcome
from qualify.evaluate.throughput import IMPOSSIBLE, case_rates, peak_bandwidth
from qualify.evaluate.verdict import by_device, verdict
from qualify.record.assemble import read_record_plan
from qualify.render.readme import render_readme
from qualify.render.summary import render_summary
from qualify.render.terminal import console, run_summary
from qualify.render.why_text import code_pairs, dirty_text, user_command
from qualify.results.model import Results
from qualify.results.store import Record
from qualify.run.fake import FAKE_INFO

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ["vecload", "attention-wide", "attention-wide-entry", "qsa-keyload"]


def record(name: str) -> tuple[Results, object]:
    plan, _ = read_record_plan(ROOT / "records" / name)
    return Record(ROOT / "records" / name).results(), plan


def with_peak(results: Results, bus_bits: int = 6144, speed: float = 1.0) -> list:
    """The record's trials as if the device had reported its bus width, the candidate `speed`
    times faster than measured."""
    out = []
    for t in results.trials:
        device = t.provenance.device.model_copy(update={"memory_bus_width_bits": bus_bits})
        cases = []
        for c in t.cases:
            timing = dict(c.timing)
            cand = timing["candidate"]
            timing["candidate"] = cand.model_copy(update={"median_ns": cand.median_ns / speed})
            cases.append(c.model_copy(update={"timing": timing}))
        out.append(
            t.model_copy(update={"provenance": t.provenance.model_copy(update={"device": device}), "cases": cases})
        )
    return out


# ---------------------------------------------------------------------------------------------
# throughput


def test_the_peak_is_memory_clock_times_two_transfers_times_the_bus():
    assert peak_bandwidth(FAKE_INFO) == pytest.approx(3201e6 * 2 * 6144 / 8)  # the H200's 4.9 TB/s
    assert peak_bandwidth(FAKE_INFO.model_copy(update={"memory_bus_width_bits": None})) is None


def test_default_bytes_are_the_inputs_read_once_and_the_outputs_written_once():
    results, plan = record("vecload")
    rates = {r.case: r for r in case_rates(plan, by_device(results.trials))}
    assert rates["N=1048576"].arms["base"].bytes_moved == 3 * 4 * 1048576  # x, y in; out
    assert not rates["N=1048576"].declared


def test_a_plan_may_state_its_bytes_and_flops():
    results, plan = record("vecload")
    workload = plan.workload.model_copy(update={"bytes_moved": "8 * N", "flops": "2 * N"})
    plan = plan.model_copy(update={"workload": workload})
    rate = case_rates(plan, by_device(results.trials))[0]
    assert rate.declared and rate.arms["candidate"].bytes_moved == 8 * 1048576
    assert rate.arms["candidate"].tflop_per_s == pytest.approx(2 * 1048576 / rate.arms["candidate"].median_ns / 1e3)


def test_a_candidate_faster_than_the_memory_system_allows_is_not_qualified():
    """A planted record: vecload's candidate at 90 % of the H200's peak, made twice as fast."""
    results, plan = record("vecload")
    honest = verdict(plan, with_peak(results))
    assert honest.status == "qualified" and not any(IMPOSSIBLE in r for r in honest.reasons)
    planted = verdict(plan, with_peak(results, speed=2.0))
    assert planted.status == "not_qualified"
    flagged = [r for r in planted.reasons if IMPOSSIBLE in r]
    assert flagged and all("(candidate)" in r for r in flagged)
    assert any(r.startswith("N=67108864 (candidate) on NVIDIA H200") for r in flagged)


def test_without_a_recorded_peak_nothing_is_flagged_and_the_readme_says_so():
    results, plan = record("vecload")
    unrecorded = with_peak(results, bus_bits=0, speed=4.0)
    assert not any(IMPOSSIBLE in r for r in verdict(plan, unrecorded).reasons)
    assert "peak not recorded" not in (ROOT / "records/vecload/README.md").read_text()  # made on the H200
    readme = render_readme(results.model_copy(update={"trials": unrecorded}), plan)
    assert "peak not recorded" in readme


def test_a_warm_cache_case_that_fits_in_l2_is_not_held_to_dram():
    results, plan = record("vecload")
    hot = plan.model_copy(update={"schedule": plan.schedule.model_copy(update={"cache": "hot"})})
    reasons = verdict(hot, with_peak(results, speed=2.0)).reasons
    flagged = {r.split(" ", 1)[0] for r in reasons if IMPOSSIBLE in r}
    assert "N=1048576" not in flagged  # 12 MiB: L2 (60 MiB) may serve it
    assert "N=67108864" in flagged  # 768 MiB cannot come from L2


# ---------------------------------------------------------------------------------------------
# why, on the first screen


def test_the_attention_wide_headline_names_the_cta_cause_on_its_first_screen():
    lines = (ROOT / "records/attention-wide/README.md").read_text().splitlines()
    first = "\n".join(lines[:25])
    assert re.search(r"T=512 \(\+\d+\.\d % time per launch\): 128 → 64 CTAs on 132 SMs; 128 → 64 SMs with work", first)
    assert "both 8 warps/SM at most, limited by registers; both 239 registers" in first


def test_many_cases_keep_the_headline_short():
    from qualify.evaluate.why import MAX_CAUSES, case_causes

    results, plan = record("attention-wide")
    trial = results.trials[0]
    many = [trial.model_copy(update={"cases": trial.cases * 1})]
    causes, left = case_causes(plan, by_device(many), [])
    assert len(causes) == 6 and left == 0
    assert MAX_CAUSES < 12  # a 12-case plan would show MAX_CAUSES and say how many more


# ---------------------------------------------------------------------------------------------
# one sign convention on every surface


def surfaces(name: str) -> dict[str, str]:
    results, plan = record(name)
    out = io.StringIO()
    console(file=out).print(run_summary(RunOutcome(trials=results.trials, results=results), f"records/{name}", plan))
    plots = ROOT / "records" / name / "plots"
    return {
        "README": render_readme(results, plan),
        "summary": render_summary(results, plan, f"records/{name}"),
        "terminal": out.getvalue(),
        "gate lines": "\n".join(results.verdict.reasons),
        "plots": "\n".join(p.read_text() for p in sorted(plots.glob("*.svg"))),
    }


@pytest.mark.parametrize("name", RECORDS)
def test_every_surface_states_changes_in_time_negative_faster(name):
    results, _ = record(name)
    for where, text in surfaces(name).items():
        assert not re.search(r"speed-up|regression <=|candidate / base, time", text, re.I), where
    # each gate judgement's value is the change in time: the sign of the case's change
    for g in results.verdict.gates:
        case = next(c for t in results.trials if t.index == (g.trial or t.index) for c in t.cases if c.case == g.case)
        assert (g.value_pct > 0) == (case.stats.delta_pct > 0) or g.trial is None
    # a slower case reads positive wherever its change is printed
    text = surfaces(name)
    for t in results.trials:
        for c in t.cases:
            if c.stats.case_class == "slower":
                assert f"(+{c.stats.delta_pct:.2f} %)" in text["README"]
                assert f"{c.stats.delta_pct:+.2f}" in text["terminal"]
    assert "change in time per launch" in text["plots"]


# ---------------------------------------------------------------------------------------------
# plain words and provenance


def test_reproduce_prints_the_command_a_user_types():
    assert user_command(["__main__.py", "run", "p.json", "--trial-process", "/tmp/x", "--trials", "1"]) == (
        "qualify run p.json --trials 1"
    )
    for name in RECORDS:
        readme = (ROOT / "records" / name / "README.md").read_text()
        assert "__main__.py" not in readme and "--trial-process" not in readme


def test_dirty_paths_say_whether_the_frozen_inputs_were_among_them():
    results, _ = record("vecload")
    p = results.trials[0].provenance
    assert dirty_text(p.model_copy(update={"dirty_paths": None})) == "yes (paths not recorded)"  # an older record
    clean = p.model_copy(update={"dirty_paths": ["README.md"], "dirty_frozen": []})
    assert dirty_text(clean) == "yes; the frozen inputs were clean (1 paths: `README.md`)"
    frozen = p.model_copy(update={"dirty_paths": ["k.cu"], "dirty_frozen": ["k.cu"]})
    assert dirty_text(frozen).startswith("yes, frozen inputs among them: `k.cu`")


def test_provenance_lists_what_was_dirty(tmp_path):
    from qualify.run.provenance import collect

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    for name in ("plan.json", "other.txt"):
        (tmp_path / name).write_text("x\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    (tmp_path / "other.txt").write_text("changed\n")
    p = collect(FAKE_INFO, tmp_path, True, "13.0", ["run"], paths=[tmp_path / "plan.json"])
    assert p.git_dirty and p.dirty_paths == ["other.txt"] and p.dirty_frozen == []
    (tmp_path / "plan.json").write_text("edited\n")
    p = collect(FAKE_INFO, tmp_path, True, "13.0", ["run"], paths=[tmp_path / "plan.json"])
    assert p.dirty_frozen == ["plan.json"] and set(p.dirty_paths) == {"other.txt", "plan.json"}


def test_a_template_change_pairs_its_functions_with_numbers():
    results, _ = record("attention-wide")
    code = results.trials[0].code
    pairs = code_pairs(results.trials, code)
    assert len(pairs) == 1
    # made on the H200 with the counts: the run paired the functions and counted what differs
    assert re.match(r"`attention_gated_fwd<64>` ↔ `attention_gated_fwd<128>`: instructions [\d,]+ ↔ [\d,]+, ", pairs[0])
    assert "; at T=512: dynamic shared memory 67,584 B → 101,376 B" in pairs[0]
    uncounted = code.model_copy(update={"differences": [d for d in code.differences if not d.startswith("pair ")]})
    assert code_pairs(results.trials, uncounted)[0].startswith(
        "`attention_gated_fwd<64>` ↔ `attention_gated_fwd<128>`: instruction counts not recorded"
    )
    counted = code.model_copy(
        update={
            "differences": [
                "pair attention_gated_fwd<64> ↔ attention_gated_fwd<128>: instructions 9 ↔ 9, 2 of them different",
                *uncounted.differences,
            ]
        }
    )
    pairs = code_pairs(results.trials, counted)
    assert pairs[0].startswith("`attention_gated_fwd<64>` ↔ `attention_gated_fwd<128>`: instructions 9 ↔ 9, 2 of them")


def test_the_run_pairs_a_templates_instantiations_and_counts_their_instructions():
    from qualify.build.machine_code import CubinCode, FunctionCode, compare
    from qualify.run.code_identity import template_pairs

    a_name, b_name = "_Z3fwdILi64EEvPf", "_Z3fwdILi128EEvPf"
    word = bytes(16)
    a = CubinCode(90, {a_name: FunctionCode(a_name, word * 3, ())}, ())
    b = CubinCode(90, {b_name: FunctionCode(b_name, word * 2 + b"\x01" * 16, ())}, ())
    lines = template_pairs(a, b, compare(a, b, labels=("base", "candidate")))
    assert lines == ["pair fwd<64> ↔ fwd<128>: instructions 3 ↔ 3, 1 of them different"]


def test_a_stream_escape_is_worded_for_the_arm_kind():
    from qualify.run.stages.fidelity import escape_message

    kernel = escape_message(80_000.0, entry_point=False)
    assert "kernel arm launches only on qualify's stream" in kernel and "entry point" not in kernel
    assert "entry point queues work on a stream of its own" in escape_message(80_000.0, entry_point=True)


def test_a_fault_in_a_complete_trial_is_explained_in_the_summary():
    from qualify.results.model import Failure
    from qualify.run.stages.fidelity import escape_message

    results, plan = record("qsa-keyload")
    fault = Failure(kind="fault", case="R=8,S=8", side="candidate", message=escape_message(80_000.0, False))
    trials = [results.trials[0].model_copy(update={"failures": [fault]}), *results.trials[1:]]
    planted = results.model_copy(update={"trials": trials, "verdict": verdict(plan, trials)})
    out = render_summary(planted, plan, "records/qsa-keyload")
    assert "trial 1 completed with a fault recorded at R=8,S=8 (candidate): every case was still timed" in out
    assert out.count("kernel arm launches only on qualify's stream") == 1  # the reason, said once


# ---------------------------------------------------------------------------------------------
# the cause line, piece by piece (qualify/evaluate/why.py)


def test_kernel_line_contrasts_the_arms_and_says_shared_facts_once():
    from qualify.evaluate.why import KernelShape, kernel_line

    base = KernelShape("fwd<64>", 128, 2, 8, "registers", 239, 0)
    candidate = KernelShape("fwd<128>", 64, 1, 8, "registers", 239, 0)
    assert kernel_line(base, candidate, 132) == (
        "128 → 64 CTAs on 132 SMs; 128 → 64 SMs with work; both 0.48 waves; "
        "both 8 warps/SM at most, limited by registers; both 239 registers; no local memory (spills)"
    )


def test_kernel_line_names_a_partial_last_wave_spills_and_what_is_unknown():
    from qualify.evaluate.why import KernelShape, kernel_line

    base = KernelShape("a", 300, 1, 4, "registers", 64, 16)
    candidate = KernelShape("b", 300, None, None, None, 32, 0)
    assert kernel_line(base, candidate, 132) == (
        "both 300 CTAs on 132 SMs; both 132 SMs with work; 2.27 waves (the last 27 % full) → n/a waves; "
        "4 → n/a warps/SM at most, limited by registers → n/a; 64 → 32 registers; "
        "16 B → 0 B local memory per thread (spills)"
    )


def test_why_line_of_a_sequence_names_the_kernel_that_moved_most():
    from qualify.evaluate.why import why_line

    results, _ = record("vecload")
    case = results.trials[0].cases[0]
    inventory = case.kernels.inventory
    two = case.kernels.model_copy(update={"inventory": {**inventory, "base": [inventory["base"][0]] * 2}})
    line = why_line(case.model_copy(update={"kernels": two}), None, 132, None)
    assert line.startswith("2 → 1 kernels per call; most change in axpy<1> → axpy<4>: ")
    # trace version 3 states no CUPTI change: no kernel is named as the one that moved
    quiet = why_line(case.model_copy(update={"kernels": two}), None, 132, None, cupti_changes=False)
    assert quiet.startswith("2 → 1 kernels per call") and "most change" not in quiet
    assert "; 4,096 → 1,024 CTAs on 132 SMs;" in line  # the pair the attribution names, base first
    assert why_line(case, None, 132, None).startswith("4,096 → 1,024 CTAs on 132 SMs; ")  # one kernel each


def test_why_line_without_a_peak_gives_rates_and_without_geometry_says_so():
    from qualify.evaluate.why import why_line

    results, plan = record("vecload")
    trials = with_peak(results, bus_bits=0)
    rate = next(r for r in case_rates(plan, by_device(trials)) if r.case == "N=1048576")
    case = trials[0].cases[0]
    line = why_line(case, None, 132, rate)
    assert re.search(r"; [\d,]+ → [\d,]+ GB/s$", line), line
    bare = case.model_copy(update={"kernels": None, "resources": {}})
    assert why_line(bare, None, 132, None) == "no launch geometry recorded"


def test_a_case_whose_floor_corrected_median_is_not_positive_has_no_rate():
    results, plan = record("vecload")
    trials = []
    for t in results.trials:
        cases = []
        for c in t.cases:
            timing = dict(c.timing)
            if c.case == "N=1048576":
                timing["candidate"] = timing["candidate"].model_copy(update={"median_ns": 0.0})
            cases.append(c.model_copy(update={"timing": timing}))
        trials.append(t.model_copy(update={"cases": cases}))
    cases = {r.case for r in case_rates(plan, by_device(trials))}
    assert "N=1048576" not in cases and "N=4194304" in cases


def test_a_warm_cache_case_is_held_to_dram_by_the_arm_that_moves_more_bytes():
    """Whether L2 may serve a warm case is decided by the arm that moves the most: 100 MiB cannot
    come from a 60 MiB L2 even when the other arm's 1 MiB could. The candidate's declared bytes then
    put its rate far above the peak, which the verdict refuses."""
    results, plan = record("vecload")
    arms = plan.arms.model_copy(
        update={
            "base": plan.arms.base.model_copy(update={"params": {**plan.arms.base.params, "K": 1}}),
            "candidate": plan.arms.candidate.model_copy(update={"params": {**plan.arms.candidate.params, "K": 100}}),
        }
    )
    workload = plan.workload.model_copy(update={"bytes_moved": "K * 1048576"})
    hot = plan.model_copy(
        update={"arms": arms, "workload": workload, "schedule": plan.schedule.model_copy(update={"cache": "hot"})}
    )
    rates = {r.case: r for r in case_rates(hot, by_device(with_peak(results)))}
    small = rates["N=1048576"]
    assert (small.arms["base"].bytes_moved, small.arms["candidate"].bytes_moved) == (2**20, 100 * 2**20)
    assert small.dram_bound and small.fraction("candidate") > 1.0
    flagged = [r for r in verdict(hot, with_peak(results)).reasons if IMPOSSIBLE in r]
    assert any(r.startswith("N=1048576 (candidate)") for r in flagged)


def test_without_a_trace_each_arm_is_read_from_its_resources_and_the_plans_geometry():
    """An untraced trial: the shapes come from the trial's resources and the resolved launch; an
    arm with no resources or no launch (an entry point) gives no shape."""
    from qualify.evaluate.why import shapes, why_line
    from qualify.plan.resolve import resolve_cases

    results, plan = record("vecload")
    case = results.trials[0].cases[0].model_copy(update={"kernels": None})
    resolved = next(r for r in resolve_cases(plan) if r.id == case.case)
    got = shapes(case, resolved)
    assert set(got) == {"base", "candidate"}
    assert [(k.ctas, k.blocks_per_sm, k.warps_per_sm) for k in got["base"]] == [(4096, 8, 64)]
    assert got["candidate"][0].ctas == 1024
    assert why_line(case, resolved, 132, None).startswith("4,096 → 1,024 CTAs on 132 SMs; ")
    no_base = case.model_copy(update={"resources": {"candidate": case.resources["candidate"]}})
    assert set(shapes(no_base, resolved)) == {"candidate"}
    assert shapes(case, None) == {}  # no plan geometry: nothing to say


def test_no_kernel_moved_most_when_no_change_was_timed():
    from qualify.evaluate.why import _moved_most

    results, _ = record("vecload")
    timed = results.trials[0].cases[0].kernels.attribution
    untimed = [c.model_copy(update={"base_ns": None}) for c in timed]
    assert _moved_most(untimed) is None and _moved_most([]) is None
    assert _moved_most(timed) is not None


def test_a_device_without_a_complete_trial_has_no_rates_and_one_complete_trial_is_enough():
    """Rates come from complete trials alone: a device whose only trial failed gives none (and no
    error), a device with one complete trial gives every case's."""
    results, plan = record("vecload")
    first = results.trials[0]
    failed = first.model_copy(update={"status": "failed"})
    rates = case_rates(plan, {"failed device": [failed], "one trial": [first]})
    assert rates and {r.device for r in rates} == {"one trial"}
