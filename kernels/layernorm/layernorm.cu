// fp32 row LayerNorm, two ways: one block per row with a two-pass mean then variance (base),
// one warp per row with Welford's running mean and M2 merged across lanes (candidate).
// y = (x - mean) * rstd * gamma + beta; mean and rstd are outputs too.

__global__ void layernorm_two_pass(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                                   float* rstd, int N, int C) {
    __shared__ float partial[32];
    const int row = blockIdx.x;
    if (row >= N) return;
    const float* xr = x + (long long)row * C;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) sum += xr[i];
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = sum;
    __syncthreads();
    if (threadIdx.x < 32) {
        float s = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
        if (threadIdx.x == 0) partial[0] = s / C;
    }
    __syncthreads();
    const float mu = partial[0];
    __syncthreads();
    float sq = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) sq += (xr[i] - mu) * (xr[i] - mu);
    for (int o = 16; o > 0; o >>= 1) sq += __shfl_down_sync(0xffffffffu, sq, o);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = sq;
    __syncthreads();
    if (threadIdx.x < 32) {
        float s = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
        if (threadIdx.x == 0) partial[0] = rsqrtf(s / C + 1e-5f);
    }
    __syncthreads();
    const float rs = partial[0];
    for (int i = threadIdx.x; i < C; i += blockDim.x) y[(long long)row * C + i] = (xr[i] - mu) * rs * gamma[i] + beta[i];
    if (threadIdx.x == 0) {
        mean[row] = mu;
        rstd[row] = rs;
    }
}

__global__ void layernorm_welford(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                                  float* rstd, int N, int C) {
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= N) return;
    const float* xr = x + (long long)row * C;
    float n = 0.0f, mu = 0.0f, m2 = 0.0f;
    for (int i = lane; i < C; i += 32) {
        n += 1.0f;
        const float d = xr[i] - mu;
        mu += d / n;
        m2 += d * (xr[i] - mu);
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float n2 = __shfl_down_sync(0xffffffffu, n, o);
        const float mu2 = __shfl_down_sync(0xffffffffu, mu, o);
        const float m22 = __shfl_down_sync(0xffffffffu, m2, o);
        const float total = n + n2;
        if (n2 > 0.0f) {
            const float d = mu2 - mu;
            mu += d * n2 / total;
            m2 += m22 + d * d * n * n2 / total;
            n = total;
        }
    }
    mu = __shfl_sync(0xffffffffu, mu, 0);
    const float rs = rsqrtf(__shfl_sync(0xffffffffu, m2, 0) / C + 1e-5f);
    for (int i = lane; i < C; i += 32) y[(long long)row * C + i] = (xr[i] - mu) * rs * gamma[i] + beta[i];
    if (lane == 0) {
        mean[row] = mu;
        rstd[row] = rs;
    }
}
