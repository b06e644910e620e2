"""Terminal rendering with rich: plan checks (and, later, run summaries)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from qualify.check import PlanCheck
from qualify.plan.model import ARM_SIDES, CudaArm


def _arm_label(check: PlanCheck, side: str) -> str:
    arm = check.loaded.plan.arm(side)
    if isinstance(arm, CudaArm):
        return f"{side} ({arm.kernel})"
    return f"{side} ({arm.symbol} in {arm.library})"


def plan_check(check: PlanCheck) -> Group:
    loaded = check.loaded
    plan = loaded.plan
    head = Text.assemble(
        (f"{plan.name}", "bold"),
        f"  {plan.revisions.base} → {plan.revisions.candidate}\n",
        "digest  ", (loaded.digest, "cyan"), "\n",
        "frozen  ",
        ("yes (matches plan.lock)" if check.frozen else "no (run `qualify plan freeze`)",
         "green" if check.frozen else "yellow"),
        "\n",
        f"files   {len(loaded.files.files)} ({', '.join(loaded.files.files)})",
    )  # fmt: skip
    parts = [head, _cases_table(check)]
    if check.compiled:
        parts.append(_resources_table(check))
        parts.append(Text(f"NVRTC {check.nvrtc}; " + ("every launch fits" if check.ok else "SOME LAUNCHES DO NOT FIT"),
                          style="green" if check.ok else "bold red"))  # fmt: skip
    return Group(*parts)


def _cases_table(check: PlanCheck) -> Table:
    table = Table(title="cases (sizes resolved per arm)", title_justify="left")
    table.add_column("case")
    table.add_column("arm")
    table.add_column("grid", justify="right")
    table.add_column("block", justify="right")
    table.add_column("dyn. smem B", justify="right")
    table.add_column("buffers MiB", justify="right")
    for case in check.loaded.cases:
        for side in ARM_SIDES:
            arm = case.arms[side]
            mib = sum(b.nbytes for b in arm.buffers) / 2**20
            if arm.launch is None:
                table.add_row(case.id, side, "-", "-", "-", f"{mib:,.1f}")
                continue
            table.add_row(
                case.id,
                side,
                "×".join(map(str, arm.launch.grid)),
                "×".join(map(str, arm.launch.block)),
                f"{arm.launch.shared_bytes:,}",
                f"{mib:,.1f}",
            )
    return table


def _resources_table(check: PlanCheck) -> Table:
    table = Table(title="compiled resources per kernel and architecture (ptxas)", title_justify="left")
    cols = ("arm", "arch", "regs", "spill st/ld B", "stack B", "static smem B",
            "dynamic smem B (cases)", "limit B", "fits")  # fmt: skip
    for col in cols:
        table.add_column(col, justify="left" if col in ("arm", "arch", "fits") else "right")
    for (side, arch), k in check.compiled.items():
        r = k.resources
        rows = [f for f in check.fits if f.side == side and f.arch == arch]
        dyn = sorted({f.dynamic_shared_bytes for f in rows})
        dyn_text = f"{dyn[0]:,}" if len(dyn) == 1 else f"{dyn[0]:,}–{dyn[-1]:,}"
        misfits = [f.case for f in rows if not f.fits]
        if r is None:  # ptxas printed no report for this kernel
            figures = ["n/a"] * 4
        else:
            spills = f"{r.spill_store_bytes}/{r.spill_load_bytes}"
            figures = [str(r.registers), Text(spills, style="red" if r.spill_store_bytes or r.spill_load_bytes else ""),
                       str(r.stack_bytes), f"{r.static_shared_bytes:,}"]  # fmt: skip
        table.add_row(
            _arm_label(check, side),
            arch,
            *figures,
            dyn_text,
            f"{rows[0].limit_bytes:,}" if rows else "-",
            Text("all cases", style="green") if not misfits
            else Text("NOT " + ", ".join(misfits), style="bold red"),
        )
    return table


def run_summary(outcome, folder) -> Group:
    """The end-of-run table: per trial and case, the medians, the ratio and its class."""
    results = outcome.results
    parts = []
    if outcome.skipped:
        parts.append(Text(f"no trial run: {outcome.skipped}", style="yellow"))
    table = Table(title=f"record {folder}", title_justify="left")
    for col in ("trial", "device", "case", "base µs", "cand µs", "Δ %", "95% CI", "class"):
        table.add_column(col, justify="right" if col not in ("device", "case", "class") else "left")
    for t in results.trials:
        for c in t.cases:
            s = c.stats
            ci = "-" if s.ci_low is None else f"[{(s.ci_low - 1) * 100:+.2f}, {(s.ci_high - 1) * 100:+.2f}]"
            table.add_row(str(t.index), t.provenance.device.name, c.case,
                          f"{c.timing['base'].median_ns / 1e3:.3f}", f"{c.timing['candidate'].median_ns / 1e3:.3f}",
                          f"{s.delta_pct:+.2f}", ci, s.case_class)  # fmt: skip
        if t.status != "complete":
            table.add_row(str(t.index), t.provenance.device.name, "-", "-", "-", "-", "-", t.status)
    parts.append(table)
    style = {"qualified": "bold green", "not_qualified": "bold red", "incomplete": "bold yellow"}
    parts.append(Text(f"verdict: {results.verdict.status}", style=style[results.verdict.status]))
    for reason in results.verdict.reasons:
        parts.append(Text(f"  - {reason}"))
    return Group(*parts)
