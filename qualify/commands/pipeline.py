"""`qualify run` and `compare` from a frozen plan to a record: the trials still planned for the
device (each one sequenced by `qualify/run/engine.py`), then the record re-derived from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from qualify.errors import ExitCode, FrozenInputChanged, QualifyError, UsageError
from qualify.plan.digest import sha256_file, verify_frozen
from qualify.plan.load import LoadedPlan, load_plan
from qualify.plan.model import ARM_SIDES, LibraryArm
from qualify.results.model import Results, Trial
from qualify.results.store import Record

if TYPE_CHECKING:  # the device floor loads lazily: `qualify --help` never imports it
    from qualify.run.device_protocol import Device


def load_frozen(plan_path: Path, checked: bool = True) -> LoadedPlan:
    """The plan, refused unless frozen, unchanged since and still passing every check of `plan
    check`: results bind to a pre-registered plan that can run."""
    loaded = load_plan(plan_path)
    if loaded.lock is None:
        raise FrozenInputChanged("the plan is not frozen; run `qualify plan freeze` before measuring", file=loaded.path)
    try:
        verify_frozen(loaded.path, loaded.freeze, loaded.lock)
    except FrozenInputChanged as exc:
        from qualify.plan.digest import with_remedy

        raise with_remedy(exc) from None
    # a plan `plan check` now refuses (a stricter qualify, another NVRTC) is refused before any
    # trial counts against budget.max_trials
    # (checked=False: a trial process, whose parent invocation has checked the same frozen plan,
    # and which then never imports the checks: a trial process's start-up is paid once per trial)
    if checked:
        from qualify.commands.check import refuse_unchecked

        refuse_unchecked(loaded)
    return loaded


def bind_libraries(loaded: LoadedPlan, libraries: dict[str, Path] | None) -> dict[str, Path]:
    """The libraries `qualify compare` names, refused unless the plan allows them.

    Every side must be a shared-library arm and every file a regular file. Where the plan froze a
    `library`, the one on the command line must be that build, byte for byte (its sha256 in the
    lock): otherwise a frozen build would be silently replaced by whatever the command names.
    """
    if not libraries:
        return {}
    lock_files = (loaded.lock or {}).get("files", {})
    for side in ARM_SIDES:
        arm = loaded.plan.arm(side)
        field = f"arms.{side}.library"
        if side not in libraries:
            continue
        if not isinstance(arm, LibraryArm):
            raise UsageError("compare needs shared-library arms", file=loaded.path, field=f"arms.{side}.kind")
        given = Path(libraries[side])
        if not given.is_file():
            raise UsageError("no such library (or not a regular file)", file=given)
        named = loaded.library(side)  # the build the plan names, beside it
        if named is None:
            continue  # the plan leaves this build to the command line; the record keeps its sha256
        frozen_path = named.resolve()
        rel = frozen_path.relative_to(loaded.files.root).as_posix()
        frozen = lock_files.get(rel)
        if frozen is None or sha256_file(given) != frozen:
            raise FrozenInputChanged(
                f"the plan froze {arm.library!r} for the {side} arm; this library is another build "
                "(sha256 differs). Compare the frozen build, or freeze a plan that names this one",
                file=given,
                field=field,
            )
    return {side: Path(path) for side, path in libraries.items()}


def check_libraries(loaded: LoadedPlan, libraries: dict[str, Path] | None) -> None:
    """Before the driver opens: the .so files given to `compare` (or named by the plan, for `run`)
    read as ELF and their ABI called, so a wrong file is named as such rather than reported as a
    device problem."""
    from qualify.build.libcheck import check_compare_libraries, check_plan_libraries

    if libraries:
        check_compare_libraries(loaded, libraries)
    else:
        check_plan_libraries(loaded)


def record_folder(loaded: LoadedPlan, record_dir: Path | None) -> Path:
    """The record folder a run writes: --record, or the default; an existing path that is not a
    folder is refused before any device or worker starts."""
    folder = Path(record_dir or default_record_dir(loaded))
    if folder.exists() and not folder.is_dir():
        raise UsageError("not a folder: a record is a folder of trials", file=folder, field="--record")
    return folder


def default_record_dir(loaded: LoadedPlan) -> Path:
    return loaded.files.root / "records" / loaded.plan.name


@dataclass
class RunOutcome:
    trials: list[Trial]
    results: Results
    skipped: str | None = None  # why no trial ran (the planned trials were already complete)


def run_plan(
    loaded: LoadedPlan,
    record_dir: Path,
    open_device: Callable[[], Device],
    open_telemetry: Callable[[str], object],
    *,
    exploratory: bool = False,
    trials: int | None = None,
    argv: list[str] | None = None,
    progress: Callable[[int, str], None] | None = None,
    sanitize: Callable | None = None,
    preflight: Callable | None = None,
    libraries: dict[str, Path] | None = None,
    workdir: Path | None = None,
    render: bool = True,
    bound: bool = False,
    added: str | None = None,
) -> RunOutcome:
    """Run the trials still planned for this device in this process, then re-derive the record.

    workdir: where the isolated preflight's outcomes are shared with the invocation's other trial
    processes (qualify.procs.trials); render=False leaves the record's re-derivation
    to the parent that runs them; bound: `libraries` are bound to the plan already; added: one trial
    beyond the plan's schedule.trials, and why (`qualify gate`), recorded in the trial."""
    from qualify.run.engine import RunOptions, TrialRunner
    from qualify.run.isolation import PreflightShared

    if not bound:  # a trial process's libraries were bound by the invocation it was started from
        libraries = bind_libraries(loaded, libraries)  # before the device opens or the record moves
    record = Record(record_dir)
    done: list[Trial] = []
    skipped = None
    failure: QualifyError | None = None
    device = open_device()
    try:
        telemetry = open_telemetry(device.info.uuid)
        wanted, skipped = remaining_trials(loaded, record, device.info.uuid, trials, added is not None)
        options = RunOptions(
            record_dir=record_dir,
            exploratory=exploratory,
            argv=argv or [],
            progress=progress or (lambda n, what: None),
            sanitize=sanitize,
            preflight=PreflightShared(preflight, workdir) if preflight else None,
            libraries=libraries or {},
            workdir=workdir,
            added=added,
        )
        with record.owned(device.info.uuid):  # one run per device per record
            for _ in range(max(wanted, 0)):
                trial = TrialRunner(loaded, device, telemetry, options).run()
                done.append(trial)
                if trial.status == "interrupted":
                    break
                if trial.status == "failed" and any(f.kind in ("fault", "timeout") for f in trial.failures):
                    break  # the CUDA context is lost (or a kernel still runs): a fresh process must continue
    except QualifyError as exc:
        failure = exc  # a trial already kept itself; the record is brought up to date first
    finally:
        device.close()
    results = rederive(record, loaded) if render else None
    if failure is not None:
        raise failure
    return RunOutcome(done, results, skipped)


def rederive(record: Record, loaded: LoadedPlan) -> Results | None:
    """The record's results.json and README from all its trials; None while it has none."""
    from qualify.record.assemble import write_record

    if not record.trials():
        return None
    with record.locked():  # other devices' workers may be re-rendering the same record
        return write_record(record, loaded.plan, loaded.lock)


def exit_code(results: Results, interrupted: bool = False) -> ExitCode:
    """The last step: a verdict (data) becomes the process's exit code."""
    if interrupted:
        return ExitCode.INTERRUPTED
    return {
        "qualified": ExitCode.QUALIFIED,
        "not_qualified": ExitCode.NOT_QUALIFIED,
        "incomplete": ExitCode.INCOMPLETE,
    }[results.verdict.status]


def remaining_trials(
    loaded: LoadedPlan, record: Record, uuid: str, trials: int | None, added: bool = False
) -> tuple[int, str | None]:
    """How many planned trials this device still owes (at most `trials`), and why none if none.

    added: one trial beyond the planned ones, and only once they are complete (the gate adds a
    trial to a case its planned trials left underpowered; admission still holds budget.max_trials)."""
    complete = [t for t in record.trials() if t.status == "complete" and t.provenance.device.uuid == uuid]
    if added:
        if len(complete) < loaded.plan.schedule.trials:
            return 0, f"a trial is added only after the {loaded.plan.schedule.trials} planned ones are complete"
        return 1, None
    wanted = loaded.plan.schedule.trials - len(complete)
    if trials is not None:
        wanted = min(wanted, trials)
    if wanted <= 0:
        return 0, f"the {loaded.plan.schedule.trials} planned trials on this device are complete"
    return wanted, None
