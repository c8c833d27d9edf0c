// Device-side ping-pong between two GPUs (or two processes on one GPU): each side's kernel stores a
// flag into the peer's memory and spins on its own flag. One thread per side, volatile accesses,
// system-scope fences; flag values only grow (base + i), so launches never need a reset. The first
// `warm` round trips are not timed (they absorb the two launches' skew). Gives up after timeout_ns.
#include "common.cuh"

extern "C" __global__ void pingpong(volatile unsigned int* mine, volatile unsigned int* theirs, unsigned int base,
                                    int warm, int iters, int initiator, unsigned long long timeout_ns,
                                    unsigned long long* out)
{
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const unsigned long long t0 = ipcb_globaltimer();
    unsigned long long t_start = t0;
    out[1] = 0;
    for (int i = 1; i <= warm + iters; ++i) {
        if (i == warm + 1) t_start = ipcb_globaltimer();
        const unsigned int v = base + (unsigned int)i;
        if (initiator) {
            *theirs = v;
            __threadfence_system();
        }
        while (*mine < v) {
            if (ipcb_globaltimer() - t0 > timeout_ns) { out[1] = (unsigned long long)i; return; }
        }
        if (!initiator) {
            *theirs = v;
            __threadfence_system();
        }
    }
    out[0] = ipcb_globaltimer() - t_start;
}

// Event ping-pong helpers: `put` stores a value (ordered before the interprocess event recorded after
// it), `check` runs after the peer's cudaStreamWaitEvent and counts a mismatch if the value is not
// there yet, which proves (or disproves) that the wait really ordered the two streams.
extern "C" __global__ void put(volatile unsigned int* where, unsigned int v)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) { *where = v; __threadfence_system(); }
}

extern "C" __global__ void check(const volatile unsigned int* where, unsigned int v, unsigned long long* bad)
{
    if (threadIdx.x == 0 && blockIdx.x == 0 && *where < v) atomicAdd(bad, 1ull);
}
