// Producer/consumer pipeline stage over CUDA IPC (suite `pipeline`, ipcbench/pipeline.py).
//
// A ring of D slots of C bytes lives in the CONSUMER's memory. Each chunk is split into L lanes (byte
// ranges [b*P, min((b+1)*P, C))), and chunks are dealt round-robin to G groups of L blocks: block
// (g, b) = blockIdx g*L+b handles lane b of chunks i = g, g+G, g+2G, ... (k-th chunk of its group:
// i = k*G + g), so that up to G chunks are in flight at once. Counters, one per block, monotonic:
//   ready[g*L+b]    (consumer's ctrl block, written remotely by producer block (g,b)) = chunks of group
//                   g whose lane b is published
//   released[g*L+b] (producer's ctrl block, written remotely by consumer block (g,b)) = chunks of group
//                   g whose lane b is consumed
// A chunk moves as a WHOLE: the consumer starts on chunk i only when all L lanes of it are published,
// and the producer reuses slot i%D only when all L lanes of chunk i-D are released (one warp checks
// the L counters in parallel).
// Producer block (g,b), chunk i: wait slot free, write its lane of chunk i (a pattern that depends on
// the chunk), __syncthreads, fence at system scope, store its ready counter.
// Consumer block (g,b), chunk i: wait chunk published, verify its lane (loads bypass L1:
// ld.global.cg), __syncthreads, store its released counter.
// One extra producer block (the monitor, block G*L) stamps, on the PRODUCER's %globaltimer, when all
// of chunk i has been released; blocks stamp (atomicMin) when they start writing chunk i. Both stamps
// are on one clock, so t_done[i] - t_start[i] is a per-chunk latency that needs no clock offset.
// Every spin gives up after timeout_ns (or as soon as *status is non-zero), writes a status code and
// returns: nothing here can hang the stream.
#include "common.cuh"

#define PL_ST_PRODUCER_HELLO 1u   // producer: the consumer kernel never said hello
#define PL_ST_PRODUCER_SLOT 2u    // producer: a slot was never released
#define PL_ST_MONITOR 3u          // producer monitor: a chunk was never released
#define PL_ST_CONSUMER_READY 4u   // consumer: a chunk was never published

typedef unsigned long long u64;

__device__ __forceinline__ unsigned int pl_hash(unsigned int seed, u64 i)
{
    unsigned int x = seed ^ (unsigned int)i ^ (unsigned int)(i >> 32) * 0x85ebca6bu;
    x ^= x >> 16; x *= 0x7feb352du;
    x ^= x >> 15; x *= 0x846ca68bu;
    x ^= x >> 16;
    return x ^ 0x3c3c3c3cu;
}

__device__ __forceinline__ unsigned int pl_chunk_seed(unsigned int base, u64 chunk)
{
    return pl_hash(base, chunk * 0x9E3779B97F4A7C15ull + 1);
}

__device__ __forceinline__ u64 pl_ld_acquire(const u64* p)
{
    u64 v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void pl_st_release(u64* p, u64 v)
{
    asm volatile("st.release.sys.global.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}

// Spin until *p >= target; false on timeout or when another block already failed (*status != 0).
__device__ bool pl_wait_ge(const u64* p, u64 target, unsigned long long timeout_ns,
                           const volatile unsigned int* status)
{
    if (pl_ld_acquire(p) >= target) return true;
    const u64 t0 = ipcb_globaltimer();
    unsigned int spins = 0;
    while (pl_ld_acquire(p) < target) {
        if ((++spins & 63u) == 0) {
            if (*status != 0u) return false;
            if (ipcb_globaltimer() - t0 > timeout_ns) return false;
        }
    }
    return true;
}

__device__ __forceinline__ void pl_fail(unsigned int* status, unsigned int code)
{
    atomicCAS(status, 0u, code);
}

// Warp-wide: every counter c[0..n) >= target (each thread of the warp checks every 32nd counter).
// Called by all 32 threads of one warp; false on timeout / failure elsewhere.
__device__ bool pl_wait_all(const u64* c, unsigned int n, u64 target, unsigned long long timeout_ns,
                            const volatile unsigned int* status)
{
    bool ok = true;
    for (unsigned int j = threadIdx.x & 31u; j < n && ok; j += 32)
        ok = pl_wait_ge(&c[j], target, timeout_ns, status);
    return __all_sync(0xffffffffu, ok);
}

extern "C" __global__ void pipe_producer(unsigned char* ring, u64 chunk_bytes, unsigned int depth,
                                         unsigned int n_chunks, unsigned int lanes, unsigned int groups,
                                         u64 part_bytes, unsigned int base_seed,
                                         u64* ready_remote,     // consumer's ctrl: ready[groups*lanes]
                                         const u64* released,   // own ctrl: released[groups*lanes]
                                         const u64* hello,      // own ctrl: set by the consumer kernel
                                         u64* t_start, u64* t_done, unsigned int* status,
                                         unsigned long long timeout_ns)
{
    __shared__ int stop;
    if (blockIdx.x == groups * lanes) {
        // Monitor: one warp notes when every lane of chunk i has been released.
        if (threadIdx.x >= 32) return;
        for (unsigned int i = 0; i < n_chunks; ++i) {
            if (!pl_wait_all(released + (u64)(i % groups) * lanes, lanes, (u64)(i / groups) + 1, timeout_ns, status)) {
                if (threadIdx.x == 0) pl_fail(status, PL_ST_MONITOR);
                return;
            }
            if (threadIdx.x == 0) t_done[i] = ipcb_globaltimer();
        }
        return;
    }
    const unsigned int g = blockIdx.x / lanes, b = blockIdx.x % lanes;
    if (threadIdx.x == 0) {
        stop = pl_wait_ge(hello, 1, timeout_ns, status) ? 0 : 1;
        if (stop) pl_fail(status, PL_ST_PRODUCER_HELLO);
    }
    __syncthreads();
    if (stop) return;
    const u64 lo = (u64)b * part_bytes;
    const u64 n = lo < chunk_bytes ? min(part_bytes, chunk_bytes - lo) : 0;
    const u64 n16 = n >> 4;
    for (unsigned int k = 0, i = g; i < n_chunks; ++k, i += groups) {
        if (threadIdx.x < 32) {
            bool ok = true;
            if (i >= depth) {
                const unsigned int j = i - depth;  // the chunk that last used slot i % depth
                ok = pl_wait_all(released + (u64)(j % groups) * lanes, lanes, (u64)(j / groups) + 1,
                                 timeout_ns, status);
            }
            if (threadIdx.x == 0) {
                if (ok) {
                    atomicMin(&t_start[i], ipcb_globaltimer());
                } else {
                    pl_fail(status, PL_ST_PRODUCER_SLOT);
                }
                stop = ok ? 0 : 1;
            }
        }
        __syncthreads();
        if (stop) return;
        const unsigned int seed = pl_chunk_seed(base_seed, i);
        uint4* dst = reinterpret_cast<uint4*>(ring + (u64)(i % depth) * chunk_bytes + lo);
        const u64 w0 = lo >> 2;
        for (u64 q = threadIdx.x; q < n16; q += blockDim.x) {
            const u64 w = w0 + 4 * q;
            dst[q] = make_uint4(pl_hash(seed, w), pl_hash(seed, w + 1), pl_hash(seed, w + 2), pl_hash(seed, w + 3));
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence_system();
            pl_st_release(&ready_remote[blockIdx.x], (u64)k + 1);
        }
    }
}

extern "C" __global__ void pipe_consumer(const unsigned char* ring, u64 chunk_bytes, unsigned int depth,
                                         unsigned int n_chunks, unsigned int lanes, unsigned int groups,
                                         u64 part_bytes, unsigned int base_seed,
                                         const u64* ready,      // own ctrl: ready[groups*lanes]
                                         u64* released_remote,  // producer's ctrl: released[groups*lanes]
                                         u64* hello_remote,     // producer's ctrl
                                         u64* mismatches, unsigned int* status,
                                         unsigned long long timeout_ns)
{
    __shared__ int stop;
    if (blockIdx.x >= groups * lanes) return;
    const unsigned int g = blockIdx.x / lanes, b = blockIdx.x % lanes;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        __threadfence_system();
        pl_st_release(hello_remote, 1);
    }
    const u64 lo = (u64)b * part_bytes;
    const u64 n = lo < chunk_bytes ? min(part_bytes, chunk_bytes - lo) : 0;
    const u64 n16 = n >> 4;
    u64 bad = 0;
    for (unsigned int k = 0, i = g; i < n_chunks; ++k, i += groups) {
        if (threadIdx.x < 32) {
            const bool ok = pl_wait_all(ready + (u64)g * lanes, lanes, (u64)k + 1, timeout_ns, status);
            if (threadIdx.x == 0) {
                stop = ok ? 0 : 1;
                if (!ok) pl_fail(status, PL_ST_CONSUMER_READY);
            }
        }
        __syncthreads();
        if (stop) break;
        const unsigned int seed = pl_chunk_seed(base_seed, i);
        const uint4* src = reinterpret_cast<const uint4*>(ring + (u64)(i % depth) * chunk_bytes + lo);
        const u64 w0 = lo >> 2;
        for (u64 q = threadIdx.x; q < n16; q += blockDim.x) {
            const uint4 v = __ldcg(&src[q]);
            const u64 w = w0 + 4 * q;
            bad += (v.x != pl_hash(seed, w)) + (v.y != pl_hash(seed, w + 1)) +
                   (v.z != pl_hash(seed, w + 2)) + (v.w != pl_hash(seed, w + 3));
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence_system();
            pl_st_release(&released_remote[blockIdx.x], (u64)k + 1);
        }
    }
    if (bad) atomicAdd(mismatches, bad);
}
