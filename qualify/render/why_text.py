"""The README's words for why a case moved and what the record's terms mean, as values.

Per-case causes and throughput (computed in `qualify.evaluate.why` and `.throughput`), missed and
held gates grouped one row per gate, the machine code of a template change paired function to
function, provenance with the paths that were dirty, and the timer's and stop rule's fields in
plain words. Every function is pure over Results and the plan.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from qualify.evaluate.headline import cause_lines, headline
from qualify.evaluate.kernels import template_name
from qualify.evaluate.throughput import CaseRate, case_rates, peak_bandwidth
from qualify.evaluate.verdict import by_device
from qualify.plan.model import Plan
from qualify.render.markdown import Md, code, line_start, md
from qualify.results.model import CodeIdentity, DeviceInfo, Provenance, Results, Trial


def causes_text(results: Results, plan: Plan) -> list[Md]:
    """One line per case: its change, then the arms side by side (qualify.evaluate.why)."""
    return [line_start(Md(line)) for line in cause_lines(headline(results, plan), md)]


# ---------------------------------------------------------------------------------------------
# throughput


def throughput_rows(results: Results, plan: Plan, device: str) -> list[CaseRate]:
    return [r for r in case_rates(plan, by_device(results.trials)) if r.device == device]


def peak_text(device: DeviceInfo) -> str:
    peak = peak_bandwidth(device)
    if peak is None:
        return "peak not recorded"
    return (
        f"{peak / 1e9:,.0f} GB/s ({device.mem_clock_max_mhz:,} MHz x 2 transfers x "
        f"{device.memory_bus_width_bits:,}-bit bus)"
    )


def gb_s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f} GB/s"


def peak_pct(value: float | None) -> str:
    return "peak not recorded" if value is None else f"{value * 100:.1f} %"


# ---------------------------------------------------------------------------------------------
# gates, grouped


@dataclass(frozen=True)
class GateGroup:
    gate: str
    device: str
    bound: str
    judged: int
    missed: int
    cases_missed: tuple[str, ...]
    low_pct: float  # change in time per launch over the missed judgements, else over all
    high_pct: float
    pooled: bool


def gate_groups(results: Results) -> list[GateGroup]:
    """One row per gate and device: how many judgements missed, which cases, the range of changes."""
    groups: dict[tuple[str, str], list] = {}
    for g in results.verdict.gates:
        groups.setdefault((g.gate, g.device), []).append(g)
    out = []
    for (gate, device), judged in groups.items():
        missed = [g for g in judged if not g.passed]
        values = [g.value_pct for g in (missed or judged)]
        out.append(
            GateGroup(
                gate=gate,
                device=device,
                bound=judged[0].bound,
                judged=len(judged),
                missed=len(missed),
                cases_missed=tuple(dict.fromkeys(g.case for g in missed)),
                low_pct=min(values),
                high_pct=max(values),
                pooled=all(g.trial is None for g in judged),
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# machine code of a template change, paired


PAIR = "pair "  # how run.code_identity writes a template's two instantiations, with instruction counts


def code_pairs(trials: list[Trial], identity: CodeIdentity) -> list[Md]:
    """Functions only in one arm whose demangled names differ only in template arguments, paired
    (`fwd<64>` ↔ `fwd<128>`) with what differs in numbers: instructions where the trial counted
    them, registers, shared and local memory from the arms' launch in the first measured case."""
    numbers = _resource_numbers(trials)
    counted = [line.removeprefix(PAIR) for line in identity.differences if line.startswith(PAIR)]
    if counted:
        out = []
        for line in counted:
            pair, _, instructions = line.partition(": ")
            x, _, y = pair.partition(" ↔ ")
            out.append(Md(f"{code(x)} ↔ {code(y)}: {md(instructions)}{numbers}"))
        return out
    names: dict[str, str] = {}
    for t in trials:
        if t.kernel_trace is not None:
            names.update(t.kernel_trace.names)
    only: dict[str, list[str]] = {"base": [], "candidate": []}
    for line in identity.differences:
        for side in only:
            suffix = f": only in {side}"
            if line.endswith(suffix):
                only[side].append(line[: -len(suffix)])
    out = []
    for b in only["base"]:
        bname = names.get(b, b)
        match = next((c for c in only["candidate"] if template_name(names.get(c, c)) == template_name(bname)), None)
        if match is None or bname == b:
            continue
        out.append(Md(f"{code(bname)} ↔ {code(names[match])}: instruction counts not recorded{numbers}"))
    return out


def differences_listed(identity: CodeIdentity) -> list[str]:
    """The comparison's lines other than the pairs `code_pairs` states."""
    return [line for line in identity.differences if not line.startswith(PAIR)]


def _resource_numbers(trials: list[Trial]) -> str:
    case = next((c for t in trials if t.status == "complete" for c in t.cases), None)
    if case is None or set(case.resources) != {"base", "candidate"}:
        return ""
    b, c = case.resources["base"], case.resources["candidate"]
    facts = [
        ("registers", b.registers, c.registers, ""),
        ("static shared memory", b.static_shared_bytes, c.static_shared_bytes, " B"),
        ("dynamic shared memory", b.dynamic_shared_bytes, c.dynamic_shared_bytes, " B"),
        ("local memory (spills)", b.local_bytes, c.local_bytes, " B"),
        ("threads per block", b.threads_per_block, c.threads_per_block, ""),
    ]
    parts = [f"{what} {x:,}{unit} → {y:,}{unit}" for what, x, y, unit in facts if x != y]
    same = [what for what, x, y, _ in facts if x == y]
    text = "; ".join(parts) if parts else "the same resources"
    if same:
        text += f"; the same {', '.join(same)}"
    return f"; at {md(case.case)}: {text}"


# ---------------------------------------------------------------------------------------------
# provenance


def dirty_text(p: Provenance) -> Md:
    """What was dirty when the trial ran, and whether the lock's files were among it."""
    if p.git_dirty is None:
        return Md("unknown (not a git work tree)")
    if not p.git_dirty:
        return Md("no")
    if p.dirty_paths is None:
        return Md("yes (paths not recorded)")
    frozen = p.dirty_frozen or []
    head = (
        "yes, frozen inputs among them: " + ", ".join(code(f, cell=True) for f in frozen)
        if frozen
        else "yes; the frozen inputs were clean"
    )
    return Md(
        f"{head} ({len(p.dirty_paths)} paths: "
        + ", ".join(code(f, cell=True) for f in p.dirty_paths[:5])
        + (", …" if len(p.dirty_paths) > 5 else "")
        + ")"
    )


# ---------------------------------------------------------------------------------------------
# plain words for the record's terms


def _batch(fields: dict) -> str | None:
    if "batch_min_ns" not in fields or "max_batch" not in fields:
        return None
    return (
        f"a case whose launches take at least {float(fields['batch_min_ns']) / 1e3:g} µs queues a whole "
        f"ABBA half (at most {fields['max_batch']} samples) behind one blocking kernel, others one sample each"
    )


_PREFLIGHT = {
    "isolated workers": "each case ran once per arm in a child process before timing",
    "reused from this run's first trial": "not repeated: this run's first trial checked the same builds",
    "none": "none",
}


def timer_words(trial: Trial) -> Md:
    """Timer fields beyond mode, cache and floor, each in plain words (unknown ones as recorded)."""
    fields = {k: v for k, v in trial.timer.items() if k not in ("mode", "cache", "floor_ns")}
    parts = []
    batch = _batch(fields)
    if batch:
        parts.append(batch)
    if "floor_samples" in fields:
        parts.append(f"floor from {fields['floor_samples']} empty windows")
    if "iterations_per_sample" in fields:
        n = fields["iterations_per_sample"]
        parts.append(f"{n} launch{'' if n == 1 else 'es'} per window")
    if "preflight" in fields:
        parts.append("preflight: " + _PREFLIGHT.get(str(fields["preflight"]), str(fields["preflight"])))
    if "telemetry" in fields:
        parts.append(f"clocks and throttling read by {fields['telemetry']}")
    known = {"batch_min_ns", "max_batch", "floor_samples", "iterations_per_sample", "preflight", "telemetry"}
    parts += [f"{k}={v}" for k, v in sorted(fields.items()) if k not in known]
    return md("; ".join(parts) or "none")


STOP_WORDS = {
    "blocks done": "all planned blocks ran",
    "target met": "interval narrow enough",
    "block cap": "block limit reached",
    "sample cap": "sample budget reached",
    "wall cap": "time budget reached",
}


def stop_words(reason: str) -> str:
    return STOP_WORDS.get(reason, reason)


def user_command(argv: list[str]) -> str:
    """The command as a user types it: `qualify …`, without the options qualify adds for its own
    child processes."""
    words = ["qualify" if i == 0 and w.endswith("__main__.py") else w for i, w in enumerate(argv)]
    out: list[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
            continue
        if w == "--trial-process":
            skip = True
            continue
        if w.startswith("--trial-process="):
            continue
        out.append(w)
    return shlex.join(out)


def launched_text(trials: list[Trial], identity: CodeIdentity) -> Md:
    """The functions a comparison of launched code compared, by arm: '`k` (base) against `k`
    (candidate)', launch by launch for arms with their own launches. Names as the kernel trace
    demangled them where it saw them, else as launched."""
    names: dict[str, str] = {}
    for t in trials:
        if t.kernel_trace is not None:
            names.update(t.kernel_trace.names)

    launches = {str(side): fs for side, fs in identity.launched.items()}

    def arm(side: str) -> str:
        listed = [code(f.shown or names.get(f.name, f.name)) for f in launches.get(side, [])]
        return (" then ".join(listed) or "nothing") + f" ({side})"

    return Md(f"{arm('base')} against {arm('candidate')}")


WHY_FUNCTIONS = (
    launched_text,
    causes_text,
    throughput_rows,
    peak_text,
    gate_groups,
    code_pairs,
    differences_listed,
    dirty_text,
    timer_words,
    user_command,
)
WHY_FILTERS = {"gb_s": gb_s, "peak_pct": peak_pct, "stop_words": stop_words}
