"""Attribution: which kernels a change between two builds moved, from both arms' inventories.

Kernels are matched by demangled name and occurrence within a call (the second `prep` of base
against the second `prep` of candidate). Kernels left over on both sides are then matched by
their template's name alone, in launch order: a build that changes a tile size often changes a
template argument (`fwd<64>` becomes `fwd<128>`), and that is the same kernel, changed. A change is
"same" inside the band — within SAME_PCT of base or within SAME_NS, whichever is wider, since a
300 ns difference in a 2 µs kernel is CUPTI's own jitter rather than a change. Attribution is
information: it explains a verdict, it never decides one.
"""

from __future__ import annotations

from collections.abc import Sequence

from qualify.evaluate.inventory import inventory
from qualify.evaluate.second_timer import agreement
from qualify.plan.model import ARM_SIDES, Side
from qualify.results.model import CaseKernels, CaseTrial, DeviceLimits, KernelChange, KernelRow, TracedCall

SAME_PCT = 2.0
SAME_NS = 300.0
BAND_TEXT = f"same: within ±{SAME_PCT:g} % or ±{SAME_NS / 1e3:g} µs of base"


def template_name(name: str) -> str:
    """`ns::fwd<64, true>` -> `ns::fwd`: the name without its outermost template arguments."""
    return name.partition("<")[0]


def _change(r: KernelRow, c: KernelRow) -> KernelChange:
    delta = c.median_ns - r.median_ns
    pct = delta / r.median_ns * 100.0 if r.median_ns > 0 else None
    inside = abs(delta) <= SAME_NS or (pct is not None and abs(pct) <= SAME_PCT)
    outcome = "same" if inside else ("slower" if delta > 0 else "faster")
    return KernelChange(
        name=r.name,
        occurrence=r.occurrence,
        candidate_name=None if c.name == r.name else c.name,
        base_ns=r.median_ns,
        candidate_ns=c.median_ns,
        change_pct=pct,
        outcome=outcome,
    )


def match_keys(base: list[tuple[str, int]], candidate: list[tuple[str, int]]) -> dict[int, int]:
    """base index -> candidate index of each matched kernel, keys (name, occurrence) in launch
    order: the same name and occurrence first, then the leftovers by their template's name."""
    exact = {k: j for j, k in enumerate(candidate)}
    matched: dict[int, int] = {}
    for i, k in enumerate(base):
        j = exact.pop(k, None)
        if j is not None:
            matched[i] = j
    leftover = sorted(exact.values())
    for i, k in enumerate(base):
        if i in matched:
            continue
        j = next((j for j in leftover if template_name(candidate[j][0]) == template_name(k[0])), None)
        if j is not None:
            leftover.remove(j)
            matched[i] = j
    return matched


def attribute(base: list[KernelRow], candidate: list[KernelRow]) -> list[KernelChange]:
    """Base's kernels in base's launch order, then the ones only the candidate launches."""
    pairs = match_keys([(r.name, r.occurrence) for r in base], [(c.name, c.occurrence) for c in candidate])
    matched = {i: candidate[j] for i, j in pairs.items()}
    leftover = [c for j, c in enumerate(candidate) if j not in pairs.values()]
    out = []
    for i, r in enumerate(base):
        if i in matched:
            out.append(_change(r, matched[i]))
        else:
            out.append(
                KernelChange(
                    name=r.name,
                    occurrence=r.occurrence,
                    base_ns=r.median_ns,
                    candidate_ns=None,
                    change_pct=None,
                    outcome="only in base",
                )
            )
    out.extend(
        KernelChange(
            name=c.name,
            occurrence=c.occurrence,
            base_ns=None,
            candidate_ns=c.median_ns,
            change_pct=None,
            outcome="only in candidate",
        )
        for c in leftover
    )
    return out


def change_text(change: KernelChange) -> str:
    """'+12.1 %', 'same', 'only in candidate' (the kernel's label is written beside it)."""
    if change.outcome in ("slower", "faster") and change.change_pct is not None:
        return f"{change.change_pct:+.1f} %"
    return change.outcome


def label(change: KernelChange | KernelRow) -> str:
    """The kernel as the record names it: `prep`, `prep #2` for its second launch in a call,
    `fwd<64> → fwd<128>` where the candidate's template arguments differ."""
    name = change.name if change.occurrence == 0 else f"{change.name} #{change.occurrence + 1}"
    other = getattr(change, "candidate_name", None)
    return name if other is None else f"{name} → {other}"


def case_kernels(
    trace: dict[Side, list[TracedCall]],
    names: dict[str, str],
    limits: DeviceLimits | None,
    floor_ns: float,
    offset_ns: float = 0.0,
) -> CaseKernels:
    """Everything the record says about a case's kernels, from its raw trace alone."""
    rows = {side: inventory(calls, names, limits) for side, calls in trace.items()}
    attribution = attribute(rows["base"], rows["candidate"]) if {"base", "candidate"} <= rows.keys() else []
    return CaseKernels(
        inventory=rows,
        attribution=attribution,
        timers={side: agreement(calls, floor_ns, offset_ns) for side, calls in trace.items()},
    )


def traced_launches_match(cases: Sequence[CaseTrial]) -> bool | None:
    """Whether the kernel inventory saw both libraries launch the same kernels the same way and
    write the same bytes, in every case; None when a case has no trace to judge by.

    `cases`: the trial's CaseTrial list (raw CUPTI records in `trace`, parity per output).
    """
    if not cases:
        return None
    for case in cases:
        if not case.trace or any(not case.trace.get(side) for side in ARM_SIDES):
            return None
        if not all(p.equal for p in case.parity):
            return False
        shapes = {side: {_launch_shape(call) for call in case.trace[side]} for side in ARM_SIDES}
        if len(shapes["base"]) != 1 or shapes["base"] != shapes["candidate"]:
            return False  # the arms launch differently, or one arm's calls disagree among themselves
    return True


def _launch_shape(call: TracedCall) -> tuple[object, ...]:
    return tuple(
        (
            k.name,
            tuple(k.grid),
            tuple(k.block),
            k.registers_per_thread,
            k.static_shared_bytes,
            k.dynamic_shared_bytes,
            k.local_bytes_per_thread,
        )
        for k in call.kernels
    )
