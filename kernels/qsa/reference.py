"""float64 NumPy reference of kernels/qsa/qsa.cu; writes the golden of protocols/qsa-keyload.

    python kernels/qsa/reference.py [PLAN] [GOLDEN]

The inputs are qualify's own (the plan's seeds through `qualify.run.inputs.generate`), except the
selection mask, which no random init expresses: it is written into the golden as an input. Short
cases see every causal key (their masks are all ones); the 2055-token case drops two 64-key blocks
per row (never the row's own block), like the seed's sparse budget; the timing case sees all keys.

The arithmetic is float64 with the kernel's bf16 rounding points (score, weights, context,
sigmoid, product), each rounded once to nearest-even, with one exception: the q·k dot product is
summed in float32 in the kernel's order (each lane's eight dims in sequence, then the warp's
butterfly). A score computed in float64 lands one bf16 quantum (0.4 %) away from the kernel's
about once in two thousand scores, and that moves every output element of its row and head by up
to 1e-2 — far outside any tolerance that still catches a dropped key. Elsewhere the kernel's fp32
and this float64 differ by less than a bf16 quantum of the result, which the plan's tolerance
covers, and its mutation calibration says how fine the gate still is.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from qualify.plan.golden import tensor_name, write_golden  # noqa: E402
from qualify.plan.load import read_plan_json, validate_plan  # noqa: E402
from qualify.plan.resolve import resolve_cases  # noqa: E402
from qualify.run.inputs import bf16_bits_to_f32, generate  # noqa: E402

PRODUCER = "kernels/qsa/reference.py"
MASK_SEED = 20261012  # the seed PR's date; the mask is data, not derived from the plan's seed
DROPPED_BLOCKS, BLOCK = 2, 64
SPARSE_LENGTH = 2055


def round_bf16(x: np.ndarray) -> np.ndarray:
    """float64 → nearest bf16 value (ties to even), without passing through float32 (which would
    round twice). Valid for normal magnitudes, which every value here has, and for zero."""
    x = np.asarray(x, dtype=np.float64)
    _, exponent = np.frexp(x)
    quantum = np.ldexp(1.0, exponent - 8)  # bf16 keeps 8 significant bits
    return np.where(x == 0, 0.0, np.round(x / quantum) * quantum)


def to_bits(x: np.ndarray) -> np.ndarray:
    """bf16 values (exact in float32) → their uint16 bit patterns."""
    return (np.asarray(x, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def selection_mask(S: int, R: int) -> np.ndarray:
    mask = np.ones((R, S), dtype=np.uint8)
    if S != SPARSE_LENGTH:
        return mask
    rng = np.random.Generator(np.random.PCG64(MASK_SEED))
    for r in range(R):
        own = (S - R + r) // BLOCK
        blocks = [b for b in range(own) if b != own]
        for b in rng.choice(blocks, size=DROPPED_BLOCKS, replace=False):
            mask[r, b * BLOCK:(b + 1) * BLOCK] = 0
    return mask


def kernel_order_dot(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """q [R, D] · k [S, D] → [R, S] in float32, summed as qsa.cu sums: lane l holds dims 8l..8l+7
    and adds their products in order (bf16 × bf16 is exact in float32, so fmaf rounds only the
    sum), then lanes combine by xor butterfly (16, 8, 4, 2, 1)."""
    products = (q.astype(np.float32)[:, None, :] * k.astype(np.float32)[None, :, :])  # exact
    lanes = products.reshape(q.shape[0], k.shape[0], 32, 8)
    acc = lanes[..., 0]
    for i in range(1, 8):
        acc = acc + lanes[..., i]  # float32 + float32: rounded once, like fmaf's sum
    width = 32
    while width > 1:
        width //= 2
        acc = acc[..., :width] + acc[..., width:2 * width]
    return acc[..., 0]


def forward(q, k, v, gate, mask, S, R, HQ, HK, scale):
    """q, gate [R, HQ, D]; k, v [HK, S, D]; mask [R, S] → weights [HQ, R, S], out [R, HQ, D]."""
    group = HQ // HK
    pos = S - R + np.arange(R)
    used = (np.arange(S)[None, :] <= pos[:, None]) & (mask != 0)  # [R, S]
    kv_of = np.arange(HQ) // group
    scores = np.stack([kernel_order_dot(q[:, h], k[kv_of[h]]) for h in range(HQ)]) * np.float32(scale)
    scores = np.where(used[None], round_bf16(scores.astype(np.float64)), -np.inf)  # [HQ, R, S]
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = round_bf16(p / p.sum(axis=-1, keepdims=True))
    context = round_bf16(np.einsum("hrs,hsd->rhd", weights, v[kv_of]))
    sig = round_bf16(1.0 / (1.0 + np.exp(-gate)))
    return weights, round_bf16(context * sig)


def main(plan_path: Path, golden_path: Path) -> None:
    plan = validate_plan(read_plan_json(plan_path), plan_path)
    specs = {b.name: b for b in plan.workload.buffers}
    tensors = {}
    for case in resolve_cases(plan, str(plan_path)):
        arm = case.arms["candidate"]
        P = {**plan.workload.params, **case.values}
        S, R, HQ, HK = P["S"], P["R"], P["HQ"], P["HK"]
        inputs = {}
        for name in ("q", "k", "v", "gate"):
            buf = arm.buffer(name)
            bits = generate(plan.seeds, case.id, specs[name], buf).view(np.uint16)
            inputs[name] = bf16_bits_to_f32(bits).astype(np.float64).reshape(buf.shape)
        mask = selection_mask(S, R)
        weights, out = forward(inputs["q"], inputs["k"], inputs["v"], inputs["gate"], mask,
                               S, R, HQ, HK, P["SCALE"])  # fmt: skip
        assert np.isfinite(weights).all() and np.isfinite(out).all(), case.id
        tensors[tensor_name(case.id, "mask")] = ("u8", mask)
        tensors[tensor_name(case.id, "weights")] = ("bf16", to_bits(weights))
        tensors[tensor_name(case.id, "out")] = ("bf16", to_bits(out))
        dropped = int(((np.arange(S)[None, :] <= (S - R + np.arange(R))[:, None]) & (mask == 0)).sum())
        print(f"{case.id}: {weights.size} weights, {out.size} outputs, {dropped} causal keys dropped")
    write_golden(golden_path, plan, tensors, PRODUCER,
                 {"reference": "float64 NumPy with the kernel's bf16 rounding points",
                  "numpy": np.__version__, "mask_seed": str(MASK_SEED)})  # fmt: skip
    print(f"wrote {golden_path}")


if __name__ == "__main__":
    plan_arg = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "protocols/qsa-keyload/plan.json"
    golden_arg = Path(sys.argv[2]) if len(sys.argv) > 2 else plan_arg.parent / "golden.safetensors"
    main(plan_arg, golden_arg)
