"""`qualify report`, `summary`, `changed` and `doctor`: records re-rendered, checked and
summarised, the protocols a change touches, and what this host can serve."""

from __future__ import annotations

from pathlib import Path

import click

from qualify.cli.common import fail_line, out, printable
from qualify.errors import UsageError


@click.command("report")
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
        shown = printable(str(folder))
        for problem in problems:
            fail_line(f"qualify: check: {shown}: {printable(problem.text)}")
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


@click.command("summary")
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


@click.command("history")
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
        f"history of {printable(history.protocol)}: {len(history.records)} records, {len(history.cases)} series, "
        f"{flagged} with change points -> {printable(str(output))}"
    )


@click.command("changed")
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


@click.command("doctor")
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
        fail_line(
            f"qualify: error: doctor: this host cannot serve {what}: blocked by {', '.join(wanted.blocked_by)} (FAIL above)"
        )
    raise SystemExit(report.exit_code)
