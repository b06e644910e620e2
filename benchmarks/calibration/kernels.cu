// A bandwidth-bound kernel for qualify's calibration benchmark: per-block partial sums of a float4
// array (grid-stride, a fixed grid, a fixed-order reduction, so the output bytes are deterministic),
// with the same spin hook as kernels/attention/attention.cu's main loop. It reads much and writes a
// few kilobytes, so the engine's per-half output checks stay cheap at 400 MB of input.
//
// Compiled with QUALIFY_SPIN_CYCLES=n, every thread spins n SM clocks on every 16th grid-stride
// iteration: a planted slowdown proportional to the work, that leaves the output bytes unchanged.
// (A spin on every iteration cost 2-4 % from its first clock on, whatever n, on the H200: the
// loop's loads stop overlapping.) Undefined or 0, the hook is empty and this is a plain reduction.

#if defined(QUALIFY_SPIN_CYCLES) && QUALIFY_SPIN_CYCLES > 0
#define QUALIFY_LOOP_STATE int qualify_iteration = 0;
#define QUALIFY_MAIN_LOOP_HOOK()                                          \
  do {                                                                    \
    if ((qualify_iteration++ & 15) == 0) {                                \
      const long long qualify_until = clock64() + (QUALIFY_SPIN_CYCLES);  \
      while (clock64() < qualify_until) {                                 \
      }                                                                   \
    }                                                                     \
  } while (0)
#else
#define QUALIFY_LOOP_STATE
#define QUALIFY_MAIN_LOOP_HOOK() \
  do {                           \
  } while (0)
#endif

constexpr int kThreads = 256;

extern "C" __global__ void __launch_bounds__(kThreads)
    calib_sum(const float4* __restrict__ x, float* __restrict__ partial, long long n4) {
  __shared__ float acc[kThreads];
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  float sum = 0.0f;
  QUALIFY_LOOP_STATE
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride) {
    QUALIFY_MAIN_LOOP_HOOK();
    const float4 v = x[i];
    sum += (v.x + v.y) + (v.z + v.w);
  }
  acc[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) acc[threadIdx.x] += acc[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = acc[0];
}
