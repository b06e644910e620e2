"""Why a case moved, in one line: the arms' launch geometry, occupancy and throughput side by side.

Per case and arm, per kernel: CTAs (the launch's blocks) against the SMs, the waves they make at the
blocks per SM that fit, how full the last wave is, warps per SM and the limit that binds, registers
and local memory (spills), and the fraction of the DRAM peak. A fact the arms share is said once
("both 8 warps/SM"); one that differs is shown base → candidate. Where an arm launches more than
one kernel, the kernels table's attribution names the kernel that moved most.

Everything comes from the record: the kernels table's inventory (CUPTI's launches, occupancy from
the device's limits) where the trial traced, else the trial's resources and the plan's launch
geometry; throughput from `qualify.evaluate.throughput`. Nothing here is typed by hand.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from qualify.evaluate.cupti_delta import cupti_change_stated
from qualify.evaluate.kernels import change_text, label
from qualify.evaluate.throughput import CaseRate
from qualify.plan.model import ARM_SIDES, Plan
from qualify.plan.resolve import ResolvedCase, resolve_cases
from qualify.results.model import CaseTrial, KernelChange, Trial


@dataclass(frozen=True)
class KernelShape:
    """One kernel launch of one arm, as the occupancy arithmetic sees it."""

    name: str
    ctas: int
    blocks_per_sm: int | None
    warps_per_sm: int | None
    limiter: str | None
    registers: int
    local_bytes: int

    def waves(self, sms: int) -> float | None:
        """CTAs over the CTAs the device holds at once; None where no block fits or it is unknown."""
        if not self.blocks_per_sm:
            return None
        return self.ctas / (self.blocks_per_sm * sms)


def shapes(case: CaseTrial, resolved: ResolvedCase | None) -> dict[str, list[KernelShape]]:
    """Each arm's kernels, in launch order: the traced inventory, else resources and plan geometry."""
    out: dict[str, list[KernelShape]] = {}
    for side in ARM_SIDES:
        rows = case.kernels.inventory.get(side, []) if case.kernels is not None else []
        if rows:
            out[side] = [
                KernelShape(
                    label(r), math.prod(r.grid), r.blocks_per_sm, r.warps_per_sm, r.limiter, r.registers, r.local_bytes
                )
                for r in rows
            ]
            continue
        res = case.resources.get(side)
        launch = resolved.arms[side].launch if resolved is not None else None
        if res is None or launch is None:
            continue
        out[side] = [
            KernelShape(
                "",
                math.prod(launch.grid),
                res.blocks_per_sm,
                res.warps_per_sm,
                None,
                res.registers,
                res.local_bytes,
            )
        ]
    return out


def _pair(values: tuple[str, str], what: str) -> str:
    base, candidate = values
    return f"both {base}{what}" if base == candidate else f"{base} → {candidate}{what}"


def _waves(k: KernelShape, sms: int) -> str:
    waves = k.waves(sms)
    if waves is None:
        return "n/a waves"
    fill = waves - math.floor(waves)
    if waves < 0.1:
        return f"{waves:.2g} waves"  # 0.0039, never 0.00
    if waves <= 1 or not fill:
        return f"{waves:.2f} waves"
    return f"{waves:.2f} waves (the last {fill * 100:.0f} % full)"


def _busy(k: KernelShape, sms: int) -> str:
    """SMs with work in the first wave (CTAs are spread one per SM before any SM takes a second)."""
    return f"{min(k.ctas, sms)}"


def kernel_line(base: KernelShape, candidate: KernelShape, sms: int) -> str:
    """The contrast of one kernel launch between the arms."""
    parts = [
        _pair((f"{base.ctas:,}", f"{candidate.ctas:,}"), f" CTAs on {sms} SMs"),
        _pair((_busy(base, sms), _busy(candidate, sms)), " SMs with work"),
        _pair((_waves(base, sms), _waves(candidate, sms)), ""),
    ]
    warps = (str(base.warps_per_sm or "n/a"), str(candidate.warps_per_sm or "n/a"))
    limit = (base.limiter or "", candidate.limiter or "")
    if limit[0] == limit[1]:
        limited = f", limited by {limit[0]}" if limit[0] else ""
    else:
        limited = f", limited by {limit[0] or 'n/a'} → {limit[1] or 'n/a'}"
    parts.append(_pair(warps, " warps/SM at most") + limited)
    parts.append(_pair((str(base.registers), str(candidate.registers)), " registers"))
    spills = (base.local_bytes, candidate.local_bytes)
    parts.append(
        "no local memory (spills)"
        if spills == (0, 0)
        else _pair((f"{spills[0]:,} B", f"{spills[1]:,} B"), " local memory per thread (spills)")
    )
    return "; ".join(parts)


def _moved_most(attribution: list[KernelChange]) -> KernelChange | None:
    timed = [c for c in attribution if c.base_ns is not None and c.candidate_ns is not None]
    if not timed:
        return None
    return max(timed, key=lambda c: abs((c.candidate_ns or 0.0) - (c.base_ns or 0.0)))


def why_line(
    case: CaseTrial, resolved: ResolvedCase | None, sms: int, rate: CaseRate | None, cupti_changes: bool = True
) -> str:
    """The case's cause in one line (without the case's name and change, which the caller adds).
    `cupti_changes`: whether the trial's trace version lets CUPTI's change per kernel be said
    (qualify.evaluate.cupti_delta.cupti_change_stated); without it no kernel is named as the mover."""
    kernels = shapes(case, resolved)
    parts = []
    if all(side in kernels for side in ARM_SIDES):
        base, candidate = kernels["base"], kernels["candidate"]
        if len(base) == 1 and len(candidate) == 1:
            parts.append(kernel_line(base[0], candidate[0], sms))
        else:
            parts.append(_pair((str(len(base)), str(len(candidate))), " kernels per call"))
            moved = _moved_most(case.kernels.attribution) if case.kernels is not None and cupti_changes else None
            if moved is not None:
                parts.append(f"most change in {label(moved)}: {change_text(moved)}")
                suffix = "" if moved.occurrence == 0 else f" #{moved.occurrence + 1}"
                b = next((k for k in base if k.name == moved.name + suffix), None)
                c = next((k for k in candidate if k.name == (moved.candidate_name or moved.name) + suffix), None)
                if b is not None and c is not None:
                    parts.append(kernel_line(b, c, sms))
    if rate is not None:
        base_f, cand_f = (rate.fraction(side) for side in ARM_SIDES)
        if base_f is not None and cand_f is not None:
            parts.append(_pair((f"{base_f * 100:.0f} %", f"{cand_f * 100:.0f} %"), " of peak DRAM bandwidth"))
        else:  # no peak known for the device: see the hardware table
            base_r, cand_r = (f"{rate.arms[side].gb_per_s:,.0f}" for side in ARM_SIDES)
            parts.append(_pair((base_r, cand_r), " GB/s"))
    return "; ".join(parts) if parts else "no launch geometry recorded"


MAX_CAUSES = 8  # per device: a many-case plan shows this many, then says how many more


@dataclass(frozen=True)
class Cause:
    device: str
    case: str
    delta_pct: float  # median over the device's complete trials of the change in time per launch
    text: str


def case_causes(plan: Plan, groups: dict[str, list[Trial]], rates: list[CaseRate]) -> tuple[list[Cause], int]:
    """Per device (label -> its trials), the planned cases' one-line causes from the first complete
    trial that measured each (geometry does not vary between trials); and how many were left out."""
    resolved = {c.id: c for c in resolve_cases(plan)}
    by_case = {(r.device, r.case): r for r in rates}
    out, left = [], 0
    for device, trials in groups.items():
        complete = [t for t in trials if t.status == "complete"]
        causes = []
        for cid, rc in resolved.items():
            rows = [(t, c) for t in complete for c in t.cases if c.case == cid]
            if not rows:
                continue
            trial, case = rows[0]
            delta = statistics.median(c.stats.delta_pct for _, c in rows)
            sms, stated = trial.provenance.device.sm_count, cupti_change_stated(trial.kernel_trace)
            text = why_line(case, rc, sms, by_case.get((device, cid)), stated)
            causes.append(Cause(device, cid, delta, text))
        left += max(0, len(causes) - MAX_CAUSES)
        out += causes[:MAX_CAUSES]
    return out, left
