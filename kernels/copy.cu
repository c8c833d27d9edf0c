// SM copy kernel: 16-byte vector loads/stores, UNROLL independent loads in flight per thread,
// grid-stride over the whole buffer, `loops` passes per launch. Either pointer may be a peer's
// (P2P over NVLink/PCIe): with src remote it is a read ("sm_read"), with dst remote a write ("sm_write").
// Bytes past the last full 16-byte vector are copied one by one by the first threads. The loop is common.cuh's
// ipcb_copy_v16, which the all-to-all's kernel shares.
#include "common.cuh"

#ifndef UNROLL
#define UNROLL 8
#endif

extern "C" __global__ void __launch_bounds__(1024)
copy_v16(const uint4* __restrict__ src, uint4* __restrict__ dst, unsigned long long nbytes, int loops)
{
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    ipcb_copy_v16<UNROLL>(src, dst, nbytes, loops, tid, stride);
}
