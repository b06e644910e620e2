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

import re

from qualify.render.markdown import case_class, duration, signed_pct, verdict_status
from qualify.render.readme import device_groups, median_of_trials
from qualify.results.model import Results

MAX_ROWS = 60  # device x case rows of the table
MAX_ITEMS = 20  # failed gates, reasons, failures
MAX_LABEL = 80  # characters of one label a user or a device wrote
MAX_BYTES = 256 * 1024  # a quarter of GitHub's 1 MiB: room for the job's other steps and devices

_MARKDOWN = re.compile(r"([\\`*_\[\]<|~])")
_ICON = {"qualified": "✅", "not_qualified": "❌", "incomplete": "⚠️"}


def text(value: object, limit: int = MAX_LABEL) -> str:
    """A label as literal text in Markdown: one line, cut, every character that could open a
    link, an image, HTML or a table cell escaped (a case name is data, not markup)."""
    flat = " ".join(str(value).split())
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return _MARKDOWN.sub(r"\\\1", flat)


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


def summary_lines(results: Results, record: str) -> list[str]:
    """The summary as lines of Markdown; `record` is the record's path as the job knows it."""
    verdict = results.verdict
    complete = sum(t.status == "complete" for t in results.trials)
    devices = device_groups(results.trials)
    lines = [
        f"### {_ICON[verdict.status]} qualify: {text(results.plan_name)} — {verdict_status(verdict.status)}",
        "",
        f"Record {text(record, 200)}, plan digest `{results.plan_digest[:12]}`: "
        f"{complete} of {len(results.trials)} trials complete on {len(devices)} "
        f"device{'s' if len(devices) != 1 else ''}.",
        "",
    ]
    rows = case_rows(results)
    if rows:
        lines += ["| device | case | base | candidate | change | class |", "|---|---|---:|---:|---:|---|"]
        lines += rows[:MAX_ROWS]
        if len(rows) > MAX_ROWS:
            lines.append(f"| … | {len(rows) - MAX_ROWS} more rows in the record's README | | | | |")
        lines.append("")
    failed = [
        f"- {text(g.gate)} at {text(g.case)} on {text(g.device)}"
        f"{'' if g.trial is None else f' (trial {g.trial})'}: speed-up {g.value_pct:+.2f} %, needs {text(g.bound)}"
        for g in verdict.gates
        if not g.passed
    ]
    if failed:
        lines += [f"**Gates missed ({len(failed)}):**", "", *_capped(failed, "missed gates"), ""]
    if verdict.reasons:
        lines += ["**Why the evidence cannot decide:**" if verdict.status == "incomplete" else "**Reasons:**", ""]
        lines += [*_capped([f"- {text(r, 300)}" for r in verdict.reasons], "reasons"), ""]
    failures = [
        f"- trial {t.index}: {f.kind}{'' if f.case is None else f' at {text(f.case)}'}"
        f"{'' if f.side is None else f' ({f.side})'}: {text(f.message, 300)}"
        for t in results.trials
        for f in t.failures
    ]
    if failures:
        lines += ["**Trial failures:**", "", *_capped(failures, "failures"), ""]
    return lines


def render_summary(results: Results, record: str) -> str:
    out = "\n".join(summary_lines(results, record)).rstrip("\n") + "\n"
    # the caps above bound the size; this guards the bound itself against a future edit
    assert len(out.encode()) <= MAX_BYTES, len(out.encode())
    return out
