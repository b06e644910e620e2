"""The command line: a thin click layer over the library.

This is the only module that maps errors to exit codes (see `qualify.errors.ExitCode`) and the only
one that prints. Every expected failure is one line on stderr; a traceback appears only with -v.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from qualify import __version__
from qualify.errors import MAX_LINE, BuildError, ExitCode, QualifyError, UsageError

SCHEMA_PATH = Path(__file__).parent / "schemas" / "plan.schema.json"


class _Out:
    """Prints through a console made for the stream as it is now (tests and pipes replace it)."""

    def print(self, *objects, **kwargs) -> None:
        from qualify.render.terminal import console

        console().print(*objects, **kwargs)


out = _Out()


def _fail_line(text: str) -> None:
    # click.echo, not rich: an error line must never be wrapped or styled.
    click.echo(text, err=True)


def _shown(path) -> str:
    """A path for a rich line: control characters made visible, [brackets] not read as markup."""
    from rich.markup import escape

    from qualify.errors import printable

    return escape(printable(str(path)))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="qualify")
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks of internal errors.")
@click.pass_context
def cli(ctx: click.Context, verbose: bool) -> None:
    """Qualify CUDA kernel changes under frozen, pre-registered plans."""
    ctx.obj = {"verbose": verbose}


@cli.group()
def plan() -> None:
    """Validate, freeze and describe plans (no GPU needed)."""


@plan.command("check")
@click.argument("plan_paths", metavar="PLAN...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--arch", "archs", multiple=True, help="Compile only these of the plan's architectures.")
@click.option(
    "--no-compile", is_flag=True, help="Validate and resolve only (no compilation, no launch or library checks)."
)
def plan_check(plan_paths: tuple[Path, ...], archs: tuple[str, ...], no_compile: bool) -> None:
    """Validate each PLAN, print its digest, resolve every case and compile both arms.

    Every plan is checked; the exit code is the highest of theirs (0 when all pass)."""
    from qualify.commands.check import check_plan
    from qualify.errors import all_of
    from qualify.render.terminal import plan_check as render

    codes = []
    for plan_path in plan_paths:
        try:
            result = check_plan(plan_path, list(archs) or None, compile=not no_compile)
            out.print(render(result))
            problems = result.problems()
            if problems:
                raise all_of(problems)
        except QualifyError as exc:
            _report(exc, limit=MAX_LINE)
            for note in getattr(exc, "stage_notes", []):  # stages not checked, then the summary
                _fail_line(f"qualify: {note}")
            codes.append(int(exc.exit_code))
    if codes:
        raise SystemExit(max(codes))


@plan.command("freeze")
@click.argument("plan_path", metavar="PLAN", type=click.Path(path_type=Path))
@click.option(
    "--replace",
    is_flag=True,
    help="Rewrite an existing lock for the plan as it is now; refused once a record holds a trial "
    "under the old lock (records/* and every --record folder are searched).",
)
@click.option(
    "--record",
    "records",
    multiple=True,
    type=click.Path(path_type=Path),
    help="With --replace: also search this record folder for trials.",
)
def plan_freeze(plan_path: Path, replace: bool, records: tuple[Path, ...]) -> None:
    """Write PLAN's lock (plan.lock.json): its digest and the sha256 of every file it uses."""
    from qualify.commands.check import freeze_plan
    from qualify.commands.refreeze import replace_lock, with_remedy
    from qualify.errors import FrozenInputChanged
    from qualify.io import MAX_LOCK_BYTES, read_text_limited
    from qualify.plan.load import load_plan

    if replace:
        from dataclasses import replace as unlocked

        from qualify.commands.check import refuse_unchecked

        loaded = load_plan(plan_path)
        refuse_unchecked(unlocked(loaded, lock=None))  # before the old lock is touched
        path, old = replace_lock(loaded, list(records))
        digest = json.loads(read_text_limited(path, MAX_LOCK_BYTES))["digest"]
        state = (
            "frozen"
            if old is None
            else "already frozen, unchanged"
            if old == digest
            else f"re-frozen (no trial ran under the old digest {old[:16]}…)"
        )
        out.print(f"{state}: {path}\ndigest {digest}")
        return
    try:
        _, path, written, digest = freeze_plan(plan_path)
    except FrozenInputChanged as exc:
        raise with_remedy(exc) from None
    state = "frozen" if written else "already frozen, unchanged"
    out.print(f"{state}: {_shown(path)}\ndigest {digest}")


@plan.command("new")
@click.argument("plan_path", metavar="PLAN", type=click.Path(path_type=Path))
@click.option("--cuda", "source", type=click.Path(path_type=Path), help="Kernel pair: the base arm's .cu file.")
@click.option("--kernel", help="Kernel pair: the base arm's __global__ function (a template instantiation is allowed).")
@click.option(
    "--candidate-cuda", "cand_source", type=click.Path(path_type=Path), help="The candidate's .cu (default: --cuda)."
)
@click.option("--candidate-kernel", "cand_kernel", help="The candidate's kernel (default: --kernel).")
@click.option("--library", "library_pair", is_flag=True, help="Library pair: two builds of a C entry point.")
@click.option("--symbol", help="Library pair: the entry point (returns an int status; the stream comes last).")
@click.option("--signature", help="Library pair: its argument types before the stream, e.g. ptr,ptr,i32,f32.")
@click.option("--base-so", type=click.Path(path_type=Path), help="The base build (default: `compare` binds it).")
@click.option("--candidate-so", type=click.Path(path_type=Path), help="The candidate build (with --base-so).")
@click.option("--abi-symbol", help="Library pair: a function returning the ABI version.")
@click.option("--abi-version", type=int, help="The ABI version the plan requires (with --abi-symbol).")
@click.option("--error-symbol", help="Library pair: const char* f(int status).")
@click.option("--arch", "archs", multiple=True, default=("sm_90",), show_default=True, help="Architectures (repeat).")
@click.option(
    "--fidelity", type=click.Choice(["bytes", "ulp", "abs", "rel", "tolerance"]), default="bytes", show_default=True
)
@click.option("--bound", type=float, help="The fidelity bound (ulp, abs, rel); a placeholder when left out.")
@click.option("--name", help="The plan's (and record's) name (default: from PLAN's folder).")
def plan_new(plan_path: Path, **options) -> None:
    """Write a skeleton PLAN for a kernel pair (--cuda, --kernel) or a library pair (--library,
    --symbol, --signature) that passes `plan check` as written; then edit what it lists."""
    from qualify.commands import scaffold

    skeleton = scaffold.skeleton_from_options(plan_path, **options)
    scaffold.write_new_plan(plan_path, skeleton)
    out.print(f"wrote {plan_path} (plan check passes); edit before `qualify plan freeze`:", soft_wrap=True)
    for item in skeleton.todo:
        out.print(f"  - {item}", soft_wrap=True)


@plan.command("schema")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write here instead of stdout.")
def plan_schema(output: Path | None) -> None:
    """Print (or write) the JSON Schema of plans."""
    from qualify.io import atomic_write_text
    from qualify.plan.schema import plan_json_schema

    text = json.dumps(plan_json_schema(), indent=2) + "\n"
    if output is None:
        click.echo(text, nl=False)
    else:
        atomic_write_text(output, text)  # a folder or an unwritable place is a one-line error
        out.print(f"wrote {_shown(output)}")


@plan.command("rehearse")
@click.argument("plan_path", metavar="PLAN", type=click.Path(path_type=Path))
@click.option(
    "--reference",
    "reference_spec",
    metavar="FILE.py:FUNCTION",
    help="float64 reference function(params, inputs) -> {output: values} (or module:function); "
    "the plan's golden is used when it has one, and its own reference when it compares with float64.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    help="Folder for REHEARSAL.md and rehearsal.json (default: a new temporary folder; never under records/).",
)
@click.option(
    "--reorder-ulp",
    type=click.IntRange(min=0, max=1 << 20),
    default=16,
    show_default=True,
    help="Simulate a change of summation order: each float output moved up to this many steps (0: identical).",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the simulation.")
@click.option(
    "--cases",
    "case_ids",
    metavar="ID",
    multiple=True,
    help="Rehearse only this case (its id, e.g. 'C=1024,N=64'; repeat for more); default: every case.",
)
def plan_rehearse(
    plan_path: Path,
    reference_spec: str | None,
    out_dir: Path | None,
    reorder_ulp: int,
    seed: int,
    case_ids: tuple[str, ...],
) -> None:
    """On the CPU: generate PLAN's inputs, evaluate the expected outputs, apply the plan's fidelity
    gate to a simulated candidate and render the result as a rehearsal (never a record), so a
    wrong bound or a control the gate cannot see shows before GPU time is spent. Exit 2 when the
    rehearsal finds a problem."""
    import tempfile

    from qualify.commands.golden import resolve_reference, view_plan
    from qualify.commands.rehearse import rehearse
    from qualify.errors import PlanError

    loaded = view_plan(plan_path)
    declared = loaded.plan.acceptance.fidelity.reference  # against float64: the plan's own, relative to it
    if reference_spec is None and declared is not None:
        reference_spec = str(loaded.path.parent / declared)
    reference = resolve_reference(reference_spec, loaded.path) if reference_spec else None
    folder = out_dir if out_dir is not None else Path(tempfile.mkdtemp(prefix=f"qualify-rehearsal-{loaded.plan.name}-"))
    result = rehearse(loaded, reference, folder, reorder_ulp=reorder_ulp, seed=seed, only=list(case_ids) or None)
    simulated = sum(c.simulated for c in result.cases)
    out.print(f"rehearsal (not a record): {_shown(folder / 'REHEARSAL.md')}", soft_wrap=True)
    out.print(f"expected values: {_shown(result.expected_from)}", soft_wrap=True)
    chosen = f" (chosen with --cases; the plan has {len(loaded.cases)})" if case_ids else ""
    out.print(f"cases simulated: {simulated} of {len(result.cases)}{chosen}")
    for problem in result.problems:
        out.print(f"problem: {_shown(problem)}", soft_wrap=True)
    if result.problems:
        first = "; ".join(result.problems) + (f" (hint: {result.hint})" if result.hint else "")
        raise PlanError(
            f"the rehearsal found {len(result.problems)} problem(s) (see {folder / 'REHEARSAL.md'}): {first}",
            file=plan_path,
            field="acceptance.fidelity",
        )
    caught = sum(bool(c.caught) for c in result.controls)
    out.print(
        f"rehearsal passed: the gate holds the simulated candidate in {sum(c.passed is True for c in result.cases)} "
        f"case(s); {caught} of {len(result.controls)} control run(s) as declared"
        + ("" if simulated == len(result.cases) else f"; {len(result.cases) - simulated} case(s) not simulated"),
        style="green",
        soft_wrap=True,
    )


@cli.group()
def golden() -> None:
    """Write golden files from a float64 reference (no GPU needed)."""


@golden.command("make")
@click.argument("plan_path", metavar="PLAN", type=click.Path(path_type=Path))
@click.option(
    "--reference",
    "reference_spec",
    required=True,
    metavar="FILE.py:FUNCTION",
    help="float64 reference function(params, inputs) -> {output: values} (or module:function).",
)
@click.option(
    "--out",
    "out_path",
    type=click.Path(path_type=Path),
    help="Write here (default: the plan's acceptance.fidelity.golden).",
)
def golden_make(plan_path: Path, reference_spec: str, out_path: Path | None) -> None:
    """Write PLAN's golden: every case's seeded inputs through the reference, each output rounded to
    its dtype, the reference's file recorded as the golden's producer (the plan's golden_script)."""
    from qualify.commands.golden import make_golden, resolve_reference, view_plan

    loaded = view_plan(plan_path)
    made = make_golden(loaded, resolve_reference(reference_spec, loaded.path), out_path)
    out.print(f"wrote {_shown(made.path)}: {made.tensors} tensors, {made.cases} cases", soft_wrap=True)
    out.print(f"producer {_shown(made.producer)}", soft_wrap=True)
    from qualify.commands.golden import GOLDEN_BUDGET_BYTES

    size = made.path.stat().st_size
    if size > GOLDEN_BUDGET_BYTES:
        out.print(
            f"note: {size / 2**20:,.0f} MiB is over the {GOLDEN_BUDGET_BYTES // 2**20} MiB a golden should "
            "take in git; docs/golden.md says how to keep it small (fewer or smaller cases, a golden for "
            "the cases that need one)",
            soft_wrap=True,
        )
    if made.hint:
        out.print(f"next: {_shown(made.hint)}", soft_wrap=True)


_RUN_OPTIONS = [
    click.option(
        "--record",
        "record_dir",
        type=click.Path(path_type=Path),
        help="Record folder (default: records/<plan name> in the plan's repository).",
    ),
    click.option("--device", "ordinal", type=int, default=0, show_default=True, help="CUDA device ordinal."),
    click.option(
        "--devices",
        metavar="all|N,M,...",
        help="Run on several GPUs of this host at once, one worker process each, into one record.",
    ),
    click.option("--trials", type=click.IntRange(min=1), help="Run at most this many of the planned trials now."),
    click.option(
        "--exploratory", is_flag=True, help="Allow a device the plan does not list; the record is marked unplanned."
    ),
    # how `run` starts each trial in a process of its own (qualify.procs.trials)
    click.option("--trial-process", "trial_process", type=click.Path(path_type=Path), hidden=True),
]


def _run_options(fn):
    for option in reversed(_RUN_OPTIONS):
        fn = option(fn)
    return fn


@cli.command("run")
@click.argument("plan_path", metavar="PLAN", type=click.Path(path_type=Path))
@_run_options
def run_cmd(
    plan_path: Path,
    record_dir: Path | None,
    ordinal: int,
    devices: str | None,
    trials: int | None,
    exploratory: bool,
    trial_process: Path | None,
) -> None:
    """Run PLAN's remaining trials on this GPU (or on --devices), each in a fresh process, and
    update its record."""
    command = ["run", str(plan_path)]
    if devices is not None:
        _execute_on_devices(command, plan_path, record_dir, devices, trials, exploratory, None)
    _execute(command, plan_path, record_dir, ordinal, trials, exploratory, None, trial_process)


@cli.command("compare")
@click.argument("base_lib", metavar="BASE.so", type=click.Path(path_type=Path))
@click.argument("cand_lib", metavar="CAND.so", type=click.Path(path_type=Path))
@click.option(
    "--plan",
    "plan_path",
    type=click.Path(path_type=Path),
    help="Frozen plan with shared-library arms: symbol, C signature, workload.call.",
)
@_run_options
def compare_cmd(
    base_lib: Path,
    cand_lib: Path,
    plan_path: Path | None,
    record_dir: Path | None,
    ordinal: int,
    devices: str | None,
    trials: int | None,
    exploratory: bool,
    trial_process: Path | None,
) -> None:
    """Qualify two builds of a shared library's public C entry point under PLAN."""
    if plan_path is None:
        raise UsageError(
            "qualify compare needs --plan PLAN: a frozen plan whose arms are shared-library "
            "arms (symbol, signature) and whose workload.call lists the arguments"
        )
    command = ["compare", str(base_lib), str(cand_lib), "--plan", str(plan_path)]
    libraries = {"base": base_lib, "candidate": cand_lib}
    if devices is not None:
        _execute_on_devices(command, plan_path, record_dir, devices, trials, exploratory, libraries)
    _execute(command, plan_path, record_dir, ordinal, trials, exploratory, libraries, trial_process)


def _execute_on_devices(command, plan_path, record_dir, devices, trials, exploratory, libraries) -> None:
    """`--devices`: one `qualify run/compare --device N` worker per GPU, in parallel, into one record."""
    from rich.text import Text

    from qualify.procs.fleet import run_on_devices

    terminate_as_interrupt()
    code = run_on_devices(
        command, plan_path, record_dir, devices, trials, exploratory, libraries, say=lambda line: out.print(Text(line))
    )
    raise SystemExit(code)


def _execute(command, plan_path, record_dir, ordinal, trials, exploratory, libraries, trial_process) -> None:
    """`run` and `compare`: one code path from the frozen plan to the record and the exit code.

    A trial process exits 0 once its trial is kept (the parent judges the record), 130 if it was
    interrupted; the parent exits with the most severe trial process's code that is no verdict,
    else the record's verdict."""
    from qualify.commands.pipeline import exit_code
    from qualify.errors import most_severe
    from qualify.procs.trials import execute

    terminate_as_interrupt()
    run = execute(
        plan_path, record_dir, ordinal, trials, exploratory, libraries, _progress, sys.argv[1:], command, trial_process
    )
    interrupted = any(t.status == "interrupted" for t in run.outcome.trials)
    if trial_process is not None:
        raise SystemExit(int(ExitCode.INTERRUPTED) if interrupted else 0)
    # the summary's renderer (rich, the headline's judgement) is the parent's alone: a trial
    # process renders nothing, and each one's start-up counts against a short kernel's verdict
    from qualify.render.terminal import run_summary

    if run.outcome.results is not None:
        out.print(run_summary(run.outcome, run.folder, run.loaded.plan))
    severe = most_severe(list(run.codes))
    if severe is not None:
        raise SystemExit(int(severe))
    if run.outcome.results is None:
        raise SystemExit(int(ExitCode.INCOMPLETE))
    raise SystemExit(exit_code(run.outcome.results, interrupted))


@cli.command("probe")
@click.argument("plan_path", metavar="PLAN", type=click.Path(path_type=Path))
@click.option("--device", "ordinal", type=int, default=0, show_default=True, help="CUDA device ordinal.")
@click.option("--base-so", type=click.Path(path_type=Path), help="Library arms: the base build.")
@click.option("--candidate-so", type=click.Path(path_type=Path), help="Library arms: the candidate build.")
def probe_cmd(plan_path: Path, ordinal: int, base_so: Path | None, candidate_so: Path | None) -> None:
    """On a GPU: run each case of PLAN once per arm and print the parity a fidelity gate would see,
    to choose a bound before freezing. Unfrozen plans are allowed; nothing is recorded."""
    from qualify.commands.pipeline import check_libraries
    from qualify.commands.probe import format_probe, run_probe
    from qualify.plan.load import load_plan
    from qualify.run.device import CudaDevice

    loaded = load_plan(plan_path)
    libraries = {side: p for side, p in (("base", base_so), ("candidate", candidate_so)) if p is not None}
    check_libraries(loaded, libraries)
    device = CudaDevice(ordinal)
    try:
        result = run_probe(loaded, device, libraries)
    finally:
        device.close()
    for line in format_probe(result):
        out.print(line, soft_wrap=True)


@cli.command("report")
@click.argument("folders", metavar="RECORD...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--check",
    "check_only",
    is_flag=True,
    help="Recompute everything from the raw samples; fail if results.json or README.md differ.",
)
@click.option(
    "--merge",
    "merge_into",
    type=click.Path(path_type=Path),
    help="Merge the RECORDs (same plan, other devices or hosts) into this new record.",
)
def report_cmd(folders: tuple[Path, ...], check_only: bool, merge_into: Path | None) -> None:
    """Re-render a record's results.json and README.md from its trials, check it, or merge records."""
    from qualify.commands.pipeline import exit_code
    from qualify.record.check import check_exit_code, inspect_record, rebuild_record
    from qualify.record.merge import merge_records

    if merge_into is not None:
        if check_only:
            # --check never writes; a merge always does. Refused rather than guessed at: check
            # each record, then merge (the merge checks the evidence of what it merges).
            raise UsageError(
                "--check and --merge do not combine: --check never writes and --merge "
                "writes a record; check each RECORD, then merge them"
            )
        results = merge_records(list(folders), merge_into)
        out.print(
            f"merged {len(folders)} records into {merge_into}: {len(results.trials)} trials, "
            f"verdict {results.verdict.status}"
        )
        return
    if len(folders) != 1:
        raise click.UsageError("give one RECORD, or several with --merge")
    folder = folders[0]
    if check_only:
        problems = inspect_record(folder)
        shown = _printable(str(folder))
        for problem in problems:
            _fail_line(f"qualify: check: {shown}: {_printable(problem.text)}")
        if problems:
            raise SystemExit(check_exit_code(problems))
        out.print(
            f"{folder}: every number in results.json and README.md reproduces from the raw samples, "
            "and the ledger, trial files and plan agree"
        )
        return
    results = rebuild_record(folder)
    out.print(f"re-rendered {folder}: verdict {results.verdict.status}")
    raise SystemExit(exit_code(results))


@cli.command("summary")
@click.argument("folder", metavar="RECORD", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--append-to",
    "target",
    type=click.Path(path_type=Path),
    help="Append to this file (e.g. $GITHUB_STEP_SUMMARY) instead of printing.",
)
def summary_cmd(folder: Path, target: Path | None) -> None:
    """Markdown summary of RECORD for a CI run's page; exits with the verdict's code, as report does."""
    from qualify.commands.pipeline import exit_code
    from qualify.commands.summary import checked_summary
    from qualify.io import append_text
    from qualify.results.store import Record

    if target is not None and target.exists() and not target.is_file():
        # a FIFO would block the job until something reads it; a device or folder is no summary
        raise UsageError("not a regular file; the summary is appended to files only", file=target, field="--append-to")
    markdown, failed_check = checked_summary(folder)
    if target is None:
        click.echo(markdown, nl=False)
    else:
        append_text(target, markdown)  # a link in the summary's place is refused, never appended through
    raise SystemExit(failed_check if failed_check is not None else exit_code(Record(folder).results()))


@cli.command("history")
@click.option("--artifacts", type=click.Path(path_type=Path), help="A folder of records (CI artifacts).")
@click.option("--git", "git_record", type=click.Path(path_type=Path), help="A record folder, read from git history.")
@click.option("--protocol", help="The protocol (plan name) to show, where the folder holds several.")
@click.option("--manifest", type=click.Path(path_type=Path), help="Commits of --artifacts records that state none.")
@click.option(
    "--alpha",
    type=click.FloatRange(min=0, max=1, min_open=True, max_open=True),
    default=0.01,
    show_default=True,
    help="Level of each change-point test (the chance a flat history is flagged).",
)
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="The HTML page to write.")
def history_cmd(artifacts, git_record, protocol, manifest, alpha, output) -> None:
    """A protocol's records across commits as one static HTML page: per case the change over time
    with its interval, the verdicts, and change points (docs/history.md). Exit 0 when written, 2 on
    bad input, 5 when the host refuses the write, 6 when git is missing."""
    from qualify.commands.history import history_page, write_page

    history, page = history_page(
        artifacts=artifacts, git_record=git_record, protocol=protocol, manifest=manifest, alpha=alpha
    )
    write_page(page, output)
    flagged = sum(1 for c in history.cases if c.changes.points)
    click.echo(
        f"history of {_printable(history.protocol)}: {len(history.records)} records, {len(history.cases)} series, "
        f"{flagged} with change points -> {_printable(str(output))}"
    )


@cli.command("changed")
@click.option("--base", help="Git revision the change is measured from (a pull request's base branch).")
@click.option("--head", default="HEAD", show_default=True, help="Git revision of the change.")
@click.option("--path", "paths", multiple=True, help="A changed path, relative to the repository (instead of --base).")
@click.option(
    "--sources",
    "sources",
    multiple=True,
    metavar="NAME=PATH",
    help="Another path protocol NAME depends on (a library's sources); a folder covers its files.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a versioned JSON document instead of plan paths.")
def changed_cmd(base: str | None, head: str, paths: tuple[str, ...], sources: tuple[str, ...], as_json: bool) -> None:
    """List the protocols a change touches: their plans, frozen files, the files they use now."""
    from qualify.commands.changed import ChangedReport, changed_paths, git_root, parse_sources, touched_protocols

    if base is None and not paths:
        raise UsageError(
            "say what changed: --base REV (the revision a pull request starts from, e.g. origin/main) "
            "or --path PATH for each changed file",
            field="--base",
        )
    if base is not None and paths:
        raise UsageError("--base and --path do not combine: give the revision to diff from, or the changed paths")
    if base is not None:
        root = git_root(Path.cwd())
        changed = changed_paths(root, base, head)
    else:  # paths given: no git needed, the repository is found as plans find it
        from qualify.plan.files import repository_root

        root, changed = repository_root(Path.cwd() / "-"), list(paths)
    touched = touched_protocols(root, changed, parse_sources(list(sources)))
    if as_json:
        report = ChangedReport(base=base, head=head if base else None, protocols=touched)
        click.echo(report.model_dump_json(indent=1))
    else:
        for t in touched:
            click.echo(t.plan)
        if not touched:  # on stderr: stdout stays the (empty) list of plans a script reads
            click.echo(f"qualify: no protocol is touched by the {len(changed)} changed path(s)", err=True)


@cli.command("gate")
@click.option("--base", help="Git revision to gate against (default: the merge base of HEAD with the default branch).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=Path("qualify-gate"),
    show_default=True,
    help="A fresh folder for gate.json, GATE.md and one record per protocol and arm.",
)
@click.option(
    "--protocol", "protocols", multiple=True, help="Gate this protocol too, whether or not the change touches it."
)
@click.option("--device", "ordinal", type=int, default=0, show_default=True, help="CUDA device ordinal.")
@click.option(
    "--time-identical",
    is_flag=True,
    help="Time arms even when both sides compile to identical machine code (the gate's noop qualification).",
)
@click.option("--link-base", default="", help="Prefix of the record links in GATE.md (an artifact's URL).")
@click.option("--schema", "schema", is_flag=True, help="Print gate.json's JSON Schema and exit.")
def gate_cmd(
    base: str | None,
    out_dir: Path,
    protocols: tuple[str, ...],
    ordinal: int,
    time_identical: bool,
    link_base: str,
    schema: bool,
) -> None:
    """Measure every protocol a change touches, each arm at --base against the same arm in the
    working tree, on this GPU; write gate.json and a Markdown table (also to $GITHUB_STEP_SUMMARY).
    Exit 0 passed, 1 a case slower or its outputs beyond the bound, 7 can't tell, 2-6 as elsewhere."""
    import json as _json
    import os

    from qualify.commands.gate import gate_schema, run_gate
    from qualify.procs.trials import execute

    if schema:
        click.echo(_json.dumps(gate_schema(), indent=2))
        return
    terminate_as_interrupt()

    def runner(plan_path: Path, record_dir: Path, libraries):
        if libraries:
            command = ["compare", str(libraries["base"]), str(libraries["candidate"]), "--plan", str(plan_path)]
        else:
            command = ["run", str(plan_path)]
        run = execute(plan_path, record_dir, ordinal, None, False, libraries, _progress, sys.argv[1:], command)
        return run.outcome.results

    from qualify.commands.gate import GATE_MD

    document = run_gate(
        Path.cwd(),
        base,
        out_dir,
        runner,
        protocols=protocols,
        time_identical=time_identical,
        link_base=link_base,
        say=lambda line: click.echo(f"qualify gate: {line}", err=True),
    )
    markdown = (out_dir / GATE_MD).read_text(encoding="utf-8")
    click.echo(markdown, nl=False)
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        if Path(target).exists() and not Path(target).is_file():
            raise UsageError("not a regular file; the summary is appended to files only", file=target)
        try:
            with open(target, "a", encoding="utf-8") as f:
                f.write(markdown)
        except OSError as exc:
            raise UsageError(f"cannot append: {exc.strerror}", file=target) from None
    raise SystemExit(document.exit_code)


@cli.command("doctor")
@click.option("--device", "ordinal", type=int, default=0, show_default=True, help="CUDA device ordinal.")
@click.option(
    "--plan",
    "plan_path",
    type=click.Path(path_type=Path),
    help="Check the GPU against this plan's devices, and only the tools it needs.",
)
@click.option(
    "--role",
    type=click.Choice(["authoring", "running", "ci"]),
    help="Exit non-zero unless the host serves this role (default: unless it serves none). authoring: "
    "write and check plans (NVRTC, no GPU); running: run trials (GPU, driver, the plan's tools); "
    "ci: a GPU CI runner (every tool).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a versioned JSON document instead of lines.")
def doctor_cmd(ordinal: int, plan_path: Path | None, role: str | None, as_json: bool) -> None:
    """Say which roles this host serves (authoring plans, running trials, a GPU CI runner) from its
    packages, NVRTC, driver and GPU, NVML and toolkit tools."""
    from qualify.commands.doctor import diagnose, format_report, plan_needs, real_host

    plan = None
    needs = (True, True)
    if plan_path is not None:
        from qualify.plan.load import load_plan

        plan = load_plan(plan_path).plan
        needs = plan_needs(plan)
    report = diagnose(real_host(), ordinal, plan, needs_nvcc=needs[0], needs_sanitizer=needs[1], role=role)
    if as_json:
        click.echo(report.model_dump_json(indent=1))
    else:
        for line in format_report(report):
            click.echo(line)
    if not report.ok:
        wanted = next(r for r in report.roles if r.name == (role or "authoring"))
        what = f"role {role}" if role else "any role"
        _fail_line(
            f"qualify: error: doctor: this host cannot serve {what}: blocked by {', '.join(wanted.blocked_by)} (FAIL above)"
        )
    raise SystemExit(report.exit_code)


def _printable(text: str) -> str:
    """One line whatever a path or a quoted value holds: control characters are escaped."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def terminate_as_interrupt() -> None:
    """SIGTERM (a CI runner cancelling the job) ends a run as Ctrl-C does: the trial is kept,
    labelled interrupted with every sample taken, the ledger closed, and the exit code is 130."""
    import signal

    def handler(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _progress(total: int):
    """A rich progress bar over the schedule's samples (on stderr, so stdout stays parseable)."""
    from contextlib import contextmanager

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from qualify.render.terminal import console

    @contextmanager
    def bar():
        columns = (TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console(stderr=True), transient=True) as progress:
            task = progress.add_task("samples", total=total)
            yield lambda n, what: progress.update(task, advance=n, description=what)

    return bar()


def _os_problem(exc: OSError) -> QualifyError:
    import errno

    from qualify.errors import EnvironmentProblem
    from qualify.io import UnreadableFile, write_problem

    where = exc.filename if exc.filename is not None else "(unnamed file)"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM):
        return (
            write_problem(Path(where), exc)
            if exc.errno != errno.EACCES
            else EnvironmentProblem(f"permission denied: {exc.strerror}", file=where)
        )
    if exc.errno in (errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG):
        return UnreadableFile(exc.strerror or str(exc), file=where)
    return EnvironmentProblem(exc.strerror or str(exc), file=where)


def _shown_path(file: str | None) -> str | None:
    """A path in an error as the user would type it: relative to the working folder when inside
    it (library code resolves plan paths; messages should not depend on that)."""
    if file is None or not Path(file).is_absolute():
        return file
    try:
        return str(Path(file).relative_to(Path.cwd()))
    except ValueError:
        return file


def _report(exc: QualifyError, limit: int | None = None) -> None:
    """Every error found, one `qualify: error:` line each, in the order to fix them; with `limit`
    (`plan check`, whose errors list cases and fields), each message cut to about that length."""
    for each in exc.each():
        each.file = _shown_path(each.file)
        _fail_line(f"qualify: error: {each.one_line(limit=limit)}")
        if isinstance(each, BuildError) and each.log:
            _fail_line(each.log)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI and turn every outcome into a documented exit code."""
    verbose = "-v" in (argv or sys.argv[1:]) or "--verbose" in (argv or sys.argv[1:])
    try:
        code = cli.main(args=argv, prog_name="qualify", standalone_mode=False)
        if isinstance(code, int):  # click's --help and --version return 0 here
            sys.exit(code)
    except click.exceptions.Abort:
        _fail_line("qualify: interrupted")
        sys.exit(ExitCode.INTERRUPTED)
    except click.ClickException as exc:  # usage errors: click's own one-liners
        _fail_line(f"qualify: error: {exc.format_message()}")
        sys.exit(ExitCode.BAD_INPUT)
    except QualifyError as exc:
        _report(exc)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        _fail_line("qualify: interrupted")
        sys.exit(ExitCode.INTERRUPTED)
    except SystemExit:
        raise
    except OSError as exc:
        # The host, not qualify: a read-only folder, a full disk, a missing permission met where no
        # module turned it into its own error. Named by file, with the documented exit code.
        problem = _os_problem(exc)
        if verbose:
            raise
        _fail_line(f"qualify: error: {problem.one_line()}")
        sys.exit(problem.exit_code)
    except UnicodeDecodeError as exc:
        if verbose:
            raise
        _fail_line(f"qualify: error: a file is not UTF-8 text (byte {exc.start}: {exc.reason})")
        sys.exit(ExitCode.BAD_INPUT)
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, not a traceback
        if verbose:
            raise
        _fail_line(f"qualify: internal error: {type(exc).__name__}: {exc} (rerun with -v)")
        sys.exit(ExitCode.INTERNAL)
    sys.exit(ExitCode.QUALIFIED)
