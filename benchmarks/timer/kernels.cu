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

// Scalar loads: the base of the pair whose verdict the benchmark times (against bench_axpy's float4).
extern "C" __global__ void bench_axpy_scalar(const float* __restrict__ x, const float* __restrict__ y,
                                             float* __restrict__ out, float a, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = fmaf(a, x[i], y[i]);
}

// A grid whose last wave is partly empty: blocks of 1024 threads (two per SM by thread count), each
// a fixed FMA chain, launched as about 1.45 waves. Its duration depends on how the scheduler packs
// the last wave, so it varies from launch to launch more than a full-wave grid.
extern "C" __global__ void bench_wave(float* out, int iters) {
    float acc = threadIdx.x * 1e-3f, b = 1.0000001f;
    for (int i = 0; i < iters; ++i) acc = fmaf(acc, b, 1e-7f);
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

// Does nothing: its reading is the timer's offset for a launch itself.
extern "C" __global__ void bench_empty(float* out) {
    if (out == nullptr) out[threadIdx.x] = 0.0f;
}
