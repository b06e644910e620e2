"""`qualify gate`: every protocol a change touches, each arm at the base revision against the same
arm in the working tree, on one runner in one job.

1. The base: --base REV, else the merge base of HEAD with the default branch. The changed paths
   are those between it and the working tree (committed, staged, unstaged, untracked);
   `changed.touched_protocols` picks the protocols, plus any named with --protocol.
2. Both trees are materialized in a private folder (`gate_tree`): the base by blob digest from
   git, the working tree from disk. Nothing is checked out over the user's files.
3. Per protocol and arm, a derived plan (`gate_plans`) puts the arm at the base against the arm
   now; library arms are built by `.github/qualify-ci.json`'s command in a git worktree of the
   base (in a temporary folder) and in the working tree.
4. Identical machine code with identical launches needs no timing (unless asked: the noop
   qualification times it). Anything else runs through `runner`: the same machinery as `qualify
   run` (ABBA blocks, placements, trials as processes), into a fresh record per arm.
5. Each case is judged by `evaluate.gate` and the document (`results.gate`) written to
   <out>/gate.json, with its Markdown table beside it (GATE.md).

No silent re-run: every trial the runner made is in its record; the gate reads them all.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from qualify.commands.changed import Touched, git_root, touched_protocols
from qualify.commands.gate_tree import (
    changed_since,
    default_base,
    git,
    materialize_revision,
    materialize_worktree,
    resolve_commit,
)
from qualify.errors import ExitCode, QualifyError, ToolError, UsageError
from qualify.io import atomic_write_text
from qualify.plan.model import CudaArm
from qualify.results.gate import GateArm, GateDocument, GateProtocol, SkippedPath
from qualify.results.model import Results

GATE_JSON = "gate.json"
GATE_MD = "GATE.md"
CI_CONFIG = ".github/qualify-ci.json"
BUILD_TIMEOUT_S = 3600

# plan path, record folder, libraries (library arms) -> the record's results (None: no trial kept)
# (derived plan, record folder, library builds, added) -> the record's results; `added` None runs the
# plan's trials, a reason runs one trial beyond them (recorded with that reason)
Runner = Callable[[Path, Path, "dict[str, Path] | None", "str | None"], "Results | None"]


def read_ci_config(root: Path) -> dict:
    path = root / CI_CONFIG
    if not path.is_file():
        return {}
    from qualify import strict_json
    from qualify.io import MAX_LOCK_BYTES, read_text_limited

    try:
        data = strict_json.parse(read_text_limited(path, MAX_LOCK_BYTES))
    except strict_json.JSONProblem as exc:
        raise UsageError(exc.message, file=path, field=exc.field) from None
    compare = data.get("compare", {}) if isinstance(data, dict) else {}
    if not isinstance(compare, dict):
        raise UsageError("not an object", file=path, field="compare")
    return compare


def _fresh_out(out: Path) -> None:
    """A gate writes a fresh folder: records of an earlier gate (perhaps another machine) are never
    read as this gate's evidence."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError("exists and is not an empty folder: a gate writes a fresh one", file=out, field="--out")
    out.mkdir(parents=True, exist_ok=True)


def _check_command(command: object) -> None:
    if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
        raise UsageError("build must be a list of strings (a command, no shell)", file=CI_CONFIG, field="build")


def _build(command: object, cwd: Path, what: str) -> None:
    _check_command(command)
    assert isinstance(command, list)
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, timeout=BUILD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(f"the build of {what} did not run: {exc}") from None
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()
        raise ToolError(f"the build of {what} exited {done.returncode}: {tail[-1] if tail else ''}")


def build_libraries(root: Path, commit: str, entry: dict, work: Path) -> dict[str, dict[str, Path]]:
    """{side: {"rev": .so, "now": .so}}: the CI build command run in a worktree of the base (in
    `work`, removed after by the caller) and in the working tree."""
    _check_command(entry.get("build"))
    revtree = work / "rev-worktree"
    git(root, "worktree", "add", "--detach", "--force", str(revtree), commit)
    _build(entry.get("build"), revtree, f"the base {commit[:12]}")
    _build(entry.get("build"), root, "the working tree")
    libs: dict[str, dict[str, Path]] = {}
    for side in ("base", "candidate"):
        rel = entry.get(side)
        if not isinstance(rel, str):
            raise UsageError("missing the library's path", file=CI_CONFIG, field=side)
        libs[side] = {"rev": revtree / rel, "now": root / rel}
    return libs


def _arm_error(side: str, exc: QualifyError | ValueError, code: str = "unknown", detail: str = "") -> GateArm:
    text = exc.one_line() if isinstance(exc, QualifyError) else str(exc)
    exit_code = int(exc.exit_code) if isinstance(exc, QualifyError) else int(ExitCode.INCOMPLETE)
    return GateArm(
        side=side,
        code=code,
        code_detail=detail or "not compared",
        timed=False,
        record=None,
        device=None,
        error=text,
        error_exit_code=exit_code,
        cases=[],
    )


def _gate_arm(derived, runner: Runner, out: Path, name: str, libraries, time_identical: bool) -> GateArm:
    from qualify.commands.gate_plans import cuda_code_identical
    from qualify.commands.pipeline import load_frozen
    from qualify.evaluate.gate import judge_identical, judge_timed, more_trials

    loaded = load_frozen(derived.path, checked=False)  # freezing just checked and compiled it
    if derived.library:
        from qualify.run.code_identity import library

        arch = loaded.plan.hardware.architectures[0]
        ident = library(libraries["base"], libraries["candidate"], arch)
        identical, detail = ident.status == "identical", ident.reason or ident.status
        code = ident.status
    elif isinstance(loaded.plan.arm("base"), CudaArm):
        identical, detail = cuda_code_identical(loaded)
        code = "identical" if identical else "differs"
    else:  # a Python arm: what it launches is decided when it runs, so it is always timed
        identical, detail, code = False, "a Python arm: no machine code to compare before running", "unknown"
    if identical and not time_identical:
        return GateArm(
            side=derived.side,
            code="identical",
            code_detail=detail,
            timed=False,
            record=None,
            device=None,
            cases=judge_identical(loaded.plan, loaded.cases, detail),
        )
    record = out / name / derived.side
    added: list[str] = []
    try:
        results = runner(derived.path, record, libraries, None)
        if results is None:
            raise ValueError("no trial was kept: nothing to judge")
        machine, cases = judge_timed(loaded.plan, loaded.cases, results)
        while (why := more_trials(loaded.plan, results, cases)) is not None:
            before = len(results.trials)
            results = runner(derived.path, record, libraries, why) or results
            if len(results.trials) <= before:
                break  # nothing ran (the record refused it): judge what there is
            added.append(f"trial {results.trials[-1].index}: {why}")
            machine, cases = judge_timed(loaded.plan, loaded.cases, results)
    except (QualifyError, ValueError) as exc:
        return _arm_error(derived.side, exc, code, detail)
    return GateArm(
        side=derived.side,
        code=code,
        code_detail=detail,
        timed=True,
        record=record.relative_to(out).as_posix(),
        device=machine,
        added_trials=added,
        cases=cases,
    )


def _gate_protocol(touched: Touched, tree: Path, root: Path, commit: str, ci: dict, runner, out, time_identical):
    from qualify.commands.gate_plans import write_derived

    rev_plan, now_plan = tree / "rev" / touched.plan, tree / "now" / touched.plan
    base = dict(name=touched.name, plan=touched.plan, reasons=touched.reasons)
    if not now_plan.is_file():
        return GateProtocol(
            **base, status="error", detail="the plan is not a regular file in the working tree", arms=[]
        )
    if not rev_plan.is_file():
        return GateProtocol(**base, status="new", detail=f"no plan at {commit[:12]}: nothing to compare with", arms=[])
    try:
        derived, _, _ = write_derived(rev_plan, now_plan, commit[:12])
    except QualifyError as exc:
        return GateProtocol(**base, status="error", detail=exc.one_line(), error_exit_code=int(exc.exit_code), arms=[])
    arms = []
    with tempfile.TemporaryDirectory(prefix="qualify-gate-build-") as work:
        built = None
        for d in derived:
            libraries = None
            if d.library:
                entry = ci.get(touched.name)
                if not isinstance(entry, dict):
                    arms.append(_arm_error(d.side, UsageError(f"no build for {touched.name}", file=CI_CONFIG)))
                    continue
                try:
                    built = built or build_libraries(root, commit, entry, Path(work))
                except QualifyError as exc:
                    arms.append(_arm_error(d.side, exc))
                    continue
                libraries = {"base": built[d.side]["rev"], "candidate": built[d.side]["now"]}
            try:
                arms.append(_gate_arm(d, runner, out, touched.name, libraries, time_identical))
            except QualifyError as exc:
                arms.append(_arm_error(d.side, exc))
        if (Path(work) / "rev-worktree").exists():  # also after a failed build
            git(root, "worktree", "remove", "--force", str(Path(work) / "rev-worktree"), check=False)
    return GateProtocol(**base, status="gated", arms=arms)


def run_gate(
    start: Path,
    base: str | None,
    out: Path,
    runner: Runner,
    *,
    protocols: tuple[str, ...] = (),
    time_identical: bool = False,
    link_base: str = "",
    say: Callable[[str], None] = lambda line: None,
) -> GateDocument:
    """The gate from the repository holding `start`; the document is also written to `out`."""
    from qualify.evaluate.gate import outcome
    from qualify.render.gate_table import gate_markdown

    root = git_root(start)
    base_rev = base or default_base(root)
    commit = resolve_commit(root, base_rev)
    head = git(root, "rev-parse", "--verify", "--quiet", "HEAD", check=False).decode().strip() or None
    dirty = bool(git(root, "status", "--porcelain", "--untracked-files=normal").strip())
    _fresh_out(out)
    ci = read_ci_config(root)
    extra = {
        name: [s for s in entry.get("sources", []) if isinstance(s, str)]
        for name, entry in ci.items()
        if isinstance(entry, dict)
    }
    changed = changed_since(root, commit)
    touched = {t.name: t for t in touched_protocols(root, changed, extra)}
    for name in protocols:
        if name not in touched:
            plan = root / "protocols" / name / "plan.json"
            if not plan.is_file():
                raise UsageError(f"no protocol named {name!r} under protocols/", field="--protocol")
            touched[name] = Touched(name=name, plan=f"protocols/{name}/plan.json", reasons=["named by --protocol"])
    say(f"base {base_rev} = {commit[:12]}; {len(changed)} changed path(s); {len(touched)} protocol(s) to gate")
    gated: list[GateProtocol] = []
    skipped: list[SkippedPath] = []
    if touched:
        with tempfile.TemporaryDirectory(prefix="qualify-gate-") as tmp:
            tree = Path(tmp) / "tree"
            (tree / ".git").mkdir(parents=True)  # the private tree's root (plan.files.repository_root)
            rev = materialize_revision(root, commit, tree / "rev")
            now = materialize_worktree(root, tree / "now")
            skipped = [SkippedPath(tree="base", path=s.path, why=s.why) for s in rev.skipped] + [
                SkippedPath(tree="working tree", path=s.path, why=s.why) for s in now.skipped
            ]
            for name in sorted(touched):
                say(f"gating {name}")
                gated.append(_gate_protocol(touched[name], tree, root, commit, ci, runner, out, time_identical))
    result, code, summary = outcome(gated)
    if result != "fail":
        errors = [p.error_exit_code or int(ExitCode.INCOMPLETE) for p in gated if p.status == "error"]
        errors += [a.error_exit_code for p in gated for a in p.arms if a.error_exit_code is not None]
        if errors:
            code = ExitCode(errors[0])
    document = GateDocument(
        base_rev=base_rev,
        base_commit=commit,
        head_commit=head,
        dirty=dirty,
        outcome=result,
        exit_code=int(code),
        summary=summary,
        protocols=gated,
        skipped=skipped,
    )
    atomic_write_text(out / GATE_JSON, json.dumps(document.model_dump(mode="json"), indent=2) + "\n")
    atomic_write_text(out / GATE_MD, gate_markdown(document, link_base))
    return document


def gate_schema() -> dict:
    from qualify.results.gate import GateDocument

    return GateDocument.model_json_schema()
