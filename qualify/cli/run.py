"""`qualify run`, `compare` and `probe`: the commands that use a GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from qualify.cli.common import out
from qualify.errors import ExitCode, UsageError

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
]


def _run_options(fn):
    for option in reversed(_RUN_OPTIONS):
        fn = option(fn)
    return fn


@click.command("run")
@click.argument("plan_path", metavar="PLAN", type=click.Path(path_type=Path))
@_run_options
def run_cmd(
    plan_path: Path,
    record_dir: Path | None,
    ordinal: int,
    devices: str | None,
    trials: int | None,
    exploratory: bool,
) -> None:
    """Run PLAN's remaining trials on this GPU (or on --devices), each in a fresh process, and
    update its record."""
    _start(plan_path, record_dir, ordinal, devices, trials, exploratory, None)


@click.command("compare")
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
) -> None:
    """Qualify two builds of a shared library's public C entry point under PLAN."""
    if plan_path is None:
        raise UsageError(
            "qualify compare needs --plan PLAN: a frozen plan whose arms are shared-library "
            "arms (symbol, signature) and whose workload.call lists the arguments"
        )
    libraries = {"base": base_lib, "candidate": cand_lib}
    _start(plan_path, record_dir, ordinal, devices, trials, exploratory, libraries)


def _start(plan_path, record_dir, ordinal, devices, trials, exploratory, libraries) -> None:
    """`run` and `compare`: the invocation resolved once (qualify.procs.invocation), then run on
    one device or, with --devices, on several at once."""
    from qualify.procs.invocation import resolve

    terminate_as_interrupt()
    resolved = resolve(plan_path, record_dir, exploratory, libraries, trials, sys.argv[1:])
    if devices is not None:
        from rich.text import Text

        from qualify.procs.fleet import run_on_devices

        raise SystemExit(run_on_devices(resolved, devices, say=lambda line: out.print(Text(line))))
    _execute(resolved.on_device(ordinal))  # before any output: no GPU is a one-line error, exit 5


@click.command("gate")
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
    from dataclasses import replace

    from qualify.commands.gate import gate_schema, run_gate
    from qualify.procs.invocation import resolve
    from qualify.procs.trials import run_on_device

    if schema:
        click.echo(_json.dumps(gate_schema(), indent=2))
        return
    terminate_as_interrupt()

    def runner(plan_path: Path, record_dir: Path, libraries, added: str | None):
        resolved = resolve(plan_path, record_dir, False, libraries, None, sys.argv[1:])
        return run_on_device(replace(resolved, added=added).on_device(ordinal)).outcome.results

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
        from qualify.io import append_text

        append_text(Path(target), markdown)  # a link in the summary's place is refused, never appended through
    raise SystemExit(document.exit_code)


# How `run` and `compare` start their processes (qualify.procs): each reads the invocation its
# parent resolved, never the user's command line again. Hidden: not for people to type.
@click.command("device-process", hidden=True)
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--device", "ordinal", type=int, required=True)
def device_process_cmd(path: Path, ordinal: int) -> None:
    """One device of `--devices`: its trials, each in a process of its own, and the record."""
    from qualify.procs.invocation import read

    terminate_as_interrupt()
    _execute(read(path).on_device(ordinal))


@click.command("trial-process", hidden=True)
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--primed", is_flag=True, help="import first, then wait for 'go' on stdin (EOF: exit 0, no trial)")
def trial_process_cmd(path: Path, primed: bool) -> None:
    """One trial: exits 0 once it is kept (the parent judges the record), 130 if interrupted."""
    from qualify.procs.invocation import read
    from qualify.procs.trials import one_trial, prime

    terminate_as_interrupt()
    resolved = read(path)
    if primed:
        try:
            prime()
            turn = sys.stdin.buffer.readline()
        except KeyboardInterrupt:
            raise SystemExit(int(ExitCode.INTERRUPTED)) from None
        if not turn.startswith(b"go"):
            raise SystemExit(0)  # cancelled before its turn: no trial, nothing to keep
    outcome = one_trial(resolved, _progress)
    interrupted = any(t.status == "interrupted" for t in outcome.trials)
    raise SystemExit(int(ExitCode.INTERRUPTED) if interrupted else 0)


def _execute(resolved) -> None:
    """`run` and `compare` on one device: the exit code is the most severe trial process's that
    is no verdict (`errors.most_severe`), else the record's verdict."""
    from qualify.commands.pipeline import exit_code
    from qualify.errors import most_severe
    from qualify.procs.trials import run_on_device
    from qualify.render.terminal import run_summary

    run = run_on_device(resolved)
    interrupted = any(t.status == "interrupted" for t in run.outcome.trials)
    if run.outcome.results is not None:
        out.print(run_summary(run.outcome, run.folder, run.loaded.plan))
    severe = most_severe(list(run.codes))
    if severe is not None:
        raise SystemExit(int(severe))
    if run.outcome.results is None:
        raise SystemExit(int(ExitCode.INCOMPLETE))
    raise SystemExit(exit_code(run.outcome.results, interrupted))


@click.command("probe")
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
