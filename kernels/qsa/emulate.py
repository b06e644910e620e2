"""A NumPy emulation of qsa.cu's own arithmetic: its order of operations and its roundings.

reference.py writes the golden in float64 with the kernel's bf16 rounding points; this module
computes what the kernel itself should write, in float32 where the kernel works in float32:

- the q·k dot in the kernel's order (each lane's eight products summed in sequence, then the
  warp's xor butterfly; bf16 × bf16 is exact in float32, so fmaf rounds only the sum), times the
  scale, rounded to bf16;
- an fp32 softmax over the rounded scores: the max, expf of the difference, the sum reduced as the
  block reduces it (each thread's stride-256 partial in order, then the butterfly within each warp
  and across the eight warps), the quotient rounded to bf16;
- the context as each thread accumulates it: fmaf over the keys in order (again exact products),
  rounded to bf16;
- sigmoid(gate) in fp32, rounded to bf16 (unless `round_sigmoid` is False: the seed's mutation),
  and the product rounded to bf16.

NumPy's float32 exp stands in for CUDA's expf (both within two ulp of exp, not always equal), so
the emulation is not the GPU bit for bit: calibrate.py measures how far the emulation sits from
the golden, and the plan's bounds leave room above that for the GPU's expf.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32
THREADS = 256  # the kernel's block size: the softmax's stride and the sum's per-thread partials


def round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 → the nearest bf16 value (ties to even), as float32; finite inputs only."""
    bits = np.asarray(x, dtype=F32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return rounded.astype(np.uint32).view(F32)


def to_bits(x: np.ndarray) -> np.ndarray:
    """bf16 values held exactly in float32 → their uint16 patterns."""
    return (np.asarray(x, dtype=F32).view(np.uint32) >> 16).astype(np.uint16)


def _butterfly(v: np.ndarray) -> np.ndarray:
    """Sum over the last axis (32 lanes) as __shfl_xor_sync with offsets 16 … 1 sums it: lane i
    adds lane i ^ o, which for lane 0 pairs i with i + o at every step."""
    width = v.shape[-1]
    while width > 1:
        width //= 2
        v = v[..., :width] + v[..., width : 2 * width]
    return v[..., 0]


def dot_scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """q [..., D] (float32 bf16 values) · k [S, D] → [..., S] float32 in the kernel's order."""
    products = q[..., None, :] * k  # exact: 8-bit by 8-bit significands
    lanes = products.reshape(*products.shape[:-1], 32, 8)
    acc = lanes[..., 0]
    for i in range(1, 8):
        acc = acc + lanes[..., i]
    return _butterfly(acc)


def block_sum(p: np.ndarray) -> np.ndarray:
    """Sum over the last axis (length S) as the kernel's block_sum after each thread's stride loop."""
    S = p.shape[-1]
    padded = np.zeros((*p.shape[:-1], -(-S // THREADS) * THREADS), dtype=F32)
    padded[..., :S] = p
    strided = padded.reshape(*p.shape[:-1], -1, THREADS)
    partial = strided[..., 0, :]
    for i in range(1, strided.shape[-2]):
        partial = partial + strided[..., i, :]
    warps = _butterfly(partial.reshape(*p.shape[:-1], THREADS // 32, 32))
    lanes = np.zeros((*p.shape[:-1], 32), dtype=F32)
    lanes[..., : THREADS // 32] = warps
    return _butterfly(lanes)


def forward(q, k, v, gate, mask, scale: float, round_sigmoid: bool = True):
    """q, gate [R, HQ, D]; k, v [HK, S, D] (float32 holding bf16 values); mask [R, S] (non-zero =
    visible) → (weights [HQ, R, S], out [R, HQ, D]), float32 holding bf16 values."""
    R, HQ, _ = q.shape
    HK, S, _ = k.shape
    pos = S - R + np.arange(R)
    used = (np.arange(S)[None, :] <= pos[:, None]) & (mask != 0)
    kv_of = np.arange(HQ) // (HQ // HK)
    scores = np.stack([dot_scores(q[:, h], k[kv_of[h]]) for h in range(HQ)])  # [HQ, R, S]
    scores = np.where(used[None], round_bf16(scores * F32(scale)), F32(-np.inf)).astype(F32)
    with np.errstate(invalid="ignore"):
        p = np.exp(scores - scores.max(axis=-1, keepdims=True)).astype(F32)
    weights = round_bf16(p / block_sum(p)[..., None])
    acc = np.zeros((HQ, R, v.shape[-1]), dtype=F32)
    vh = v[kv_of]  # [HQ, S, D]
    for j in range(int(pos.max()) + 1):  # keys after a row's position weigh exactly 0
        acc = acc + weights[:, :, j, None] * vh[:, None, j, :]  # exact products, one rounding
    sig = (F32(1) / (F32(1) + np.exp(-gate))).astype(F32)
    if round_sigmoid:
        sig = round_bf16(sig)
    out = round_bf16(round_bf16(acc.transpose(1, 0, 2)) * sig)
    return weights, out
