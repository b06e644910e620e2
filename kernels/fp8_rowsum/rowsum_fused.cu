// Candidate arm of protocols/fp8-rowsum: one launch that reads the fp8 e4m3 matrix and reduces
// each row, with no f32 intermediate. It needs sm_90a: it decodes with Hopper's cvt.e4m3x2 and
// gives back registers with setmaxnreg, which only the arch-specific target has; compiled for
// plain sm_90 it stops here.
#include "rowsum_common.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "rowsum_fused.cu needs sm_90a (setmaxnreg): list sm_90a in hardware.architectures"
#endif

// registers per thread after setmaxnreg.dec: a multiple of 8 in [24, 256], at most what the
// kernel starts with (32: __launch_bounds__(128, 16) for a full SM of 2048 threads), and enough
// for this loop (ptxas fits it in 24 without spilling)
#ifndef FUSED_REGISTERS
#define FUSED_REGISTERS 24
#endif

// One warp group (128 threads) per row. setmaxnreg is warp-group-wide (.sync.aligned): every
// thread of the block executes it once, before any divergence.
__global__ void __launch_bounds__(ROWSUM_THREADS, 16) fused_rowsum(const unsigned char* __restrict__ q,
                                                                   const float* __restrict__ scale,
                                                                   float* __restrict__ out, int cols) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" : : "n"(FUSED_REGISTERS));
    const unsigned char* row = q + static_cast<long long>(blockIdx.x) * cols;
    const float s = scale[blockIdx.x];
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += ROWSUM_THREADS) {
        unsigned char b = row[c];
#ifdef QUALIFY_CONTROL_FLIP_FP8_BIT
        if (c == 0) b ^= 0x08u;  // negative control: the lowest exponent bit of each row's first fp8
#endif
        acc = __fadd_rn(acc, __fmul_rn(e4m3_to_float_hw(b), s));
    }
    const float total = block_sum_128(acc);
    if (threadIdx.x == 0) out[blockIdx.x] = total;
}
