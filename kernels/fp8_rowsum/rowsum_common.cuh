// Shared by both arms of protocols/fp8-rowsum: the fp8 e4m3 decoding of the base and the one
// block reduction both arms end with, so the two arms add the same numbers in the same order.
//
// out[r] = sum over c of (e4m3 q[r, c] as float) * scale[r], for one block of 128 threads per row:
// thread t adds columns t, t + 128, t + 256 ... in that order, each product rounded on its own
// (__fmul_rn, __fadd_rn: no contraction into an FMA, which would round once instead of twice),
// then the 128 partial sums are reduced by one fixed tree. Equal order and equal rounding make the
// fused candidate's output byte-identical to the two-kernel base's.
#pragma once

#define ROWSUM_THREADS 128

// e4m3 (OCP fp8, bias 7, no infinity, S.1111.111 NaN) to float, exactly, in integer arithmetic.
__device__ __forceinline__ float e4m3_to_float(unsigned char b) {
    const unsigned sign = static_cast<unsigned>(b & 0x80u) << 24;
    const unsigned exponent = (b >> 3) & 0xFu;
    const unsigned mantissa = b & 0x7u;
    if (exponent == 0xFu && mantissa == 0x7u) return __uint_as_float(sign | 0x7FC00000u);
    if (exponent == 0u) {  // subnormal: mantissa * 2^-9, signed zero kept
        const float magnitude = static_cast<float>(mantissa) * 0.001953125f;
        return sign ? -magnitude : magnitude;
    }
    return __uint_as_float(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}

// e4m3 to float through the hardware (cvt.e4m3x2, sm_89 and later): the byte as the low half of
// an e4m3x2 pair, to f16 (exact: every e4m3 value is an f16), to f32 (exact). The same values as
// e4m3_to_float, NaN aside (its payload differs).
__device__ __forceinline__ float e4m3_to_float_hw(unsigned char b) {
    unsigned halves;
    const unsigned short pair = b;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(halves) : "h"(pair));
    float value;
    asm("cvt.f32.f16 %0, %1;" : "=f"(value) : "h"(static_cast<unsigned short>(halves & 0xFFFFu)));
    return value;
}

// The sum of one value per thread of a 128-thread block, the same bits on every run: a butterfly
// within each warp, then warp 0's, 1's, 2's and 3's sums added left to right.
__device__ __forceinline__ float block_sum_128(float v) {
    __shared__ float partial[ROWSUM_THREADS / 32];
    for (int offset = 16; offset > 0; offset >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, offset));
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
    __syncthreads();
    return __fadd_rn(__fadd_rn(__fadd_rn(partial[0], partial[1]), partial[2]), partial[3]);
}
