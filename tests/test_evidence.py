"""`report --check` checks the evidence, not only the numbers.

Each attack takes a record that checks out, changes it the way a forger would (often re-rendering
results.json and README.md afterwards with `qualify report`, so that only the evidence can give
it away) and asserts that `report --check` refuses it with the documented exit code and a line
that names the file and what is wrong, never a traceback.

Records come from the real pipeline on the fake device (tests/test_pipeline.py's route: plan →
freeze → run_plan → record), so their ledgers, trial files and raw samples are what `qualify run`
writes, or from tests/test_record.py's synthetic builder where a record needs sanitizer results.
"""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from pathlib import Path

import fakes
import numpy as np
import pytest
from plans import make_repo
from test_engine import small_plan
from test_record import h200_trials, new_record

from qualify.cli import main
from qualify.commands.pipeline import load_frozen, run_plan
from qualify.plan.digest import freeze_from_hashes, sha256_file
from qualify.plan.load import validate_plan
from qualify.record.assemble import write_record
from qualify.record.check import check_record
from qualify.record.merge import merge_records
from qualify.results import samples as raw
from qualify.results.model import Trial
from qualify.results.store import Record
from qualify.run.fake import FAKE_INFO, FakeDevice, FakeTelemetry

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted(p.parent for p in ROOT.glob("records/*/results.json"))


# ---------------------------------------------------------------------------------------------
# records and the CLI


def _pipeline_record(
    root: Path, kernel=fakes.axpy, plan: dict | None = None, device_info=FAKE_INFO, seed: int = 0
) -> Path:
    path = make_repo(root, plan or small_plan(), freeze=True)
    device = FakeDevice(
        {"axpy": kernel}, durations={"base": 10_000.0, "candidate": 8_000.0}, info=device_info, seed=seed
    )
    folder = root / "records" / "tiny"
    run_plan(load_frozen(path), folder, lambda: device, lambda uuid: FakeTelemetry())
    return folder


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """Two complete trials, qualified, written by qualify run (ledger with sha256)."""
    return _pipeline_record(tmp_path_factory.mktemp("made"))


@pytest.fixture(scope="module")
def wrong(tmp_path_factory) -> Path:
    """Two complete trials whose candidate changes one output element: not qualified."""
    plan = small_plan()
    plan["stop"] = {"fail_fast": []}  # time the cases anyway, so that only parity tells
    return _pipeline_record(tmp_path_factory.mktemp("wrong"), kernel=fakes.axpy_one_wrong, plan=plan)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    record, plan, lock = new_record(tmp_path_factory.mktemp("synthetic") / "vecwidth")
    h200_trials(record, lock)
    write_record(record, plan, lock)
    return record.folder


@pytest.fixture
def rec(made, tmp_path) -> Path:
    return Path(shutil.copytree(made, tmp_path / "rec"))


@pytest.fixture
def bad(wrong, tmp_path) -> Path:
    return Path(shutil.copytree(wrong, tmp_path / "bad"))


@pytest.fixture
def syn(synthetic, tmp_path) -> Path:
    return Path(shutil.copytree(synthetic, tmp_path / "syn"))


def run_cli(argv, capsys) -> tuple[int, list[str]]:
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    return exc.value.code, captured.err.splitlines()


def refused(capsys, folder: Path, code: int, *fragments: str, lines: int | None = 1) -> list[str]:
    """`report --check folder` exits with `code`; one line (or `lines`) holds every fragment."""
    got, err = run_cli(["report", "--check", folder], capsys)
    assert got == code, err
    assert err, "a refused record says why"
    assert all(line.startswith(f"qualify: check: {folder}: ") or line.startswith("qualify: error: ") for line in err), (
        err
    )
    if lines is not None:
        assert len(err) == lines, err
    assert any(all(f in line for f in fragments) for line in err), (fragments, err)
    return err


def passes(capsys, folder: Path) -> None:
    got, err = run_cli(["report", "--check", folder], capsys)
    assert got == 0, err


def rerender(folder: Path) -> None:
    """What a forger runs after editing the evidence: results.json and README.md follow it."""
    Record(folder)  # the folder exists
    from qualify.record.check import rebuild_record

    rebuild_record(folder)


def edit_trial(folder: Path, index: int, change) -> None:
    path = folder / "trials" / f"trial-{index}.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(Trial.model_validate(data).model_dump_json(indent=1) + "\n")


def ledger_events(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "ledger.jsonl").read_text().splitlines() if line.strip()]


def write_ledger(folder: Path, events: list[dict]) -> None:
    (folder / "ledger.jsonl").write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in events))


def old_ledger(folder: Path) -> None:
    """The ledger as records made before the end event held sha256: nothing to compare files with."""
    write_ledger(
        folder,
        [{k: v for k, v in e.items() if k not in ("trial_sha256", "samples_sha256")} for e in ledger_events(folder)],
    )


def replace_samples(folder: Path, index: int, change) -> None:
    """Edit trial `index`'s raw samples and point its trial file at the new bytes (sha256 updated)."""
    path = folder / "trials" / f"trial-{index}.npz"
    arrays = raw.load(path)
    change(arrays)
    data = raw.save(path, arrays)
    import hashlib

    edit_trial(folder, index, lambda d: d.update(samples_sha256=hashlib.sha256(data).hexdigest()))


def raw_samples_bytes(folder: Path, index: int, members: dict[str, bytes]) -> None:
    """Replace trial `index`'s samples with hand-made .npy members (sha256 updated to match)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    path = folder / "trials" / f"trial-{index}.npz"
    path.write_bytes(buf.getvalue())
    edit_trial(folder, index, lambda d: d.update(samples_sha256=sha256_file(path)))


def first_case(folder: Path) -> str:
    return json.loads((folder / "trials" / "trial-1.json").read_text())["cases"][0]["case"]


# ---------------------------------------------------------------------------------------------
# the records made here check out; so does every committed record, and re-rendering changes no byte


def test_pipeline_records_check_out(made, wrong, synthetic, capsys):
    for folder in (made, wrong, synthetic):
        passes(capsys, folder)


def test_end_events_record_the_sha256_of_the_trial_and_its_samples(made):
    ends = [e for e in ledger_events(made) if e["event"] == "trial_ended"]
    assert [e["trial"] for e in ends] == [1, 2]
    for e in ends:
        assert e["trial_sha256"] == sha256_file(made / "trials" / f"trial-{e['trial']}.json")
        assert e["samples_sha256"] == sha256_file(made / "trials" / f"trial-{e['trial']}.npz")


@pytest.mark.parametrize("record", COMMITTED, ids=[p.name for p in COMMITTED])
def test_re_rendering_a_committed_record_changes_no_byte(record, tmp_path, capsys):
    copy = Path(shutil.copytree(record, tmp_path / record.name))
    run_cli(["report", copy], capsys)
    for name in ("results.json", "README.md"):
        assert (copy / name).read_bytes() == (record / name).read_bytes(), name


# ---------------------------------------------------------------------------------------------
# cause 5: the ledger against the trial files and the budget


def _copy_trial_over(folder: Path, src: int, dst: int) -> None:
    trials = folder / "trials"
    shutil.copyfile(trials / f"trial-{src}.npz", trials / f"trial-{dst}.npz")
    data = json.loads((trials / f"trial-{src}.json").read_text())
    data.update(index=dst, samples_file=f"trials/trial-{dst}.npz")
    (trials / f"trial-{dst}.json").write_text(Trial.model_validate(data).model_dump_json(indent=1) + "\n")


def test_trial_replaced_by_a_copy_of_another(rec, capsys):
    _copy_trial_over(rec, 1, 2)
    rerender(rec)
    refused(capsys, rec, 2, "trials/trial-2.json", "same device and start time as trial 1", lines=None)


def _swap_two_samples(folder: Path, index: int) -> None:
    """Swap two samples of one block: new bytes, the very same statistics."""
    case = first_case(folder)

    def swap(arrays):
        for field in ("ns", "block", "sm_mhz", "throttle", "temp_c"):
            a = arrays[f"{case}/base/{field}"].copy()
            a[[0, 1]] = a[[1, 0]]  # both in block 0: the block bootstrap cannot see it
            arrays[f"{case}/base/{field}"] = a

    replace_samples(folder, index, swap)


def test_trial_replaced_by_a_disguised_copy_is_caught_by_the_ledger_sha256_alone(rec, capsys):
    _copy_trial_over(rec, 1, 2)
    edit_trial(rec, 2, lambda d: d.update(started_at="2026-12-01T00:00:00.000+00:00"))
    _swap_two_samples(rec, 2)
    rerender(rec)
    refused(capsys, rec, 2, "trials/trial-2.json: sha256 differs from the one the ledger.jsonl recorded", lines=2)


def test_fabricated_trial_not_in_the_ledger(rec, capsys):
    _copy_trial_over(rec, 2, 3)
    edit_trial(rec, 3, lambda d: d.update(started_at="2026-12-01T00:00:00.000+00:00"))
    rerender(rec)
    err = refused(capsys, rec, 2, "trials/trial-3.json", "not in the ledger.jsonl", lines=None)
    assert any("3 complete trials" in line and "schedule.trials is 2" in line for line in err), err


def test_fabricated_trial_with_forged_ledger_events_exceeds_the_planned_trials(rec, capsys):
    _copy_trial_over(rec, 2, 3)
    edit_trial(rec, 3, lambda d: d.update(started_at="2026-12-01T00:00:00.000+00:00"))
    events = ledger_events(rec)
    events += [{**events[2], "trial": 3}, {"event": "trial_ended", "trial": 3, "status": "complete"}]
    write_ledger(rec, events)
    rerender(rec)
    refused(capsys, rec, 2, "trials: 3 complete trials on GPU-", "schedule.trials is 2", lines=None)


def test_more_trials_in_the_ledger_than_the_budget_allows(rec, capsys):
    events = ledger_events(rec)
    start = events[0]
    for index in (3, 4, 5):  # three more crashed trials: each counts against max_trials = 3
        events += [
            {**start, "trial": index},
            {"event": "trial_ended", "trial": index, "status": "interrupted", "note": "died"},
        ]
    write_ledger(rec, events)
    refused(capsys, rec, 2, "ledger.jsonl: 5 trials on GPU-", "budget.max_trials is 3")


def test_listed_trial_deleted(rec, capsys):
    (rec / "trials" / "trial-2.json").unlink()
    (rec / "trials" / "trial-2.npz").unlink()
    rerender(rec)
    refused(capsys, rec, 2, "trials/trial-2.json: missing; the ledger.jsonl ended trial 2 'complete'")


def test_failed_trial_files_removed(tmp_path, capsys):
    plan = small_plan()
    plan["stop"] = {"fail_fast": ["fidelity"]}
    folder = _pipeline_record(tmp_path, kernel=fakes.axpy_one_wrong, plan=plan)
    assert [e.get("status") for e in ledger_events(folder) if e["event"] == "trial_ended"] == ["failed", "failed"]
    passes(capsys, folder)
    (folder / "trials" / "trial-1.json").unlink()
    (folder / "trials" / "trial-1.npz").unlink()
    rerender(folder)
    refused(capsys, folder, 2, "trials/trial-1.json: missing; the ledger.jsonl ended trial 1 'failed'")


@pytest.mark.parametrize("how", ["emptied", "deleted"])
def test_ledger_emptied_or_deleted(rec, capsys, how):
    if how == "emptied":
        (rec / "ledger.jsonl").write_text("")
    else:
        (rec / "ledger.jsonl").unlink()
    err = refused(capsys, rec, 2, "trials/trial-1.json: trial 1 is not in the ledger.jsonl", lines=2)
    assert "trials/trial-2.json: trial 2 is not in the ledger.jsonl" in err[1]


def test_ledger_reordered(rec, capsys):
    events = ledger_events(rec)
    write_ledger(rec, events[2:] + events[:2])
    refused(capsys, rec, 2, "ledger.jsonl: trials start in the order [2, 1]")


def test_ledger_status_edited(rec, capsys):
    events = ledger_events(rec)
    events[1]["status"] = "interrupted"
    write_ledger(rec, events)
    refused(capsys, rec, 2, "trials/trial-1.json: status 'complete', the ledger.jsonl ended it 'interrupted'")


def test_trial_status_edited_with_the_ledger(rec, capsys):
    """Status edited in the trial file and the ledger alike: no failure explains it."""
    old_ledger(rec)
    events = ledger_events(rec)
    events[3]["status"] = "failed"
    write_ledger(rec, events)
    edit_trial(rec, 2, lambda d: d.update(status="failed"))
    rerender(rec)
    refused(capsys, rec, 2, "trials/trial-2.json: contradicts its evidence: status 'failed' with no failure recorded")


@pytest.mark.parametrize(
    "event, fragment",
    [
        ({"event": "trial_started", "trial": 1}, "starts trial 1 a second time"),
        ({"event": "trial_ended", "trial": 2, "status": "complete"}, "ends trial 2 a second time"),
        ({"event": "trial_ended", "trial": 7, "status": "complete"}, "ends trial 7, which has not started"),
        ({"event": "trial_paused", "trial": 1}, "is 'trial_paused'"),
    ],
)
def test_ledger_events_that_qualify_never_writes(rec, capsys, event, fragment):
    write_ledger(rec, ledger_events(rec) + [event])
    refused(capsys, rec, 2, "ledger.jsonl: event 5 ", fragment)


def test_ledger_device_edited(rec, capsys):
    events = ledger_events(rec)
    events[0]["device_uuid"] = "GPU-99999999-0000-0000-0000-000000000000"
    write_ledger(rec, events)
    refused(capsys, rec, 2, "trials/trial-1.json: ran on GPU-00000000", "GPU-99999999", "by the ledger.jsonl")


def test_a_trial_left_open_before_another_started(rec, capsys):
    events = ledger_events(rec)
    del events[1]  # trial 1's end
    write_ledger(rec, events)
    refused(capsys, rec, 2, "ledger.jsonl: trial 1 never ended, yet a later trial started")


def test_a_crashed_last_trial_without_files_is_evidence_not_a_problem(rec, capsys):
    events = ledger_events(rec)
    write_ledger(rec, events + [{**events[2], "trial": 3}])  # started, then the process died
    passes(capsys, rec)


def test_trial_file_edited_in_a_field_nothing_else_checks(rec, capsys):
    edit_trial(rec, 1, lambda d: d["provenance"].update(host="elsewhere"))
    rerender(rec)
    refused(capsys, rec, 2, "trials/trial-1.json: sha256 differs from the one the ledger.jsonl recorded")


def test_trial_file_reformatted(rec, capsys):
    path = rec / "trials" / "trial-2.json"
    path.write_text(json.dumps(json.loads(path.read_text()), indent=2))
    refused(capsys, rec, 2, "trials/trial-2.json: sha256 differs", "the trial file changed")


def test_samples_permuted_within_a_block_keep_every_statistic_but_not_the_ledger_sha256(rec, capsys):
    _swap_two_samples(rec, 1)
    rerender(rec)
    passes_numbers = check_record(rec)
    # every statistic still reproduces: only the two sha256 the ledger recorded tell
    assert [p.split(":")[0] for p in passes_numbers] == ["trials/trial-1.json"] * 2, passes_numbers
    refused(capsys, rec, 2, "trials/trial-1.json: samples_sha256", "the raw samples were replaced", lines=2)


def test_old_ledger_without_sha256_still_checks(rec, capsys):
    """Records made before the end event held sha256 (every committed one): not recorded, not a failure."""
    old_ledger(rec)
    passes(capsys, rec)


# ---------------------------------------------------------------------------------------------
# cause 6: the plan is bound to the digest the ledger recorded when the trials ran


def _loosen_plan(folder: Path) -> str:
    """Loosen the gates, re-derive the lock and every digest field the trial files hold."""
    lock = json.loads((folder / "plan.lock.json").read_text())
    data = json.loads((folder / "plan.json").read_text())
    data["acceptance"]["gates"] = []
    plan = validate_plan(data, folder / "plan.json")
    frozen = freeze_from_hashes(plan, lock["files"])
    (folder / "plan.json").write_text(json.dumps(data, indent=2))
    old = lock["digest"]
    lock.update(plan_sha256=frozen.plan_sha256, digest=frozen.digest)
    (folder / "plan.lock.json").write_text(json.dumps(lock, indent=2))
    for index in (1, 2):
        edit_trial(folder, index, lambda d: d.update(plan_digest=frozen.digest))
    return old


def test_plan_loosened_after_the_run_with_trials_rewritten_is_refused_with_exit_3(bad, capsys):
    _loosen_plan(bad)
    rerender(bad)
    err = refused(
        capsys,
        bad,
        3,
        "ledger.jsonl: trial 1 ran under plan digest",
        "the plan or its lock changed after the run",
        lines=None,
    )
    assert not any("README" in line for line in err), err


def test_plan_loosened_and_the_ledger_digest_rewritten_is_caught_by_the_trial_sha256(bad, capsys):
    old = _loosen_plan(bad)
    new = json.loads((bad / "plan.lock.json").read_text())["digest"]
    (bad / "ledger.jsonl").write_text((bad / "ledger.jsonl").read_text().replace(old, new))
    rerender(bad)
    refused(capsys, bad, 2, "trials/trial-1.json: sha256 differs", lines=2)


def test_plan_edited_without_its_lock_is_exit_3(rec, capsys):
    data = json.loads((rec / "plan.json").read_text())
    data["hypothesis"] = "something else"
    (rec / "plan.json").write_text(json.dumps(data))
    refused(capsys, rec, 3, "plan.json: its digest is", "edited after freezing", lines=None)


def test_lock_digest_edited_is_exit_3(rec, capsys):
    lock = json.loads((rec / "plan.lock.json").read_text())
    lock["digest"] = "0" * 64
    (rec / "plan.lock.json").write_text(json.dumps(lock))
    refused(capsys, rec, 3, "plan.lock.json: digest 0000000000000000", lines=None)


# ---------------------------------------------------------------------------------------------
# cause 7: facts beside the samples are re-derived or cross-checked


def test_parity_failure_edited_out_of_the_parity_alone(bad, capsys):
    old_ledger(bad)
    case = first_case(bad)

    def hide(d):
        for p in d["cases"][0]["parity"]:
            p.update(equal=True, differing_elements=0, first_difference=None, max_ulp=0, max_abs=0.0, max_rel=0.0)

    edit_trial(bad, 1, hide)
    rerender(bad)
    refused(capsys, bad, 2, f"{case}: outputs pass the fidelity gate, but the trial records fidelity failure")


def test_fidelity_failure_deleted_from_the_failures_alone(bad, capsys):
    old_ledger(bad)
    edit_trial(bad, 1, lambda d: d.update(failures=[]))
    rerender(bad)
    err = refused(
        capsys, bad, 2, "outputs fail the fidelity gate, but the trial has no fidelity failure for it", lines=None
    )
    assert len(err) == len(json.loads((bad / "plan.json").read_text())["workload"]["cases"]), err  # one per case


def test_parity_failure_edited_out_consistently_is_caught_by_the_trial_sha256(bad, capsys):
    def hide(d):
        for c in d["cases"]:
            for p in c["parity"]:
                p.update(equal=True, differing_elements=0, first_difference=None, max_ulp=0, max_abs=0.0, max_rel=0.0)
        d["failures"] = []

    edit_trial(bad, 1, hide)
    edit_trial(bad, 2, hide)
    rerender(bad)
    assert "Verdict: QUALIFIED" in "\n".join((bad / "README.md").read_text().splitlines()[:4])  # the forgery works
    refused(capsys, bad, 2, "trials/trial-1.json: sha256 differs", lines=2)


def test_parity_that_contradicts_itself(rec, capsys):
    old_ledger(rec)
    edit_trial(rec, 1, lambda d: d["cases"][0]["parity"][0].update(differing_elements=5))
    rerender(rec)
    refused(capsys, rec, 2, "parity of out contradicts itself", "5 of")


@pytest.mark.parametrize(
    "name, cc, planned, fragment",
    [
        ("NVIDIA A100", "8.0", True, "provenance.planned is True, but the plan does not list NVIDIA A100 (cc 8.0)"),
        ("NVIDIA H200 (fake)", "9.0", False, "provenance.planned is False, but the plan lists"),
    ],
)
def test_device_relabelled(rec, capsys, name, cc, planned, fragment):
    old_ledger(rec)
    for index in (1, 2):
        edit_trial(
            rec,
            index,
            lambda d: (
                d["provenance"]["device"].update(name=name, compute_capability=cc),
                d["provenance"].update(planned=planned),
            ),
        )
    rerender(rec)
    refused(capsys, rec, 2, "trials/trial-1.json: contradicts its evidence", fragment, lines=2)


def test_case_dropped_from_a_trial(rec, capsys):
    old_ledger(rec)
    case = first_case(rec)
    edit_trial(rec, 1, lambda d: d.update(cases=d["cases"][1:]))
    rerender(rec)
    refused(capsys, rec, 2, f"its raw samples time {case}, which the trial leaves out", lines=None)


def test_case_listed_twice(rec, capsys):
    old_ledger(rec)
    edit_trial(rec, 1, lambda d: d.update(cases=d["cases"] + d["cases"][:1]))
    rerender(rec)
    refused(capsys, rec, 2, "a case is listed twice", lines=None)


def test_timer_edited(rec, capsys):
    old_ledger(rec)
    edit_trial(rec, 1, lambda d: d["timer"].update(iterations_per_sample=5))
    rerender(rec)
    refused(capsys, rec, 2, "timer.iterations_per_sample is 5, the plan's is 1")


@pytest.mark.parametrize(
    "failures, status, fragment",
    [
        ([], "interrupted", "an interrupted trial, and only one, records its interruption"),
        ([{"kind": "interrupted", "message": "SIGINT"}], "complete", "records its interruption"),
        ([{"kind": "budget", "message": "wall-time budget spent"}], "complete", "despite a budget failure"),
        ([], "failed", "status 'failed' with no failure recorded"),
    ],
)
def test_status_that_its_failures_contradict(rec, capsys, failures, status, fragment):
    old_ledger(rec)
    events = ledger_events(rec)
    events[1]["status"] = status
    write_ledger(rec, events)
    edit_trial(rec, 1, lambda d: d.update(failures=failures, status=status))
    rerender(rec)
    refused(capsys, rec, 2, "trials/trial-1.json: contradicts its evidence", fragment, lines=None)


@pytest.mark.parametrize(
    "change, fragment",
    [
        (dict(caught=True, differing_elements=0), "is 'caught' with no element differing"),
        (dict(caught=False), "which fails a bytes gate, yet it is not 'caught'"),
        (dict(name="renamed"), "negative control renamed (input) is not one of the plan's"),
    ],
)
def test_negative_control_edited(rec, capsys, change, fragment):
    old_ledger(rec)
    edit_trial(rec, 1, lambda d: d["controls"][0].update(change))
    rerender(rec)
    refused(capsys, rec, 2, fragment, lines=None)


@pytest.mark.parametrize(
    "change, fragment",
    [
        (dict(summary=["ERROR SUMMARY: 3 errors"]), "says clean, but its exit code 0 and summary lines give findings"),
        (dict(exit_code=86), "says clean, but its exit code 86"),
        (dict(errors=None, summary=[]), "give error (None errors)"),
        (dict(tool="initcheck"), "initcheck at N=1024 is not a sanitizer check of the plan"),
    ],
)
def test_sanitizer_result_edited(syn, capsys, change, fragment):
    old_ledger(syn)
    edit_trial(syn, 1, lambda d: d["sanitizer"][0].update(change))
    rerender(syn)
    refused(capsys, syn, 2, "trials/trial-1.json: contradicts its evidence", fragment, lines=None)


def test_a_sanitizer_check_listed_twice_is_named(syn, capsys):
    """qualify runs each declared check once per case and side; a second copy of a clean result
    (say, pasted over a failing one's place) is not a run of its own."""
    old_ledger(syn)
    edit_trial(syn, 1, lambda d: d["sanitizer"].append(dict(d["sanitizer"][0])))
    rerender(syn)
    first = Record(syn).trials()[0].sanitizer[0]
    refused(
        capsys,
        syn,
        2,
        "trials/trial-1.json: contradicts its evidence",
        f"{first.tool} at {first.case} ({first.side}) appears 2 times",
        lines=None,
    )


def test_verdict_in_results_json_is_re_derived_from_the_samples(rec, capsys):
    """results.json's verdict edited (numbers untouched): the verdict the samples give is not it."""
    path = rec / "results.json"
    path.write_text(path.read_text().replace('"status": "qualified"', '"status": "incomplete"'))
    refused(capsys, rec, 2, "results.json: the verdict is not the one its trials give", "verdict.status", lines=None)


@pytest.mark.parametrize(
    "update, what",
    [
        (lambda r: {"plan_name": "forged"}, "plan_name"),
        (lambda r: {"files": {**r.files, "extra.cu": "0" * 64}}, "files"),
    ],
)
def test_results_json_naming_another_plan_is_named_as_such(rec, capsys, update, what):
    """results.json written as qualify writes it, its trials and verdict intact, but naming another
    plan (or other frozen files) than the record's plan and lock: the check says which, rather than
    leaving the reader a byte difference to decode."""
    from qualify.results.store import results_json

    results = Record(rec).results()
    forged = results.model_copy(update=update(results))
    (rec / "results.json").write_text(results_json(forged), encoding="utf-8")
    err = refused(capsys, rec, 2, "results.json: plan_name or files differ from plan.json and", lines=None)
    assert not any("results.json line" in line for line in err), err


# ---------------------------------------------------------------------------------------------
# cause 9: results.json and README.md byte for byte


def test_readme_with_crlf_line_endings(rec, capsys):
    path = rec / "README.md"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    refused(capsys, rec, 2, "README.md line 1 differs from the rendered record", "\\r'")


def test_readme_without_its_final_newline(rec, capsys):
    path = rec / "README.md"
    path.write_bytes(path.read_bytes()[:-1])
    refused(capsys, rec, 2, "README.md differs from the rendered record in its final newline")


def test_readme_with_a_trailing_space(rec, capsys):
    path = rec / "README.md"
    lines = path.read_text().split("\n")
    lines[3] += " "
    path.write_text("\n".join(lines))
    refused(capsys, rec, 2, "README.md line 4 differs")


def test_readme_cut_short_names_the_first_missing_line(rec, capsys):
    path = rec / "README.md"
    lines = path.read_text().split("\n")  # the text ends in "\n": the last item is ""
    last = lines[-2]
    path.write_text("\n".join(lines[:-2]) + "\n")
    refused(capsys, rec, 2, f"README.md line {len(lines) - 1}: missing line (expected {last!r})")


def test_readme_not_utf8(rec, capsys):
    path = rec / "README.md"
    path.write_bytes(path.read_bytes() + b"\xff")
    refused(capsys, rec, 2, "README.md: not UTF-8")


@pytest.mark.parametrize(
    "rewrite, fragment",
    [
        (lambda t: json.dumps(json.loads(t), indent=2) + "\n", "results.json line 2 differs"),
        (lambda t: t.replace("\n", "\r\n"), "results.json line 1 differs"),
        (lambda t: json.dumps(json.loads(t), indent=1, sort_keys=True) + "\n", "results.json line 2 differs"),
        (lambda t: t + "\n", "results.json line"),
    ],
)
def test_results_json_equal_in_values_but_not_in_bytes(rec, capsys, rewrite, fragment):
    path = rec / "results.json"
    path.write_text(rewrite(path.read_text()), newline="")
    refused(capsys, rec, 2, fragment)


# ---------------------------------------------------------------------------------------------
# cause 13: raw samples whose sha256 was updated to match, malformed


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def _members(folder: Path, index: int) -> dict[str, bytes]:
    arrays = raw.load(folder / "trials" / f"trial-{index}.npz")
    return {f"{k}.npy": _npy(v) for k, v in arrays.items()}


@pytest.mark.parametrize("cut", [5, 40, -8])
def test_truncated_npy_member(rec, capsys, cut):
    members = _members(rec, 1)
    name = f"{first_case(rec)}/base/ns.npy"
    members[name] = members[name][:cut]
    raw_samples_bytes(rec, 1, members)
    refused(capsys, rec, 2, "trial-1.npz: unreadable raw samples", "base/ns.npy")


def test_npy_header_announcing_more_than_it_holds(rec, capsys):
    members = _members(rec, 1)
    name = f"{first_case(rec)}/base/ns.npy"
    members[name] = members[name].replace(b"'shape': (12,)", b"'shape': (99,)")
    raw_samples_bytes(rec, 1, members)
    refused(capsys, rec, 2, "trial-1.npz: unreadable raw samples", "header announces 99")


def test_npy_shape_whose_product_overflows(rec, capsys):
    header = b"{'descr': '<f8', 'fortran_order': False, 'shape': (1099511627775, 1099511627775), }"
    raw_samples_bytes(rec, 1, {"floor_ns.npy": b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header})
    refused(capsys, rec, 2, "trial-1.npz: unreadable raw samples", "floor_ns.npy")


@pytest.mark.parametrize(
    "field, value, fragment",
    [
        ("ns", np.empty(0), "base/ns: empty"),
        ("block", np.zeros(5, dtype=np.int32), "base/block: 5 entries, its ns has 12"),
        ("ns", np.array(["fast"] * 12), "base/ns: dtype <U4, expected real numbers"),
        ("block", np.zeros(12, dtype=bool), "base/block: dtype |b1, expected integers"),
        ("ns", np.ones((12, 1)), "base/ns: 2-dimensional"),
        ("ns", np.full(12, np.nan), "base/ns: holds a negative or non-finite duration"),
        ("ns", np.full(12, -5.0), "base/ns: holds a negative or non-finite duration"),
        ("sm_mhz", None, "base/sm_mhz: missing, its ns has 12"),
        ("throttle", np.full(12, -1, dtype=np.int64), "base/throttle: holds a negative value"),
    ],
)
def test_malformed_series(rec, capsys, field, value, fragment):
    case = first_case(rec)

    def change(arrays):
        if value is None:
            del arrays[f"{case}/base/{field}"]
        else:
            arrays[f"{case}/base/{field}"] = value

    replace_samples(rec, 1, change)
    rerender(rec)
    refused(capsys, rec, 2, "trials/trial-1.npz: unusable raw samples", f"{case}/{fragment}")


def test_series_qualify_does_not_record(rec, capsys):
    replace_samples(rec, 1, lambda a: a.update({"notes": np.zeros(3)}))
    rerender(rec)
    refused(capsys, rec, 2, "trials/trial-1.npz: unusable raw samples: notes: not a series qualify records")


def test_timing_series_without_ns(rec, capsys):
    case = first_case(rec)
    replace_samples(rec, 1, lambda a: a.pop(f"{case}/aa_a/ns"))
    rerender(rec)
    refused(capsys, rec, 2, f"{case}/aa_a/ns: missing, while")


def test_more_samples_than_the_budget_allows(rec, capsys):
    old_ledger(rec)
    case = first_case(rec)

    def grow(arrays):
        for field in ("ns", "block", "sm_mhz", "throttle", "temp_c", "placement", "half"):
            k = f"{case}/aa_b/{field}"
            if k in arrays:  # placement and half: where the trial drew them
                arrays[k] = np.concatenate([arrays[k], arrays[k][:1]])

    replace_samples(rec, 1, grow)
    rerender(rec)
    refused(capsys, rec, 2, f"{case}/aa_b/ns: 13 timed samples, the plan's budget.max_samples is 12", lines=None)


def test_series_problems_accept_what_the_runner_writes():
    s = raw.TrialSamples()
    for i in range(4):
        s.add("T=1", "base", ns=1000.0 + i, block=i // 2, sm_mhz=1980.0, throttle=0, temp_c=40.0)
    s.add_warmup("T=1", "candidate", 1200.0)  # warmed up, then interrupted before timing
    s.add_floor(1300.0)
    assert raw.series_problems(s.arrays()) == []


# ---------------------------------------------------------------------------------------------
# cause 16 (--check --merge) and merging


def test_check_with_merge_is_refused_and_writes_nothing(rec, made, tmp_path, capsys):
    out = tmp_path / "merged"
    got, err = run_cli(["report", "--check", "--merge", out, rec, made], capsys)
    assert got == 2 and len(err) == 1 and err[0].startswith("qualify: error: "), err
    assert "--check and --merge do not combine" in err[0]
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["rec"]


def test_check_lines_stay_one_line_for_a_folder_with_a_newline(made, tmp_path, capsys):
    folder = Path(shutil.copytree(made, tmp_path / "two\nlines"))
    (folder / "README.md").write_text("forged\n")
    got, err = run_cli(["report", "--check", folder], capsys)
    assert got == 2 and len(err) == 1 and "two\\nlines" in err[0], err


def test_merged_record_checks_out_and_its_ledger_holds_the_new_sha256(made, tmp_path, capsys):
    other = _pipeline_record(
        tmp_path / "other",
        device_info=FAKE_INFO.model_copy(update={"uuid": "GPU-11111111-0000-0000-0000-000000000001"}),
        seed=1,
    )
    dest = tmp_path / "merged"
    merge_records([made, other], dest)
    assert check_record(dest) == []
    ends = [e for e in ledger_events(dest) if e["event"] == "trial_ended"]
    assert [e["trial"] for e in ends] == [1, 2, 3, 4]
    for e in ends:
        assert e["trial_sha256"] == sha256_file(dest / "trials" / f"trial-{e['trial']}.json")


def test_merge_of_two_records_of_one_device_over_its_budget_is_refused(made, tmp_path, capsys):
    twin = _pipeline_record(tmp_path / "twin", seed=2)  # the same fake device: 2 + 2 trials, max_trials 3
    dest = tmp_path / "merged"
    got, err = run_cli(["report", "--merge", dest, made, twin], capsys)
    assert got == 2 and len(err) == 1, err
    assert "the merged record: ledger.jsonl: 4 trials on GPU-00000000" in err[0]
    assert "only evidence that checks out is merged" in err[0]
    assert not dest.exists() and not any(p.name.startswith(".merged") for p in tmp_path.iterdir())


def test_merge_refuses_a_source_whose_evidence_does_not_check_out(rec, tmp_path, capsys):
    (rec / "ledger.jsonl").write_text("")
    dest = tmp_path / "merged"
    got, err = run_cli(["report", "--merge", dest, rec], capsys)
    assert got == 2 and len(err) == 1, err
    assert f"qualify: error: {rec}: trials/trial-1.json: trial 1 is not in the ledger.jsonl" in err[0]
    assert not dest.exists()


def test_merge_refuses_a_source_whose_plan_changed_after_the_run_with_exit_3(bad, tmp_path, capsys):
    _loosen_plan(bad)
    rerender(bad)
    got, err = run_cli(["report", "--merge", tmp_path / "merged", bad], capsys)
    assert got == 3 and len(err) == 1 and "the plan or its lock changed after the run" in err[0], err


# ---------------------------------------------------------------------------------------------
# the ledger a crash leaves


def test_a_trial_whose_end_event_was_lost_is_closed_with_the_status_its_file_holds(rec):
    events = ledger_events(rec)
    write_ledger(rec, events[:3])  # trial 2 written, then the process died before its end event
    assert Record(rec).close_dangling() == [2]
    end = ledger_events(rec)[-1]
    assert (end["trial"], end["status"]) == (2, "complete")
    assert end["trial_sha256"] == sha256_file(rec / "trials" / "trial-2.json")
    assert check_record(rec) == []


# ---------------------------------------------------------------------------------------------
# shared-library arms: one pair of builds per record, of the plan's entry point

ENTRY = ROOT / "records" / "attention-wide-entry"


@pytest.mark.parametrize(
    "change, fragment",
    [
        (lambda lib: lib.update(sha256="0" * 64), "libraries.candidate: another build than trial 1's"),
        (
            lambda lib: lib.update(symbol="attention_fast"),
            "libraries.candidate: symbol 'attention_fast' ABI 1, the plan's",
        ),
        (lambda lib: lib.update(abi_version=2), "ABI 2, the plan's is 'attention_gated' ABI 1"),
    ],
)
def test_library_build_swapped_in_one_trial(tmp_path, capsys, change, fragment):
    folder = Path(shutil.copytree(ENTRY, tmp_path / "entry"))
    edit_trial(folder, 2, lambda d: change(d["libraries"]["candidate"]))
    rerender(folder)
    refused(capsys, folder, 2, "trials/trial-2.json: ", fragment)


def test_library_recorded_for_a_cuda_arm(rec, capsys):
    old_ledger(rec)
    lib = {"path": "libx.so", "sha256": "1" * 64, "symbol": "f", "abi_version": None}
    edit_trial(rec, 1, lambda d: d.update(libraries={"base": lib}))
    rerender(rec)
    refused(capsys, rec, 2, "trials/trial-1.json: libraries.base: the plan's base arm is not a shared-library arm")


def test_warm_ups_of_a_timed_case_are_the_plans(rec, capsys):
    case = first_case(rec)
    replace_samples(rec, 1, lambda a: a.update({f"{case}/candidate/warmup_ns": a[f"{case}/candidate/warmup_ns"][:1]}))
    rerender(rec)
    refused(capsys, rec, 2, f"{case}/candidate/warmup_ns: 1 warm-up runs, the plan's schedule.warmup is 2", lines=None)


def test_warm_ups_of_a_case_stopped_before_timing_may_be_fewer(rec, capsys):
    old_ledger(rec)  # the samples change: the recorded sha256 would tell, and is not what this tests
    replace_samples(rec, 1, lambda a: a.update({"N=999/base/warmup_ns": np.array([5.0])}))
    rerender(rec)
    passes(capsys, rec)
