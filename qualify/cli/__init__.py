"""The command line: a thin click layer over the library, one module per group of commands
(`plan`: plans and goldens; `run`: the GPU commands; `record`: records, changes and the host).

This is the only module that maps errors to exit codes (see `qualify.errors.ExitCode`) and the only
one that prints. Every expected failure is one line on stderr; a traceback appears only with -v.
"""

import sys
from pathlib import Path

import click

from qualify import __version__
from qualify.cli import plan, record, run
from qualify.cli.common import fail_line, report
from qualify.cli.run import terminate_as_interrupt as terminate_as_interrupt
from qualify.errors import ExitCode, QualifyError

SCHEMA_PATH = Path(__file__).parent.parent / "schemas" / "plan.schema.json"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="qualify")
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks of internal errors.")
@click.pass_context
def cli(ctx: click.Context, verbose: bool) -> None:
    """Qualify CUDA kernel changes under frozen, pre-registered plans."""
    ctx.obj = {"verbose": verbose}


for command in (
    plan.plan,
    plan.golden,
    run.run_cmd,
    run.compare_cmd,
    run.probe_cmd,
    run.gate_cmd,
    run.device_process_cmd,
    run.trial_process_cmd,
    record.report_cmd,
    record.summary_cmd,
    record.history_cmd,
    record.changed_cmd,
    record.doctor_cmd,
):
    cli.add_command(command)


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


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI and turn every outcome into a documented exit code."""
    verbose = "-v" in (argv or sys.argv[1:]) or "--verbose" in (argv or sys.argv[1:])
    try:
        code = cli.main(args=argv, prog_name="qualify", standalone_mode=False)
        if isinstance(code, int):  # click's --help and --version return 0 here
            sys.exit(code)
    except click.exceptions.Abort:
        fail_line("qualify: interrupted")
        sys.exit(ExitCode.INTERRUPTED)
    except click.ClickException as exc:  # usage errors: click's own one-liners
        fail_line(f"qualify: error: {exc.format_message()}")
        sys.exit(ExitCode.BAD_INPUT)
    except QualifyError as exc:
        report(exc)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        fail_line("qualify: interrupted")
        sys.exit(ExitCode.INTERRUPTED)
    except SystemExit:
        raise
    except OSError as exc:
        # The host, not qualify: a read-only folder, a full disk, a missing permission met where no
        # module turned it into its own error. Named by file, with the documented exit code.
        problem = _os_problem(exc)
        if verbose:
            raise
        fail_line(f"qualify: error: {problem.one_line()}")
        sys.exit(problem.exit_code)
    except UnicodeDecodeError as exc:
        if verbose:
            raise
        fail_line(f"qualify: error: a file is not UTF-8 text (byte {exc.start}: {exc.reason})")
        sys.exit(ExitCode.BAD_INPUT)
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, not a traceback
        if verbose:
            raise
        fail_line(f"qualify: internal error: {type(exc).__name__}: {exc} (rerun with -v)")
        sys.exit(ExitCode.INTERNAL)
    sys.exit(ExitCode.QUALIFIED)
