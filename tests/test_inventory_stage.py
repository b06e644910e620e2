"""The engine's inventory stage on the fake device: traced after the timing, kept raw in the trial,
derived into the record's kernel section, re-derived by `report --check`, and the second timer's
disagreement as a reason."""

from __future__ import annotations

import json
import shutil

import pytest
from test_compare import build, compare
from test_engine import fake, frozen, run_trial, small_plan

from qualify.evaluate.cupti_delta import TRACE_VERSION
from qualify.record.check import check_record

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs a C compiler")

PREP = "_Z4prepPKfPfi"
FLASH = "_ZN5flash6kernelILi128ELb1EEEvPK6__halfPS2_i"
ACTIVITY = {
    "base": [
        {"name": PREP, "ns": 2_000},
        {
            "name": FLASH,
            "ns": 40_000,
            "grid": (132, 1, 1),
            "registers_per_thread": 128,
            "dynamic_shared_bytes": 101_376,
        },
    ],
    "candidate": [
        {"name": PREP, "ns": 2_010},
        {
            "name": FLASH,
            "ns": 45_000,
            "grid": (132, 1, 1),
            "registers_per_thread": 168,
            "dynamic_shared_bytes": 101_376,
        },
        {"name": "tail", "ns": 900},
    ],
}


def traced_compare(tmp_path, **device_kw):
    # the fake entry points' durations are set for the kernel table, not from the bytes they move:
    # a device without a recorded peak, so no rate is held to DRAM (tests/test_why.py holds them)
    from qualify.run.fake import FAKE_INFO

    device_kw.setdefault("info", FAKE_INFO.model_copy(update={"memory_bus_width_bits": None}))
    return compare(tmp_path, build(tmp_path, "v1"), build(tmp_path, "v2"), activity=ACTIVITY, **device_kw)


def test_tracing_follows_each_cases_timing_and_is_kept_raw(tmp_path):
    from qualify.run.fake import FakeDevice

    seen: list[FakeDevice] = []
    real_init = FakeDevice.__init__

    def spy(self, *a, **kw):
        real_init(self, *a, **kw)
        seen.append(self)

    FakeDevice.__init__ = spy
    try:
        outcome = traced_compare(tmp_path)
    finally:
        FakeDevice.__init__ = real_init
    calls = seen[0].calls
    kinds = [c[0] for c in calls]
    traces = [i for i, k in enumerate(kinds) if k == "trace"]
    assert len(traces) == 2 * 2 * 5  # two cases, two arms, schedule.traced_calls = 5
    (trial,) = outcome.trials
    for group, case in zip((traces[:10], traces[10:]), trial.cases):
        # one case's traced calls together, with only each call's poisoning and flush between them
        assert {kinds[i] for i in range(group[0], group[-1]) if i not in group} <= {"poison", "flush"}
        # the read-back of the last half's outputs, and the trial's null calls ahead of its first trace
        before = [k for k in kinds[: group[0]] if k not in ("differs", "trace_null", "poison", "flush")]
        assert before[-1] == "release"  # right after the case's last ABBA half
        order = sorted((c.block, c.position, side) for side in ("base", "candidate") for c in case.trace[side])
        assert [calls[i][1] for i in group] == [side for _, _, side in order]  # in the blocks' order
    assert "sample" in kinds[traces[9] : traces[10]]  # the next case is timed after this one's trace
    assert kinds.count("trace_null") == 1 and kinds.index("trace_null") < traces[0]  # once, before the first
    case = trial.cases[0]
    assert [len(case.trace[s]) for s in ("base", "candidate")] == [5, 5]
    assert [k.name for k in case.trace["candidate"][0].kernels] == [PREP, FLASH, "tail"]
    assert trial.kernel_trace.names[FLASH] == "flash::kernel<128, true>"
    assert trial.kernel_trace.version == TRACE_VERSION
    assert trial.cost.stages_s["inventory"] >= 0


def test_record_names_each_kernel_without_cuptis_change(tmp_path):
    outcome = traced_compare(tmp_path)
    readme = (tmp_path / "record" / "README.md").read_text()
    assert "## Kernels each call launches" in readme
    assert "| N=256 | candidate | `flash::kernel<128, true>` | 132×1×1 | 128×1×1 | 168 | 0 B | 101,376 B |" in readme
    (line,) = [x for x in readme.splitlines() if x.startswith("- N=256:")]
    # trace version 3: each kernel by name and the arms that launch it, CUPTI's change (+12 % for
    # flash, kept in the trial file) nowhere; the call's change by the samples beside them
    assert line.startswith("- N=256: `prep`: both arms; `flash::kernel<128, true>`: both arms; ")
    assert "`tail`: only in candidate; the call by the timed samples: +14." in line
    (case,) = [c for c in outcome.trials[0].cases if c.case == "N=256"]
    flash = [d for d in case.kernels.deltas if d.name == "flash::kernel<128, true>"]
    assert flash[0].stats.delta_pct > 11  # the evidence is kept
    assert "+12." not in readme
    assert "### CUPTI against the timed samples" not in readme
    assert "### Second timer" not in readme and outcome.results.verdict.status == "qualified"
    assert check_record(tmp_path / "record") == []


def _edit_trial(tmp_path, edit) -> list[str]:
    path = tmp_path / "record" / "trials" / "trial-1.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return check_record(tmp_path / "record")


def test_report_check_catches_an_edited_kernel_table(tmp_path):
    traced_compare(tmp_path)

    def faster_flash(data):
        data["cases"][0]["kernels"]["inventory"]["candidate"][1]["median_ns"] = 40_000.0

    problems = _edit_trial(tmp_path, faster_flash)
    assert any("differs from its raw samples" in p and "inventory.candidate[1].median_ns" in p for p in problems)


def test_report_check_catches_an_edited_raw_trace(tmp_path):
    traced_compare(tmp_path)

    def later_end(data):
        data["cases"][0]["trace"]["base"][0]["kernels"][1]["end_ns"] += 50_000

    problems = _edit_trial(tmp_path, later_end)
    assert any("differs from its raw samples" in p and "kernels." in p for p in problems), problems


def test_report_check_catches_an_edited_readme_row(tmp_path):
    traced_compare(tmp_path)
    readme = tmp_path / "record" / "README.md"
    text = readme.read_text()
    assert "| 168 |" in text
    readme.write_text(text.replace("| 168 |", "| 96 |", 1))
    assert any("README.md line" in p for p in check_record(tmp_path / "record"))


@pytest.mark.parametrize("scale, agree", [(1.0, True), (1.4, False)])
def test_cupti_that_reads_otherwise_than_the_samples_is_kept_and_never_a_reason(tmp_path, scale, agree):
    # tracing's own cost on every traced window (5 µs here) never enters the comparison with the
    # samples beyond the launch overhead it states; CUPTI reading the candidate 40 % longer does,
    # and under trace version 3 the comparison is evidence in the trial file, not a reason
    outcome = traced_compare(tmp_path, trace_offset_ns=5_000.0, trace_scale={"candidate": scale})
    (case,) = [c for c in outcome.trials[0].cases if c.case == "N=256"]
    assert case.kernels.timer_delta.agree is agree
    assert case.kernels.sample_timers["candidate"].agree is agree and case.kernels.sample_timers["base"].agree
    assert outcome.results.verdict.status == "qualified" and outcome.results.verdict.reasons == []
    readme = (tmp_path / "record" / "README.md").read_text()
    assert "CUPTI against the timed samples" not in readme and "timers disagree" not in readme
    assert check_record(tmp_path / "record") == []


def test_the_null_calls_are_traced_once_per_trial_and_kept_raw(tmp_path):
    outcome = traced_compare(tmp_path, trace_offset_ns=2_000.0)
    (trial,) = outcome.trials
    nulls = trial.kernel_trace.null_calls
    assert len(nulls) == 5 and all(len(c.kernels) == 1 for c in nulls)
    timers = [t for c in trial.cases for t in c.kernels.sample_timers.values()]
    # the fake's floor samples carry noise: the trial's measured floor, not 1,300 ns exactly, is subtracted
    assert timers and all(t.overhead_ns == pytest.approx(2_000.0, abs=50) and t.agree for t in timers)
    assert all(
        t.high_ns - t.low_ns == pytest.approx(t.overhead_ns + 2 * (1000 + 0.03 * t.cupti_median_ns)) for t in timers
    )


def test_report_check_catches_edited_null_calls(tmp_path):
    traced_compare(tmp_path)

    def longer(data):
        for call in data["kernel_trace"]["null_calls"]:
            call["event_ns"] += 30_000

    problems = _edit_trial(tmp_path, longer)
    assert any("sample_timers" in p and "overhead_ns" in p for p in problems), problems


def test_without_cupti_the_record_says_so(tmp_path):
    outcome = traced_compare(tmp_path, cupti=False)
    (trial,) = outcome.trials
    assert trial.status == "complete" and all(c.trace is None and c.kernels is None for c in trial.cases)
    assert trial.kernel_trace.tool.startswith("not taken: cupti-python is not installed")
    readme = (tmp_path / "record" / "README.md").read_text()
    assert "Trial 1: kernel trace not taken: cupti-python is not installed" in readme
    assert check_record(tmp_path / "record") == []


def test_traced_calls_zero_traces_nothing(tmp_path):
    plan = small_plan()
    plan["schedule"]["traced_calls"] = 0
    device = fake()
    trial = run_trial(frozen(tmp_path, plan), device, tmp_path)
    assert not [c for c in device.calls if c[0] == "trace"]
    assert trial.kernel_trace.tool == "off (schedule.traced_calls is 0)"


def test_kernel_arms_are_traced_and_timed_twice_too(tmp_path):
    device = fake()
    trial = run_trial(frozen(tmp_path), device, tmp_path)
    case = trial.cases[0]
    (base,) = case.kernels.inventory["base"]
    (cand,) = case.kernels.inventory["candidate"]
    assert base.median_ns == pytest.approx(10_000, rel=0.02) and cand.median_ns == pytest.approx(8_000, rel=0.02)
    (change,) = case.kernels.attribution  # axpy<1> against axpy<4>: one kernel, its template argument changed
    assert (change.name, change.candidate_name) == (base.name, cand.name) and base.name != cand.name
    assert change.outcome == "faster" and all(t.agree for t in case.kernels.sample_timers.values())
    assert case.kernels.timer_delta.agree is not False


def test_a_cupti_failure_ends_tracing_not_the_trial(tmp_path, monkeypatch):
    from qualify.errors import DeviceError
    from qualify.run.fake import FakeDevice

    def broken(self, enqueue, calls, label, cold, **kw):
        raise DeviceError("CUPTI activity_enable: CUPTI_ERROR_NOT_INITIALIZED")

    monkeypatch.setattr(FakeDevice, "trace_calls", broken)
    outcome = traced_compare(tmp_path)
    (trial,) = outcome.trials
    assert trial.status == "complete" and all(c.trace is None for c in trial.cases)
    assert trial.kernel_trace.tool == "stopped at N=256 (base): CUPTI activity_enable: CUPTI_ERROR_NOT_INITIALIZED"
    assert check_record(tmp_path / "record") == []


def test_an_entry_point_failing_while_traced_fails_the_trial(tmp_path, monkeypatch):
    from qualify.run.fake import FakeDevice
    from qualify.run.library import EntryPointFailed

    def failing(self, enqueue, calls, label, cold, **kw):
        raise EntryPointFailed("attention_gated returned 1: invalid argument", 1)

    monkeypatch.setattr(FakeDevice, "trace_calls", failing)
    (trial,) = traced_compare(tmp_path).trials
    assert trial.status == "failed" and "returned 1" in trial.failures[0].message


def test_the_terminal_summary_attributes_the_change(tmp_path):
    import io

    from qualify.render.terminal import console, run_summary

    outcome = traced_compare(tmp_path)
    out = io.StringIO()
    console(file=out).print(run_summary(outcome, tmp_path / "record"))
    text = out.getvalue()
    assert "kernels (traced calls, information only):" in text
    (line,) = [x for x in text.splitlines() if x.strip().startswith("trial 1, N=1000:")]
    # trace version 3: the kernels by name and the arms that launch them, no CUPTI change
    assert (
        line.strip() == "trial 1, N=1000: prep: both arms; flash::kernel<128, true>: both arms; tail: only in candidate"
    )
