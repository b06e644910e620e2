"""`qualify plan …` and `qualify golden make`: plans written, checked, frozen and rehearsed, and
goldens made; none needs a GPU."""

from __future__ import annotations

import json
from pathlib import Path

import click

from qualify.cli.common import fail_line, out, report, shown
from qualify.errors import MAX_LINE, QualifyError


@click.group()
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
            report(exc, limit=MAX_LINE)
            for note in exc.stage_notes or ():  # stages not checked, then the summary
                fail_line(f"qualify: {note}")
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
    from qualify.commands.refreeze import replace_lock
    from qualify.errors import FrozenInputChanged
    from qualify.io import MAX_LOCK_BYTES, read_text_limited
    from qualify.plan.digest import with_remedy
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
    out.print(f"{state}: {shown(path)}\ndigest {digest}")


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
        out.print(f"wrote {shown(output)}")


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
@click.option(
    "--device",
    "ordinal",
    type=click.IntRange(min=0),
    help="On a GPU host: also run each CUDA arm once per case on this GPU, with a guard after every output "
    "and scratch buffer, and report any write past a buffer's declared size.",
)
def plan_rehearse(
    plan_path: Path,
    reference_spec: str | None,
    out_dir: Path | None,
    reorder_ulp: int,
    seed: int,
    case_ids: tuple[str, ...],
    ordinal: int | None,
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
    only = list(case_ids) or None
    if ordinal is None:
        result = rehearse(loaded, reference, folder, reorder_ulp=reorder_ulp, seed=seed, only=only)
    else:
        from qualify.run.device import CudaDevice

        device = CudaDevice(ordinal)
        try:
            result = rehearse(loaded, reference, folder, reorder_ulp=reorder_ulp, seed=seed, only=only, device=device)
        finally:
            device.close()
    simulated = sum(c.simulated for c in result.cases)
    out.print(f"rehearsal (not a record): {shown(folder / 'REHEARSAL.md')}", soft_wrap=True)
    out.print(f"expected values: {shown(result.expected_from)}", soft_wrap=True)
    out.print(f"writes past a buffer's declared size: {shown(result.buffer_bounds)}", soft_wrap=True)
    chosen = f" (chosen with --cases; the plan has {len(loaded.cases)})" if case_ids else ""
    out.print(f"cases simulated: {simulated} of {len(result.cases)}{chosen}")
    for problem in result.problems:
        out.print(f"problem: {shown(problem)}", soft_wrap=True)
    if result.problems:
        first = "; ".join(result.problems) + (f" (hint: {result.hint})" if result.hint else "")
        raise PlanError(
            f"the rehearsal found {len(result.problems)} problem(s) (see {folder / 'REHEARSAL.md'}): {first}",
            file=plan_path,
            # only writes past declared sizes: the fields that declare those buffers
            field=", ".join(dict.fromkeys(result.overrun_fields))
            if len(result.problems) == len(result.overrun_fields)
            else "acceptance.fidelity",
        )
    caught = sum(bool(c.caught) for c in result.controls)
    out.print(
        f"rehearsal passed: the gate holds the simulated candidate in {sum(c.passed is True for c in result.cases)} "
        f"case(s); {caught} of {len(result.controls)} control run(s) as declared"
        + ("" if simulated == len(result.cases) else f"; {len(result.cases) - simulated} case(s) not simulated"),
        style="green",
        soft_wrap=True,
    )


@click.group()
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
    out.print(f"wrote {shown(made.path)}: {made.tensors} tensors, {made.cases} cases", soft_wrap=True)
    out.print(f"producer {shown(made.producer)}", soft_wrap=True)
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
        out.print(f"next: {shown(made.hint)}", soft_wrap=True)
