// Shared device helpers for ipcbench kernels.
#pragma once

__device__ __forceinline__ unsigned long long ipcb_globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// The SM copy loop (kernels/copy.cu's copy_v16 and kernels/alltoall.cu's a2a_write, one loop for both): `loops`
// passes of dst[0:nbytes] = src[0:nbytes], this thread taking the 16-byte vectors tid, tid + stride, ... with U
// independent loads in flight (U: the kernel's UNROLL, --sm-copy's), then the vectors past the last full group of
// U one at a time, then the bytes past the last full vector one by one (thread tid the byte (n16 << 4) + tid).
// Inlined into each kernel, which passes its own tid and stride (copy_v16: the whole grid; a2a_write: the blocks of
// one peer), so each compiles to the loop it had.
template <int U>
__device__ __forceinline__ void ipcb_copy_v16(const uint4* __restrict__ src, uint4* dst, unsigned long long nbytes,
                                              int loops, unsigned long long tid, unsigned long long stride)
{
    const unsigned long long n16 = nbytes >> 4;
    const unsigned char* sb = reinterpret_cast<const unsigned char*>(src);
    unsigned char* db = reinterpret_cast<unsigned char*>(dst);
    for (int l = 0; l < loops; ++l) {
        unsigned long long i = tid;
        for (; i + (U - 1) * stride < n16; i += U * stride) {
            uint4 v[U];
#pragma unroll
            for (int u = 0; u < U; ++u) v[u] = src[i + u * stride];
#pragma unroll
            for (int u = 0; u < U; ++u) dst[i + u * stride] = v[u];
        }
        for (; i < n16; i += stride) dst[i] = src[i];
        const unsigned long long t = (n16 << 4) + tid;
        if (t < nbytes) db[t] = sb[t];
    }
}
