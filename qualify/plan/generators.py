"""What each input generator makes of its dtype, measured before any GPU time.

A generator is written in real numbers; the kernel sees them rounded to the buffer's dtype. In the
narrow types that can destroy the input: a normal of std 1000 cast to e4m3 (largest finite 448) is
mostly NaN, a uniform on [1000, 2000] saturated to e4m3 is 448 everywhere, a constant 1e-9 is 0 in
every float type narrower than f32. Such an input tests nothing the plan means to test, and the
rehearsal or the trial that follows blames the controls or the tolerance instead.

The check draws a bounded sample (SAMPLE values, seeded from the plan's base seed: the same plan
gives the same figures) of each generated input, casts it exactly as `qualify.run.inputs` does
(`qualify.dtypes.from_float64`, with the buffer's overflow rule) and counts the NaN or infinite,
the saturated (at the largest finite magnitude) and the zero values. A generator that meant zeros
(`zeros`, `constant` 0) is not refused for them; golden inputs are the golden's business.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from qualify.dtypes import FLOATS, Overflow
from qualify.errors import PlanError
from qualify.plan.model import ConstantInit, NormalInit, Plan, UniformInit

SAMPLE = 1 << 16
# refused at or above these fractions of the sample
MAX_NONFINITE = 0.001  # a NaN or infinity in one input element in a thousand poisons reductions
MAX_SATURATED = 0.01  # one value in a hundred clamped: the distribution is no longer the one written
MAX_ZERO = 0.5  # half the inputs rounded to zero: the values written are below the dtype's reach


@dataclass(frozen=True)
class Produced:
    nonfinite: float
    saturated: float
    zero: float
    largest: float  # the dtype's largest finite value


def produced(init: NormalInit | UniformInit | ConstantInit, dtype: str, overflow: Overflow, seed: int) -> Produced:
    """The fractions of a SAMPLE of `init`'s values, cast to `dtype`, that are non-finite,
    saturated and zero."""
    import numpy as np

    from qualify.dtypes import as_float64, from_float64, largest_finite

    rng = np.random.Generator(np.random.PCG64(seed))
    if isinstance(init, NormalInit):
        values = rng.normal(init.mean, init.std, SAMPLE)
    elif isinstance(init, UniformInit):
        values = rng.uniform(init.low, init.high, SAMPLE)
    else:
        values = np.full(SAMPLE, init.value)
    cast = as_float64(from_float64(values, dtype, overflow), dtype)
    top = largest_finite(dtype)
    finite = np.isfinite(cast)
    return Produced(
        nonfinite=float(np.mean(~finite)),
        saturated=float(np.mean(finite & (np.abs(cast) == top) & (np.abs(values) != top))),
        zero=float(np.mean(cast == 0)),
        largest=top,
    )


def _percent(x: float) -> str:
    return f"{100 * x:.0f} %" if x >= 0.01 else f"{100 * x:.2g} %"


def generator_problems(plan: Plan, file: str | Path | None) -> list[PlanError]:
    """One PlanError per float input whose generator makes it degenerate in its dtype."""
    out = []
    for i, buf in enumerate(plan.workload.buffers):
        init = buf.init
        if (
            buf.role != "input"
            or buf.dtype not in FLOATS
            or not isinstance(init, (NormalInit, UniformInit, ConstantInit))
        ):
            continue
        overflow: Overflow = buf.overflow or "nonfinite"
        got = produced(init, buf.dtype, overflow, plan.seeds.base)
        found = []
        if got.nonfinite >= MAX_NONFINITE:
            found.append(f"{_percent(got.nonfinite)} NaN or infinite")
        if got.saturated >= MAX_SATURATED:
            found.append(f"{_percent(got.saturated)} saturated at ±{got.largest:g}")
        meant_zero = isinstance(init, ConstantInit) and init.value == 0
        if got.zero >= MAX_ZERO and not meant_zero:
            found.append(f"{_percent(got.zero)} zero")
        if found:
            out.append(
                PlanError(
                    f"{init.kind} generator in {buf.dtype} ({overflow}) makes {' and '.join(found)} of "
                    f"{SAMPLE:,} sampled inputs (largest finite {buf.dtype} is {got.largest:g}); choose "
                    f"a {init.kind} within the dtype's range, or an input the dtype can hold",
                    file=file,
                    field=f"workload.buffers[{i}].init",
                )
            )
    return out
