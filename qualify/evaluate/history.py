"""A protocol's records over time, as one series per case and GPU model, with change points.

Each record contributes one point per device and case: the record's pooled statistics for that
device (its ratio, interval, class and trial count), as results.json states them; a record made
before pooled statistics existed is pooled here from its complete trials by the same function
(`evaluate.pooled.pool`). Points are ordered as the records are given (the caller orders them: by
commit or by the time the record's first trial started), then by machine within a record.

Series are per GPU model (the device's name), not per machine: a history is measured on whichever
runner took each job, so the spread between machines is part of what the change-point test sees as
noise. A record whose plan digest differs from the previous point's marks a plan change on the
page: a re-frozen plan is a new experiment, whatever the numbers do.

Change points are found on 100·ln(ratio) (symmetric: a 2× slowdown and its fix are the same
distance) by `evaluate.changepoint.segment`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from qualify.evaluate.changepoint import ALPHA, PERMUTATIONS, SEED, Segmentation, segment
from qualify.evaluate.pooled import pool
from qualify.evaluate.verdict import device_label
from qualify.results.model import CaseStats, PooledStats, Results


@dataclass(frozen=True)
class RecordInfo:
    """Where one record came from and what it says about itself."""

    source: str  # the file read, or "<commit>:<path>" for a record read from git
    commit: str | None  # the commit the record stands for
    commit_source: str  # "record" (its trials' git_revision), "manifest", "git" or "unknown"
    when: str  # ISO time: the commit's, or the first trial's start
    message: str  # the commit's subject line, or ""
    measured: str | None  # the revision the trials ran on, as they state it (git_revision)
    dirty: bool  # a trial ran on a tree with uncommitted changes
    plan_name: str
    plan_digest: str
    verdict: str


@dataclass(frozen=True)
class Point:
    record: int  # index into History.records
    machine: str  # the device as the record labels it
    ratio: float
    ci_low: float | None
    ci_high: float | None
    case_class: str
    trials: int
    mde_pct: float | None = None  # the smallest change the record could have resolved

    @property
    def log_pct(self) -> float:
        return 100.0 * math.log(self.ratio)


@dataclass(frozen=True)
class CaseHistory:
    case: str
    gpu: str
    points: tuple[Point, ...]
    changes: Segmentation
    plan_changes: tuple[int, ...]  # indices into points where the plan digest differs from the one before


@dataclass(frozen=True)
class History:
    protocol: str
    records: tuple[RecordInfo, ...]
    cases: tuple[CaseHistory, ...]
    notes: tuple[str, ...] = ()  # what the reader left out and why (duplicates, removed records)


def record_points(results: Results) -> dict[tuple[str, str], list[tuple[str, PooledStats]]]:
    """{(case, gpu model): [(machine label, pooled statistics), …]} of one record."""
    gpu_of = {device_label(t): t.provenance.device.name for t in results.trials}
    pooled = results.pooled or _pooled_from_trials(results)
    out: dict[tuple[str, str], list[tuple[str, PooledStats]]] = {}
    for machine in sorted(pooled):
        for case, stats in pooled[machine].items():
            gpu = gpu_of.get(machine, machine)
            out.setdefault((case, gpu), []).append((machine, stats))
    return out


def _pooled_from_trials(results: Results) -> dict[str, dict[str, PooledStats]]:
    """Pooled statistics for a record that predates them: its complete trials, per device and case."""
    by_device: dict[str, dict[str, list[CaseStats]]] = {}
    for trial in results.trials:
        if trial.status != "complete":
            continue
        cases = by_device.setdefault(device_label(trial), {})
        for case in trial.cases:
            cases.setdefault(case.case, []).append(case.stats)
    return {device: {case: pool(stats) for case, stats in cases.items()} for device, cases in by_device.items()}


def build_history(
    protocol: str,
    records: Sequence[tuple[RecordInfo, Results]],
    *,
    alpha: float = ALPHA,
    permutations: int = PERMUTATIONS,
    seed: int = SEED,
    notes: Sequence[str] = (),
) -> History:
    """Every case's series over `records` (in the order given), each segmented."""
    series: dict[tuple[str, str], list[Point]] = {}
    digests: dict[tuple[str, str], list[str]] = {}
    for index, (info, results) in enumerate(records):
        for key, stats_list in record_points(results).items():
            for machine, s in stats_list:
                point = Point(index, machine, s.ratio, s.ci_low, s.ci_high, s.case_class, s.trials, s.mde_pct)
                series.setdefault(key, []).append(point)
                digests.setdefault(key, []).append(info.plan_digest)
    cases = []
    for key in sorted(series, key=lambda k: (k[1], _case_order(records, k[0]))):
        points = series[key]
        marks = digests[key]
        plan_changes = tuple(i for i in range(1, len(marks)) if marks[i] != marks[i - 1])
        changes = segment([p.log_pct for p in points], alpha=alpha, permutations=permutations, seed=seed)
        cases.append(CaseHistory(key[0], key[1], tuple(points), changes, plan_changes))
    return History(protocol, tuple(info for info, _ in records), tuple(cases), tuple(notes))


def _case_order(records: Sequence[tuple[RecordInfo, Results]], case: str) -> tuple[int, str]:
    """Cases in the order the latest record's first trial lists them (the plan's order); others after."""
    for _, results in reversed(records):
        for trial in results.trials:
            names = [c.case for c in trial.cases]
            if case in names:
                return (names.index(case), case)
    return (1 << 30, case)
