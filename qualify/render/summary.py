"""The Markdown summary of a record for a CI run's page ($GITHUB_STEP_SUMMARY).

A reviewer reads it in the pull request's checks: the verdict, one row per device and case with the
change and its class, the gates that failed, why the evidence is incomplete, and where the record
is. It renders Results only (the record's README is the full account) and computes nothing that
Results and `qualify.render.readme`'s pure functions do not already hold.

GitHub refuses a step summary over 1 MiB, and one job's summaries share that limit, so every list
here is capped and every label cut: the output stays under MAX_BYTES for any record, however
many cases, devices or failed gates it holds.
"""

from __future__ import annotations

from qualify.evaluate.headline import headline, headline_lines, reason_lines
from qualify.plan.model import Plan
from qualify.render.markdown import case_class, duration, line_start, md, signed_pct, verdict_status
from qualify.render.readme import device_groups, median_of_trials
from qualify.results.model import Results

MAX_ROWS = 60  # device x case rows of the table
MAX_ITEMS = 20  # reasons, problems
MAX_LABEL = 80  # characters of one label a user or a device wrote
MAX_BYTES = 256 * 1024  # a quarter of GitHub's 1 MiB: room for the job's other steps and devices

_ICON = {"qualified": "✅", "not_qualified": "❌", "incomplete": "⚠️"}


def text(value: object, limit: int = MAX_LABEL) -> str:
    """A label as literal text in Markdown, escaped as the README escapes it (links, images, HTML,
    entities, math, table cells; control and bidi characters made visible), one line, cut."""
    flat = " ".join(str(value).split())
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return md(flat)


def _capped(lines: list[str], what: str) -> list[str]:
    if len(lines) <= MAX_ITEMS:
        return lines
    return lines[:MAX_ITEMS] + [f"- … and {len(lines) - MAX_ITEMS} more {what} (see the record's README)"]


def _classes(trials, cid: str) -> str:
    found = [c.stats.case_class for t in trials if t.status == "complete" for c in t.cases if c.case == cid]
    return ", ".join(case_class(c) for c in dict.fromkeys(found)) or "n/a"


def case_rows(results: Results) -> list[str]:
    """One table row per device and case: medians over complete trials, the change, its class."""
    rows = []
    for group in device_groups(results.trials):
        cids = list(dict.fromkeys(c.case for t in group.trials for c in t.cases))
        for cid in cids:
            median = median_of_trials(group.trials, cid)
            if median is None:
                cells = [text(group.label), text(cid), "n/a", "n/a", "n/a", "no complete trial"]
            else:
                cells = [
                    text(group.label),
                    text(cid),
                    duration(median.base_ns),
                    duration(median.candidate_ns),
                    signed_pct(median.delta_pct),
                    _classes(group.trials, cid),
                ]
            rows.append("| " + " | ".join(cells) + " |")
    return rows


def _complete_faults(results: Results) -> list[str]:
    """A fault recorded in a trial that still completed: what that means for the reader."""
    out = []
    for t in results.trials:
        faults = [f for f in t.failures if f.kind == "fault"]
        if t.status == "complete" and faults:
            where = ", ".join(f"{f.case} ({f.side})" if f.side else str(f.case) for f in faults)
            out.append(
                f"- trial {t.index} completed with a fault recorded at {text(where, 200)}: every case was "
                "still timed, and the fault counts against the candidate in the verdict"
            )
    return out


def summary_lines(results: Results, plan: Plan, record: str, holder: str | None = None) -> list[str]:
    """The summary as lines of Markdown; `record` is the record's path as the job knows it and
    `holder` the commit that last changed it, where the record is in a repository.

    Each thing is said once: the table gives every case's change, the reasons give each missed
    gate once (its cases and range) and every other reason of the verdict; the README has the rest.
    """
    verdict = results.verdict
    complete = sum(t.status == "complete" for t in results.trials)
    devices = device_groups(results.trials)
    revisions = sorted({t.provenance.git_revision[:12] for t in results.trials if t.provenance.git_revision})
    where = f" (committed in `{holder[:12]}`)" if holder else ""
    ran = f"; trials ran at {', '.join(f'`{text(r)}`' for r in revisions)}" if revisions else ""
    head = headline(results, plan)
    lines = [
        f"### {_ICON[verdict.status]} qualify: {text(results.plan_name)} — {verdict_status(verdict.status)}",
        "",
        f"Record {text(record, 200)}{where}, plan digest `{results.plan_digest[:12]}`: "
        f"{complete} of {len(results.trials)} trials complete on {len(devices)} "
        f"device{'s' if len(devices) != 1 else ''}{ran}. " + " ".join(headline_lines(head, text)[: len(head.devices)]),
        "",
    ]
    rows = case_rows(results)
    if rows:
        lines += ["| device | case | base | candidate | change in time | class |", "|---|---|---:|---:|---:|---|"]
        lines += rows[:MAX_ROWS]
        if len(rows) > MAX_ROWS:
            lines.append(f"| … | {len(rows) - MAX_ROWS} more rows in the record's README | | | | |")
        lines.append("")
    reasons = [f"- {line_start(line)}" for line in reason_lines(head, lambda v: text(v, 300))]
    if reasons:
        title = "Why the evidence cannot decide" if verdict.status == "incomplete" else "Reasons"
        lines += [f"**{title}** (changes in time per launch: negative is faster):", ""]
        lines += [*_capped(reasons, "reasons"), *_complete_faults(results)]
    return lines


def render_summary(results: Results, plan: Plan, record: str, holder: str | None = None) -> str:
    out = "\n".join(summary_lines(results, plan, record, holder)).rstrip("\n") + "\n"
    # the caps above bound the size; this guards the bound itself against a future edit
    assert len(out.encode()) <= MAX_BYTES, len(out.encode())
    return out
