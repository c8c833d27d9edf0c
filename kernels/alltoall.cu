// All-to-all kernels (ipcbench/suites/alltoall.py): every GPU of the node sends one slice to every other GPU
// at once, each GPU's rank driving its own flows.
#include "common.cuh"

#ifndef UNROLL
#define UNROLL 8
#endif

// One kernel per GPU stores its source buffer into `npeers` peers' buffers at once (dsts: a device array of
// the peers' destination pointers), as an MoE dispatch kernel writes each expert's slice into its peer. Block b
// serves peer b % npeers, so the blocks the scheduler places together spread over every peer, and each peer's
// blocks stride over its slice with 16-byte stores, UNROLL loads in flight per thread (kernels/copy.cu's loop:
// common.cuh's ipcb_copy_v16). The grid is a multiple of npeers. `loops` passes per launch.
extern "C" __global__ void __launch_bounds__(1024)
a2a_write(const uint4* __restrict__ src, const unsigned long long* __restrict__ dsts, int npeers,
          unsigned long long nbytes, int loops)
{
    const int peer = blockIdx.x % npeers;
    const unsigned long long per_peer = gridDim.x / npeers;
    uint4* dst = reinterpret_cast<uint4*>(dsts[peer]);
    const unsigned long long stride = per_peer * blockDim.x;
    const unsigned long long tid = (unsigned long long)(blockIdx.x / npeers) * blockDim.x + threadIdx.x;
    ipcb_copy_v16<UNROLL>(src, dst, nbytes, loops, tid, stride);
}

// A barrier between the GPUs of the node on the device, between two steps of the copy engine's all-to-all:
// this rank adds one to its own count (*seq, in its memory), stores the count into its word of every peer's
// flags (post[j]: a P2P store into that peer's memory), then waits until every peer's word in its own flags
// (mine[0..n), its own index `me` skipped) has reached the count. Counts only grow, so no launch resets
// anything, and a peer can be at most one barrier ahead. Gives up after timeout_ns (GPU global timer): writes 1
// into *status, which the host reads after the batch; a later barrier that finds *status set returns at once.
// Launch with one block of 32 threads (thread 0 does the work).
extern "C" __global__ void a2a_barrier(const unsigned long long* __restrict__ post, int npeers,
                                       const volatile unsigned int* mine, int n, int me, unsigned int* seq,
                                       volatile unsigned int* status, unsigned long long timeout_ns)
{
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const unsigned int v = *seq + 1u;
    *seq = v;
    for (int j = 0; j < npeers; ++j) *reinterpret_cast<volatile unsigned int*>(post[j]) = v;
    __threadfence_system();
    const unsigned long long t0 = ipcb_globaltimer();
    for (int r = 0; r < n; ++r) {
        if (r == me) continue;
        while ((int)(mine[r] - v) < 0) {
            if (*status != 0u) return;
            if (ipcb_globaltimer() - t0 > timeout_ns) {
                *status = 1u;
                return;
            }
        }
    }
}
