"""The history page: one self-contained HTML file, inline CSS and inline SVG, no script at all.

Every string that comes from a record, a manifest or git (protocol, case and machine names, commit
messages, paths) is hostile input: a pull request chooses them. Each is written through `_e`
(html.escape, quotes included) into text or a quoted attribute, never into a tag name, an
attribute name, a style, a URL or a script. The page carries no script and no event handler, and
its Content-Security-Policy (`default-src 'none'`) forbids scripts, fetches, frames and images
from anywhere, so a string that slipped through escaping could still run nothing and reach nothing.
Attributes built from data hold numbers only (indices and coordinates).
"""

from __future__ import annotations

import html
import math

from qualify.evaluate.changepoint import smallest_p
from qualify.evaluate.history import CaseHistory, History, Point, RecordInfo

CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
WIDTH, HEIGHT = 760, 260
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 14, 46
COLOURS = {"faster": "#1a7f37", "slower": "#cf222e", "same": "#57606a", "cant_tell": "#bf8700"}
CLASS_WORDS = {"faster": "faster", "slower": "slower", "same": "unchanged", "cant_tell": "can't tell"}

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1f2328;max-width:1100px}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #d0d7de;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f6f8fa}.num{text-align:right;font-variant-numeric:tabular-nums}
.flag{color:#cf222e;font-weight:600}.muted{color:#57606a}section.case{margin:28px 0}
svg.plot{background:#fff;border:1px solid #d0d7de}code{font-size:12px}
.msg{min-width:300px;max-width:560px;overflow-wrap:anywhere}.src{max-width:220px;overflow-wrap:anywhere;font-size:11px}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _pct(ratio: float | None) -> str:
    return "—" if ratio is None else f"{(ratio - 1) * 100:+.2f} %"


def _interval(p: Point) -> str:
    if p.ci_low is None or p.ci_high is None:
        return "no interval"
    return f"[{(p.ci_low - 1) * 100:+.2f}, {(p.ci_high - 1) * 100:+.2f}]"


def _mde(p: Point) -> str:
    return "—" if p.mde_pct is None else f"{p.mde_pct:.2f} %"


def _short(info: RecordInfo) -> str:
    return info.commit[:10] if info.commit else "unknown"


def render_history(history: History) -> str:
    """The whole page, as text."""
    cases = history.cases
    first = history.cases[0].changes if cases else None
    method = (
        f"{first.method}; alpha {first.alpha}, {first.permutations} permutations, "
        f"no piece shorter than {first.min_size} records"
        if first
        else "no series"
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_e(CSP)}">',
        f"<title>qualify history: {_e(history.protocol)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>History of <code>{_e(history.protocol)}</code></h1>",
        f"<p>{len(history.records)} records, {len(cases)} series (case × GPU model). Each point is a "
        "record's change in time on one machine (candidate against base; negative is faster), with "
        "its 95 % interval; colour is the case's class in that record. Change points (red lines): "
        f"{_e(method)}, on 100·ln(ratio). Dashed grey lines: the plan's digest changed.</p>",
        _summary(cases, history.records),
    ]
    parts += [_case_section(k, c, history.records) for k, c in enumerate(cases)]
    parts.append(_records_table(history.records))
    if history.notes:
        parts.append("<h2>Left out</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in history.notes) + "</ul>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _summary(cases: tuple[CaseHistory, ...], records: tuple[RecordInfo, ...]) -> str:
    rows = []
    for k, c in enumerate(cases):
        last = c.points[-1]
        found = ", ".join(
            f"at {_e(_short(records[c.points[cp.index].record]))} ({_e(_pct(math.exp(cp.before / 100)))} → "
            f"{_e(_pct(math.exp(cp.after / 100)))})"
            for cp in c.changes.points
        )
        if found:
            flag = f'<span class="flag">{len(c.changes.points)} change(s)</span>: {found}'
        elif smallest_p(len(c.points), c.changes.min_size) > c.changes.alpha:
            flag = f'none <span class="muted">({len(c.points)} points are too few to flag any at alpha {c.changes.alpha})</span>'
        else:
            flag = "none"
        rows.append(
            f'<tr data-case-index="{k}"><td><a href="#case-{k}">{_e(c.case)}</a></td><td>{_e(c.gpu)}</td>'
            f'<td class="num">{len(c.points)}</td><td class="num">{_e(_pct(last.ratio))} {_e(_interval(last))}</td>'
            f"<td>{_e(CLASS_WORDS.get(last.case_class, last.case_class))}</td><td>{flag}</td></tr>"
        )
    head = "<tr><th>case</th><th>GPU</th><th>points</th><th>latest change</th><th>latest class</th><th>change points</th></tr>"
    return f'<table id="summary">{head}{"".join(rows)}</table>'


def _case_section(k: int, c: CaseHistory, records: tuple[RecordInfo, ...]) -> str:
    changes = {cp.index for cp in c.changes.points}
    rows = []
    for i, p in enumerate(c.points):
        info = records[p.record]
        mark = ' class="flag"' if i in changes else ""
        rows.append(
            f'<tr{mark}><td class="num">{i}</td><td><code>{_e(_short(info))}</code></td><td>{_e(p.machine)}</td>'
            f'<td class="num">{_e(_pct(p.ratio))}</td><td class="num">{_e(_interval(p))}</td>'
            f'<td class="num">{_e(_mde(p))}</td>'
            f'<td>{_e(CLASS_WORDS.get(p.case_class, p.case_class))}</td><td class="num">{p.trials}</td>'
            f"<td>{_e(info.verdict)}</td><td>{'change point' if i in changes else ''}</td></tr>"
        )
    head = (
        "<tr><th>#</th><th>commit</th><th>machine</th><th>change</th><th>95 % interval</th>"
        '<th title="the smallest change this record could resolve (95 % confidence, 80 % power)">MDE</th><th>class</th>'
        "<th>trials</th><th>record verdict</th><th></th></tr>"
    )
    return (
        f'<section class="case" id="case-{k}" data-points="{len(c.points)}" data-changes="{len(c.changes.points)}">'
        f'<h2>{_e(c.case)} <span class="muted">on {_e(c.gpu)}</span></h2>'
        f"{_plot(c, records)}<details><summary>points</summary><table>{head}{''.join(rows)}</table></details>"
        "</section>"
    )


def _plot(c: CaseHistory, records: tuple[RecordInfo, ...]) -> str:
    pts = c.points
    values = [0.0]
    for p in pts:
        values.append((p.ratio - 1) * 100)
        if p.ci_low is not None and p.ci_high is not None:
            values += [(p.ci_low - 1) * 100, (p.ci_high - 1) * 100]
    lo, hi = min(values), max(values)
    pad = max((hi - lo) * 0.08, 0.05)
    lo, hi = lo - pad, hi + pad
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(i: float) -> float:
        return LEFT + (inner_w * (i + 0.5) / len(pts))

    def y(v: float) -> float:
        return TOP + inner_h * (hi - v) / (hi - lo)

    out = [
        f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="change over records">'
    ]
    out.append(f"<title>{_e(c.case)} on {_e(c.gpu)}: change in % per record</title>")
    for tick in _ticks(lo, hi):
        out.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
            f'stroke="{"#8c959f" if tick == 0 else "#eaeef2"}"/>'
            f'<text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end" font-size="11">{tick:+.4g} %</text>'
        )
    for i in c.plan_changes:
        out.append(
            f'<line class="plan-change" data-index="{i}" x1="{x(i - 0.5):.1f}" x2="{x(i - 0.5):.1f}" '
            f'y1="{TOP}" y2="{HEIGHT - BOTTOM}" stroke="#8c959f" stroke-dasharray="4 3"/>'
        )
    for start, stop, mean in c.changes.segments:
        level = y(math.expm1(mean / 100) * 100)
        out.append(
            f'<line class="segment" x1="{x(start - 0.4):.1f}" x2="{x(stop - 0.6):.1f}" y1="{level:.1f}" '
            f'y2="{level:.1f}" stroke="#0969da" stroke-width="2" opacity="0.6"/>'
        )
    for cp in c.changes.points:
        out.append(
            f'<line class="change" data-index="{cp.index}" x1="{x(cp.index - 0.5):.1f}" '
            f'x2="{x(cp.index - 0.5):.1f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}" stroke="#cf222e" stroke-width="2">'
            f"<title>change point before point {cp.index} (p = {cp.p_value:.4f})</title></line>"
        )
    step = max(1, math.ceil(len(pts) / 20))
    for i, p in enumerate(pts):
        info = records[p.record]
        if p.ci_low is not None and p.ci_high is not None:
            out.append(
                f'<line class="interval" x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{y((p.ci_low - 1) * 100):.1f}" '
                f'y2="{y((p.ci_high - 1) * 100):.1f}" stroke="{COLOURS.get(p.case_class, "#000")}"/>'
            )
        tip = (
            f"{_short(info)} ({info.commit_source}) {info.when}\n{p.machine}\n"
            f"{_pct(p.ratio)} {_interval(p)}, {CLASS_WORDS.get(p.case_class, p.case_class)}, "
            f"{p.trials} trial(s); record {info.verdict}\n{info.message}"
        )
        out.append(
            f'<circle class="point" data-index="{i}" cx="{x(i):.1f}" cy="{y((p.ratio - 1) * 100):.1f}" r="4" '
            f'fill="{COLOURS.get(p.case_class, "#000")}"><title>{_e(tip)}</title></circle>'
        )
        if i % step == 0:
            out.append(
                f'<text x="{x(i):.1f}" y="{HEIGHT - BOTTOM + 14}" font-size="10" text-anchor="end" '
                f'transform="rotate(-35 {x(i):.1f} {HEIGHT - BOTTOM + 14})">{_e(_short(info)[:8])}</text>'
            )
    out.append("</svg>")
    return "".join(out)


def _ticks(lo: float, hi: float) -> list[float]:
    """About five round values between lo and hi, 0 among them when it lies inside."""
    raw = (hi - lo) / 5
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step)
    return [round(k * step, 10) for k in range(first, math.floor(hi / step) + 1)]


def _records_table(records: tuple[RecordInfo, ...]) -> str:
    rows = []
    for k, r in enumerate(records):
        measured = (r.measured[:10] if r.measured else "not stated") + (" (dirty tree)" if r.dirty else "")
        rows.append(
            f'<tr><td class="num">{k}</td><td><code title="{_e(r.commit or "unknown")}">{_e(_short(r))}</code></td>'
            f"<td>{_e(r.commit_source)}</td>"
            f"<td>{_e(r.when)}</td><td><code>{_e(measured)}</code></td><td>{_e(r.verdict)}</td>"
            f'<td><code>{_e(r.plan_digest[:12])}</code></td><td class="msg">{_e(r.message)}</td>'
            f'<td class="src"><code>{_e(r.source)}</code></td></tr>'
        )
    head = (
        "<tr><th>#</th><th>commit</th><th>commit from</th><th>when</th><th>trials ran on</th><th>verdict</th>"
        "<th>plan digest</th><th>message</th><th>read from</th></tr>"
    )
    return f'<h2>Records</h2><table id="records">{head}{"".join(rows)}</table>'
