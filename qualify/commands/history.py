"""qualify history: a protocol's records across commits, as one static HTML page.

Two sources, never mixed:

- A folder of CI artifacts (`--artifacts DIR`): every `results.json` under DIR (links are not
  followed out of it), each a record. The commit a record stands for is what its trials state
  (`provenance.git_revision`); where they state none, a manifest's entry for the record's folder;
  else the commit that added the file, where DIR is inside a git repository; else unknown. The
  page says which, per record. Records are ordered by their first trial's start: the time the
  record itself states.
- The repository's own records (`--git RECORD`): every commit that added or changed
  RECORD/results.json, oldest first, each version read with `git show`, never checked out.

Re-rendering a record changes its results.json without measuring anything; a record whose trials'
samples (by sha256) are those of a record already read is the same measurement and is left out,
with a note on the page, so one measurement is never counted twice by the change-point test.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from qualify import strict_json
from qualify.errors import QualifyError, ToolError, UsageError
from qualify.evaluate.changepoint import ALPHA, PERMUTATIONS
from qualify.evaluate.history import History, RecordInfo, build_history
from qualify.io import MAX_JSON_BYTES, atomic_write_text, read_text_limited
from qualify.plan.load import plan_error_from_validation
from qualify.render.history_html import render_history
from qualify.results.model import RESULTS_VERSION, Results

MAX_RECORDS = 5000  # far above any history a page can show; a folder with more is refused
MAX_DEPTH = 8  # how deep under --artifacts a results.json is looked for
_COMMIT = re.compile(r"[0-9a-f]{7,64}")


class HistoryInputError(QualifyError):
    """A record, manifest or option `qualify history` cannot use (exit 2)."""


def results_from_text(text: str, where: str) -> Results:
    """A results.json's text as the model, or one error naming `where` and the field."""
    try:
        data = strict_json.parse(text)
    except strict_json.JSONProblem as exc:
        raise HistoryInputError(exc.message, file=where, field=exc.field) from None
    if not isinstance(data, dict):
        raise HistoryInputError(f"expected a JSON object, got {type(data).__name__}", file=where)
    if data.get("results_version") != RESULTS_VERSION:
        raise HistoryInputError(
            f"results_version {data.get('results_version')!r} is not {RESULTS_VERSION}; this qualify cannot read it",
            file=where,
            field="results_version",
        )
    try:
        results = Results.model_validate(data)
    except ValidationError as exc:
        first = plan_error_from_validation(exc, data, Path(where)).each()[0]
        raise HistoryInputError(first.message, file=where, field=first.field) from None
    _check_ratios(results, where)
    return results


def _check_ratios(results: Results, where: str) -> None:
    """Every ratio the page plots or pools is a positive number (a time over a time): a record that
    says otherwise is refused here, naming the field, rather than failing in a logarithm later."""
    fields = [
        (strict_json.join_field(strict_json.join_field(strict_json.join_field("pooled", d), c), name), value)
        for d, cases in results.pooled.items()
        for c, s in cases.items()
        for name, value in (("ratio", s.ratio), ("ci_low", s.ci_low), ("ci_high", s.ci_high))
    ]
    fields += [
        (f"trials[{t}].cases[{k}].stats.{name}", value)
        for t, trial in enumerate(results.trials)
        for k, case in enumerate(trial.cases)
        for name, value in (("ratio", case.stats.ratio), ("ci_low", case.stats.ci_low), ("ci_high", case.stats.ci_high))
    ]
    for field, value in fields:
        if value is not None and not (0 < value < float("inf")):
            raise HistoryInputError(f"{value!r} is not a positive ratio", file=where, field=field)


def _revisions(results: Results) -> list[str]:
    """The revisions the record's trials state, in trial order, each once."""
    seen: list[str] = []
    for trial in sorted(results.trials, key=lambda t: t.started_at):
        rev = trial.provenance.git_revision
        if rev and rev not in seen:
            seen.append(rev)
    return seen


def _started(results: Results) -> str:
    return min((t.started_at for t in results.trials), default="")


def _samples_key(results: Results) -> frozenset[str]:
    return frozenset(t.samples_sha256 for t in results.trials)


def _git(args: Sequence[str], cwd: Path, what: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, timeout=120)
    except FileNotFoundError:
        raise ToolError(f"git not found on PATH; qualify history needs it to {what}") from None
    except subprocess.TimeoutExpired:
        raise ToolError(f"git did not finish within 120 s ({what})") from None


def _git_root(start: Path) -> Path | None:
    done = _git(["rev-parse", "--show-toplevel"], start, "find the repository")
    return Path(done.stdout.decode(errors="surrogateescape").strip()) if done.returncode == 0 else None


def _repo_or_none(folder: Path) -> Path | None:
    try:
        return _git_root(folder)
    except ToolError:
        return None


# ---- artifacts --------------------------------------------------------------------------------


def find_results(folder: Path) -> list[Path]:
    """Every results.json under `folder`, at most MAX_DEPTH folders down, links not followed."""
    if not folder.is_dir():
        raise HistoryInputError("not a folder of records", file=folder, field="--artifacts")
    found: list[Path] = []
    for here, dirs, files in os.walk(folder, followlinks=False):
        depth = len(Path(here).relative_to(folder).parts)
        if depth >= MAX_DEPTH:
            dirs[:] = []
        dirs.sort()
        if "results.json" in files:
            found.append(Path(here) / "results.json")
            if len(found) > MAX_RECORDS:
                raise HistoryInputError(f"more than {MAX_RECORDS} records", file=folder, field="--artifacts")
    return sorted(found)


def read_manifest(path: Path) -> dict[str, tuple[str, str]]:
    """{record folder relative to the artifacts folder: (commit, message)} from a manifest:
    {"records": {"<folder>": {"commit": "<hex>", "message": "<subject>"}}} (message optional)."""
    text = read_text_limited(path, MAX_JSON_BYTES, field="--manifest")
    try:
        data = strict_json.parse(text)
    except strict_json.JSONProblem as exc:
        raise HistoryInputError(exc.message, file=path, field=exc.field) from None
    if not isinstance(data, dict) or set(data) != {"records"} or not isinstance(data["records"], dict):
        raise HistoryInputError('expected {"records": {"<folder>": {"commit": …}}}', file=path, field="records")
    out: dict[str, tuple[str, str]] = {}
    for folder, entry in data["records"].items():
        field = strict_json.join_field("records", folder)
        if not isinstance(entry, dict) or not set(entry) <= {"commit", "message"} or "commit" not in entry:
            raise HistoryInputError('expected {"commit": "<hex>", "message": "…"}', file=path, field=field)
        commit, message = entry["commit"], entry.get("message", "")
        if not isinstance(commit, str) or not _COMMIT.fullmatch(commit):
            raise HistoryInputError("a commit is 7 to 64 lowercase hex digits", file=path, field=f"{field}.commit")
        if not isinstance(message, str):
            raise HistoryInputError("expected a string", file=path, field=f"{field}.message")
        out[folder] = (commit, message)
    return out


def from_artifacts(
    folder: Path, *, protocol: str | None = None, manifest: Path | None = None
) -> tuple[str, list[tuple[RecordInfo, Results]], list[str]]:
    """The records under `folder` of one protocol, ordered by their first trial's start."""
    entries = read_manifest(manifest) if manifest is not None else {}
    loaded = []
    for path in find_results(folder):
        text = read_text_limited(path, MAX_JSON_BYTES, root=folder)
        loaded.append((path, results_from_text(text, str(path))))
    names = sorted({r.plan_name for _, r in loaded})
    if protocol is not None:
        loaded = [(p, r) for p, r in loaded if r.plan_name == protocol]
    elif len(names) > 1:
        raise HistoryInputError(f"records of several protocols ({', '.join(names)}); name one", field="--protocol")
    if not loaded:
        what = f"no record of protocol {protocol!r}" if protocol else "no results.json"
        raise HistoryInputError(f"{what} under this folder", file=folder, field="--artifacts")
    known = {p.parent.relative_to(folder).as_posix() for p, _ in loaded}
    for name in entries:
        if name not in known:
            raise HistoryInputError(
                "names no record folder under --artifacts", file=manifest, field=strict_json.join_field("records", name)
            )
    # git is asked only where a record states no commit and the manifest gives none; without git
    # those records are "unknown", not an error: artifacts need no repository
    needs_git = any(not _revisions(r) and p.parent.relative_to(folder).as_posix() not in entries for p, r in loaded)
    repo = _repo_or_none(folder) if needs_git else None
    records = []
    for path, results in sorted(loaded, key=lambda pr: (_started(pr[1]), str(pr[0]))):
        rel = path.parent.relative_to(folder).as_posix()
        records.append((_artifact_info(path, rel, results, entries, manifest, repo), results))
    return loaded[0][1].plan_name, *_distinct(records)


def _artifact_info(path, rel, results, entries, manifest, repo) -> RecordInfo:
    revisions = _revisions(results)
    commit, source, message, when = (revisions[-1] if revisions else None), "record", "", _started(results)
    if rel in entries:
        listed, message = entries[rel]
        if commit is not None and not (commit.startswith(listed) or listed.startswith(commit)):
            raise HistoryInputError(
                f"commit {listed} disagrees with the record's trials ({commit})",
                file=manifest,
                field=strict_json.join_field("records", rel) + ".commit",
            )
        if commit is None:
            commit, source = listed, "manifest"
    if commit is None and repo is not None:
        done = _git(["log", "-1", "--format=%H%x00%s", "--", str(path.resolve())], repo, "date a record")
        line = done.stdout.decode("utf-8", errors="replace").strip()
        if done.returncode == 0 and line:
            commit, message = line.split("\x00", 1)
            source = "git"
    if commit is None:
        source = "unknown"
    elif len(revisions) > 1 and source == "record":
        source = f"record ({len(revisions)} revisions; the latest shown)"
    return _info(str(path), commit, source, when, message, results)


def _info(source: str, commit: str | None, how: str, when: str, message: str, results: Results) -> RecordInfo:
    revisions = _revisions(results)
    return RecordInfo(
        source=source,
        commit=commit,
        commit_source=how,
        when=when,
        message=message,
        measured=revisions[-1] if revisions else None,
        dirty=any(t.provenance.git_dirty for t in results.trials),
        plan_name=results.plan_name,
        plan_digest=results.plan_digest,
        verdict=results.verdict.status,
    )


def _distinct(records: list[tuple[RecordInfo, Results]]) -> tuple[list[tuple[RecordInfo, Results]], list[str]]:
    """The records less those whose trials repeat an earlier record's samples (re-rendered or
    copied records), with a note for each one left out."""
    seen: dict[frozenset[str], RecordInfo] = {}
    kept, notes = [], []
    for info, results in records:
        key = _samples_key(results)
        if key in seen:
            first = seen[key]
            notes.append(f"{_name(info)}: the same trials as {_name(first)} (re-rendered or copied); not counted again")
            continue
        seen[key] = info
        kept.append((info, results))
    return kept, notes


def _name(info: RecordInfo) -> str:
    return info.commit[:10] if info.commit and info.commit_source == "git" else info.source


# ---- git ----------------------------------------------------------------------------------------


def from_git(record: Path) -> tuple[str, list[tuple[RecordInfo, Results]], list[str]]:
    """Every version of RECORD/results.json in the repository's history, oldest first."""
    start = record if record.is_dir() else Path(os.path.abspath(record)).parent
    root = _git_root(start if start.exists() else Path.cwd())
    if root is None:
        raise UsageError("not inside a git repository", file=record, field="--git")
    target = Path(os.path.abspath(record)) / "results.json"
    try:
        rel = target.relative_to(Path(os.path.realpath(root))).as_posix()
    except ValueError:
        try:
            rel = target.relative_to(root).as_posix()
        except ValueError:
            raise UsageError(f"outside the repository at {root}", file=record, field="--git") from None
    fmt = "--format=%H%x00%cI%x00%s"
    done = _git(["log", "--reverse", "--diff-filter=AMR", fmt, "--", rel], root, "list the record's history")
    if done.returncode != 0:
        raise UsageError(f"git log failed: {_last_line(done)}", file=record, field="--git")
    records, notes = [], []
    for line in done.stdout.decode("utf-8", errors="replace").splitlines():
        commit, when, message = line.split("\x00", 2)
        where = f"{commit[:12]}:{rel}"
        size = _git(["cat-file", "-s", f"{commit}:{rel}"], root, "size a record")
        if size.returncode != 0:
            notes.append(f"{where}: not in that commit's tree; left out")
            continue
        if int(size.stdout.strip() or 0) > MAX_JSON_BYTES:
            raise HistoryInputError(f"more than the {MAX_JSON_BYTES} bytes allowed", file=where)
        shown = _git(["show", f"{commit}:{rel}"], root, "read a record")
        if shown.returncode != 0:
            raise HistoryInputError(f"git show failed: {_last_line(shown)}", file=where)
        try:
            text = shown.stdout.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise HistoryInputError(f"not UTF-8 text (byte {exc.start})", file=where) from None
        results = results_from_text(text, where)
        records.append((_info(where, commit, "git", when, message, results), results))
    if not records:
        raise HistoryInputError("no commit holds this record's results.json", file=record, field="--git")
    kept, dropped = _distinct(records)
    return kept[-1][1].plan_name, kept, notes + dropped


def _last_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else f"exit {done.returncode}"


# ---- the page -----------------------------------------------------------------------------------


def history_page(
    *,
    artifacts: Path | None = None,
    git_record: Path | None = None,
    protocol: str | None = None,
    manifest: Path | None = None,
    alpha: float = ALPHA,
    permutations: int = PERMUTATIONS,
) -> tuple[History, str]:
    """The history and its page's HTML, from exactly one of the two sources."""
    if (artifacts is None) == (git_record is None):
        raise UsageError("give exactly one of --artifacts DIR and --git RECORD", field="--artifacts")
    if manifest is not None and artifacts is None:
        raise UsageError("--manifest names commits of records under --artifacts", field="--manifest")
    if artifacts is not None:
        name, records, notes = from_artifacts(artifacts, protocol=protocol, manifest=manifest)
    else:
        name, records, notes = from_git(git_record)  # type: ignore[arg-type]
        if protocol is not None and protocol != name:
            raise HistoryInputError(f"the record's protocol is {name!r}, not {protocol!r}", field="--protocol")
    history = build_history(name, records, alpha=alpha, permutations=permutations, notes=notes)
    return history, render_history(history)


def write_page(html: str, out: Path) -> None:
    """Write the page whole or not at all; a symbolic link at `out` is refused, never followed."""
    out = Path(os.path.abspath(out))
    atomic_write_text(out, html, root=out.parent)
