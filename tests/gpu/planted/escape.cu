// A shared library with two builds of one entry point (compiled with -DESCAPE=0 or 1):
// the honest build queues its kernel on the caller's stream; the escaping build launches on a
// stream of its own, so events on the caller's stream see nothing and the call looks free.
#include <cuda_runtime.h>

__global__ void slow_double(const float* in, float* out, int n, long long spin_cycles) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const long long start = clock64();
    while (clock64() - start < spin_cycles) {
    }
    if (i < n) out[i] = in[i] * 2.0f;
}

extern "C" __attribute__((visibility("default"))) int scale_entry(const void* in, void* out, int n, void* stream) {
    cudaStream_t target = static_cast<cudaStream_t>(stream);
#if ESCAPE
    static cudaStream_t own = nullptr;
    if (own == nullptr) cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking);
    target = own;
#endif
    // about 0.5 ms of spinning at ~2 GHz: long enough that escaped work cannot hide in noise
    slow_double<<<(n + 255) / 256, 256, 0, target>>>(static_cast<const float*>(in), static_cast<float*>(out), n,
                                                      1000000LL);
    return static_cast<int>(cudaGetLastError());
}
