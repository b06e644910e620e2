// qualify's own device helpers, compiled with NVRTC for the device's architecture at session start.

// Holds the stream until the host sets *release, so every launch of a sample is queued before the
// GPU reaches the start event: host launch latency never enters the timed window (NVBench's
// blocking kernel). Gives up after timeout_ns of %globaltimer and records that it did, so a
// sample that could not be queued in time is discarded instead of silently mis-timed.
extern "C" __global__ void qualify_block_stream(const volatile int* release, unsigned long long timeout_ns,
                                                int* timed_out) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    while (*release == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - start > timeout_ns) {
            *timed_out = 1;
            return;
        }
        __nanosleep(1000);
    }
}

// Cold-cache flush by *reading* a buffer of at least twice the L2: the lines it leaves are clean,
// so the next kernel pays no write-back (a memset flush leaves dirty lines: +12-15 % at 45 us on
// the H200). The xor result is stored only under a condition that never holds, which keeps the
// loads alive without writing anything.
extern "C" __global__ void qualify_flush_l2(const int4* __restrict__ data, unsigned long long n, int* sink) {
    int acc = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const int4 v = __ldcg(data + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x5eed1e55 && threadIdx.x == 1023) *sink = acc;
}

// Reads one byte every `stride` bytes of a buffer after a cold flush, so the first kernel of a
// sample finds its address translations warm while L2 holds almost none of its lines. Stored only
// under a condition that never holds, like the flush.
extern "C" __global__ void qualify_touch_pages(const unsigned char* __restrict__ data, unsigned long long nbytes,
                                               unsigned long long stride, int* sink) {
    const unsigned long long i = (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) * stride;
    if (i < nbytes && __ldcg(data + i) == 0x5e && threadIdx.x == 1023) *sink = 1;
}

// Idles one thread for `ns` of %globaltimer: queued between a cold flush and a sample's start
// event, it gives the memory system the pause it has when a sample starts on its own.
extern "C" __global__ void qualify_settle(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        __nanosleep(500);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}

// Sets *differ when two buffers of n bytes differ: the timed launches' outputs are checked against
// the reference on the device, so a half costs no device-to-host copy of its outputs.
extern "C" __global__ void qualify_bytes_differ(const unsigned char* __restrict__ a, const unsigned char* __restrict__ b,
                                                unsigned long long n, int* differ) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        if (a[i] != b[i]) {
            *differ = 1;
            return;
        }
    }
}
