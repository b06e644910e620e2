"""The simulated candidate of a CPU rehearsal (`qualify plan rehearse`): expected values moved the
way a change of summation order moves them, so a bound too tight for such a change shows on the CPU.

A reordered floating-point reduction leaves each output a few representable steps from where the
other order put it. The simulation moves each element of a float output by a seeded whole number
of steps drawn uniformly from [-k, k] (k = `--reorder-ulp`), on the dtype's own grid (magnitude
bits ± steps, saturating at zero and at the largest finite value; non-finite values stay). Integer
outputs and outputs the plan singles out as bit-exact (`exact[]`, a `bit_exact` rule) are left
identical: the plan says the change does not reorder them there. Everything is read from the dtype
tables (`qualify.dtypes`), so a new float dtype needs only its table entries.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

import numpy as np

from qualify.dtypes import FLOATS, ITEMSIZE, LARGEST_FINITE_BITS, UNSIGNED
from qualify.evaluate.tolerance_gate import rule_for, selects
from qualify.plan.model import Fidelity


def declared_identical(fidelity: Fidelity, case_id: str, params: Mapping[str, int | float], output: str) -> bool:
    """Whether the plan singles this output out as bit-exact in this case (an `exact[]` selector or a
    `bit_exact` rule). A numeric bound of zero, or mode `bytes` over every output, is the bound
    being rehearsed, not such a declaration: a change that keeps every bit is rehearsed with
    `--reorder-ulp 0`."""
    if any(selects(s, case_id, params) and (s.outputs is None or output in s.outputs) for s in fidelity.exact):
        return True
    rule = rule_for(fidelity, case_id, params, output) if fidelity.mode == "tolerance" else None
    return rule is not None and rule.bit_exact


# Elements moved at once: the int64 temporaries are a chunk's, not the output's (a 128 MiB output
# held 1.6 GB here when moved whole). The draw is one seeded stream over the chunks in order.
CHUNK_ELEMENTS = 1 << 16


def reordered(
    values: np.ndarray, dtype: str, steps: int, seed: int, case_id: str, output: str, chunk: int = CHUNK_ELEMENTS
) -> np.ndarray:
    """A copy of flat uint8 `values` with each float element moved a seeded number of steps in
    [-steps, steps]; the draw is keyed by case and output, so one rehearsal is reproducible."""
    if dtype not in FLOATS or steps == 0:
        unmoved: np.ndarray = values.copy()
        return unmoved
    largest = np.int64(LARGEST_FINITE_BITS[dtype])
    unsigned = UNSIGNED[ITEMSIZE[dtype]]
    words = values.copy().view(unsigned)
    key = (zlib.crc32(case_id.encode()), zlib.crc32(output.encode()))
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))
    sign = np.uint64(1) << np.uint64(8 * ITEMSIZE[dtype] - 1)
    for lo in range(0, words.size, chunk):
        part = words[lo : lo + chunk]
        move = rng.integers(-steps, steps + 1, size=part.size, dtype=np.int64)
        w = part.astype(np.uint64)
        magnitude = (w & (sign - np.uint64(1))).astype(np.int64)
        moved = np.where(magnitude <= largest, np.clip(magnitude + move, 0, largest), magnitude)
        part[:] = ((w & sign) | moved.astype(np.uint64)).astype(unsigned)
    out: np.ndarray = words.view(np.uint8)
    return out
