// Kernels of known shape for the timer benchmark: a bandwidth-bound axpy whose duration scales
// with n, and a compute-bound FMA chain whose duration scales with iters (for the ms range).
extern "C" __global__ void bench_axpy(const float4* __restrict__ x, const float4* __restrict__ y,
                                      float4* __restrict__ out, float a, long long n4) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        const float4 u = x[i], v = y[i];
        out[i] = make_float4(fmaf(a, u.x, v.x), fmaf(a, u.y, v.y), fmaf(a, u.z, v.z), fmaf(a, u.w, v.w));
    }
}

extern "C" __global__ void bench_fma_chain(float* out, int iters) {
    float acc = threadIdx.x * 1e-3f, b = 1.0000001f;
    for (int i = 0; i < iters; ++i) acc = fmaf(acc, b, 1e-7f);
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
