"""The roofline of a record's device: each arm's DRAM throughput per case against the peak.

One point per case and arm at (bytes one launch moves, GB/s from the arm's median time per
launch), a line from base to candidate per case, and the device's peak DRAM bandwidth as the
roof (`qualify.evaluate.throughput`). Without a recorded peak the roof is left out and the title
says so. Drawn by `qualify.render.plots` beside its other plots, with the same data digest.
"""

from __future__ import annotations

from typing import Callable

from qualify.evaluate.throughput import case_rates, peak_bandwidth
from qualify.plan.model import ARM_SIDES, Plan
from qualify.render.plain import visible
from qualify.results.model import Trial

TITLE = "DRAM throughput of each arm per case (GB/s from the median time per launch) under the device's peak"


def draw_roofline(label: str, trials: list[Trial], plan: Plan, digest, figure: Callable, colours: dict[str, str]):
    rates = case_rates(plan, {label: trials})
    complete = [t for t in trials if t.status == "complete"]
    peak = peak_bandwidth(complete[0].provenance.device) if complete else None
    fig = figure(8.0, 4.0, left=0.9, right=2.9, top=0.35, bottom=0.55)
    ax = fig.add_subplot()
    for r in rates:
        xs = [r.arms[side].bytes_moved for side in ARM_SIDES]
        ys = [r.arms[side].gb_per_s for side in ARM_SIDES]
        digest.add(xs, ys)
        ax.plot(xs, ys, color="#bbbbbb", lw=0.8, zorder=1)
        ax.annotate(visible(r.case), (xs[-1], ys[-1]), fontsize=6, xytext=(3, 3), textcoords="offset points")
    for side in ARM_SIDES:
        xs = [r.arms[side].bytes_moved for r in rates]
        ys = [r.arms[side].gb_per_s for r in rates]
        ax.scatter(xs, ys, s=18, color=colours[side], label=side, zorder=2)
    if peak is not None:
        digest.add(peak)
        ax.axhline(peak / 1e9, color="black", lw=1.0, ls="--", label=f"peak DRAM {peak / 1e9:,.0f} GB/s")
    if rates:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("bytes moved per launch")
    ax.set_ylabel("GB/s")
    roof = "" if peak is not None else " (peak not recorded)"
    ax.set_title(visible(f"{label}: throughput per case{roof}"), loc="left")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig
