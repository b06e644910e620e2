"""The regression gate's Markdown: one table per gate (protocols × cases), for a pull request's
step summary. Every label is escaped (`render.markdown.md`): case ids, reasons and paths come from
plans and trees a pull request wrote."""

from __future__ import annotations

from qualify.render.markdown import md
from qualify.results.gate import GateCase, GateDocument

CLASS_WORDS = {
    "identical_code": "identical machine code",
    "unchanged": "unchanged",
    "faster": "faster",
    "slower": "**slower**",
    "cant_tell": "can't tell",
}
BYTES_WORDS = {
    "identical": "identical",
    "within_tolerance": "changed, within bound",
    "beyond_tolerance": "**changed beyond bound**",
    "not_compared": "not compared",
}
OUTCOME_WORDS = {"pass": "passed", "fail": "FAILED", "incomplete": "incomplete"}


def _change(c: GateCase) -> str:
    if c.delta_pct is None:
        return "—"
    interval = ""
    if c.ci_low is not None and c.ci_high is not None:
        interval = f" [{(c.ci_low - 1) * 100:+.2f}, {(c.ci_high - 1) * 100:+.2f}]"
    resolves = f", resolves {c.mde_pct:.2f}%" if c.mde_pct is not None else ""
    flag = " ⚠ underpowered" if c.underpowered else ""
    return f"{c.delta_pct:+.2f}%{interval}{resolves}{flag}"


def _link(record: str | None, link_base: str) -> str:
    if record is None:
        return "—"
    target = f"{link_base.rstrip('/')}/{record}" if link_base else record
    return f"[{md(record)}]({md(target).replace(')', '%29').replace(' ', '%20')})"


def gate_markdown(doc: GateDocument, link_base: str = "") -> str:
    """The gate as Markdown: a heading with the outcome, the table, then what was not gated."""
    lines = [
        f"## qualify gate: {OUTCOME_WORDS[doc.outcome]} (exit {doc.exit_code})",
        "",
        f"Base {md(doc.base_rev)} = `{doc.base_commit[:12]}`; head "
        f"`{(doc.head_commit or 'none')[:12]}`{' with uncommitted changes' if doc.dirty else ''}. {md(doc.summary)}",
        "",
    ]
    rows = [(p, a, c) for p in doc.protocols for a in p.arms for c in a.cases]
    if rows:
        lines += [
            "| protocol | arm | case | change (95% CI) | class | bytes | record |",
            "|---|---|---|---|---|---|---|",
        ]
        for p, a, c in rows:
            lines.append(
                f"| {md(p.name)} | {a.side} | {md(c.case)} | {_change(c)} | {CLASS_WORDS[c.gate_class]} | "
                f"{BYTES_WORDS[c.bytes]} | {_link(a.record, link_base)} |"
            )
    elif not doc.protocols:
        lines.append("No protocol is touched by this change.")
    problems = [f"- {md(p.name)}: {p.status}: {md(p.detail or '')}" for p in doc.protocols if p.status != "gated"]
    problems += [
        f"- {md(p.name)} ({a.side} arm): not gated: {md(a.error)}" for p in doc.protocols for a in p.arms if a.error
    ]
    if problems:
        lines += ["", "Not gated:", "", *problems]
    added = [
        f"- {md(p.name)} ({a.side} arm), {md(line)}" for p in doc.protocols for a in p.arms for line in a.added_trials
    ]
    if added:
        lines += ["", "Trials added beyond the plan's (each is in its record):", "", *added]
    if doc.skipped:
        lines += [
            "",
            f"{len(doc.skipped)} path(s) were not materialized (links, oversized or unsafe paths); see gate.json.",
        ]
    return "\n".join(lines) + "\n"
