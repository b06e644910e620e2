"""Plots of a record, drawn with matplotlib from its raw samples and written beside its README.

Per device, four SVG images under `plots/`:

  device-<k>-ratio.svg    the change in time per launch and its 95 % interval per case and trial,
                          against the "same" band and the bounds of the gates that judge the case
  device-<k>-samples.svg  each arm's distribution of time per launch, per case (all trials)
  device-<k>-order.svg    every timed sample in the order it was taken, coloured by arm, with the
                          SM clock beneath: drift, throttling and the ABBA structure at a glance
  device-<k>-roofline.svg each arm's DRAM throughput per case under the device's peak bandwidth
                          (qualify.render.roofline)

Determinism, and what `report --check` compares. An SVG written by one matplotlib version is the
same bytes every time here: the Agg-free SVG backend, text kept as text (`svg.fonttype: none`,
laid out with the DejaVu metrics matplotlib ships), a fixed `svg.hashsalt` for the ids, no date,
and no mathtext (a `$` in a label is a dollar sign). Another matplotlib version lays out the same
data in other bytes, so each SVG names the version that wrote it (its Creator metadata) and the
sha256 of the numbers it draws (its Description). `plot_problems` re-renders and compares bytes
when the installed matplotlib wrote the file; under another version it recomputes the data
digest from the raw samples and compares that (the drawing itself then goes unchecked: a plot
re-rendered under the installed version brings the byte comparison back). PNG is not used: its
bytes depend on the rasteriser and zlib builds as well.

The sample order is rebuilt from the samples: each sample's half of its block where the trial
recorded it (blocks whose order was drawn), else the fixed alternation of
qualify.plan.schedule.block_halves; within a block, each series' samples are stored in the order
taken, its first half from the block's first appearance of the arm and its second from the second.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qualify.evaluate.stats import SAME_BAND
from qualify.evaluate.summarize import floor_ns, series_ns
from qualify.evaluate.verdict import device_label
from qualify.io import MAX_PLOT_BYTES, atomic_write_bytes, read_limited, remove_in_record
from qualify.plan.checks import selected_cases
from qualify.plan.model import ARM_SIDES, Plan
from qualify.plan.resolve import case_id
from qualify.plan.schedule import AA, MAIN, block_halves
from qualify.render.plain import visible
from qualify.render.roofline import TITLE as ROOFLINE_TITLE
from qualify.render.roofline import draw_roofline
from qualify.results import samples as raw
from qualify.results.model import Results, Trial
from qualify.results.samples import THROTTLE_MASK, key

PLOT_DIR = "plots"
HASHSALT = "qualify"
COLOURS = {"base": "#1f77b4", "candidate": "#ff7f0e", "aa": "#7f7f7f"}
TRIAL_MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*")
STYLE = {
    "svg.hashsalt": HASHSALT,
    "svg.fonttype": "none",  # text stays text: no glyph outlines from whatever fonts are installed
    "font.family": "DejaVu Sans",  # shipped with matplotlib: the same metrics everywhere
    "font.size": 8,
    "text.parse_math": False,  # a label is plain text, never mathtext
    "axes.grid": True,
    "grid.alpha": 0.3,
    "figure.dpi": 72,
    "savefig.dpi": 72,
}
_DESCRIPTION = re.compile(r"<dc:description>qualify plot; data sha256 ([0-9a-f]{64})</dc:description>")
_CREATOR = re.compile(r"<dc:creator>\s*<cc:Agent>\s*<dc:title>Matplotlib v([^,<]+)")


@dataclass(frozen=True)
class PlotFile:
    kind: str  # ratio / samples / order / roofline
    path: str  # relative to the record folder, POSIX
    title: str


KINDS = {
    "ratio": "change in time per launch per case (negative is faster), 95 % interval per trial, against the gates' bounds",
    "samples": "time per launch of each arm, per case",
    "order": "samples in the order taken, coloured by arm, with the SM clock",
    "roofline": ROOFLINE_TITLE,
}


def _groups(results: Results) -> list[tuple[str, list[Trial]]]:
    out: dict[str, list[Trial]] = {}
    for t in results.trials:
        out.setdefault(device_label(t), []).append(t)
    return list(out.items())


def device_plots(results: Results) -> dict[str, list[PlotFile]]:
    """The plots of each device (by device label) that measured at least one case."""
    out = {}
    for k, (label, trials) in enumerate(_groups(results), 1):
        if any(t.cases for t in trials):
            out[label] = [PlotFile(kind, f"{PLOT_DIR}/device-{k}-{kind}.svg", title) for kind, title in KINDS.items()]
    return out


# ---------------------------------------------------------------------------------------------
# data: what each plot draws, from the raw samples


def _case_order(plan: Plan, trials: list[Trial]) -> list[str]:
    planned = [case_id(c) for c in plan.workload.cases]
    seen = dict.fromkeys(c.case for t in trials for c in t.cases)  # ordered, and looked up in O(1)
    known = set(planned)
    return [c for c in planned if c in seen] + [c for c in seen if c not in known]


def taken_order(arrays: dict[str, np.ndarray], cid: str, pair, values: dict[str, np.ndarray]):
    """(series, values) of each ABBA half of one case, in the order the halves ran."""
    (a, _), (b, _) = pair
    if key(cid, a, "block") not in arrays or key(cid, b, "block") not in arrays:
        return []
    blocks = list(dict.fromkeys(arrays[key(cid, a, "block")].tolist()))
    out = []
    for block in blocks:
        taken = {a: 0, b: 0}
        for half in block_halves(block, pair, _drawn_order(arrays, cid, pair, block)):
            mask = arrays[key(cid, half.series, "block")] == block
            chunk = values[half.series][mask]
            size = len(chunk) // 2 if taken[half.series] == 0 else len(chunk) - len(chunk) // 2
            start = taken[half.series]
            out.append((half.series, chunk[start : start + size]))
            taken[half.series] += size
    return out


def _drawn_order(arrays: dict[str, np.ndarray], cid: str, pair, block: int) -> str | None:
    """ABBA or BAAB as the block ran it, where its samples recorded their half; else None."""
    (a, _), _ = pair
    halves = arrays.get(key(cid, a, "half"))
    if halves is None:
        return None
    first = halves[arrays[key(cid, a, "block")] == block]
    return "ABBA" if first.size and int(first.min()) == 0 else "BAAB"


def _load(folder: Path, trial: Trial) -> dict[str, np.ndarray]:
    return raw.load(Path(folder) / trial.samples_file, root=folder)


class _Digest:
    """sha256 of every number a plot draws, in drawing order."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def add(self, *values) -> None:
        for v in values:
            self._h.update(np.ascontiguousarray(np.asarray(v, dtype=np.float64)).tobytes())

    def hexdigest(self) -> str:
        return self._h.hexdigest()


# ---------------------------------------------------------------------------------------------
# drawing


def _figure(width: float, height: float, left: float, right: float, top: float, bottom: float, **space):
    """A figure with fixed margins in inches (constrained layout would double the drawing time)."""
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(
        left=left / width, right=1 - right / width, top=1 - top / height, bottom=bottom / height, **space
    )
    FigureCanvasSVG(fig)
    return fig


def _svg(fig, digest: _Digest, title: str) -> bytes:
    buf = io.BytesIO()
    fig.savefig(
        buf,
        format="svg",
        metadata={"Date": None, "Title": title, "Description": f"qualify plot; data sha256 {digest.hexdigest()}"},
    )
    return buf.getvalue()


def _ratio(label: str, trials: list[Trial], plan: Plan, digest: _Digest):
    cases = _case_order(plan, trials)
    fig = _figure(8.0, 1.1 + 0.45 * len(cases), left=0.9, right=2.9, top=0.35, bottom=0.55)
    ax = fig.add_subplot()
    ys = {cid: len(cases) - 1 - i for i, cid in enumerate(cases)}
    band = SAME_BAND * 100
    ax.axvspan(-band, band, color="#999999", alpha=0.25, lw=0, label=f"same (±{band:g} %)")
    ax.axvline(0.0, color="black", lw=0.8)
    shown = set()
    for gate in plan.acceptance.gates:
        for cid in selected_cases(gate, plan):
            if cid not in ys:
                continue
            y = ys[cid]
            for bound, colour, what in (
                (gate.min_speedup_pct, "#2ca02c", "needs change ≤"),
                (gate.max_regression_pct, "#d62728", "allows change ≤"),
            ):
                if bound is None:
                    continue
                x = -bound if colour == "#2ca02c" else bound
                name = f"{visible(gate.name)}: {what} {x:+g} %"
                ax.plot(
                    [x, x], [y - 0.4, y + 0.4], color=colour, lw=1.5, ls="--", label=None if name in shown else name
                )
                shown.add(name)
                digest.add(x, y)
    n = len(trials)
    for j, t in enumerate(trials):
        offset = (j - (n - 1) / 2) * (0.5 / max(n, 1))
        xs, ys_, lo, hi = [], [], [], []
        for c in t.cases:
            if c.case not in ys:
                continue
            # the change in time per launch, in %: the record's one convention (negative is faster)
            ratio = c.stats.ratio
            xs.append((ratio - 1) * 100)
            ys_.append(ys[c.case] + offset)
            lo.append((ratio - (c.stats.ci_low if c.stats.ci_low is not None else ratio)) * 100)
            hi.append(((c.stats.ci_high if c.stats.ci_high is not None else ratio) - ratio) * 100)
        digest.add(xs, ys_, lo, hi)
        state = "" if t.status == "complete" else f" ({t.status})"
        ax.errorbar(
            xs,
            ys_,
            xerr=[lo, hi],
            fmt=TRIAL_MARKERS[j % len(TRIAL_MARKERS)],
            ms=4,
            capsize=2,
            lw=1,
            mfc="white" if t.status != "complete" else None,
            label=f"trial {t.index}{state}",
        )
    ax.set_yticks(list(ys.values()), [visible(c) for c in ys])
    ax.set_ylim(-0.6, len(cases) - 0.4)
    ax.set_xlabel("change in time per launch, candidate against base, % (negative: candidate faster)")
    ax.set_title(visible(f"{label}: change and 95 % interval per case"), loc="left")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def _samples(label: str, trials: list[Trial], plan: Plan, folder: Path, digest: _Digest):
    cases = _case_order(plan, trials)
    cols = min(3, len(cases))
    rows = -(-len(cases) // cols)
    fig = _figure(
        2.8 * cols + 0.4, 2.1 * rows + 0.5, left=0.45, right=0.15, top=0.55, bottom=0.5, hspace=0.75, wspace=0.3
    )
    axes = fig.subplots(rows, cols, squeeze=False)
    # each trial's case ids as a set: looked up per case, not scanned (a scan is quadratic in cases)
    loaded = [({c.case for c in t.cases}, _load(folder, t)) for t in trials]
    iterations = plan.schedule.iterations_per_sample
    for i, cid in enumerate(cases):
        ax = axes[i // cols][i % cols]
        per_arm = {}
        for side in ARM_SIDES:
            parts = [
                series_ns(a, cid, side, floor_ns(a), iterations) / 1e3
                for measured, a in loaded
                if cid in measured and key(cid, side, "ns") in a
            ]
            per_arm[side] = np.concatenate(parts) if parts else np.empty(0)
        both = np.concatenate(list(per_arm.values()))
        if both.size == 0:
            continue
        lo, hi = np.percentile(both, [0.5, 99.5])
        bins = np.linspace(lo, hi if hi > lo else lo + 1e-3, 41)
        for side, values in per_arm.items():
            digest.add(values)
            ax.hist(
                np.clip(values, bins[0], bins[-1]),
                bins=bins,
                histtype="step",
                color=COLOURS[side],
                lw=1.2,
                label=f"{side} (median {np.median(values):.3f} µs)" if values.size else side,
            )
            if values.size:
                ax.axvline(float(np.median(values)), color=COLOURS[side], lw=0.8, ls=":")
        ax.set_title(visible(cid), fontsize=8)
        ax.set_xlabel("µs per launch (0.5–99.5 % shown)")
        ax.legend(fontsize=6, frameon=False)
    for j in range(len(cases), rows * cols):
        axes[j // cols][j % cols].set_visible(False)
    fig.suptitle(visible(f"{label}: time per launch per arm, all trials pooled"), x=0.01, ha="left", fontsize=9)
    return fig


def _order(label: str, trials: list[Trial], plan: Plan, folder: Path, digest: _Digest):
    measured = [t for t in trials if t.cases]
    fig = _figure(9.5, 2.9 * len(measured) + 0.3, left=0.8, right=1.9, top=0.45, bottom=0.5, hspace=0.6)
    axes = fig.subplots(2 * len(measured), 1, squeeze=False, height_ratios=[3, 1] * len(measured))
    iterations = plan.schedule.iterations_per_sample
    for j, t in enumerate(measured):
        ax, clock_ax = axes[2 * j][0], axes[2 * j + 1][0]
        arrays = _load(folder, t)
        floor = floor_ns(arrays)
        x = 0
        traces: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {"base": [], "candidate": [], "aa": []}
        clocks, throttled, edges = [], [], []
        for c in t.cases:
            cid = c.case
            base_median = c.timing["base"].median_ns or 1.0
            names = [s for s in ("base", "candidate", "aa_a", "aa_b") if key(cid, s, "ns") in arrays]
            values = {s: series_ns(arrays, cid, s, floor, iterations) / base_median for s in names}
            mhz = {s: arrays[key(cid, s, "sm_mhz")] for s in names if key(cid, s, "sm_mhz") in arrays}
            flags = {
                s: (arrays[key(cid, s, "throttle")] & THROTTLE_MASK) != 0
                for s in names
                if key(cid, s, "throttle") in arrays
            }
            start = x
            for pair in (MAIN, AA):
                halves = taken_order(arrays, cid, pair, values)
                clock_halves = dict(enumerate(taken_order(arrays, cid, pair, mhz))) if len(mhz) == len(names) else {}
                flag_halves = dict(enumerate(taken_order(arrays, cid, pair, flags))) if len(flags) == len(names) else {}
                for h, (series, chunk) in enumerate(halves):
                    xs = np.arange(x, x + len(chunk), dtype=np.float64)
                    arm = "aa" if series.startswith("aa_") else series
                    traces[arm].append((xs, chunk))
                    if h in clock_halves:
                        clocks.append((xs, clock_halves[h][1]))
                    if h in flag_halves:
                        throttled.append(xs[flag_halves[h][1].astype(bool)])
                    x += len(chunk)
            edges.append((start, x, cid))
        for arm, parts in traces.items():
            if not parts:
                continue
            # halves joined by NaN: one path per arm, broken where another arm ran
            xs = np.concatenate([np.append(p[0], np.nan) for p in parts])
            ys = np.concatenate([np.append(p[1], np.nan) for p in parts])
            digest.add(xs, ys)
            name = {"aa": "A/A (base against itself)"}.get(arm, arm)
            ax.plot(xs, ys, color=COLOURS[arm], lw=0.6, label=name)
        for start, end, cid in edges:
            ax.axvline(start, color="black", lw=0.4, alpha=0.5)
            ax.text(
                (start + end) / 2,
                1.0,
                visible(cid),
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="bottom",
                fontsize=6,
            )
        ax.set_ylabel("time / case's base median")
        ax.set_title(
            visible(f"{label}, trial {t.index} ({t.status}): samples in the order taken"),
            loc="left",
            fontsize=8,
            pad=12,
        )
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        if clocks:
            cx = np.concatenate([np.append(p[0], np.nan) for p in clocks])
            cy = np.concatenate([np.append(np.asarray(p[1], dtype=np.float64), np.nan) for p in clocks])
            digest.add(cx, cy)
            clock_ax.plot(cx, cy, color="#2ca02c", lw=0.8, label="SM clock")
        bad = np.concatenate(throttled) if throttled else np.empty(0)
        digest.add(bad)
        if bad.size:
            clock_ax.plot(
                bad,
                np.zeros_like(bad),
                "|",
                color="#d62728",
                transform=clock_ax.get_xaxis_transform(),
                ms=6,
                label=f"throttled ({bad.size})",
            )
        clock_ax.set_ylabel("SM MHz")
        ax.tick_params(labelbottom=False)
        if j == len(measured) - 1:
            clock_ax.set_xlabel("sample, in the order taken")
        clock_ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        clock_ax.sharex(ax)
    return fig


def warm() -> None:
    """Import what drawing needs and load the font list, drawing nothing (qualify.procs.trials
    does this while its trials run, so the record's plots start at once after the last one)."""
    import matplotlib.font_manager as font_manager
    from matplotlib.backends.backend_svg import FigureCanvasSVG  # noqa: F401
    from matplotlib.figure import Figure  # noqa: F401

    font_manager.findfont(str(STYLE["font.family"]))


def render_plots(folder: Path, results: Results, plan: Plan) -> dict[str, bytes]:
    """Every plot of the record: relative path -> SVG bytes. Reads the raw samples, writes nothing."""
    import matplotlib

    out = {}
    with matplotlib.rc_context(STYLE):
        for (label, trials), (_, files) in zip(
            [(lab, ts) for lab, ts in _groups(results) if any(t.cases for t in ts)], device_plots(results).items()
        ):
            for f in files:
                digest = _Digest()
                if f.kind == "ratio":
                    fig = _ratio(label, trials, plan, digest)
                elif f.kind == "samples":
                    fig = _samples(label, trials, plan, Path(folder), digest)
                elif f.kind == "roofline":
                    fig = draw_roofline(label, trials, plan, digest, _figure, COLOURS)
                else:
                    fig = _order(label, trials, plan, Path(folder), digest)
                out[f.path] = _svg(fig, digest, visible(f"{label}: {f.title}"))
    return out


def samples_readable(folder: Path, results: Results) -> bool:
    """Whether every trial's raw samples load and hold well-formed series (report --check names
    what is wrong otherwise; a plot of damaged evidence would only hide it)."""
    from qualify.errors import QualifyError
    from qualify.results.samples import series_problems

    for t in results.trials:
        try:
            if series_problems(_load(folder, t)):
                return False
        except (QualifyError, OSError, ValueError):
            return False
    return True


def write_plots(folder: Path, results: Results, plan: Plan) -> list[str]:
    """(Re)write the record's plots; plots of devices no longer in the record are removed. Nothing
    is drawn from raw samples that are not well formed."""
    folder = Path(folder)
    if not samples_readable(folder, results):
        return []
    plots = render_plots(folder, results, plan)
    for rel, data in plots.items():
        atomic_write_bytes(folder / rel, data, root=folder)  # a link in the record is refused
    stale = folder / PLOT_DIR
    if stale.is_dir() and not stale.is_symlink():
        for path in stale.glob("device-*.svg"):
            if f"{PLOT_DIR}/{path.name}" not in plots:
                remove_in_record(path, folder)
    return sorted(plots)


def svg_facts(data: bytes) -> tuple[str | None, str | None]:
    """(matplotlib version that wrote it, data sha256 it declares) of one of qualify's SVGs."""
    text = data.decode("utf-8", errors="replace")
    creator, description = _CREATOR.search(text), _DESCRIPTION.search(text)
    return (creator.group(1) if creator else None, description.group(1) if description else None)


def plot_problems(folder: Path, results: Results, plan: Plan) -> list[str]:
    """Every way the record's plots differ from what its raw samples draw (for `report --check`)."""
    import matplotlib

    folder = Path(folder)
    expected = render_plots(folder, results, plan)
    problems = []
    for rel, data in expected.items():
        path = folder / rel
        if not os.path.lexists(path):  # anything else there is read, or refused, by read_limited
            problems.append(f"{rel}: missing; `qualify report {folder}` draws it")
            continue
        found = read_limited(path, MAX_PLOT_BYTES, root=folder)
        if found == data:
            continue
        version, declared = svg_facts(found)
        if version == matplotlib.__version__ or version is None:
            problems.append(f"{rel}: differs from the plot its raw samples draw")
        elif declared != svg_facts(data)[1]:
            problems.append(
                f"{rel}: the data it declares (sha256 {str(declared)[:16]}…) is not what the raw "
                f"samples give; drawn by matplotlib {version}, this is {matplotlib.__version__}"
            )
    extra = (
        sorted(
            p.relative_to(folder).as_posix()
            for p in (folder / PLOT_DIR).glob("device-*.svg")
            if p.relative_to(folder).as_posix() not in expected
        )
        if (folder / PLOT_DIR).is_dir()
        else []
    )
    problems.extend(f"{rel}: not a plot of this record's devices" for rel in extra)
    return problems
