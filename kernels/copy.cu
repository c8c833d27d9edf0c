// SM copy kernel: 16-byte vector loads/stores, UNROLL independent loads in flight per thread,
// grid-stride over the whole buffer, `loops` passes per launch. Either pointer may be a peer's
// (P2P over NVLink/PCIe): with src remote it is a read ("sm_read"), with dst remote a write ("sm_write").
// Bytes past the last full 16-byte vector are copied one by one by the first threads.
#ifndef UNROLL
#define UNROLL 8
#endif

extern "C" __global__ void __launch_bounds__(1024)
copy_v16(const uint4* __restrict__ src, uint4* __restrict__ dst, unsigned long long nbytes, int loops)
{
    const unsigned long long n16 = nbytes >> 4;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned char* sb = reinterpret_cast<const unsigned char*>(src);
    unsigned char* db = reinterpret_cast<unsigned char*>(dst);
    for (int l = 0; l < loops; ++l) {
        unsigned long long i = tid;
        for (; i + (UNROLL - 1) * stride < n16; i += UNROLL * stride) {
            uint4 v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) v[u] = src[i + u * stride];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) dst[i + u * stride] = v[u];
        }
        for (; i < n16; i += stride) dst[i] = src[i];
        const unsigned long long t = (n16 << 4) + tid;
        if (t < nbytes) db[t] = sb[t];
    }
}
