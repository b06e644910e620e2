"""`qualify probe PLAN`: the parity a fidelity gate would see, measured once, before freezing.

A team choosing an ulp (or abs, rel) bound otherwise guesses, freezes, and spends a GPU trial to
learn the guess was wrong. The probe runs every case once per arm with the plan's own seeded
inputs and reports, per case and output buffer, what `qualify.evaluate.fidelity.compare` measures —
the same function the gate uses — plus how the differing elements spread over ulp distances, and
the smallest bound of each mode that every case would pass.

It never writes a record, a trial or a ledger event, and accepts unfrozen plans: its numbers are
exploration, not evidence (one launch per arm, no determinism check, no controls). A bound chosen
from them still has to hold in the frozen plan's trials.

The device is anything with the CudaDevice surface; CPU tests pass `qualify.run.fake.FakeDevice`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qualify.dtypes import BITS, FLOATS, ITEMSIZE, UNSIGNED, as_float64
from qualify.evaluate.fidelity import _ordered, compare
from qualify.plan.load import LoadedPlan
from qualify.plan.model import ARM_SIDES, LibraryArm, PythonArm
from qualify.run import inputs as input_gen
from qualify.run.arms import ArmExec, compile_and_load, unload
from qualify.run.reference import host_values, load_reference, reference_outputs

# Histogram edges of the per-element ulp distance: 0 (identical value, ±0 included), 1, 2, 3-4,
# 5-8, ... doubling; the last bucket is open.
ULP_EDGES = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096)


@dataclass(frozen=True)
class BufferProbe:
    case: str
    buffer: str
    compared: str  # "candidate/base", or "base/float64" and "candidate/float64"
    dtype: str
    elements: int
    identical: int  # bit-identical elements
    ulp_histogram: tuple[tuple[str, int], ...]  # (bucket label, differing elements in it)
    nonfinite: int  # differing elements where either side is NaN or ±Inf
    max_ulp: int | None  # as the gate computes them (None: not measurable, e.g. a NaN differs)
    max_abs: float | None
    max_rel: float | None


def ulp_histogram(dtype: str, expected: np.ndarray, actual: np.ndarray) -> tuple[tuple[tuple[str, int], ...], int]:
    """Counts of differing elements by ulp distance, and how many differing elements are not finite.

    Elements with identical bits are left out (they are counted as identical). A differing pair
    with a NaN or an infinity has no ulp distance and is counted apart, as the gate refuses it.
    """
    if dtype not in FLOATS:
        return (), 0
    size = ITEMSIZE[dtype]
    a, b = expected.view(UNSIGNED[size]), actual.view(UNSIGNED[size])
    differ = np.flatnonzero(a != b)
    if differ.size == 0:
        return (), 0
    # finiteness from the values: e4m3 keeps finite values under an all-ones exponent
    nonfinite = ~(np.isfinite(as_float64(expected, dtype)[differ]) & np.isfinite(as_float64(actual, dtype)[differ]))
    finite = differ[~nonfinite]
    dist = np.abs(_ordered(a[finite], BITS[dtype]) - _ordered(b[finite], BITS[dtype]))
    rows = []
    lower = 0
    for upper in ULP_EDGES:
        count = int(((dist >= lower) & (dist <= upper)).sum())
        label = str(upper) if lower == upper else f"{lower}-{upper}"
        if count:
            rows.append((label, count))
        lower = upper + 1
    above = int((dist > ULP_EDGES[-1]).sum())
    if above:
        rows.append((f">{ULP_EDGES[-1]}", above))
    return tuple(rows), int(nonfinite.sum())


def probe_buffer(
    case: str, name: str, dtype: str, expected: np.ndarray, actual: np.ndarray, compared: str = "candidate/base"
) -> BufferProbe:
    parity = compare(name, dtype, expected, actual)
    histogram, nonfinite = ulp_histogram(dtype, expected, actual)
    return BufferProbe(
        case,
        name,
        compared,
        dtype,
        parity.elements,
        parity.elements - parity.differing_elements,
        histogram,
        nonfinite,
        parity.max_ulp,
        parity.max_abs,
        parity.max_rel,
    )


@dataclass(frozen=True)
class ProbeResult:
    plan: str
    lock: str  # "frozen", "not frozen", "changed since freezing"
    device: str
    mode: str
    bound: float | None
    against: str
    buffers: tuple[BufferProbe, ...]

    def smallest_bound(self, mode: str) -> float | None:
        """The smallest bound of `mode` every probed buffer passes; None: no bound passes (a
        non-finite difference, or an integer output that differs under ulp or rel)."""
        worst = 0.0
        for b in self.buffers:
            if b.identical == b.elements:
                continue
            value = {"ulp": b.max_ulp, "abs": b.max_abs, "rel": b.max_rel}[mode]
            if value is None:
                return None
            worst = max(worst, value)
        return worst

    @property
    def bytes_identical(self) -> bool:
        return all(b.identical == b.elements for b in self.buffers)


def run_probe(loaded: LoadedPlan, device, libraries: dict[str, Path] | None = None) -> ProbeResult:
    """Each case once per arm on `device`; nothing is written anywhere."""
    from qualify.errors import FrozenInputChanged
    from qualify.plan.digest import verify_frozen

    lock = "not frozen"
    if loaded.lock is not None:
        try:
            verify_frozen(loaded.path, loaded.freeze, loaded.lock)
            lock = "frozen"
        except FrozenInputChanged:
            lock = "changed since freezing"
    fid = loaded.plan.acceptance.fidelity
    function = load_reference(loaded.path, fid.reference) if fid.against == "float64" else None
    kernels = load_arms(loaded, device, libraries or {})
    rows: list[BufferProbe] = []
    try:
        specs = [s for s in loaded.plan.workload.buffers if s.role == "input"]
        for case in loaded.cases:
            outputs, host = {}, {}
            for side in ARM_SIDES:
                arm = case.arms[side]
                buffers = {b.name: device.alloc(b.nbytes) for b in arm.buffers}
                try:
                    data = input_gen.generate_case(loaded.plan.seeds, case.id, [(s, arm.buffer(s.name)) for s in specs])
                    for spec, array in zip(specs, data):
                        device.upload(buffers[spec.name], array)
                        host.setdefault(spec.name, (arm.buffer(spec.name), array))
                    names = [b.name for b in arm.buffers if b.role == "output"]
                    ex = ArmExec(side, kernels[side], arm, buffers, names)
                    ex.bind_args()
                    outputs[side] = ex.run_once(device)
                finally:
                    for buf in buffers.values():
                        device.free(buf)
            dtypes = {b.name: b.dtype for b in case.arms["base"].buffers}
            if function is None:
                for name, expected in outputs["base"].items():
                    rows.append(probe_buffer(case.id, name, dtypes[name], expected, outputs["candidate"][name]))
                continue
            inputs = {n: host_values(b.dtype, a, b.shape) for n, (b, a) in host.items()}
            wanted = {b.name: (b.dtype, b.shape) for b in case.arms["base"].buffers if b.role == "output"}
            params = {**loaded.plan.workload.params, **case.values}
            expected = reference_outputs(function, params, inputs, wanted, loaded.path, case.id)
            for side in ARM_SIDES:
                for name, got in outputs[side].items():
                    rows.append(probe_buffer(case.id, name, dtypes[name], expected[name], got, f"{side}/float64"))
    finally:
        for side, kernel in kernels.items():
            if not isinstance(loaded.plan.arm(side), (LibraryArm, PythonArm)):
                unload(device, kernel)
    return ProbeResult(
        loaded.plan.name,
        lock,
        f"{device.info.name} ({device.info.arch})",
        fid.mode,
        fid.bound,
        fid.against,
        tuple(rows),
    )


def load_arms(loaded: LoadedPlan, device, libraries: dict[str, Path]) -> dict[str, object]:
    """Both arms on `device`, outside any trial: a library as given (or as the plan names it), a
    CUDA arm compiled and loaded as a trial loads it. The margin benchmark loads its arms here too."""
    from qualify.errors import UsageError
    from qualify.run.library import load_library

    kernels: dict[str, object] = {}
    for side in ARM_SIDES:
        arm = loaded.plan.arm(side)
        if isinstance(arm, LibraryArm):
            path = loaded.library(side, libraries)
            if path is None:
                raise UsageError(
                    f"the {side} arm names no library: give it with --{'base' if side == 'base' else 'candidate'}-so",
                    file=loaded.path,
                    field=f"arms.{side}.library",
                )
            kernels[side] = load_library(side, path, arm, f"arms.{side}.library")
        elif isinstance(arm, PythonArm):
            from qualify.run import python_arm

            kernels[side] = python_arm.load(loaded, side, device.python_runtime())
        else:
            kernels[side] = compile_and_load(device, loaded, side, loaded.cases)[1]
    return kernels


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def format_probe(result: ProbeResult) -> list[str]:
    """The probe's report as lines (printed by the CLI)."""
    lines = [
        f"probe of {result.plan} on {result.device}; plan {result.lock}",
        "exploration, not evidence: one launch per arm and case, no determinism check, no controls; "
        "nothing was recorded",
        f"the plan's gate: {result.mode}"
        + (f" <= {result.bound:g}" if result.bound is not None else "")
        + f", against {result.against}"
        + ("" if result.against != "golden" else " (the probe compares candidate with base instead)"),
        "",
    ]
    width = max([len(b.case) for b in result.buffers] + [4])
    lines.append(
        f"{'case':<{width}}  {'compared':<17}  buffer  elements  identical  max ulp  max abs  max rel  ulp distances of differing elements"
    )
    for b in result.buffers:
        spread = ", ".join(f"{label}: {n}" for label, n in b.ulp_histogram)
        if b.nonfinite:
            spread += (", " if spread else "") + f"NaN/Inf: {b.nonfinite}"
        lines.append(
            f"{b.case:<{width}}  {b.compared:<17}  {b.buffer:<6}  {b.elements:>8}  {b.identical:>9}  "
            f"{_number(b.max_ulp):>7}  {_number(b.max_abs):>7}  {_number(b.max_rel):>7}  {spread or '-'}"
        )
    lines.append("")
    if result.bytes_identical:
        lines.append("every output is bit-identical: mode 'bytes' would pass")
    else:
        smallest = {m: result.smallest_bound(m) for m in ("ulp", "abs", "rel")}
        shown = ", ".join(
            f"{m} {_number(v) if v is not None else 'none (a NaN/Inf or integer difference)'}"
            for m, v in smallest.items()
        )
        lines.append(f"smallest bound that would pass: {shown}; mode 'bytes' would fail")
        if result.bound is not None and smallest[result.mode] is not None:
            verdict = "would pass" if smallest[result.mode] <= result.bound else "would FAIL"
            lines.append(f"the plan's bound ({result.mode} <= {result.bound:g}) {verdict} on these inputs")
    return lines
