// Fill and verify: every 32-bit word i of a buffer holds pattern(seed, i), a hash that is never the
// same for neighbouring words or seeds, so a stale, shifted or partial copy cannot pass. The seed
// depends on the source rank, the size and the sample. Bytes past the last full word use the low
// byte of the pattern of their own index.

__device__ __forceinline__ unsigned int ipcb_pattern(unsigned int seed, unsigned long long i)
{
    unsigned int x = seed ^ (unsigned int)i ^ (unsigned int)(i >> 32) * 0x85ebca6bu;
    x ^= x >> 16; x *= 0x7feb352du;
    x ^= x >> 15; x *= 0x846ca68bu;
    x ^= x >> 16;
    return x ^ 0xa5a5a5a5u;
}

extern "C" __global__ void fill(unsigned int* buf, unsigned long long nbytes, unsigned int seed)
{
    const unsigned long long nw = nbytes >> 2;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (unsigned long long i = tid; i < nw; i += stride) buf[i] = ipcb_pattern(seed, i);
    const unsigned long long t = (nw << 2) + tid;
    if (t < nbytes) reinterpret_cast<unsigned char*>(buf)[t] = (unsigned char)ipcb_pattern(seed, t);
}

extern "C" __global__ void verify(const unsigned int* buf, unsigned long long nbytes, unsigned int seed,
                                  unsigned long long* mismatches)
{
    const unsigned long long nw = nbytes >> 2;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long bad = 0;
    for (unsigned long long i = tid; i < nw; i += stride) bad += (buf[i] != ipcb_pattern(seed, i));
    const unsigned long long t = (nw << 2) + tid;
    if (t < nbytes) bad += (reinterpret_cast<const unsigned char*>(buf)[t] != (unsigned char)ipcb_pattern(seed, t));
    if (bad) atomicAdd(mismatches, bad);
}
