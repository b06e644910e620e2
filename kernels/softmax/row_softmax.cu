// Row softmax, y[r, c] = exp(x[r, c] - max_r) / sum_c exp(x[r, c] - max_r), two ways with one
// signature (the example pair of the README's "qualify a kernel pair in your own repository"):
//   softmax_block<THREADS>: one block of THREADS threads per row; the row max and the sum of
//     exponentials each reduced by a shared-memory tree.
//   softmax_warp<WARPS>: one warp per row, WARPS rows per block; both reductions by warp shuffles,
//     with no shared memory and no block barrier.
// The two add the exponentials in different orders, so their outputs differ in the last bits: the
// plan that compares them needs an atol + rtol bound, not byte identity.
// A build with QUALIFY_CONTROL_SKIP_LAST_COL leaves each row's last column unwritten in
// softmax_warp (a negative control the fidelity gate must catch).

__device__ inline float neg_inf() { return __int_as_float(0xff800000); }

template <int THREADS>
__global__ void __launch_bounds__(THREADS) softmax_block(const float* __restrict__ x, float* __restrict__ y,
                                                         int rows, int cols) {
    __shared__ float scratch[THREADS];
    const int t = threadIdx.x;
    const long long r = blockIdx.x;
    if (r >= rows) return;
    const float* in = x + r * cols;
    float* out = y + r * cols;

    float m = neg_inf();
    for (int c = t; c < cols; c += THREADS) m = fmaxf(m, in[c]);
    scratch[t] = m;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (t < s) scratch[t] = fmaxf(scratch[t], scratch[t + s]);
        __syncthreads();
    }
    m = scratch[0];
    __syncthreads();

    float sum = 0.0f;
    for (int c = t; c < cols; c += THREADS) sum += expf(in[c] - m);
    scratch[t] = sum;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (t < s) scratch[t] += scratch[t + s];
        __syncthreads();
    }
    const float inv = 1.0f / scratch[0];
    for (int c = t; c < cols; c += THREADS) out[c] = expf(in[c] - m) * inv;
}

template <int WARPS>
__global__ void __launch_bounds__(WARPS * 32) softmax_warp(const float* __restrict__ x, float* __restrict__ y,
                                                           int rows, int cols) {
    const int lane = threadIdx.x & 31;
    const long long r = static_cast<long long>(blockIdx.x) * WARPS + (threadIdx.x >> 5);
    if (r >= rows) return;  // a whole warp leaves together: the shuffles below see full warps
    const float* in = x + r * cols;
    float* out = y + r * cols;

    float m = neg_inf();
    for (int c = lane; c < cols; c += 32) m = fmaxf(m, in[c]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));

    float sum = 0.0f;
    for (int c = lane; c < cols; c += 32) sum += expf(in[c] - m);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float inv = 1.0f / sum;
#ifdef QUALIFY_CONTROL_SKIP_LAST_COL
    const int end = cols - 1;
#else
    const int end = cols;
#endif
    for (int c = lane; c < end; c += 32) out[c] = expf(in[c] - m) * inv;
}

template __global__ void softmax_block<256>(const float*, float*, int, int);
template __global__ void softmax_warp<8>(const float*, float*, int, int);
