"""Check the qsa-keyload plan's bounds and control expectations against arithmetic, before measuring.

    python protocols/qsa-keyload/calibrate.py [--plan PLAN] [--record RECORD]

For every case, kernels/qsa/emulate.py computes what qsa.cu should write (its own order and
roundings, in float32), and the plan's fidelity gate judges that against the float64 golden:
the worst bound fraction per output is how much of its bound the kernel's own arithmetic uses.
Each negative control is emulated the same way (its input mutation, or the build define that
drops the sigmoid's rounding) and judged against what the plan declares for it; the gate's
resolution (the plan's mutation calibration) is computed on the emulated outputs. With --record,
each figure the record measured on the GPU is printed beside the emulated one.

Exit status: 0 when the emulated kernel passes every bound with the margin asked (--margin, the
largest worst bound fraction allowed, 0.5 by default) and every control behaves as declared; 1
otherwise. It reads the plan and golden; it writes nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from qualify.evaluate.tolerance_gate import calibrate as resolve  # noqa: E402
from qualify.evaluate.tolerance_gate import control_outcome, judge_case, passes
from qualify.plan.golden import Golden, load_golden  # noqa: E402
from qualify.plan.load import load_plan  # noqa: E402
from qualify.results.store import Record  # noqa: E402
from qualify.run.controls import mutate  # noqa: E402
from qualify.run.golden_stage import case_inputs  # noqa: E402
from qualify.run.inputs import bf16_bits_to_f32  # noqa: E402

UNROUNDED_GATE = "QSA_MUTATION_UNROUNDED_GATE"  # the build define qsa.cu knows


def _emulator():
    spec = importlib.util.spec_from_file_location("qsa_emulate", ROOT / "kernels/qsa/emulate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


emulate = _emulator()


@dataclass(frozen=True)
class Judged:
    """One output of one case (under a control, or the plain candidate when control is None)."""

    case: str
    output: str
    control: str | None
    atol: float
    rtol: float
    identical: int
    elements: int
    fraction: float | None  # worst bound fraction; None: infinite (a difference under a zero bound)
    passed: bool
    declared: str  # "pass" or "fail"


def emulated_outputs(loaded, case, raw: dict[str, np.ndarray], round_sigmoid: bool = True) -> dict[str, np.ndarray]:
    """The emulated kernel's outputs of one case from its raw inputs, as flat uint8 arrays."""
    arm = case.arms["candidate"]
    P = arm.params
    x = {n: bf16_bits_to_f32(raw[n].view(np.uint16)).reshape(arm.buffer(n).shape) for n in ("q", "k", "v", "gate")}
    mask = raw["mask"].reshape(arm.buffer("mask").shape)
    weights, out = emulate.forward(x["q"], x["k"], x["v"], x["gate"], mask, P["SCALE"], round_sigmoid)
    return {
        "weights": emulate.to_bits(weights).view(np.uint8).reshape(-1),
        "out": emulate.to_bits(out).view(np.uint8).reshape(-1),
    }


def _params(loaded, case) -> dict:
    return {**loaded.plan.workload.params, **case.values}


def _judge(loaded, golden: Golden, case, actual: dict[str, np.ndarray]):
    expected = {n: golden.expected(case.id, n) for n in actual}
    return judge_case(
        loaded.plan.acceptance.fidelity, case.id, _params(loaded, case), {n: "bf16" for n in actual}, expected, actual
    )


def _row(case: str, control: str | None, c, declared: str) -> Judged:
    return Judged(
        case, c.output, control, c.atol, c.rtol, c.identical, c.elements, c.worst_bound_fraction, passes(c), declared
    )


def control_actual(loaded, case, raw, control) -> dict[str, np.ndarray]:
    """The emulated outputs under one negative control."""
    if control.kind == "input":
        spec = case.arms["candidate"].buffer(control.buffer)
        changed = {
            **raw,
            control.buffer: mutate(raw[control.buffer], spec.dtype, control.mutation, case.arms["candidate"].params),
        }
        return emulated_outputs(loaded, case, changed)
    if set(control.defines) != {UNROUNDED_GATE}:
        raise SystemExit(f"calibrate.py: control {control.name}: no emulation of defines {sorted(control.defines)}")
    return emulated_outputs(loaded, case, raw, round_sigmoid=False)


def evaluate(plan_path: Path):
    """(candidate rows, control rows, resolutions) of the emulated kernel under the plan."""
    loaded = load_plan(plan_path)
    golden = load_golden(loaded.plan, loaded.path, loaded.files.root, loaded.cases)
    fid = loaded.plan.acceptance.fidelity
    candidate, controls, resolutions = [], [], []
    for case in loaded.cases:
        raw = case_inputs(loaded.plan, golden, case.id, case.arms["candidate"])
        actual = emulated_outputs(loaded, case, raw)
        candidate += [_row(case.id, None, c, "pass") for c in _judge(loaded, golden, case, actual)]
        if fid.calibration is not None:
            for name, data in actual.items():
                resolutions.append(
                    resolve(
                        fid,
                        fid.calibration,
                        case.id,
                        _params(loaded, case),
                        name,
                        "bf16",
                        golden.expected(case.id, name),
                        data,
                    )
                )
        for control in loaded.plan.controls.negative:
            if control.cases is not None and case.id not in control.cases:
                continue
            counts = _judge(loaded, golden, case, control_actual(loaded, case, raw, control))
            outcome = control_outcome(control, case.id, _params(loaded, case), counts)
            controls += [_row(case.id, control.name, c, outcome.expected[c.output]) for c in counts]
    return candidate, controls, resolutions


def measured(record: Path) -> tuple[dict, dict]:
    """The record's worst bound fractions: candidate {(trial, case, output)} and controls
    {(trial, control, case, output)}, each as (fraction, passed)."""
    cand, ctrl = {}, {}
    for t in Record(record).trials():
        for c in t.cases:
            if c.tolerance is None:
                continue
            for n in c.tolerance.counts["candidate"]:
                cand[(t.index, c.case, n.output)] = (n.worst_bound_fraction, passes(n))
        for o in t.control_outcomes or []:
            for output, fraction in o.worst_bound_fraction.items():
                ctrl[(t.index, o.control, o.case, output)] = (fraction, o.passed[output])
    return cand, ctrl


def _f(value: float | None) -> str:
    return "inf" if value is None else f"{value:.3g}"


def _bound(r: Judged) -> str:
    return "bit-exact" if r.atol == 0 and r.rtol == 0 else f"{r.atol:.3g} + {r.rtol:.3g}·|e|"


def _measured_cells(found: dict, key: tuple, trials: list[int]) -> str:
    cells = []
    for t in trials:
        if (t, *key) in found:
            fraction, ok = found[(t, *key)]
            cells.append(f"t{t} {_f(fraction)} {'pass' if ok else 'FAIL'}")
    return "; ".join(cells) or "-"


def report(candidate, controls, resolutions, margin: float, record: Path | None = None) -> list[str]:
    """The lines to print, and (as the last line) the conclusion."""
    cand_m, ctrl_m = measured(record) if record is not None else ({}, {})
    trials = sorted({k[0] for k in [*cand_m, *ctrl_m]})
    side = ["measured on the GPU (trial fraction result)"] if record is not None else []
    lines = [
        "Candidate (emulated kernel) against the golden, under the plan's bounds:",
        "",
        " | ".join(["case", "output", "bound", "identical", "emulated worst fraction", *side]),
    ]
    problems = []
    for r in candidate:
        cells = [r.case, r.output, _bound(r), f"{r.identical}/{r.elements}", f"{_f(r.fraction)}"]
        if record is not None:
            cells.append(_measured_cells(cand_m, (r.case, r.output), trials))
        lines.append(" | ".join(cells))
        if not r.passed or r.fraction is None or r.fraction > margin:
            problems.append(f"{r.case} {r.output}: emulated worst bound fraction {_f(r.fraction)} above {margin}")
    for output in sorted({r.output for r in candidate}):
        worst = max((r.fraction or 0.0) for r in candidate if r.output == output)
        lines.append(
            f"worst emulated bound fraction of {output} over the cases: {worst:.3g} "
            f"(margin {1 - worst:.0%} of the bound left for the GPU's expf)"
        )
    lines += [
        "",
        "Negative controls (emulated) against what the plan declares:",
        "",
        " | ".join(["control", "case", "output", "declared", "emulated", "worst fraction", *side]),
    ]
    for r in controls:
        got = "pass" if r.passed else "fail"
        cells = [
            r.control,
            r.case,
            r.output,
            r.declared,
            got + ("" if got == r.declared else " (NOT AS DECLARED)"),
            _f(r.fraction),
        ]
        if record is not None:
            cells.append(_measured_cells(ctrl_m, (r.control, r.case, r.output), trials))
        lines.append(" | ".join(cells))
        if got != r.declared:
            problems.append(f"control {r.control} at {r.case}, {r.output}: declared {r.declared}, emulated {got}")
    if not any(not r.passed for r in controls):
        problems.append("no control fails the gate anywhere: the gate is not shown able to fail")
    if resolutions:
        lines += ["", "The gate's resolution on the emulated outputs (smallest perturbation caught):", ""]
        for res in resolutions:
            s = res.smallest_caught
            lines.append(
                f"{res.case} {res.output}: "
                + (
                    "VACUOUS"
                    if s is None
                    else f"{s.quanta} quanta on {s.elements} elements (fraction {_f(s.worst_bound_fraction)})"
                )
            )
            if s is None:
                problems.append(f"{res.case} {res.output}: the gate catches no perturbation")
    lines.append("")
    lines += [f"PROBLEM: {p}" for p in problems] or [
        "OK: the emulated kernel passes with margin and every control behaves as declared"
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", type=Path, default=HERE / "plan.json")
    parser.add_argument("--record", type=Path, default=None, help="a record of this plan: print its figures too")
    parser.add_argument("--margin", type=float, default=0.5, help="largest emulated worst bound fraction allowed")
    args = parser.parse_args(argv)
    candidate, controls, resolutions = evaluate(args.plan)
    lines = report(candidate, controls, resolutions, args.margin, args.record)
    print("\n".join(lines))
    return 0 if lines[-1].startswith("OK") else 1


if __name__ == "__main__":
    sys.exit(main())
