// out = a * x + y over n floats, read with scalar loads (VEC = 1) or 16-byte vector loads (VEC = 4).
//
// The pair qualifies "a vectorised load": the independent variable is the load width only. Both
// instantiations evaluate the same fmaf per element, so their outputs are byte-identical by
// construction; any difference the fidelity gate finds is a bug in the vector path (alignment,
// tail handling). Self-contained so NVRTC compiles it with no host headers.

template <int VEC>
__global__ void __launch_bounds__(256) axpy(const float* __restrict__ x, const float* __restrict__ y,
                                            float* __restrict__ out, float a, long long n) {
#ifdef QUALIFY_SPIN_CYCLES
    // Calibration hook (benchmarks/calibration): every thread spins QUALIFY_SPIN_CYCLES SM clocks
    // before its loads, planting a slowdown of known size without touching the data. Undefined in
    // every real build, where the kernel is unchanged.
    const long long qualify_until = clock64() + (QUALIFY_SPIN_CYCLES);
    while (clock64() < qualify_until) {
    }
#endif
    const long long first = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
    if (VEC == 4 && first + 3 < n) {
        const float4 xv = *reinterpret_cast<const float4*>(x + first);
        const float4 yv = *reinterpret_cast<const float4*>(y + first);
        float4 o;
        o.x = fmaf(a, xv.x, yv.x);
        o.y = fmaf(a, xv.y, yv.y);
        o.z = fmaf(a, xv.z, yv.z);
        o.w = fmaf(a, xv.w, yv.w);
        *reinterpret_cast<float4*>(out + first) = o;
        return;
    }
#ifdef QUALIFY_CONTROL_DROP_TAIL
    if (VEC == 4) return;  // negative control: the tail is left unwritten, which parity must catch
#endif
    // Scalar path: every element for VEC == 1, the tail (n not a multiple of 4) for VEC == 4.
    for (int k = 0; k < VEC; ++k) {
        const long long i = first + k;
        if (i < n) out[i] = fmaf(a, x[i], y[i]);
    }
}
