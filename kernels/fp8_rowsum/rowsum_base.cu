// Base arm of protocols/fp8-rowsum: two launches. dequant_scale turns the fp8 e4m3 matrix into
// f32 (each element times its row's scale) in a scratch buffer; row_sum reduces each row of it.
// The f32 scratch is written and read back in full: 4 bytes a element each way on top of the
// 1-byte fp8 read, the traffic the fused candidate removes.
#include "rowsum_common.cuh"

__global__ void __launch_bounds__(1024) dequant_scale(const unsigned char* __restrict__ q,
                                                      const float* __restrict__ scale, float* __restrict__ deq,
                                                      int rows, int cols) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= static_cast<long long>(rows) * cols) return;
    deq[i] = __fmul_rn(e4m3_to_float(q[i]), scale[i / cols]);
}

__global__ void __launch_bounds__(ROWSUM_THREADS) row_sum(const float* __restrict__ deq, float* __restrict__ out,
                                                          int cols) {
    const float* row = deq + static_cast<long long>(blockIdx.x) * cols;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += ROWSUM_THREADS) acc = __fadd_rn(acc, row[c]);
    const float total = block_sum_128(acc);
    if (threadIdx.x == 0) out[blockIdx.x] = total;
}
