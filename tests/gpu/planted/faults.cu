// Planted faults for qualify's GPU tests. `copy_ok` is the correct reference; each other kernel
// has exactly one defect, and the tests assert that the mechanism meant for it catches it.
// All share the signature (const float* in, float* out, int n) and a one-thread-per-element grid.

extern "C" __global__ void copy_ok(const float* in, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * 2.0f;
}

// memcheck: the last thread writes one element past the end.
extern "C" __global__ void oob_write(const float* in, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * 2.0f;
    if (i == n - 1) out[n + 64] = 0.0f;
}

// racecheck: neighbours' shared-memory slots are read without a barrier after they are written.
extern "C" __global__ void smem_race(const float* in, float* out, int n) {
    __shared__ float tile[256];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? in[i] : 0.0f;
    const float right = tile[(threadIdx.x + 1) % blockDim.x];  // no __syncthreads()
    if (i < n) out[i] = in[i] * 2.0f + 0.0f * right;
}

// initcheck: a device-heap allocation is read before anything wrote it.
extern "C" __global__ void uninit_read(const float* in, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    __shared__ float* scratch;
    if (threadIdx.x == 0) scratch = static_cast<float*>(malloc(sizeof(float) * 4));
    __syncthreads();
    float junk = 0.0f;
    if (threadIdx.x == 0 && scratch != nullptr) junk = scratch[1];
    if (i < n) out[i] = in[i] * 2.0f + 0.0f * junk;
    __syncthreads();
    if (threadIdx.x == 0 && scratch != nullptr) free(scratch);
}

// fault isolation: a trap kills the context.
extern "C" __global__ void trap_at_end(const float* in, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * 2.0f;
    if (i == n - 1) __trap();
}

// fault isolation: never returns (the flag it waits for is never set).
extern "C" __global__ void endless(const float* in, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    volatile const float* watch = in;
    while (watch[0] == watch[0] || i >= 0) {
        __nanosleep(1000);
    }
    if (i < n) out[i] = in[i];
}

// parity: one element is wrong.
extern "C" __global__ void one_wrong(const float* in, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * 2.0f + (i == n / 2 ? 1.0f : 0.0f);
}

// parity through poisoned outputs: the last element is never written.
extern "C" __global__ void skips_last(const float* in, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n - 1) out[i] = in[i] * 2.0f;
}
