"""Check a record: recompute everything it claims from its raw samples and list every disagreement.

A record is trustworthy when the chain plan → trials → results.json → README.md holds link by link:
the plan still matches its lock and the digest the ledger recorded when the trials ran, the ledger
and the trial files tell one story (`qualify.record.evidence`), every raw-sample file is the one
the trial names (sha256) and well formed, every statistic and fact in a trial is what its samples
and its plan give, results.json holds exactly those trials and the verdict they imply, and
results.json and README.md are, byte for byte, what `qualify report` writes for them.
Problems are returned as data; unreadable files raise PlanError naming the file.
"""

from __future__ import annotations

import math
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qualify.errors import ExitCode, PlanError
from qualify.evaluate.recompute import in_recorded_shape, recompute_trial
from qualify.evaluate.verdict import pooled_cases, verdict
from qualify.io import MAX_JSON_BYTES, MAX_NPZ_BYTES, MAX_TEXT_BYTES, read_limited
from qualify.plan.digest import sha256_file
from qualify.plan.model import Plan
from qualify.record import evidence
from qualify.record.assemble import (
    LOCK_FILE,
    PLAN_FILE,
    README_FILE,
    derive_results,
    load_record_plan,
    plan_mismatch,
    read_record_plan,
    write_record,
)
from qualify.record.evidence import Problem
from qualify.record.python_facts import python_problems
from qualify.render.readme import render_readme
from qualify.results import samples as raw
from qualify.results.model import PooledStats, Results, Trial
from qualify.results.store import Record, results_json

# JSON round-trips floats exactly, so recomputed statistics normally match bit for bit; the
# tolerance only absorbs last-digit differences between numpy builds. The absolute part keeps
# values that are near zero by nature (a change of +0.000 %) from failing on noise alone.
REL_TOL = 1e-9
ABS_TOL = 1e-9
MAX_LISTED = 5  # differences listed per file before "and N more"


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def differences(found: object, expected: object, path: str = "") -> list[str]:
    """Where two JSON-like values differ: 'path: found X, expected Y' per leaf."""
    if isinstance(found, dict) and isinstance(expected, dict):
        out = []
        for k in list(expected) + [k for k in found if k not in expected]:
            sub = f"{path}.{k}" if path else str(k)
            if k not in found:
                out.append(f"{sub}: missing")
            elif k not in expected:
                out.append(f"{sub}: not expected")
            else:
                out.extend(differences(found[k], expected[k], sub))
        return out
    if isinstance(found, list) and isinstance(expected, list):
        if len(found) != len(expected):
            return [f"{path}: {len(found)} entries, expected {len(expected)}"]
        return [d for i, (a, b) in enumerate(zip(found, expected)) for d in differences(a, b, f"{path}[{i}]")]
    if _number(found) and _number(expected):
        if math.isclose(found, expected, rel_tol=REL_TOL, abs_tol=ABS_TOL):
            return []
    elif type(found) is type(expected) and found == expected:  # True is not 1 in a record
        return []
    return [f"{path}: found {found!r}, expected {expected!r}"]


def _listed(where: str, diffs: list[str], what: str) -> list[str]:
    if not diffs:
        return []
    more = f" (and {len(diffs) - MAX_LISTED} more)" if len(diffs) > MAX_LISTED else ""
    return [f"{where}: {what}: {d}" for d in diffs[:MAX_LISTED]] + ([f"{where}: {what}{more}"] if more else [])


def load_samples(path: Path, root: Path | None = None) -> dict[str, np.ndarray]:
    try:
        return raw.load(path, root=root)
    except FileNotFoundError:
        raise PlanError("no such file", file=path) from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise PlanError(f"unreadable raw samples: {exc}", file=path) from None


def _trial_problems(record: Record, trial: Trial, plan: Plan, lock: dict) -> tuple[list[str], Trial | None]:
    """What is wrong with one trial, and the trial as its raw samples give it (None: they cannot)."""
    path = record.trial_path(trial.index)
    where = f"trials/{path.name}"
    problems = []
    if trial.plan_digest != lock["digest"]:
        problems.append(
            f"{where}: ran under plan digest {trial.plan_digest[:16]}…, the record's "
            f"{LOCK_FILE} says {lock['digest'][:16]}…"
        )
    samples = (record.folder / trial.samples_file).resolve()
    if not samples.is_relative_to(record.folder.resolve()):
        return problems + [f"{where}: samples_file {trial.samples_file!r} lies outside the record"], None
    if not samples.exists():
        return problems + [f"{where}: its raw samples {trial.samples_file} are missing"], None
    if not samples.is_file():
        return problems + [f"{where}: its raw samples {trial.samples_file} are not a file"], None
    digest = sha256_file(samples, limit=MAX_NPZ_BYTES, root=record.folder)
    if digest != trial.samples_sha256:
        # the samples are not the ones the trial was derived from: recomputing from them proves nothing
        return problems + [
            f"{trial.samples_file}: sha256 {digest[:16]}… differs from the trial's "
            f"samples_sha256 {trial.samples_sha256[:16]}…: the raw samples changed"
        ], None
    arrays = load_samples(samples, record.folder)
    bad = raw.series_problems(arrays)
    if bad:  # statistics of malformed series would be meaningless, or not computable at all
        return problems + _listed(trial.samples_file, bad, "unusable raw samples"), None
    problems += _listed(where, evidence.trial_fact_problems(trial, plan, arrays), "contradicts its evidence")
    try:
        again = recompute_trial(trial, arrays, plan.schedule.iterations_per_sample)
    except KeyError as exc:  # a listed case its samples do not time: reported above
        return problems + [f"{trial.samples_file}: lacks the series {exc}"], None
    shaped = in_recorded_shape(again, trial)
    diffs = differences(trial.model_dump(mode="json"), shaped.model_dump(mode="json"))
    return problems + _listed(where, diffs, "differs from its raw samples"), again


def _text_problem(folder: Path, name: str, expected: str) -> list[str]:
    """The first byte-level difference between a derived file and what qualify writes for it."""
    path = folder / name
    if not os.path.lexists(path):  # anything else there is read, or refused, by read_limited
        return [f"{name}: missing"]
    limit = MAX_JSON_BYTES if name.endswith(".json") else MAX_TEXT_BYTES
    try:
        found = read_limited(path, limit, root=folder).decode("utf-8")
    except UnicodeDecodeError as exc:
        return [f"{name}: not UTF-8 ({exc.reason} at byte {exc.start})"]
    if found == expected:
        return []
    # lines end at "\n" only: a carriage return left in a line is a difference to show, not to hide
    want, got = _lines(expected), _lines(found)
    for n, (a, b) in enumerate(zip(want, got), 1):
        if a != b:
            return [f"{name} line {n} differs from the rendered record: expected {a!r}, found {b!r}"]
    if len(want) != len(got):
        n = min(len(want), len(got)) + 1
        shown = f"found {got[n - 1]!r}" if len(got) > len(want) else f"expected {want[n - 1]!r}"
        return [f"{name} line {n}: {'extra' if len(got) > len(want) else 'missing'} line ({shown})"]
    return [f"{name} differs from the rendered record in its final newline"]


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    return lines[:-1] if text.endswith("\n") else lines


@dataclass(frozen=True)
class Evidence:
    plan: Plan
    lock: dict
    trials: list[Trial]  # as their files hold them
    rederived: list[Trial]  # with every statistic as the raw samples give it
    problems: list[Problem]


def check_evidence(folder: Path) -> Evidence:
    """The evidence alone (plan, lock, ledger, trial files, raw samples), before the derived files."""
    folder = Path(folder)
    record = Record(folder)
    plan, lock = load_record_plan(folder)
    problems: list[Problem] = []
    mismatch = plan_mismatch(plan, lock)
    if mismatch:
        problems.append(Problem(": ".join(mismatch), frozen=True))
    events = record.ledger()  # a damaged ledger (a line cut short, an edited event) raises, naming its line
    trials = record.trials()  # each file holds the trial its name says, or this raises
    problems.extend(evidence.ledger_problems(events, trials, plan, lock))
    library = evidence.library_problems(trials, plan, lock)
    problems.extend(library)
    problems.extend(Problem(p) for p in python_problems(trials, plan))
    ended = evidence.end_events(events)
    rederived = []
    for trial in trials:
        found, again = _trial_problems(record, trial, plan, lock)
        named = any(f"trials/trial-{trial.index}.json" in p.text for p in library)
        if not found and not named and trial.index in ended:
            # The hashes the ledger recorded say only that a file changed; the checks above say
            # how, when they can. Reported alone, they catch the edit nothing else can see.
            found = evidence.hash_problems(record, trial, ended[trial.index])
        problems.extend(Problem(p) for p in found)
        rederived.append(again if again is not None else trial)
    return Evidence(plan, lock, trials, rederived, problems)


def _pooled_json(pooled: dict[str, dict[str, PooledStats]]) -> dict:
    return {device: {cid: p.model_dump(mode="json") for cid, p in cases.items()} for device, cases in pooled.items()}


def inspect_record(folder: Path) -> list[Problem]:
    """Every way the record disagrees with its own evidence; an empty list means it checks out."""
    folder = Path(folder)
    record = Record(folder)
    ev = check_evidence(folder)
    plan, lock, trials = ev.plan, ev.lock, ev.trials

    results = record.results()
    found: list[str] = []
    if results.plan_digest != lock["digest"]:
        found.append(
            f"results.json: plan_digest {results.plan_digest[:16]}… is not the "
            f"{LOCK_FILE} digest {lock['digest'][:16]}…"
        )
    if results.plan_name != plan.name or results.files != lock["files"]:
        found.append(f"results.json: plan_name or files differ from {PLAN_FILE} and {LOCK_FILE}")
    stored = [t.index for t in results.trials]
    on_disk = [t.index for t in trials]
    if stored != on_disk:
        found.append(f"results.json: holds trials {stored}, the trial files are {on_disk}")
    else:
        for kept, trial in zip(results.trials, trials):
            diffs = differences(kept.model_dump(mode="json"), trial.model_dump(mode="json"))
            found.extend(_listed("results.json", diffs, f"trial {trial.index} differs from its trial file"))
    # the verdict of the statistics as the raw samples give them, not as the trial files state them
    fresh = verdict(plan, ev.rederived)
    diffs = differences(results.verdict.model_dump(mode="json"), fresh.model_dump(mode="json"), "verdict")
    found.extend(_listed("results.json", diffs, "the verdict is not the one its trials give"))
    # the pooled two-level statistics, from the trials as their raw samples give them
    expected, written = _pooled_json(pooled_cases(plan, ev.rederived)), _pooled_json(results.pooled)
    diffs = differences(written, expected, "pooled")
    found.extend(_listed("results.json", diffs, "the pooled statistics are not the ones its trials give"))
    derived = derive_results(plan, lock, trials)
    if not found:
        # equal in every value is not enough: the file must be the bytes `qualify report` writes
        found.extend(_text_problem(folder, "results.json", results_json(derived)))

    # The README must be what the trial files render to, not merely what results.json renders
    # to: a results.json edited to match an edited README must not make the pair pass.
    found.extend(_text_problem(folder, README_FILE, render_readme(derived, plan)))
    # the plots are drawn from the same evidence: missing, stale or edited ones are problems too
    # (their bytes under the matplotlib that drew them, their declared data under another)
    from qualify.render.plots import plot_problems, samples_readable

    if samples_readable(folder, derived):
        found.extend(plot_problems(folder, derived, plan))
    return ev.problems + [Problem(p) for p in found]


def check_record(folder: Path) -> list[str]:
    """`inspect_record` as sentences."""
    return [p.text for p in inspect_record(folder)]


def check_exit_code(problems: list[Problem]) -> ExitCode:
    """The exit code of a record that does not check out: 3 when the plan or its lock changed
    after the run (a frozen input, as for `run`), 2 for any other disagreement."""
    return ExitCode.FROZEN if any(p.frozen for p in problems) else ExitCode.BAD_INPUT


def rebuild_record(folder: Path) -> Results:
    """Derive results.json and README.md again from the trial files (`qualify report DIR`)."""
    plan, lock = read_record_plan(Path(folder))
    return write_record(Record(Path(folder)), plan, lock)
