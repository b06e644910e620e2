"""Trace version 2 on the fake device: traced calls taken as the timed samples are (ABBA/BAAB
blocks over the case's placements and flush slots, poisoned outputs), CUPTI's change with its
interval against the samples', and the second timer against the samples' median."""

from __future__ import annotations

import json
import math

import pytest
from test_engine import fake, frozen, run_trial, small_plan

from qualify.evaluate.cupti_delta import FIXED_PCT, TRACE_VERSION, allowance_pct, interval_gap_pct
from qualify.evaluate.recompute import kernel_fields
from qualify.evaluate.verdict import verdict
from qualify.plan.schedule import block_plan, trace_plan
from qualify.record.assemble import write_record
from qualify.record.check import check_record
from qualify.results.model import CaseStats, KernelActivity, KernelTrace, TracedCall
from qualify.results.store import Record


def traced_plan(calls: int = 6) -> dict:
    plan = small_plan()
    plan["schedule"] |= {"blocks": 6, "traced_calls": calls}
    plan["budget"]["max_samples"] = 36
    return plan


def run_traced(tmp_path, calls: int = 6, **device_kw):
    loaded = frozen(tmp_path, traced_plan(calls))
    device = fake(**device_kw)
    trial = run_trial(loaded, device, tmp_path)
    assert trial.status == "complete"
    plan, lock = loaded.plan, json.loads((tmp_path / "record" / "plan.lock.json").read_text())
    results = write_record(Record(tmp_path / "record"), plan, lock)
    return loaded, device, trial, results


# ---------------------------------------------------------------------------------------------
# the trace plan


@pytest.mark.parametrize("calls", range(8))
def test_the_trace_plan_gives_each_arm_its_calls_in_abba_and_baab_blocks(calls):
    draws = trace_plan(5, 1, "N=1000", calls, placements=6, flush_slots=4)
    assert [d.side for d in draws].count("base") == [d.side for d in draws].count("candidate") == calls
    for block in {d.block for d in draws}:
        inside = [d for d in draws if d.block == block]
        letters = "".join("A" if d.side == "base" else "B" for d in inside)
        assert inside[0].order.startswith(letters) and [d.position for d in inside] == list(range(len(inside)))
        assert len({(d.placement, d.flush_slot, d.order) for d in inside}) == 1  # one placement per block
    full = [d.order for d in draws if d.position == 0][: 2 * (calls // 4)]
    assert full.count("ABBA") == full.count("BAAB")  # balanced in whole pairs of blocks


def test_the_trace_plan_rotates_placements_in_rounds_from_streams_of_its_own():
    draws = trace_plan(5, 1, "N=1000", 12, placements=6, flush_slots=4)
    per_block = {d.block: d for d in draws}
    assert sorted(d.placement for d in per_block.values()) == list(range(6))  # six blocks, six placements
    assert sorted(d.flush_slot for d in list(per_block.values())[:4]) == [0, 1, 2, 3]
    assert trace_plan(5, 1, "N=1000", 8, 6, 4) == draws[:16]  # fewer calls: a prefix
    assert draws == trace_plan(5, 1, "N=1000", 12, 6, 4)
    assert draws != trace_plan(5, 2, "N=1000", 12, 6, 4)  # another trial draws anew
    timed = block_plan(5, 1, "N=1000", 6, 6, 4)
    assert [d.placement for d in timed] != [per_block[b].placement for b in range(6)]


# ---------------------------------------------------------------------------------------------
# the engine


def test_traced_calls_rotate_through_the_placements_and_interleave(tmp_path):
    loaded, device, trial, _ = run_traced(tmp_path)
    assert trial.kernel_trace.version == TRACE_VERSION == 3 and trial.kernel_trace.flush_slots == 4
    traced = [i for i, c in enumerate(device.calls) if c[0] == "trace"]
    for n, case in enumerate(trial.cases):
        draws = trace_plan(loaded.plan.seeds.base, trial.index, case.case, 6, case.placements["used"], 4)
        mine = traced[12 * n : 12 * (n + 1)]
        assert [device.calls[i][1] for i in mine] == [d.side for d in draws]  # ABBA/BAAB, not base's then candidate's
        for side in ("base", "candidate"):
            kept = [(c.block, c.position, c.order, c.placement, c.flush_slot) for c in case.trace[side]]
            assert kept == [(d.block, d.position, d.order, d.placement, d.flush_slot) for d in draws if d.side == side]
        assert len({d.placement for d in draws}) == 3  # three blocks, three placements of the pool
        # each call: its arm's output poisoned on the block's placement, then the block's flush slot
        poisoned: dict[int, set[int]] = {}
        for i, d in zip(mine, draws):
            assert device.calls[i - 1] == ("flush", d.flush_slot)
            kind, ptr = device.calls[i - 2]
            assert kind == "poison"
            poisoned.setdefault(d.placement, set()).add(ptr)
        assert all(len(p) == 1 for p in poisoned.values())  # one output buffer per placement (shared by the arms)
        assert len(set().union(*poisoned.values())) == 3  # and a different one on each placement
    # no traced call inside the timed blocks: every sample of a case precedes its traced calls
    samples = [i for i, c in enumerate(device.calls) if c[0] == "sample"]
    assert not [i for i in samples if traced[0] < i < traced[11]]


def test_cupti_and_samples_that_agree_give_no_reason(tmp_path):
    _, _, trial, results = run_traced(tmp_path)
    for case in trial.cases:
        d = case.kernels.timer_delta
        assert d.agree is True and d.cupti.ci_low is not None and d.events == case.stats
        (kernel,) = case.kernels.deltas
        assert kernel.stats == d.cupti  # one kernel per call: its change is the call's
        assert all(t.agree for t in case.kernels.sample_timers.values())
    assert not [r for r in results.verdict.reasons if "disagree" in r]
    assert check_record(tmp_path / "record") == []


def as_version_2(tmp_path, loaded, trial):
    """The record re-derived as trace version 2 wrote it (a record made before version 3)."""
    kt = trial.kernel_trace.model_copy(update={"version": 2})
    old = trial.model_copy(update={"kernel_trace": kt})
    Record(tmp_path / "record").trial_path(trial.index).write_text(old.model_dump_json(indent=1) + "\n")
    lock = json.loads((tmp_path / "record" / "plan.lock.json").read_text())
    return old, write_record(Record(tmp_path / "record"), loaded.plan, lock)


def test_cupti_that_disagrees_with_the_samples_is_kept_as_evidence_and_neither_judged_nor_printed(tmp_path):
    # trace version 3: CUPTI reads the candidate 5 % longer than the samples do (-16 % against
    # -20 %); the trial file keeps the comparison, the verdict and every text a reader sees do not
    loaded, _, trial, results = run_traced(tmp_path, trace_scale={"candidate": 1.05})
    for case in trial.cases:
        assert case.kernels.timer_delta.agree is False  # derived and kept as raw evidence
        assert case.kernels.deltas[0].stats.delta_pct == pytest.approx(-16.0, abs=0.5)
    assert not [r for r in results.verdict.reasons if "disagree" in r]
    assert results.verdict.reasons == ["NVIDIA H200 (fake) (GPU-00000000): 1 of 2 planned trials complete"]
    readme = (tmp_path / "record" / "README.md").read_text()
    assert "-16." not in readme and "CUPTI against the timed samples" not in readme
    assert "### Second timer" not in readme
    (line,) = [x for x in readme.splitlines() if x.startswith("- N=1024: ")]
    assert "`axpy<1>`: only in base; `axpy<4>`: only in candidate" in line or ": both arms" in line
    assert "the call by the timed samples: -20." in line
    from qualify.render.terminal import kernel_lines

    lines = kernel_lines(results)
    assert lines and not [x for x in lines if "%" in x]  # names and where they ran, no change
    assert check_record(tmp_path / "record") == []


def test_cupti_that_disagrees_with_the_samples_beyond_their_intervals_is_a_reason(tmp_path):
    # trace version 2 (records made before version 3 keep its rule): CUPTI reads the candidate
    # 5 % longer than the samples do: -16 % against -20 %
    loaded, _, trial, _ = run_traced(tmp_path, trace_scale={"candidate": 1.05})
    trial, results = as_version_2(tmp_path, loaded, trial)
    for case in trial.cases:
        d = case.kernels.timer_delta
        assert d.agree is False and d.gap_pct > d.allowance_pct == pytest.approx(FIXED_PCT, abs=0.1)
        assert case.kernels.deltas[0].stats.delta_pct == pytest.approx(-16.0, abs=0.5)
        assert all(t.agree for t in case.kernels.sample_timers.values())  # 0.4 µs: inside the per-arm bound
    named = [r for r in results.verdict.reasons if "the two timers disagree" in r]
    assert [r.split(":")[0] for r in named] == ["trial 1"] * 2
    assert "the two timers disagree at N=1024: CUPTI -16." in named[0] and "against events -20." in named[0]
    # said, never decisive: the one other reason (a second planned trial not run) decides the status
    others = [r for r in results.verdict.reasons if r not in named]
    assert others == ["NVIDIA H200 (fake) (GPU-00000000): 1 of 2 planned trials complete"]
    assert results.verdict.status == "incomplete"
    one_trial = results.model_copy(update={"trials": [trial]})
    plan_one = loaded.plan.model_copy(update={"schedule": loaded.plan.schedule.model_copy(update={"trials": 1})})
    alone = verdict(plan_one, one_trial.trials)
    assert alone.status == "qualified" and [r for r in alone.reasons if "the two timers disagree" in r] == named
    readme = (tmp_path / "record" / "README.md").read_text()
    (row,) = [x for x in readme.splitlines() if x.startswith("| 1 | N=1024 | -16.")]
    assert "| -20." in row and row.endswith("| no |")
    # derived as version 2 derives: only the edit to the trial file itself is seen
    problems = check_record(tmp_path / "record")
    assert [p for p in problems if "the trial file changed" not in p] == [] and len(problems) == 1


def test_report_check_holds_each_traced_call_to_its_draw(tmp_path):
    run_traced(tmp_path)
    path = tmp_path / "record" / "trials" / "trial-1.json"
    data = json.loads(path.read_text())
    calls = data["cases"][0]["trace"]["candidate"]
    calls[0]["placement"] = (calls[0]["placement"] + 1) % 6  # one call moved to another placement
    calls[1]["position"] = next(i for i, x in enumerate(calls[1]["order"]) if x == "A")  # the base arm's turn
    calls[2]["placement"] = 6  # the case has six
    path.write_text(json.dumps(data, indent=1) + "\n")
    problems = check_record(tmp_path / "record")
    where = "contradicts its evidence: cases N=1024"
    assert any(
        f"{where}: traced block {calls[0]['block']} ran on more than one order, placement" in p for p in problems
    )
    assert any(f"{where}: the candidate arm's traced call 2 ran at position" in p for p in problems)
    assert any(f"{where}: the candidate arm's traced call 3 names placement 6 and flush slot" in p for p in problems)


# ---------------------------------------------------------------------------------------------
# the comparison's arithmetic


def _stats(lo: float, hi: float) -> CaseStats:
    ratio = math.sqrt(lo * hi)
    return CaseStats(
        ratio=ratio, ci_low=lo, ci_high=hi, delta_pct=(ratio - 1) * 100, case_class="cant_tell", reason="", blocks=3
    )


def test_intervals_apart_by_their_gap_and_overlapping_ones_by_none():
    assert interval_gap_pct(_stats(0.80, 0.84), _stats(0.83, 0.90)) == 0.0
    assert interval_gap_pct(_stats(0.80, 0.84), _stats(0.88, 0.90)) == pytest.approx((0.88 / 0.84 - 1) * 100)
    assert interval_gap_pct(_stats(0.88, 0.90), _stats(0.80, 0.84)) == pytest.approx((0.88 / 0.84 - 1) * 100)
    assert interval_gap_pct(_stats(0.8, 0.84).model_copy(update={"ci_low": None}), _stats(0.8, 0.9)) is None


def test_the_allowance_grows_with_the_launch_overhead_the_event_window_holds():
    change = _stats(0.79, 0.81)  # -20 %
    assert allowance_pct(change, 5_000.0, 0.0) == FIXED_PCT
    # 1 µs in both arms' windows pulls a -20 % change of a 5 µs kernel to -16.7 %: 3.3 points
    assert allowance_pct(change, 5_000.0, 1_000.0) == pytest.approx(FIXED_PCT + abs(change.delta_pct) / 6)


def test_a_version_1_trace_derives_as_before():
    kernel = KernelActivity(
        name="k",
        grid=(1, 1, 1),
        block=(32, 1, 1),
        registers_per_thread=8,
        static_shared_bytes=0,
        dynamic_shared_bytes=0,
        local_bytes_per_thread=0,
        start_ns=0,
        end_ns=4_000,
        correlation_id=1,
        stream_id=7,
    )
    trace = {side: [TracedCall(event_ns=5_300.0, kernels=[kernel])] for side in ("base", "candidate")}
    old = kernel_fields(trace, KernelTrace(tool="t", demangler="none"), 1_300.0)["kernels"]
    assert set(old.timers) == {"base", "candidate"} and old.timers["base"].agree
    assert old.deltas is None and old.timer_delta is None and old.sample_timers is None
    assert "deltas" not in old.model_fields_set  # results.json of such a record gains no field
    with pytest.raises(ValueError, match="trace version 2 is derived with the case's timed samples"):
        kernel_fields(trace, KernelTrace(tool="t", demangler="none", version=2), 1_300.0)


def _calls(*spans_ns: int) -> list[TracedCall]:
    kernel = KernelActivity(
        name="k",
        grid=(1, 1, 1),
        block=(32, 1, 1),
        registers_per_thread=8,
        static_shared_bytes=0,
        dynamic_shared_bytes=0,
        local_bytes_per_thread=0,
        start_ns=0,
        end_ns=0,
        correlation_id=1,
        stream_id=7,
    )
    return [TracedCall(event_ns=0.0, kernels=[kernel.model_copy(update={"end_ns": s})]) for s in spans_ns]


@pytest.mark.parametrize(
    "events_ns, agree",
    [
        (10_000.0 + 1_200.0 + 1_300.0, True),  # the whole launch overhead and the whole allowance above
        (10_000.0 + 1_200.0 + 1_301.0, False),
        (10_000.0 - 1_300.0, True),  # samples shorter than CUPTI by the allowance
        (10_000.0 - 1_301.0, False),
    ],
)
def test_the_second_timer_allows_the_launch_overhead_above_and_its_allowance_both_ways(events_ns, agree):
    from qualify.evaluate.second_timer import sample_disagreement_text, sample_timer

    t = sample_timer(events_ns, _calls(9_000, 10_000, 30_000), 1_200.0)  # median span 10 µs: 1 µs + 3 %
    assert t.cupti_median_ns == 10_000.0 and t.gap_ns == events_ns - 10_000.0
    assert (t.low_ns, t.high_ns) == (-1_300.0, 2_500.0) and t.agree is agree
    text = sample_disagreement_text("N=1", "base", t)
    assert text.startswith("timers disagree at N=1 (base): ") and "(launch overhead 1.200 µs)" in text


def test_with_one_placement_the_traced_blocks_are_the_units(tmp_path):
    plan = traced_plan()
    plan["schedule"]["placement"] = {"count": 1}
    loaded = frozen(tmp_path, plan)
    trial = run_trial(loaded, fake(), tmp_path)
    for case in trial.cases:
        assert {c.placement for side in ("base", "candidate") for c in case.trace[side]} == {0}
        assert case.kernels.timer_delta.cupti.blocks == 3 and case.kernels.timer_delta.agree is True
        assert case.stats.blocks == 6  # the samples' units: blocks too


def test_windows_of_several_launches_are_not_held_to_one_launch_traced(tmp_path):
    plan = traced_plan()
    plan["schedule"]["iterations_per_sample"] = 2
    loaded = frozen(tmp_path, plan)
    # CUPTI reads 40 % longer: against windows of two launches that would be no evidence of a fault
    trial = run_trial(loaded, fake(trace_scale={"candidate": 1.4}), tmp_path)
    lock = json.loads((tmp_path / "record" / "plan.lock.json").read_text())
    results = write_record(Record(tmp_path / "record"), loaded.plan, lock)
    for case in trial.cases:
        assert case.kernels.timer_delta is None and case.kernels.sample_timers is None
        assert case.kernels.deltas[0].stats.delta_pct == pytest.approx(12.0, abs=1.0)  # 8 µs × 1.4 against 10
    assert not [r for r in results.verdict.reasons if "disagree" in r]
    readme = (tmp_path / "record" / "README.md").read_text()
    assert "A timed window holds 2 launches and a traced call one, so\nCUPTI is not held" in readme
    assert "### Second timer" not in readme
    assert check_record(tmp_path / "record") == []


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"block": None}, "lacks its draw"),
        ({"flush_slot": "past"}, "and flush slot"),
        ({"placement": 99}, "placement 99"),
    ],
)
def test_a_committed_traced_call_without_its_block_or_outside_the_pools_is_refused(change, expected):
    from pathlib import Path

    from qualify.evaluate.cupti_delta import draw_problems

    trial = Record(Path(__file__).resolve().parents[1] / "records" / "vecload").trials()[0]
    assert trial.kernel_trace.version >= 2 and draw_problems(trial) == []
    case = trial.cases[0]
    if change.get("flush_slot") == "past":
        change = {"flush_slot": trial.kernel_trace.flush_slots or 1}  # one past the last slot
    trace = {**case.trace, "base": [case.trace["base"][0].model_copy(update=change), *case.trace["base"][1:]]}
    planted = trial.model_copy(update={"cases": [case.model_copy(update={"trace": trace}), *trial.cases[1:]]})
    assert any(expected in p for p in draw_problems(planted))
