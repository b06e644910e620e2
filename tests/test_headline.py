"""The headline a record opens with: golden sentences for the shapes a result takes.

Trials are built from statistics directly (no raw samples): the headline reads Results only, and
every number it prints is a field of them. Sentences are compared whole, so a wording that reads
wrong for a slowdown or a speed-up ("speed-up -23.81 %") fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

from plans import plan_copy

from qualify.evaluate.headline import headline, headline_lines, reason_lines
from qualify.evaluate.stats import classify
from qualify.evaluate.verdict import verdict
from qualify.plan.load import validate_plan
from qualify.results.model import (
    BufferParity,
    CaseStats,
    CaseTrial,
    ControlResult,
    DeviceInfo,
    Failure,
    Provenance,
    Results,
    SanitizerResult,
    TimingSummary,
    Trial,
)

LENGTHS = (512, 640, 1024, 2048, 4096, 8192)
H200 = DeviceInfo(
    name="NVIDIA H200",
    uuid="GPU-005ec561-0000",
    ordinal=0,
    compute_capability="9.0",
    arch="sm_90",
    sm_count=132,
    l2_bytes=62_914_560,
    max_shared_per_block_optin=232_448,
    driver_version="580",
    cuda_driver_version="13.0",
)


def make_plan(gates=None, sanitizer=None, aa=True, cases=None):
    data = plan_copy()
    data["workload"]["cases"] = cases or [{"N": n} for n in LENGTHS]
    data["acceptance"] = {
        "gates": gates
        if gates is not None
        else [
            {"name": "faster_from_2048", "where": "N >= 2048", "min_speedup_pct": 5.0},
            {"name": "no_regression", "max_regression_pct": 2.0},
        ],
        "sanitizer": sanitizer if sanitizer is not None else [{"tool": "memcheck", "cases": ["N=512"]}],
    }
    data["controls"]["aa"] = aa
    return validate_plan(json.loads(json.dumps(data)), Path("plan.json"))


def stats(delta_pct: float, half_width_pct: float = 0.3) -> CaseStats:
    ratio = 1 + delta_pct / 100
    lo, hi = ratio - half_width_pct / 100, ratio + half_width_pct / 100
    cls, why = classify(ratio, lo, hi)
    # the MDE a t-interval of this half-width implies over 10 blocks: (t.975 + t.80) / t.975 = 1.39
    return CaseStats(
        ratio=ratio,
        ci_low=lo,
        ci_high=hi,
        delta_pct=delta_pct,
        case_class=cls,
        reason=why,
        mde_pct=1.39 * half_width_pct,
        blocks=10,
    )


def case(cid: str, delta_pct: float, *, equal: bool = True, half_width_pct: float = 0.3) -> CaseTrial:
    t = TimingSummary(
        samples=200,
        warmup=10,
        median_ns=1e5,
        q1_ns=1e5,
        q3_ns=1e5,
        min_ns=1e5,
        max_ns=1e5,
        throttled_samples=0,
        mean_sm_clock_mhz=1980.0,
    )
    parity = BufferParity(
        buffer="out",
        equal=equal,
        elements=1000,
        differing_elements=0 if equal else 3,
        first_difference=None if equal else 7,
        max_ulp=0 if equal else 2,
        max_abs=0.0,
        max_rel=0.0,
    )
    return CaseTrial(
        case=cid,
        input_sha256={},
        resources={},
        timing={"base": t, "candidate": t},
        stats=stats(delta_pct, half_width_pct),
        aa=stats(0.0, 0.2),
        parity=[parity],
        deterministic={"base": True, "candidate": True},
        timed_outputs_match=True,
    )


def trial(
    index: int,
    deltas,
    *,
    status="complete",
    equal=True,
    sanitizer=None,
    controls=None,
    failures=(),
    half_width_pct: float = 0.3,
) -> Trial:
    prov = Provenance(
        device=H200,
        planned=True,
        nvrtc_version="13.0",
        cuda_bindings_version="13.0",
        qualify_version="0.1",
        python_version="3.11",
        numpy_version="2.4",
        git_revision=None,
        git_dirty=None,
        host="h",
        command=["qualify", "run"],
    )
    clean = [
        SanitizerResult(
            tool="memcheck",
            case="N=512",
            side=s,
            status="clean",
            errors=0,
            exit_code=0,
            summary=[],
            excerpt=[],
            seconds=1.0,
        )
        for s in ("base", "candidate")
    ]
    return Trial(
        index=index,
        status=status,
        plan_digest="d" * 64,
        started_at="s",
        ended_at="e",
        provenance=prov,
        timer={},
        cases=[case(f"N={n}", d, equal=equal, half_width_pct=half_width_pct) for n, d in zip(LENGTHS, deltas)],
        controls=controls
        if controls is not None
        else [ControlResult(name="flip", kind="input", case="N=512", caught=True, differing_elements=1)],
        sanitizer=clean if sanitizer is None else sanitizer,
        failures=list(failures),
        samples_file="trials/x.npz",
        samples_sha256="0" * 64,
    )


def results(plan, trials) -> Results:
    return Results(plan_name="tiny", plan_digest="d" * 64, files={}, trials=trials, verdict=verdict(plan, trials))


def lines(plan, trials, esc=str):
    h = headline(results(plan, trials), plan)
    return headline_lines(h, esc), reason_lines(h, esc)


SLOWER = [(23.8, 10.9, 11.7, 20.7, 17.5, 16.4), (23.0, 11.1, 11.6, 21.3, 17.8, 16.6)]


def test_slower_everywhere():
    plan = make_plan()
    head, reasons = lines(plan, [trial(1, SLOWER[0]), trial(2, SLOWER[1])])
    assert head == [
        "The candidate is slower at all 6 cases, by 11.0 % to 23.4 % (time per launch, median of 2 complete trials).",
        "Outputs: byte-identical to the base arm in all 12 case-trial checks.",
        "A/A control of 12 runs: 12 same; none came out faster or slower; negative controls caught in 2 of 2 runs; "
        "compute-sanitizer clean (memcheck; 4 runs).",
    ]
    # one line per gate, the slowdown worded as one, never as a negative speed-up
    assert reasons == [
        "gate faster_from_2048 missed at N=2048, N=4096, N=8192, all its cases (change <= -5%; "
        "6 of 6 judgements): slower by 16.4 % to 21.3 %.",
        "gate no_regression missed at all 6 of its cases (change <= +2%; 12 of 12 judgements): "
        "slower by 10.9 % to 23.8 %.",
    ]
    assert not any("-" in line.split(":")[-1] for line in reasons)


def test_faster_from_a_length_on_and_the_same_below_states_the_crossover():
    plan = make_plan()
    deltas = [(0.1, -0.2, 0.0, -6.1, -8.0, -9.0), (0.2, -0.1, 0.1, -6.3, -7.8, -8.8)]
    head, reasons = lines(plan, [trial(1, deltas[0]), trial(2, deltas[1])])
    assert head[0] == (
        "The candidate is the same up to N=1024 (within ±0.5 %); faster from N=2048, by 6.2 % to 8.9 % "
        "(time per launch, median of 2 complete trials). It crosses over: faster from N=2048; the data would "
        "support a gate where N >= 2048 with a change of at most -5.5 % in a new, separately frozen plan "
        "(this verdict stands)."
    )
    assert reasons == []


def test_mixed_classes_read_in_plan_order():
    plan = make_plan(gates=[])
    deltas = (3.0, 0.1, 0.0, -4.0, 0.2, 6.0)
    head, _ = lines(plan, [trial(1, deltas), trial(2, deltas)])
    assert head[0].startswith(
        "The candidate is slower at N=512, by 3.0 %; the same from N=640 to N=1024 "
        "(within ±0.5 %); faster at N=2048, by 4.0 %; the same at N=4096 (within ±0.5 %); "
        "slower at N=8192, by 6.0 % (time"
    )
    assert "crosses over" not in head[0]  # faster in the middle only: no single boundary


def test_trials_that_disagree_and_wide_intervals_are_said_so():
    plan = make_plan(gates=[])
    head, _ = lines(
        plan,
        [trial(1, (3.0, 1.0, 0, 0, 0, 0), half_width_pct=2.0), trial(2, (-3.0, 1.0, 0, 0, 0, 0), half_width_pct=2.0)],
    )
    assert head[0].startswith(
        "The candidate is inconsistent across trials at N=512; not resolved from N=640 "
        "(+0.0 % to +1.0 % in time, the 95 % interval too wide to call)"
    )


def test_a_speed_up_short_of_its_gate_and_one_not_resolved():
    plan = make_plan(gates=[{"name": "faster", "min_speedup_pct": 1.0, "every_trial": True}], sanitizer=[])
    # N=512: 0.3 % faster (short of 1 %); N=640: 2 % faster but the interval straddles 1
    deltas = (-0.3, -2.0, -3.0, -3.0, -3.0, -3.0)
    wide = trial(1, deltas, half_width_pct=0.2)
    wide.cases[1] = wide.cases[1].model_copy(update={"stats": stats(-2.0, 2.5)})
    _, reasons = lines(plan, [wide])
    # N=640's interval straddles the bound and it resolves only 3.5 %: can't tell, never a miss
    assert reasons[0] == "gate faster missed at N=512 (change <= -1%; 1 of 5 judgements): faster by only 0.3 %."
    assert any(r.startswith("gate faster can't tell at N=640") and "can detect is 3.47%" in r for r in reasons)
    plan2 = make_plan(gates=[{"name": "faster", "min_speedup_pct": 1.0}], sanitizer=[])
    _, reasons = lines(plan2, [trial(1, (-0.3, -0.5, -3, -3, -3, -3)), trial(2, (-0.3, -0.5, -3, -3, -3, -3))])
    assert reasons[0] == (
        "gate faster missed at N=512, N=640 (change <= -1%; 4 of 12 judgements): faster by only 0.3 % to 0.5 %."
    )


def test_a_gate_missed_both_ways_gives_the_span():
    plan = make_plan(gates=[{"name": "big", "min_speedup_pct": 10.0, "every_trial": False}], sanitizer=[])
    deltas = (4.0, -3.0, -20.0, -20.0, -20.0, -20.0)
    _, reasons = lines(plan, [trial(1, deltas), trial(2, deltas)])
    assert (
        reasons[0]
        == "gate big missed at N=512, N=640 (change <= -10%; 2 of 6 judgements): from 3.0 % faster to 4.0 % slower."
    )


def test_incomplete_record_says_what_is_missing():
    plan = make_plan(gates=[])
    head, reasons = lines(plan, [trial(1, SLOWER[0])])
    assert head[0].endswith("(time per launch, median of 1 complete trial).")
    assert "NVIDIA H200 (GPU-005ec561): 1 of 2 planned trials complete" in reasons
    assert head[2].endswith("compute-sanitizer clean (memcheck; 2 runs).")
    head, _ = lines(plan, [trial(1, SLOWER[0], sanitizer=[])])
    assert head[2].endswith("; compute-sanitizer not run.")
    head, reasons = lines(plan, [])
    assert head[0] == "No trial has run: there is nothing to report yet."
    assert reasons == ["no trials"]


def test_fidelity_failure_and_vacuous_control_are_in_the_headline():
    plan = make_plan(gates=[])
    missed = [ControlResult(name="flip", kind="input", case="N=512", caught=False, differing_elements=0)]
    found = [
        SanitizerResult(
            tool="memcheck",
            case="N=512",
            side="candidate",
            status="findings",
            errors=3,
            exit_code=1,
            summary=[],
            excerpt=[],
            seconds=1.0,
        )
    ]
    t1 = trial(1, SLOWER[0], equal=False, controls=missed, sanitizer=found)
    t2 = trial(2, SLOWER[1], failures=[Failure(kind="fidelity", case="N=9", message="outputs differ")])
    head, _ = lines(plan, [t1, t2])
    assert (
        head[1] == "Outputs: NOT byte-identical to the base arm at N=512 (trial 1), N=640 (trial 1), "
        "N=1024 (trial 1) and 4 more."
    )
    assert head[2] == (
        "A/A control of 12 runs: 12 same; none came out faster or slower; negative control NOT caught: flip at N=512 "
        "(trial 1) (the fidelity gate is vacuous); compute-sanitizer: memcheck at N=512 (candidate): "
        "findings."
    )


def test_labels_pass_through_the_escape_function():
    plan = make_plan()
    seen = []

    def esc(text: str) -> str:
        seen.append(text)
        return f"<{text}>"

    head, reasons = lines(plan, [trial(1, SLOWER[0]), trial(2, SLOWER[1])], esc)
    assert "gate <no_regression>" in reasons[1]
    assert "<N=2048>, <N=4096>, <N=8192>" in reasons[0]
    assert {"faster_from_2048", "no_regression", "N=2048"} <= set(seen)


def test_a_large_crossover_length_is_written_whole():
    sizes = [1 << 20, 1 << 22, 1 << 24, 1 << 25, 1 << 26, 1 << 27]
    plan = make_plan(gates=[], sanitizer=[], cases=[{"N": n} for n in sizes])
    t = trial(1, (0.1, -12.0, -15.0, -20.0, -22.0, -23.0))
    t = t.model_copy(update={"cases": [c.model_copy(update={"case": f"N={n}"}) for c, n in zip(t.cases, sizes)]})
    head, _ = lines(plan, [t])
    assert (
        "faster from N=4194304;" in head[0] and "a gate where N >= 4194304 with a change of at most -11.5 %" in head[0]
    )


def _traced(t, version: int):
    from qualify.results.model import KernelTrace

    return t.model_copy(update={"kernel_trace": KernelTrace(tool="t", demangler="none", version=version)})


def test_trials_of_trace_version_3_are_worded_by_their_pooled_interval():
    """Issue 32: the headline said "median of 2 complete trials" where the pooled interval decides.
    From trace version 3 on, each case's class and change are the pooled interval's."""
    from qualify.evaluate.pooled import pool

    plan = make_plan()
    trials = [_traced(trial(1, SLOWER[0]), 3), _traced(trial(2, SLOWER[1]), 3)]
    head, _ = lines(plan, trials)
    pooled = [pool([c.stats for t in trials for c in t.cases if c.case == cid]).delta_pct for cid in plan_cases(plan)]
    low, high = sorted((min(pooled), max(pooled)))
    assert head[0] == (
        f"The candidate is slower at all 6 cases, by {low:.1f} % to {high:.1f} % (time per launch, pooled over "
        "2 complete trials, each its own process)."
    )
    # one version-2 trial among them: the words the record was written with
    mixed, _ = lines(plan, [trials[0], _traced(trial(2, SLOWER[1]), 2)])
    assert mixed[0].endswith("(time per launch, median of 2 complete trials).")
    one, _ = lines(plan, trials[:1])
    assert one[0].endswith("(time per launch, from 1 complete trial).")


def test_pooled_words_name_a_case_the_trials_disagree_on_by_the_pooled_class():
    plan = make_plan()
    a, b = (0.1, -0.2, 0.0, -6.1, -8.0, -9.0), (0.2, -0.1, 0.1, -6.3, -7.8, -8.8)
    mixed_first = (6.0,) + a[1:]  # trial 1 reads N=512 slower, trial 2 the same: per trial "inconsistent"
    head, _ = lines(plan, [trial(1, mixed_first), trial(2, b)])
    assert "inconsistent across trials" in head[0]
    head, _ = lines(plan, [_traced(trial(1, mixed_first), 3), _traced(trial(2, b), 3)])
    assert "inconsistent across trials" not in head[0]


def plan_cases(plan):
    from qualify.plan.resolve import case_id

    return [case_id(c) for c in plan.workload.cases]


def _with_aa(t: Trial, index: int, delta_pct: float, half_width_pct: float) -> Trial:
    cases = list(t.cases)
    cases[index] = cases[index].model_copy(update={"aa": stats(delta_pct, half_width_pct)})
    return t.model_copy(update={"cases": cases})


def test_an_aa_that_strays_in_one_process_only_is_said_as_such():
    plan = make_plan()
    one, two = trial(1, SLOWER[0]), trial(2, SLOWER[1])
    head, _ = lines(plan, [_with_aa(one, 0, 0.7, 0.1), _with_aa(two, 0, -0.4, 0.1)])
    first = one.cases[0].case
    assert head[2].startswith(
        "A/A control of 12 runs: 11 same, 1 slower; in one process a difference that is not there "
        f"came out (slower at {first} (trial 1)), pooled over the device's trials none did;"
    ), head[2]


def test_an_aa_that_strays_pooled_over_the_trials_names_the_case_and_device():
    plan = make_plan()
    one, two = trial(1, SLOWER[0]), trial(2, SLOWER[1])
    head, _ = lines(plan, [_with_aa(one, 0, 1.2, 0.1), _with_aa(two, 0, 1.3, 0.1)])
    first = one.cases[0].case
    assert f"; pooled over a device's trials, a difference that is not there came out: slower at {first} on " in head[2]
