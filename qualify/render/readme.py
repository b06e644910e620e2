"""Render a record's README.md from its Results (and the plan, for the protocol's own words).

Compute, then format. Every number in the README is a value of Results or the plan, or is derived
from them by one of the small pure functions here; the template only looks values up and formats
them through the filters of qualify.render.markdown. Nothing is typed by hand, so `qualify report --check` can render a
record again and compare it with the README byte for byte.
"""

from __future__ import annotations

import fnmatch
import functools
import statistics
from dataclasses import dataclass
from pathlib import Path

import jinja2

from qualify.evaluate.headline import headline, headline_lines, reason_lines
from qualify.evaluate.verdict import device_label
from qualify.plan.checks import selected_cases
from qualify.plan.model import Buffer, CudaArm, DeviceSpec, Plan, PythonArm, SpeedGate
from qualify.plan.model.hardware import target_for
from qualify.plan.resolve import case_id
from qualify.render.kernels_text import KERNEL_FILTERS, KERNEL_FUNCTIONS, KERNEL_GLOBALS
from qualify.render.markdown import FILTERS, Md, code, finalize, line_start, md
from qualify.render.plots import device_plots
from qualify.render.why_text import WHY_FILTERS, WHY_FUNCTIONS, user_command
from qualify.results.model import (
    CaseTrial,
    CodeIdentity,
    ControlResult,
    DeviceInfo,
    Failure,
    Results,
    SanitizerResult,
    Trial,
)

TEMPLATE = "README.md.j2"
SIDES = ("base", "candidate")

# ---------------------------------------------------------------------------------------------
# derived values: pure functions of Results and the plan


@dataclass(frozen=True)
class DeviceGroup:
    label: str
    device: DeviceInfo
    trials: tuple[Trial, ...]

    @property
    def complete(self) -> tuple[Trial, ...]:
        return tuple(t for t in self.trials if t.status == "complete")


def device_groups(trials: list[Trial]) -> list[DeviceGroup]:
    """Trials grouped by device (name and UUID), devices in the order they first ran."""
    order: dict[str, list[Trial]] = {}
    for t in trials:
        order.setdefault(device_label(t), []).append(t)
    return [DeviceGroup(label, ts[0].provenance.device, tuple(ts)) for label, ts in order.items()]


def planned_cases(plan: Plan) -> list[str]:
    return [case_id(c) for c in plan.workload.cases]


def case_ids(plan: Plan, trials: list[Trial] | tuple[Trial, ...]) -> list[str]:
    """Case ids measured in these trials, in the plan's order (unplanned ids last, as found)."""
    seen = {c.case for t in trials for c in t.cases}
    planned = planned_cases(plan)
    extra = [c.case for t in trials for c in t.cases if c.case not in planned]
    return [cid for cid in planned if cid in seen] + list(dict.fromkeys(extra))


def find_case(trial: Trial, cid: str) -> CaseTrial | None:
    return next((c for c in trial.cases if c.case == cid), None)


@dataclass(frozen=True)
class TrialsMedian:
    base_ns: float
    candidate_ns: float
    delta_pct: float
    trials: int


def median_of_trials(trials: tuple[Trial, ...], cid: str) -> TrialsMedian | None:
    """Medians over complete trials: of each arm's median, and of the change.

    The change is the median of the trials' changes rather than a ratio of the two medians shown
    beside it; gates judged over trials read the pooled two-level interval instead (Results.pooled).
    """
    rows = [c for t in trials if t.status == "complete" for c in t.cases if c.case == cid]
    if not rows:
        return None
    return TrialsMedian(
        base_ns=statistics.median(c.timing["base"].median_ns for c in rows),
        candidate_ns=statistics.median(c.timing["candidate"].median_ns for c in rows),
        delta_pct=statistics.median(c.stats.delta_pct for c in rows),
        trials=len(rows),
    )


def spread(values: list[int]) -> str:
    """'40' when every value agrees, '32 to 40' otherwise, 'none' without values."""
    if not values:
        return "none"
    lo, hi = min(values), max(values)
    return f"{lo:,}" if lo == hi else f"{lo:,} to {hi:,}"


def samples_per_arm(trials: tuple[Trial, ...]) -> str:
    return spread([c.timing[s].samples for t in trials for c in t.cases for s in SIDES if s in c.timing])


def warmups_per_arm(trials: tuple[Trial, ...]) -> str:
    return spread([c.timing[s].warmup for t in trials for c in t.cases for s in SIDES if s in c.timing])


def throttled(trials: tuple[Trial, ...]) -> tuple[int, int]:
    """(throttled, all) timed samples of both arms over these trials."""
    timings = [c.timing[s] for t in trials for c in t.cases for s in SIDES if s in c.timing]
    return sum(x.throttled_samples for x in timings), sum(x.samples for x in timings)


def planned_samples_per_arm(plan: Plan) -> int:
    """Timed samples per arm, case and trial under the fixed schedule: each ABBA block runs an arm twice."""
    return 2 * plan.schedule.samples_per_block * plan.schedule.blocks


def gate_cases(gate: SpeedGate, plan: Plan) -> list[str]:
    return selected_cases(gate, plan)


def gate_bound(gate: SpeedGate) -> str:
    """The gate as declared, in the record's one convention: change in time per launch, negative is faster."""
    bounds = []
    if gate.min_speedup_pct is not None:
        # judged per trial, a speed-up must also be resolved by the trial's interval (class faster)
        resolved = " with class faster" if gate.every_trial else ""
        bounds.append(f"change <= {-gate.min_speedup_pct:+g} %{resolved}")
    if gate.max_regression_pct is not None:
        bounds.append(f"change <= {gate.max_regression_pct:+g} %")
    return " and ".join(bounds)


def _assignments(values: dict) -> str:
    return ", ".join(f"{md(k)}={md(v)}" for k, v in values.items())


def arm_text(plan: Plan, side: str) -> Md:
    arm = plan.arm(side)
    params = _assignments(arm.params)
    if isinstance(arm, CudaArm):
        if arm.launches is None:
            text = f"CUDA kernel {code(arm.kernel)} from {code(arm.source)}"
        else:  # its own sequence, timed as one call
            text = f"CUDA launches {' then '.join(code(k) for k in arm.kernels)} from {code(arm.source)}"
        if arm.defines:
            text += ", defines " + _assignments(arm.defines)
        if arm.options:
            text += ", NVRTC options " + " ".join(code(o) for o in arm.options)
    elif isinstance(arm, PythonArm):
        text = f"Python callable {code(arm.callable)}" + (", timed as CUDA-graph replays" if arm.graph else "")
        if arm.autotune == "warmup":
            text += ", autotuned in warm-up"
    else:
        # a plan may leave the library to the command line (`qualify compare BASE.so CAND.so`);
        # the trials name the files they loaded, with their digests, in the Libraries section
        where = code(arm.library) if arm.library is not None else "the library given on the command line"
        text = f"library entry point {code(arm.symbol)} in {where}"
    return Md(text + (f" ({params})" if params else ""))


def buffer_text(buffer: Buffer) -> Md:
    shape = ", ".join(md(d) for d in buffer.shape)
    text = f"{code(buffer.name)} {buffer.dtype} [{shape}] {buffer.role}"
    init = buffer.init
    if init is None:
        return Md(text + " (poisoned before every launch)")
    fields = ", ".join(f"{k} {v:g}" for k, v in init.model_dump().items() if k != "kind")
    return Md(text + f", {init.kind}" + (f" ({fields})" if fields else ""))


def fidelity_text(plan: Plan) -> Md:
    f = plan.acceptance.fidelity
    against = {
        "base": "the base arm's outputs",
        "float64": f"a float64 reference {code(f.reference)}" if f.reference else "",
        "golden": f"the golden file {code(f.golden)}" if f.golden else "",
    }[f.against]
    if f.mode == "bytes":
        return Md(f"outputs byte-identical to {against}")
    if f.mode == "tolerance":
        text = f"outputs within |err| ≤ {f.atol:g} + {f.rtol:g}·|expected| of {against}"
        text += f" (written by {code(f.golden_script)})" if f.golden_script else ""
        if f.tolerances:
            from qualify.render.tolerance_text import tolerances_text

            text = f"outputs within their case's bound of {against}"
            text += f" (written by {code(f.golden_script)})" if f.golden_script else ""
            text += f": {md(tolerances_text(f))}"
        return Md(text + ("; bit-exact where selected" if f.exact else ""))
    unit = {"ulp": "ulp", "abs": "absolute", "rel": "relative"}[f.mode]
    return Md(f"outputs within {f.bound:g} ({unit}) of {against}")


def control_text(control) -> Md:
    if control.kind == "build":
        return Md("candidate rebuilt with " + _assignments(control.defines))
    if control.kind == "callable":
        return Md(f"candidate called with control={md(repr(control.name))}")
    m = control.mutation
    what = {
        "flip_bit": f"bit {m.bit} of element {md(m.index)} flipped",
        "set": f"element {md(m.index)} set to {m.value:g}",
        "scale": f"scaled by {m.value:g}",
        "zero": "zeroed",
        "fill": f"every element set to {m.value:g}" if m.op == "fill" else "",
        "swap": f"{m.length} elements at {md(m.index)} exchanged with those at {md(m.other)}" if m.op == "swap" else "",
    }[m.op]
    return Md(f"input {code(control.buffer)} {what}")


def timer_extra(trial: Trial) -> Md:
    """Timer fields beyond mode, cache and floor, as the run recorded them."""
    rest = {k: v for k, v in trial.timer.items() if k not in ("mode", "cache", "floor_ns")}
    return Md(", ".join(f"{md(k)}={md(v)}" for k, v in sorted(rest.items())) or "none")


def golden_tables(plan: Plan, results: Results) -> Md:
    """For plans judged by counts (a golden file, or a tolerance against the base arm): each case's
    bound (when the plan gives bounds per case), then per trial the candidate's (and, against a
    golden, the base's) counts, the controls as declared and measured, and the gate's resolution."""
    from qualify.render.tolerance_text import bounds_table, controls_table, counts_table, resolution_lines

    source = "the golden" if plan.acceptance.fidelity.against == "golden" else "the base arm"
    out = []
    bounds = bounds_table(plan, results)
    if bounds:
        out += ["", "Each case's bound, per output:", "", *bounds]
    for t in results.trials:
        for side in ("candidate", "base"):
            table = counts_table(t, side)
            if table:
                out += ["", f"Trial {t.index}, the {side} against {source}:", "", *table]
        controls = controls_table(t)
        if controls:
            out += ["", f"Trial {t.index}, negative controls against {source}:", "", *controls]
        resolution = resolution_lines(t)
        if resolution:
            out += [
                "",
                f"Trial {t.index}, the gate's resolution (the smallest perturbation it caught):",
                "",
                *resolution,
            ]
    return Md("\n".join(out))


def stage_text(stages: dict[str, float]) -> Md:
    """The stages that took measurable time, in the engine's order, with their seconds."""
    return Md(", ".join(f"{md(k)} {v:.1f} s" for k, v in stages.items() if v >= 0.05) or "none measurable")


def spec_text(spec: DeviceSpec) -> Md:
    parts = [
        code(spec.name) if spec.name else None,
        f"compute capability {md(spec.compute_capability)}" if spec.compute_capability else None,
    ]
    return Md(" with ".join(p for p in parts if p))


def spec_matches(spec: DeviceSpec, device: DeviceInfo) -> bool:
    # fnmatchcase: a record must render the same on every operating system
    name_ok = spec.name is None or fnmatch.fnmatchcase(device.name, spec.name)
    return name_ok and (spec.compute_capability is None or spec.compute_capability == device.compute_capability)


@dataclass(frozen=True)
class SanitizerRow:
    device: str
    trial: int | None
    tool: str
    case: str
    side: str
    result: SanitizerResult | None  # None: the plan declares the check, no trial ran it


def sanitizer_rows(results: Results, plan: Plan) -> list[SanitizerRow]:
    rows = []
    for group in device_groups(results.trials):
        found = set()
        for t in group.trials:
            for r in t.sanitizer:
                rows.append(SanitizerRow(group.label, t.index, r.tool, r.case, r.side, r))
                found.add((r.tool, r.case, r.side))
        for check in plan.acceptance.sanitizer:
            for cid in check.cases:
                for side in SIDES:
                    if (check.tool, cid, side) not in found:
                        rows.append(SanitizerRow(group.label, None, check.tool, cid, side, None))
    return rows


@dataclass(frozen=True)
class ControlRow:
    device: str
    trial: int | None
    name: str
    result: ControlResult | None  # None: declared, not run on this device
    # judged against a golden's declarations: `caught` then reads "behaved as declared", and a
    # control may be declared to pass, so "caught (0 differing elements)" would misread it
    declared: bool = False


def control_rows(results: Results, plan: Plan) -> list[ControlRow]:
    rows = []
    for group in device_groups(results.trials):
        names = set()
        for t in group.trials:
            for c in t.controls:
                rows.append(ControlRow(group.label, t.index, c.name, c, t.control_outcomes is not None))
                names.add(c.name)
        rows.extend(ControlRow(group.label, None, c.name, None) for c in plan.controls.negative if c.name not in names)
    return rows


def unverified(results: Results, plan: Plan) -> list[str]:
    """What this record does not establish, derived from what the plan asked and the trials hold."""
    return [line_start(line) for line in _unverified(results, plan)]


def _unverified(results: Results, plan: Plan) -> list[str]:
    out = []
    groups = device_groups(results.trials)
    complete = [g for g in groups if g.complete]
    for spec in plan.hardware.devices:
        if not any(spec_matches(spec, g.device) for g in complete):
            out.append(Md(f"Device {spec_text(spec)}: listed by the plan, no complete trial ran on it."))
    for g in groups:
        if len(g.complete) < plan.schedule.trials:
            out.append(f"{g.label}: {len(g.complete)} of {plan.schedule.trials} planned trials complete.")
        unplanned = [str(t.index) for t in g.trials if not t.provenance.planned]
        if unplanned:
            out.append(f"{g.label}: not listed by the plan; trial {', '.join(unplanned)} ran as exploratory.")
        bad, total = throttled(g.trials)
        if bad:
            out.append(f"{g.label}: {bad:,} of {total:,} timed samples were taken while the SM was throttled.")
        if plan.controls.aa:
            missing = [f"{c.case} (trial {t.index})" for t in g.complete for c in t.cases if c.aa is None]
            if missing:
                out.append(f"{g.label}: no A/A control at {', '.join(missing)}.")
    for row in sanitizer_rows(results, plan):
        if row.result is None:
            out.append(f"{row.tool} at {row.case} ({row.side}) not run on {row.device}.")
    for row in control_rows(results, plan):
        if row.result is None:
            out.append(f"Negative control {row.name} not run on {row.device}.")
    declared = plan.hardware.architectures
    executed = {target_for(declared, t.provenance.device.arch) or t.provenance.device.arch for t in results.trials}
    idle = [a for a in declared if a not in executed]
    if idle:
        out.append(
            f"Compiled for {', '.join(idle)} but not executed there: no trial ran on "
            f"{'that architecture' if len(idle) == 1 else 'those architectures'}."
        )
    # qualify times the arms' launches only; saying so keeps kernel and end-to-end results apart
    out.append("End-to-end (application) latency: not measured; this record times the arms' launches only.")
    return out


def headline_text(results: Results, plan: Plan) -> list[Md]:
    """The sentences that open the README (see qualify.evaluate.headline)."""
    return [Md(line) for line in headline_lines(headline(results, plan), md)]


def reasons_text(results: Results, plan: Plan) -> list[Md]:
    return [line_start(Md(line)) for line in reason_lines(headline(results, plan), md)]


def failure_rows(trials: list[Trial]) -> list[tuple[int, Failure]]:
    return [(t.index, f) for t in trials for f in t.failures]


def code_identities(trials: list[Trial]) -> list[tuple[str, CodeIdentity]]:
    """(trial numbers, identity) for each distinct machine-code comparison the trials made;
    trials made before qualify compared machine code are left out."""
    groups: list[tuple[list[str], CodeIdentity]] = []
    for t in trials:
        if t.code is None:
            continue
        same = next((g for g in groups if g[1] == t.code), None)
        if same is None:
            groups.append(([str(t.index)], t.code))
        else:
            same[0].append(str(t.index))
    return [(", ".join(indices), code) for indices, code in groups]


def commands(trials: list[Trial]) -> list[tuple[str, str]]:
    """(trial numbers, command line) for each distinct command the trials ran under."""
    by_command: dict[str, list[str]] = {}
    for t in trials:
        by_command.setdefault(user_command(t.provenance.command), []).append(str(t.index))
    return [(", ".join(indices), command) for command, indices in by_command.items()]


FUNCTIONS = {
    f.__name__: f
    for f in (
        device_groups,
        planned_cases,
        case_ids,
        find_case,
        median_of_trials,
        samples_per_arm,
        warmups_per_arm,
        throttled,
        planned_samples_per_arm,
        gate_cases,
        gate_bound,
        arm_text,
        buffer_text,
        fidelity_text,
        control_text,
        timer_extra,
        stage_text,
        golden_tables,
        sanitizer_rows,
        control_rows,
        unverified,
        failure_rows,
        commands,
        code_identities,
        headline_text,
        reasons_text,
        device_plots,
    )
}
FUNCTIONS.update({f.__name__: f for f in KERNEL_FUNCTIONS})
FUNCTIONS.update({f.__name__: f for f in WHY_FUNCTIONS})
FUNCTIONS.update(KERNEL_GLOBALS)

# ---------------------------------------------------------------------------------------------


@functools.cache  # one environment per process: it caches the compiled template
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        undefined=jinja2.StrictUndefined,  # a misspelt field is an error, never an empty cell
        autoescape=False,  # Markdown, not HTML: `finalize` escapes for Markdown instead
        finalize=finalize,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(FILTERS)
    env.filters.update(KERNEL_FILTERS)
    env.filters.update(WHY_FILTERS)
    env.globals.update(FUNCTIONS)
    return env


def render_readme(results: Results, plan: Plan) -> str:
    return environment().get_template(TEMPLATE).render(results=results, plan=plan)
