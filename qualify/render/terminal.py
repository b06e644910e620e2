"""Terminal rendering with rich: plan checks and run summaries.

Every function here returns a renderable and prints nothing; `qualify.cli` prints it on the
console `console()` makes. Two rules hold for everything shown:

- A label (a plan's name, revisions, kernel, case ids, file names; a device name or a reason from
  a record) is a `Text` built from `visible(label)`: rich never reads it as markup, and its
  control characters (newlines, ESC sequences, bidi overrides) show as escapes instead of acting.
  A plain `str` handed to a rich table cell would be parsed as markup, so none is.
- Numbers are never cut. On a terminal, a table too wide folds a cell over two lines rather than
  replacing digits with "…"; into a pipe or a file (a CI log) the console is as wide as the widest
  line, so nothing wraps at 80 columns, and rich writes no colour there.
"""

from __future__ import annotations

import sys
from typing import IO, TYPE_CHECKING

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from qualify.evaluate.headline import cause_lines, headline, headline_lines, reason_lines
from qualify.plan.model import ARM_SIDES, CudaArm, PythonArm
from qualify.render.plain import visible

if TYPE_CHECKING:  # a type only: rendering a check never needs the command that makes one
    from qualify.commands.check import PlanCheck

# Wide enough for any table qualify prints; only lines that long use it (rich pads nothing).
LOG_WIDTH = 1000
VERDICT_STYLE = {"qualified": "bold green", "not_qualified": "bold red", "incomplete": "bold yellow"}


def console(stderr: bool = False, file: IO[str] | None = None) -> Console:
    """The console to print on: the terminal's width on a terminal, no 80-column cut elsewhere."""
    stream = file or (sys.stderr if stderr else sys.stdout)
    tty = hasattr(stream, "isatty") and stream.isatty()
    if tty:
        return Console(file=stream, highlight=False)
    return Console(file=stream, highlight=False, width=LOG_WIDTH, no_color=True, soft_wrap=False)


def label(value: object, style: str = "") -> Text:
    """A label as plain text: no markup, control characters made visible."""
    return Text(visible(value), style=style)


def _number_column(table: Table, name: str) -> None:
    # fold, never ellipsis: a number split over two lines is still the number
    table.add_column(name, justify="right", overflow="fold", no_wrap=False)


def _arm_label(check: PlanCheck, key: str) -> Text:
    side, _, launch = key.partition(".launches[")
    arm = check.loaded.plan.arm(side)
    if isinstance(arm, CudaArm):
        kernel = arm.kernel if not launch else arm.launches[int(launch.rstrip("]"))].kernel
        return label(f"{key} ({kernel})")
    if isinstance(arm, PythonArm):
        return label(f"{side} ({arm.callable})")
    return label(f"{side} ({arm.symbol} in {arm.library})")


def plan_check(check: PlanCheck) -> Group:
    loaded = check.loaded
    plan = loaded.plan
    names = list(loaded.files.files)
    files = ", ".join(names[:SHOWN_FILES]) + (
        f", … {len(names) - SHOWN_FILES} more" if len(names) > SHOWN_FILES else ""
    )
    head = Text.assemble(
        (visible(plan.name), "bold"),
        f"  {visible(plan.revisions.base)} → {visible(plan.revisions.candidate)}\n",
        "digest  ",
        (loaded.digest, "cyan"),
        "\n",
        "frozen  ",
        (
            "yes (matches plan.lock)" if check.frozen else "no (run `qualify plan freeze`)",
            "green" if check.frozen else "yellow",
        ),
        "\n",
        f"files   {len(loaded.files.files)} ({visible(files)})",
    )
    parts = [head, _cases_table(check)]
    if check.compiled:
        parts.append(_resources_table(check))
        parts.append(
            Text(
                f"NVRTC {visible(check.nvrtc)}"
                + (f", CCCL {visible(check.cccl)}" if check.cccl else "")
                + (f"; compiled in memory, confined: {visible(check.sandbox)}" if check.sandbox else "")
                + "; "
                + ("every launch fits" if check.ok else "SOME LAUNCHES DO NOT FIT"),
                style="green" if check.ok else "bold red",
            )
        )
    for note in check.notes:
        parts.append(Text(f"note: {visible(note)}", style="yellow"))
    return Group(*parts)


# What the terminal shows of a large plan: every case and file is checked, but a table of 100,000
# rows costs minutes to lay out and nobody reads it (plan check on 1,000 cases spent 15 s in rich).
SHOWN_CASES = 50
SHOWN_FILES = 50


def _cases_table(check: PlanCheck) -> Table:
    cases = check.loaded.cases
    hidden = len(cases) - SHOWN_CASES
    table = Table(
        title="cases (sizes resolved per arm)",
        title_justify="left",
        caption=f"… and {hidden} more cases, each checked like these" if hidden > 0 else None,
        caption_justify="left",
    )
    table.add_column("case", overflow="fold")
    table.add_column("arm", overflow="fold")
    for col in ("grid", "block", "dyn. smem B", "buffers MiB"):
        _number_column(table, col)
    for case in cases[:SHOWN_CASES]:
        for side in ARM_SIDES:
            arm = case.arms[side]
            mib = sum(b.nbytes for b in arm.buffers) / 2**20
            for i, step in enumerate(arm.steps):  # an arm's own launches, one row each
                launch = step.launch
                grid, block = "×".join(map(str, launch.grid)), "×".join(map(str, launch.block))
                name = f"{side}.launches[{i}] ({step.kernel})"
                table.add_row(label(case.id), label(name), grid, block, f"{launch.shared_bytes:,}", f"{mib:,.1f}")
            if arm.steps:
                continue
            if arm.launch is None:
                table.add_row(label(case.id), side, "-", "-", "-", f"{mib:,.1f}")
                continue
            table.add_row(
                label(case.id),
                side,
                "×".join(map(str, arm.launch.grid)),
                "×".join(map(str, arm.launch.block)),
                f"{arm.launch.shared_bytes:,}",
                f"{mib:,.1f}",
            )
    return table


def _resources_table(check: PlanCheck) -> Table:
    table = Table(title="compiled resources per kernel and architecture (ptxas)", title_justify="left")
    cols = (
        "arm",
        "arch",
        "regs",
        "spill st/ld B",
        "stack B",
        "static smem B",
        "dynamic smem B (cases)",
        "limit B",
        "fits",
    )
    for col in cols:
        if col in ("arm", "arch", "fits"):
            table.add_column(col, overflow="fold")
        else:
            _number_column(table, col)
    for (side, arch), k in check.compiled.items():
        r = k.resources
        rows = [f for f in check.fits if f.side == side and f.arch == arch]
        dyn = sorted({f.dynamic_shared_bytes for f in rows})
        dyn_text = "-" if not dyn else f"{dyn[0]:,}" if len(dyn) == 1 else f"{dyn[0]:,}–{dyn[-1]:,}"
        misfits = [f.case for f in rows if not f.fits]
        if r is None:  # ptxas printed no report for this kernel
            figures = ["n/a"] * 4
        else:
            spills = f"{r.spill_store_bytes}/{r.spill_load_bytes}"
            figures = [
                str(r.registers),
                Text(spills, style="red" if r.spill_store_bytes or r.spill_load_bytes else ""),
                str(r.stack_bytes),
                f"{r.static_shared_bytes:,}",
            ]
        table.add_row(
            _arm_label(check, side),
            label(arch),
            *figures,
            dyn_text,
            f"{rows[0].limit_bytes:,}" if rows else "-",
            Text("all cases", style="green") if not misfits else label("NOT " + ", ".join(misfits), style="bold red"),
        )
    return table


def verdict_block(results, plan) -> Group:
    """The verdict, the headline sentences and the grouped reasons, as the README opens."""
    h = headline(results, plan)
    parts = [Text(f"verdict: {results.verdict.status.replace('_', ' ')}", style=VERDICT_STYLE[results.verdict.status])]
    parts.extend(Text(line) for line in headline_lines(h, visible))
    causes = cause_lines(h, visible)
    if causes:
        parts.append(Text("why, case by case (base → candidate):"))
        parts.extend(Text(f"  - {line}") for line in causes)
    reasons = reason_lines(h, visible)
    if reasons:
        parts.append(Text("reasons (changes in time per launch: negative is faster):"))
        parts.extend(Text(f"  - {line}") for line in reasons)
    return Group(*parts)


def run_summary(outcome, folder, plan=None) -> Group:
    """The end-of-run summary: the verdict in words (headline and grouped reasons), then per trial
    and case the medians, the change and its interval. Without the plan the reasons are listed as
    the verdict wrote them."""
    results = outcome.results
    parts = []
    if outcome.skipped:
        parts.append(label(f"no trial run: {outcome.skipped}", style="yellow"))
    if plan is not None:
        parts.append(verdict_block(results, plan))
    else:
        parts.append(
            Text(f"verdict: {results.verdict.status.replace('_', ' ')}", style=VERDICT_STYLE[results.verdict.status])
        )
        parts.extend(label(f"  - {reason}") for reason in results.verdict.reasons)
    table = Table(title=Text(f"record {visible(folder)}"), title_justify="left")
    for col in ("trial", "device", "case", "base µs", "cand µs", "Δ %", "95% CI of Δ %", "class"):
        if col in ("device", "case", "class"):
            table.add_column(col, overflow="fold")
        else:
            _number_column(table, col)
    for t in results.trials:
        device = label(t.provenance.device.name)
        for c in t.cases:
            s = c.stats
            ci = "-" if s.ci_low is None else f"[{(s.ci_low - 1) * 100:+.2f}, {(s.ci_high - 1) * 100:+.2f}]"
            table.add_row(
                str(t.index),
                device,
                label(c.case),
                f"{c.timing['base'].median_ns / 1e3:.3f}",
                f"{c.timing['candidate'].median_ns / 1e3:.3f}",
                f"{s.delta_pct:+.2f}",
                ci,
                s.case_class.replace("cant_tell", "can't tell"),
            )
        if t.status != "complete":
            table.add_row(str(t.index), device, "-", "-", "-", "-", "-", t.status)
    parts.append(table)
    attribution = kernel_lines(results)
    if attribution:
        parts.append(Text("kernels (traced calls, information only):"))
        parts.extend(label(f"  {line}") for line in attribution)
    return Group(*parts)


def kernel_lines(results) -> list[str]:
    """Per trial and case, where the change lies by kernel: 'trial 1, T=640: flash<128>: +12.1 %; prep: same'."""
    from qualify.render.kernels_text import kernel_parts

    out = []
    for t in results.trials:
        for c in t.cases:
            if c.kernels is None or not c.kernels.attribution:
                continue
            # CUPTI's change per kernel where the trial's trace version states it, else names only
            named = kernel_parts(t, c.kernels)
            parts = "; ".join(f"{name}: {change}" for name, change in named)
            out.append(f"trial {t.index}, {c.case}: {parts}")
    return out
