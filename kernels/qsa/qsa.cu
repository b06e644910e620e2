// A compact QSA-style sparse attention forward (prefill, one pass, no streaming softmax), written
// for qualify's second seed experiment. bf16 in and out, head_dim 256, grouped KV heads.
//
//   q, gate, out  [R, HQ, 256]   the last R query rows of an S-token sequence (positions S-R .. S-1)
//   k, v          [HK, S, 256]   head-major, so exchanging two KV heads swaps two contiguous slices
//   mask          [R, S] u8      the selection mask, non-zero = visible; a key is used when it is
//                                visible and causal (key <= the row's position)
//   weights       [HQ, R, S]     bf16 attention weights (0 where not used)
//
// Rounding points, matched by kernels/qsa/reference.py: the score q·k/16 is rounded to bf16; the
// softmax runs in fp32 over the rounded scores; weights are rounded to bf16 before the context
// reduction; the context is rounded to bf16, so is sigmoid(gate), and so is their product.
//
// qsa_forward<G, VEC>: one block per (query row, G query heads); the G heads map to one KV head and
// share its key and value scans. Base: <1, false> (each lane reads its eight key dims with eight
// scalar loads). Candidate: <4, true> (one 128-bit load per lane, four heads per block). Both arms
// run the same reductions in the same order for every head, so their bytes agree; only the number
// of times a key row is read changes.
//
// A row with no visible key is outside the contract (its softmax divides 0 by 0).

#include <cuda_bf16.h>

namespace qsa {

constexpr int kHeadDim = 256;
constexpr int kThreads = 256;  // one thread per output dim in the context reduction
constexpr int kWarps = kThreads / 32;
static_assert(kThreads == kHeadDim, "the context reduction maps one thread to one dim");

__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// Block reductions in one fixed order (per-thread partials, warp butterfly, then warp 0's lanes
// over the warps): every thread returns the same value, identical in every arm.
__device__ __forceinline__ float block_max(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // red may still be read by the previous reduction
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  v = threadIdx.x % 32 < kWarps ? red[threadIdx.x % 32] : neg_inf();
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float block_sum(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  v = threadIdx.x % 32 < kWarps ? red[threadIdx.x % 32] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// A lane's eight consecutive dims of one key row.
template <bool VEC>
__device__ __forceinline__ void load_key(const __nv_bfloat16* row, int lane, float (&kf)[8]) {
  if constexpr (VEC) {
    // 16 bytes per lane: rows are 512 bytes and the buffer is 256-byte aligned
    const uint4 raw = *reinterpret_cast<const uint4*>(row + lane * 8);
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(pairs[i]);
      kf[2 * i] = f.x;
      kf[2 * i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) kf[i] = __bfloat162float(row[lane * 8 + i]);
  }
}

}  // namespace qsa

template <int G, bool VEC>
__global__ void __launch_bounds__(qsa::kThreads) qsa_forward(
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
    const __nv_bfloat16* __restrict__ v, const __nv_bfloat16* __restrict__ gate,
    const unsigned char* __restrict__ mask, __nv_bfloat16* __restrict__ weights,
    __nv_bfloat16* __restrict__ out, int S, int R, int HQ, int HK, float scale) {
  using namespace qsa;
  extern __shared__ float scores[];  // [G][S]
  __shared__ float red[kWarps];
  const int r = blockIdx.x;
  const int h0 = blockIdx.y * G;
  const int kvh = h0 / (HQ / HK);  // the plan keeps G a divisor of HQ / HK
  const int pos = S - R + r;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  float qf[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int i = 0; i < 8; ++i)
      qf[g][i] = __bfloat162float(q[(static_cast<size_t>(r) * HQ + h0 + g) * kHeadDim + lane * 8 + i]);

  // scores: one warp per key, every head of the block against the key row read once
  const __nv_bfloat16* kh = k + static_cast<size_t>(kvh) * S * kHeadDim;
  for (int j = warp; j < S; j += kWarps) {
    const bool used = j <= pos && mask[static_cast<size_t>(r) * S + j] != 0;
    float kf[8];
    load_key<VEC>(kh + static_cast<size_t>(j) * kHeadDim, lane, kf);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) dot = fmaf(qf[g][i], kf[i], dot);
      for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      if (lane == 0) scores[g * S + j] = used ? round_bf16(dot * scale) : neg_inf();
    }
  }
  __syncthreads();

  // fp32 softmax over the rounded scores, weights rounded to bf16 and kept for the context
  for (int g = 0; g < G; ++g) {
    float* row = scores + g * S;
    float m = neg_inf();
    for (int j = threadIdx.x; j < S; j += kThreads) m = fmaxf(m, row[j]);
    m = block_max(m, red);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < S; j += kThreads) {
      const float p = expf(row[j] - m);  // exp(-inf) = 0 for keys not used
      row[j] = p;
      sum += p;
    }
    sum = block_sum(sum, red);
    __nv_bfloat16* wrow = weights + (static_cast<size_t>(h0 + g) * R + r) * S;
    for (int j = threadIdx.x; j < S; j += kThreads) {
      const float w = round_bf16(row[j] / sum);
      row[j] = w;
      wrow[j] = __float2bfloat16_rn(w);
    }
  }
  __syncthreads();

  // context: one thread per dim, keys in order; keys after the row's position weigh exactly 0
  const int d = threadIdx.x;
  const __nv_bfloat16* vh = v + static_cast<size_t>(kvh) * S * kHeadDim;
  float acc[G];
#pragma unroll
  for (int g = 0; g < G; ++g) acc[g] = 0.0f;
  for (int j = 0; j <= pos; ++j) {
    const float vj = __bfloat162float(vh[static_cast<size_t>(j) * kHeadDim + d]);
#pragma unroll
    for (int g = 0; g < G; ++g) acc[g] = fmaf(scores[g * S + j], vj, acc[g]);
  }
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const size_t o = (static_cast<size_t>(r) * HQ + h0 + g) * kHeadDim + d;
    float sig = 1.0f / (1.0f + expf(-__bfloat162float(gate[o])));
#ifndef QSA_MUTATION_UNROUNDED_GATE  // the seed's mutation: drop the bf16 rounding of the sigmoid
    sig = round_bf16(sig);
#endif
    out[o] = __float2bfloat16_rn(round_bf16(acc[g]) * sig);
  }
}
