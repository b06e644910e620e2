"""Cross-checks of a record's evidence: the ledger against the trial files, and each trial against
its plan and its own raw samples.

`report --check` recomputes every statistic from the raw samples; that proves nothing about trials
that were deleted, copied, invented or relabelled, or about facts recorded beside the samples
(parity, failures, status, sanitizer results, the device). This module checks what can be checked
without a signature:

- the ledger, written as trials start and end, lists every trial file and no other; trials start
  in the order 1, 2, 3…, each once, each ended once after it started; its statuses, devices and
  (in records made since they were recorded) sha256 of the trial and samples files agree with the
  files; no device ran more trials than the budget allows;
- the plan digest in the ledger is the record's lock digest: a plan changed after the run does not
  pass, however consistently the trial files were rewritten to match it;
- each trial's facts are those qualify would have written: its cases are the ones its raw samples
  time, its status agrees with its failures, a case whose outputs fail the fidelity gate carries a
  fidelity failure, parity counts agree with themselves, "clean" sanitizer results say so in their
  own summary lines, and the device is planned exactly when the plan lists it.

Problems are data (`Problem`); what cannot be re-derived is listed in the README's threat model.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from qualify.evaluate.cupti_delta import draw_problems
from qualify.evaluate.device_match import device_matches
from qualify.evaluate.sanitizer_output import parse
from qualify.evaluate.tolerance_gate import declared_bound
from qualify.evaluate.tolerance_gate import passes as tolerance_passes
from qualify.evaluate.verdict import fidelity_passes
from qualify.io import MAX_JSON_BYTES
from qualify.plan.digest import sha256_file
from qualify.plan.model import ARM_SIDES, LibraryArm, Plan
from qualify.plan.resolve import case_id
from qualify.record.code_facts import code_problems, short_digest
from qualify.results.model import Trial
from qualify.results.samples import key
from qualify.results.store import LEDGER, Record


@dataclass(frozen=True)
class Problem:
    """One way a record disagrees with its evidence. `frozen`: a frozen input (the plan or its
    lock) changed after the run, which the exit-code table ranks apart (3) from a bad record (2)."""

    text: str
    frozen: bool = False

    def __str__(self) -> str:
        return self.text


def _origin(event: dict) -> str:
    """The record an event was written in: a merged ledger keeps each source's events apart."""
    merged = event.get("merged_from")
    return str(merged.get("record")) if isinstance(merged, dict) else ""


# -- the ledger against the trial files -------------------------------------------------------


def _sequence(events: list[dict]) -> tuple[dict[int, dict], dict[int, dict], list[Problem]]:
    """Each trial's start and end event, and what is wrong with their order."""
    out: list[Problem] = []
    started: dict[int, dict] = {}
    ended: dict[int, dict] = {}
    order: list[int] = []
    for n, event in enumerate(events, 1):
        kind, index = event["event"], event["trial"]
        if kind == "trial_started":
            if index in started:
                out.append(Problem(f"{LEDGER}: event {n} starts trial {index} a second time"))
                continue
            started[index] = event
            order.append(index)
        elif kind == "trial_ended":
            if index not in started:
                out.append(Problem(f"{LEDGER}: event {n} ends trial {index}, which has not started"))
            elif index in ended:
                out.append(Problem(f"{LEDGER}: event {n} ends trial {index} a second time"))
            else:
                ended[index] = event
        else:
            out.append(Problem(f"{LEDGER}: event {n} is {kind!r}; a ledger holds trial_started and trial_ended"))
    if order != list(range(1, len(order) + 1)):
        out.append(
            Problem(f"{LEDGER}: trials start in the order {order[:8]}; qualify numbers them 1, 2, 3… as they start")
        )
    # a trial never ended: the process died. What a crash can leave and nothing more: a device's
    # next trial (one run owns a device in a record at a time) closes its open trial first, so only
    # the last trial of each device (in each source of a merge) may still be open; workers on
    # other devices may have started trials since.
    last_start = {(_origin(started[index]), started[index].get("device_uuid")): index for index in order}
    for index, event in sorted(started.items()):
        if index not in ended and last_start.get((_origin(event), event.get("device_uuid"))) != index:
            out.append(
                Problem(
                    f"{LEDGER}: trial {index} never ended, yet a later trial started: "
                    "qualify ends a trial before it starts another"
                )
            )
    return started, ended, out


def ledger_problems(events: list[dict], trials: list[Trial], plan: Plan, lock: dict) -> list[Problem]:
    started, ended, out = _sequence(events)
    digest = lock["digest"]
    for index, event in sorted(started.items()):
        if event.get("digest") != digest:
            out.append(
                Problem(
                    f"{LEDGER}: trial {index} ran under plan digest {short_digest(event.get('digest'))}, the record's "
                    f"plan.lock.json says {short_digest(digest)}: the plan or its lock changed after the run",
                    frozen=True,
                )
            )
        if not isinstance(event.get("device_uuid"), str) or not event["device_uuid"]:
            out.append(Problem(f"{LEDGER}: trial {index}'s start names no device_uuid"))

    files = {t.index: t for t in trials}
    for trial in trials:
        where = f"trials/trial-{trial.index}.json"
        event = started.get(trial.index)
        if event is None:
            out.append(Problem(f"{where}: trial {trial.index} is not in the {LEDGER}: qualify did not run it"))
            continue
        uuid = trial.provenance.device.uuid
        if event.get("device_uuid") != uuid:
            out.append(Problem(f"{where}: ran on {uuid} by its file, on {event.get('device_uuid')} by the {LEDGER}"))
        end = ended.get(trial.index)
        if end is None:
            continue
        if end.get("status") != trial.status:
            out.append(Problem(f"{where}: status {trial.status!r}, the {LEDGER} ended it {end.get('status')!r}"))
    for index, event in sorted(started.items()):
        if index in files:
            continue
        end = ended.get(index)
        lost = end is None or (end.get("status") == "interrupted" and "note" in end and "trial_sha256" not in end)
        if not lost:  # a trial that ended normally wrote its file first
            out.append(
                Problem(f"trials/trial-{index}.json: missing; the {LEDGER} ended trial {index} {end.get('status')!r}")
            )

    out.extend(_budget_problems(started, trials, plan))
    out.extend(_copy_problems(trials))
    return out


def end_events(events: list[dict]) -> dict[int, dict]:
    """Each trial's first end event."""
    out: dict[int, dict] = {}
    for event in events:
        if event["event"] == "trial_ended":
            out.setdefault(event["trial"], event)
    return out


def hash_problems(record: Record, trial: Trial, end: dict) -> list[str]:
    """The sha256 the end event recorded (records made before they were recorded have none)."""
    out = []
    where = f"trials/trial-{trial.index}.json"
    recorded = end.get("trial_sha256")
    if (
        recorded is not None
        and sha256_file(record.trial_path(trial.index), limit=MAX_JSON_BYTES, root=record.folder) != recorded
    ):
        out.append(
            f"{where}: sha256 differs from the one the {LEDGER} recorded when the trial "
            f"ended ({short_digest(recorded)}): the trial file changed"
        )
    recorded = end.get("samples_sha256")
    if recorded is not None and trial.samples_sha256 != recorded:
        out.append(
            f"{where}: samples_sha256 {short_digest(trial.samples_sha256)} is not the "
            f"{short_digest(recorded)} the {LEDGER} recorded: the raw samples were replaced"
        )
    return out


def _budget_problems(started: dict[int, dict], trials: list[Trial], plan: Plan) -> list[Problem]:
    out = []
    limit = plan.budget.max_trials
    per_device = Counter(str(e.get("device_uuid")) for e in started.values())
    per_device.update(t.provenance.device.uuid for t in trials if t.index not in started)
    for uuid, count in sorted(per_device.items()):
        if count > limit:
            out.append(Problem(f"{LEDGER}: {count} trials on {uuid}; the plan's budget.max_trials is {limit}"))
    # a trial beyond schedule.trials is one `qualify gate` added, saying why in the trial itself,
    # and only after the device's planned trials were complete
    planned = Counter(t.provenance.device.uuid for t in trials if t.status == "complete" and not t.added)
    for uuid, count in sorted(planned.items()):
        if count > plan.schedule.trials:
            out.append(
                Problem(
                    f"trials: {count} complete trials on {uuid}; the plan's schedule.trials is "
                    f"{plan.schedule.trials} and qualify runs no more unless it says why (a trial's `added`)"
                )
            )
    for added in (t for t in trials if t.added):
        uuid = added.provenance.device.uuid
        before = sum(
            1
            for t in trials
            if t.index < added.index and t.status == "complete" and not t.added and t.provenance.device.uuid == uuid
        )
        if before < plan.schedule.trials:
            out.append(
                Problem(
                    f"trials/trial-{added.index}.json: added beyond the plan's trials after only {before} of its "
                    f"{plan.schedule.trials} planned trials were complete on {uuid}"
                )
            )
    return out


def _copy_problems(trials: list[Trial]) -> list[Problem]:
    """A trial file copied under another index: the device and start time, or the samples, repeat."""
    out = []
    first: dict[tuple, int] = {}
    for trial in trials:
        for what, ident in (
            ("device and start time", ("at", trial.provenance.device.uuid, trial.started_at)),
            ("raw samples", ("samples", trial.samples_sha256)),
        ):
            if ident in first:
                out.append(
                    Problem(
                        f"trials/trial-{trial.index}.json: same {what} as trial {first[ident]}: a copy, not a trial"
                    )
                )
            else:
                first[ident] = trial.index
    return out


# -- each trial against its plan and its raw samples -------------------------------------------


def device_planned(trial: Trial, plan: Plan) -> bool:
    """Whether the plan lists the trial's device (the rule `qualify run` admits devices by)."""
    return device_matches(trial.provenance.device, plan.hardware.devices)


def timed_cases(arrays: dict[str, np.ndarray]) -> set[str]:
    """Cases whose base and candidate were both timed: exactly the cases a trial reports."""
    cases = {name.rsplit("/", 2)[0] for name in arrays if name.count("/") >= 2}
    return {c for c in cases if all(arrays.get(key(c, s, "ns"), np.empty(0)).size for s in ARM_SIDES)}


def trial_fact_problems(trial: Trial, plan: Plan, arrays: dict[str, np.ndarray]) -> list[str]:
    """Facts of one trial that disagree with its plan, its raw samples or each other."""
    out: list[str] = []
    planned_ids = [case_id(c) for c in plan.workload.cases]
    ids = [c.case for c in trial.cases]
    timed = timed_cases(arrays)
    unknown = [c for c in sorted(timed | set(ids)) if c not in planned_ids]
    if unknown:
        out.append(f"cases {', '.join(unknown)} are not cases of the plan")
    if len(set(ids)) != len(ids):
        out.append(f"a case is listed twice: {ids}")
    if set(ids) != timed:
        dropped, extra = sorted(timed - set(ids)), sorted(set(ids) - timed)
        if dropped:
            out.append(f"its raw samples time {', '.join(dropped)}, which the trial leaves out")
        if extra:
            out.append(f"lists {', '.join(extra)}, which its raw samples do not time")
    elif ids != [c for c in planned_ids if c in timed]:
        out.append(f"cases in the order {ids}, not the plan's")

    planned = device_planned(trial, plan)
    if trial.provenance.planned != planned:
        device = trial.provenance.device
        out.append(
            f"provenance.planned is {trial.provenance.planned}, but the plan "
            f"{'lists' if planned else 'does not list'} {device.name} (cc {device.compute_capability})"
        )

    schedule = plan.schedule
    for name, want in (
        ("mode", schedule.timing),
        ("cache", schedule.cache),
        ("iterations_per_sample", schedule.iterations_per_sample),
    ):
        if name in trial.timer and trial.timer[name] != want:
            out.append(f"timer.{name} is {trial.timer[name]!r}, the plan's is {want!r}")
    if "floor_samples" in trial.timer and trial.timer["floor_samples"] != arrays.get("floor_ns", np.empty(0)).size:
        out.append(
            f"timer.floor_samples is {trial.timer['floor_samples']}, its raw samples hold "
            f"{arrays.get('floor_ns', np.empty(0)).size}"
        )
    out.extend(_sample_budget_problems(arrays, plan, set(ids)))
    out.extend(_status_problems(trial))
    out.extend(_parity_problems(trial, plan))
    out.extend(_control_problems(trial, plan))
    out.extend(_sanitizer_problems(trial, plan))
    out.extend(code_problems(trial, plan))
    out.extend(draw_problems(trial))
    return out


def _sample_budget_problems(arrays: dict[str, np.ndarray], plan: Plan, reported: set[str]) -> list[str]:
    out = []
    schedule, limit = plan.schedule, plan.budget.max_samples
    for name, arr in sorted(arrays.items()):
        case, field = name.rsplit("/", 2)[0], name.rsplit("/", 1)[-1]
        if field == "ns" and arr.size > limit:
            out.append(f"{name}: {arr.size} timed samples, the plan's budget.max_samples is {limit}")
        if field == "block" and arr.size and int(arr.max()) >= schedule.blocks:
            out.append(f"{name}: block {int(arr.max())}, the plan's schedule.blocks is {schedule.blocks}")
        # every warm-up of a timed case ran; a trial stopped during warm-up keeps fewer, untimed
        if field == "warmup_ns" and case in reported and arr.size != schedule.warmup:
            out.append(f"{name}: {arr.size} warm-up runs, the plan's schedule.warmup is {schedule.warmup}")
    return out


def _status_problems(trial: Trial) -> list[str]:
    kinds = {f.kind for f in trial.failures}
    out = []
    if (trial.status == "interrupted") != ("interrupted" in kinds):
        out.append(
            f"status {trial.status!r} with failures {sorted(kinds) or 'none'}: an interrupted trial, "
            "and only one, records its interruption"
        )
    # a timeout, a budget stop or an error ends the trial as failed; so does a fault, except work
    # escaping the stream, which is recorded and the trial goes on
    ending = kinds & {"timeout", "budget", "error"}
    if trial.status == "complete" and ending:
        out.append(f"status 'complete' despite a {sorted(ending)[0]} failure, which ends a trial as failed")
    if trial.status == "failed" and not kinds:
        out.append("status 'failed' with no failure recorded")
    return out


def _parity_problems(trial: Trial, plan: Plan) -> list[str]:
    out = []
    outputs = [b.name for b in plan.workload.buffers if b.role == "output"]
    fidelity_failed = {f.case for f in trial.failures if f.kind == "fidelity"}
    for case in trial.cases:
        where = case.case
        if [p.buffer for p in case.parity] != outputs:
            out.append(f"{where}: parity covers {[p.buffer for p in case.parity]}, the plan's outputs are {outputs}")
        for p in case.parity:
            consistent = (
                0 <= p.differing_elements <= p.elements
                and p.equal == (p.differing_elements == 0)
                and (p.first_difference is None) == p.equal
                and (p.first_difference is None or 0 <= p.first_difference < p.elements)
                and not (p.equal and any(v not in (None, 0) for v in (p.max_ulp, p.max_abs, p.max_rel)))
            )
            if not consistent:
                out.append(
                    f"{where}: parity of {p.buffer} contradicts itself (equal {p.equal}, "
                    f"{p.differing_elements} of {p.elements} differ, first at {p.first_difference})"
                )
        if plan.acceptance.fidelity.counted:
            # counted fidelity: the candidate's counts (against the golden or the base arm), the controls as declared
            # at this case (each misbehaving control is a fidelity failure of the case too)
            counts_pass = case.tolerance is not None and all(
                tolerance_passes(c) for c in case.tolerance.counts.get("candidate", [])
            )
            out.extend(_bound_problems(plan, case))
            vacuous = case.tolerance is not None and any(r.vacuous for r in case.tolerance.calibration)
            controls_ok = all(o.as_declared for o in (trial.control_outcomes or []) if o.case == where)
            passes = counts_pass and not vacuous and controls_ok and all(case.deterministic.values())
        else:
            passes = fidelity_passes(case.parity, plan.acceptance.fidelity) and all(case.deterministic.values())
        if passes == (where in fidelity_failed):
            out.append(
                f"{where}: outputs {'pass' if passes else 'fail'} the fidelity gate, but the trial "
                f"{'records' if passes else 'has no'} fidelity failure for it"
            )
    return out


def _bound_problems(plan: Plan, case) -> list[str]:
    """Each count was judged by the bound the plan gives its case and output (an atol in quanta
    is derived from the golden, which the record does not hold: it must at least be positive)."""
    values = next((c for c in plan.workload.cases if case_id(c) == case.case), None)
    if case.tolerance is None or values is None:
        return []
    params = {**plan.workload.params, **values}
    out = []
    for side, counts in case.tolerance.counts.items():
        for c in counts:
            atol, rtol = declared_bound(plan.acceptance.fidelity, case.case, params, c.output)
            if c.rtol != rtol or (c.atol != atol if atol is not None else not c.atol > 0):
                out.append(
                    f"{case.case}: {side} {c.output} was judged by atol {c.atol:g}, rtol {c.rtol:g}, "
                    "not by the bound the plan gives it"
                )
    return out


def _control_problems(trial: Trial, plan: Plan) -> list[str]:
    out = []
    declared = {c.name: c for c in plan.controls.negative}
    for c in trial.controls:
        spec = declared.get(c.name)
        if spec is None or spec.kind != c.kind:
            out.append(f"negative control {c.name} ({c.kind}) is not one of the plan's")
        elif spec.cases is not None and c.case not in spec.cases:
            out.append(f"negative control {c.name} ran at {c.case}, which the plan does not give it")
        if plan.acceptance.fidelity.counted:
            # 'caught' reads "behaved as declared" (a control may be declared to pass): it must agree
            # with the recorded outcome under counted fidelity
            outcome = next(
                (o for o in (trial.control_outcomes or []) if o.control == c.name and o.case == c.case), None
            )
            if outcome is None or outcome.as_declared != c.caught:
                out.append(f"negative control {c.name} at {c.case}: 'caught' disagrees with its recorded outcome")
            continue
        if c.caught and c.differing_elements == 0:
            out.append(f"negative control {c.name} at {c.case} is 'caught' with no element differing")
        if plan.acceptance.fidelity.mode == "bytes" and not c.caught and c.differing_elements > 0:
            out.append(
                f"negative control {c.name} at {c.case}: {c.differing_elements} elements differ, "
                "which fails a bytes gate, yet it is not 'caught'"
            )
    return out


def _sanitizer_problems(trial: Trial, plan: Plan) -> list[str]:
    out = []
    declared = {(c.tool, cid) for c in plan.acceptance.sanitizer for cid in c.cases}
    runs = Counter((r.tool, r.case, r.side) for r in trial.sanitizer)
    for (tool, case, side), n in runs.items():
        if n > 1:
            out.append(f"{tool} at {case} ({side}) appears {n} times")
    for r in trial.sanitizer:
        if (r.tool, r.case) not in declared:
            out.append(f"{r.tool} at {r.case} is not a sanitizer check of the plan")
        if r.status != "clean":
            continue
        again = parse(r.tool, r.case, r.side, r.exit_code, "\n".join(f"========= {s}" for s in r.summary), r.seconds)
        if again.status != "clean" or again.errors != r.errors:
            out.append(
                f"{r.tool} at {r.case} ({r.side}) says clean, but its exit code {r.exit_code} and "
                f"summary lines give {again.status} ({again.errors} errors)"
            )
    return out


def library_problems(trials: list[Trial], plan: Plan, lock: dict) -> list[Problem]:
    """The builds a record compared: one pair for the whole record, of the plan's entry point, and
    the frozen build where the plan names one (`qualify run` refuses another build into a record)."""
    out = []
    frozen_hashes = set(lock["files"].values())
    first: dict[str, tuple[int, str]] = {}
    for trial in trials:
        where = f"trials/trial-{trial.index}.json"
        for side, info in sorted(trial.libraries.items()):
            arm = plan.arm(side)
            if not isinstance(arm, LibraryArm):
                out.append(Problem(f"{where}: libraries.{side}: the plan's {side} arm is not a shared-library arm"))
                continue
            if info.symbol != arm.symbol or (arm.abi_version is not None and info.abi_version != arm.abi_version):
                out.append(
                    Problem(
                        f"{where}: libraries.{side}: symbol {info.symbol!r} ABI {info.abi_version}, the "
                        f"plan's is {arm.symbol!r} ABI {arm.abi_version}"
                    )
                )
            if arm.library is not None and info.sha256 not in frozen_hashes:
                out.append(
                    Problem(
                        f"{where}: libraries.{side}: sha256 {short_digest(info.sha256)} is not a build the lock froze"
                    )
                )
            seen = first.setdefault(side, (trial.index, info.sha256))
            if seen[1] != info.sha256:
                out.append(
                    Problem(
                        f"{where}: libraries.{side}: another build than trial {seen[0]}'s; "
                        "a record compares one pair of builds"
                    )
                )
    return out
