"""Attribution: which kernels a change between two builds moved, from both arms' inventories.

Kernels are matched by demangled name and occurrence within a call (the second `prep` of base
against the second `prep` of candidate). A change is "same" inside the band — within SAME_PCT
of base or within SAME_NS, whichever is wider, since a 300 ns difference in a 2 µs kernel is
CUPTI's own jitter rather than a change. Attribution is information: it explains a verdict, it
never decides one.
"""

from __future__ import annotations

from qualify.evaluate.second_timer import agreement
from qualify.results.model import CaseKernels, DeviceLimits, KernelChange, KernelRow, TracedCall
from qualify.run.inventory import inventory

SAME_PCT = 2.0
SAME_NS = 300.0
BAND_TEXT = f"same: within ±{SAME_PCT:g} % or ±{SAME_NS / 1e3:g} µs of base"


def attribute(base: list[KernelRow], candidate: list[KernelRow]) -> list[KernelChange]:
    """Base's kernels in base's launch order, then the ones only the candidate launches."""
    cand = {(r.name, r.occurrence): r for r in candidate}
    out = []
    for r in base:
        c = cand.pop((r.name, r.occurrence), None)
        if c is None:
            out.append(KernelChange(name=r.name, occurrence=r.occurrence, base_ns=r.median_ns,
                                    candidate_ns=None, change_pct=None, outcome="only in base"))  # fmt: skip
            continue
        delta = c.median_ns - r.median_ns
        pct = delta / r.median_ns * 100.0 if r.median_ns > 0 else None
        inside = abs(delta) <= SAME_NS or (pct is not None and abs(pct) <= SAME_PCT)
        outcome = "same" if inside else ("slower" if delta > 0 else "faster")
        out.append(KernelChange(name=r.name, occurrence=r.occurrence, base_ns=r.median_ns,
                                candidate_ns=c.median_ns, change_pct=pct, outcome=outcome))  # fmt: skip
    out.extend(KernelChange(name=c.name, occurrence=c.occurrence, base_ns=None, candidate_ns=c.median_ns,
                            change_pct=None, outcome="only in candidate") for c in cand.values())  # fmt: skip
    return out


def change_text(change: KernelChange) -> str:
    """`flash<128>`: +12.1 %, `prep`: same, `tail`: only in candidate (name without backticks)."""
    if change.outcome in ("slower", "faster") and change.change_pct is not None:
        return f"{change.change_pct:+.1f} %"
    return change.outcome


def label(change: KernelChange | KernelRow) -> str:
    return change.name if change.occurrence == 0 else f"{change.name} #{change.occurrence + 1}"


def case_kernels(trace: dict[str, list[TracedCall]], names: dict[str, str], limits: DeviceLimits | None,
                 floor_ns: float) -> CaseKernels:  # fmt: skip
    """Everything the record says about a case's kernels, from its raw trace alone."""
    rows = {side: inventory(calls, names, limits) for side, calls in trace.items()}
    attribution = attribute(rows["base"], rows["candidate"]) if {"base", "candidate"} <= rows.keys() else []
    return CaseKernels(inventory=rows, attribution=attribution,
                       timers={side: agreement(calls, floor_ns) for side, calls in trace.items()})  # fmt: skip
