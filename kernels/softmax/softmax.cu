// Row softmax, one block of THREADS threads per row: the pair issue 17's user wrote, kept here as
// the tolerance example of `qualify probe` (docs/plan.md, "Choosing a bound").
//   SHUFFLE = 0: both reductions (row max, then sum of exponentials) as a shared-memory tree;
//   SHUFFLE = 1: warp shuffles, then one value per warp combined by the first warp.
// The two sum in different orders, so their outputs differ by a few ulps, more on wider rows.
#define THREADS 256

template <int SHUFFLE>
__device__ float block_reduce(float v, float* scratch, bool is_max) {
    const int t = threadIdx.x;
    if (SHUFFLE) {
        for (int o = 16; o > 0; o >>= 1) {
            const float w = __shfl_xor_sync(0xffffffffu, v, o);
            v = is_max ? fmaxf(v, w) : v + w;
        }
        if ((t & 31) == 0) scratch[t >> 5] = v;
        __syncthreads();
        if (t < 32) {
            v = t < THREADS / 32 ? scratch[t] : (is_max ? __int_as_float(0xff800000) : 0.0f);
            for (int o = 16; o > 0; o >>= 1) {
                const float w = __shfl_xor_sync(0xffffffffu, v, o);
                v = is_max ? fmaxf(v, w) : v + w;
            }
            if (t == 0) scratch[0] = v;
        }
    } else {
        scratch[t] = v;
        __syncthreads();
        for (int s = THREADS / 2; s > 0; s >>= 1) {
            if (t < s) scratch[t] = is_max ? fmaxf(scratch[t], scratch[t + s]) : scratch[t] + scratch[t + s];
            __syncthreads();
        }
    }
    __syncthreads();
    const float out = scratch[0];
    __syncthreads();
    return out;
}

template <int SHUFFLE>
__global__ void __launch_bounds__(THREADS) softmax_rows(const float* __restrict__ x, float* __restrict__ y,
                                                        int rows, int cols) {
    __shared__ float scratch[THREADS];
    const int r = blockIdx.x;
    if (r >= rows) return;
    const float* in = x + static_cast<long long>(r) * cols;
    float* out = y + static_cast<long long>(r) * cols;
    float m = __int_as_float(0xff800000);
    for (int c = threadIdx.x; c < cols; c += THREADS) m = fmaxf(m, in[c]);
    m = block_reduce<SHUFFLE>(m, scratch, true);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += THREADS) s += __expf(in[c] - m);
    s = block_reduce<SHUFFLE>(s, scratch, false);
    const float inv = 1.0f / s;
    for (int c = threadIdx.x; c < cols; c += THREADS) out[c] = __expf(in[c] - m) * inv;
}

template __global__ void softmax_rows<0>(const float*, float*, int, int);
template __global__ void softmax_rows<1>(const float*, float*, int, int);
