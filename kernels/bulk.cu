// Bulk-copy kernel (Hopper, sm_90+): moves bytes with the TMA unit's bulk asynchronous copies instead of
// 16-byte loads and stores in registers. Either pointer may be a peer's (CUDA IPC maps it into the unified
// address space, so it is a plain global address): with src remote it is a read (sm_bulk_read, pull), with
// dst remote a write (sm_bulk_write, push). The host side is ipcbench/core/bulk.py (plan, deal) and
// core/gpu.py (launch_bulk_copy).
//
// The bytes [0, body) (body = nbytes rounded down to 16) are cut into `pieces` pieces of `piece` bytes
// (a multiple of 16, at most BULK_CHUNK; the last piece of a pass may be shorter). The pieces of all
// `loops` passes form one sequence g = 0 .. pieces*loops-1, dealt round-robin: CTA b copies g = b, b+G,
// b+2G, ... (G = gridDim.x), piece g % pieces of pass g / pieces, so every CTA ends within one piece of
// the others. The 0-15 bytes after the body are copied once, with plain loads and stores, by CTA 0.
//
// Per CTA, one thread (thread 0) runs a pipeline over BULK_STAGES buffers of BULK_CHUNK bytes in dynamic
// shared memory, one mbarrier per stage. The i-th piece of this CTA uses stage i % S, for the (i / S)-th
// time, so its barrier phase has parity (i / S) & 1.
//   prologue: start the loads of pieces 0 .. S-2
//   piece i:  wait for load i (mbarrier phase), start the store of stage i % S (bulk_group, committed
//             alone), then wait until every store but the newest has finished READING shared memory
//             (wait_group.read 1) - so store i-1 is done with stage (i-1) % S - and start the load of piece
//             i+S-1 into that stage.
//   end:      wait until every store has completed (wait_group 0) before the CTA and its shared memory go.
// So up to S-1 loads and two stores are in flight per CTA. Shared memory is only ever accessed by the
// async proxy (the bulk copies); the mbarrier orders a load's writes before the store issued after the
// wait, and wait_group.read orders a store's reads before the load that refills its stage.
//
// Launch with core/bulk.THREADS (32) threads and BULK_STAGES * (BULK_CHUNK + 8) bytes of dynamic shared
// memory; src and dst must be 16-byte aligned (the host checks).
#include "common.cuh"

#ifndef BULK_CHUNK
#define BULK_CHUNK 16384
#endif
#ifndef BULK_STAGES
#define BULK_STAGES 4
#endif
#define BULK_THREADS 32
// A barrier that has not completed after this long means a bulk copy never arrived (a bug, or memory
// that went away): trap, so that the launch fails with an error instead of hanging the stream.
#define BULK_WAIT_TIMEOUT_NS 10000000000ull

static_assert(BULK_CHUNK % 16 == 0 && BULK_CHUNK >= 16, "BULK_CHUNK: a positive multiple of 16 bytes");
static_assert(BULK_STAGES >= 2, "BULK_STAGES: at least 2 (one loading while one is stored)");
static_assert(BULK_CHUNK < (1 << 20), "one bulk copy's bytes must fit an mbarrier's transaction count");

typedef unsigned long long u64;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

__device__ __forceinline__ unsigned bulk_smem(const void* p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void bulk_bar_init(unsigned bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}

// Arrive on the barrier (its one expected arrival per phase) and add `bytes` to the transaction count
// that the bulk copy's complete_tx will count down: the phase completes when all have landed.
__device__ __forceinline__ void bulk_bar_expect(unsigned bar, unsigned bytes)
{
    asm volatile("{\n\t.reg .b64 st;\n\t"
                 "mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n\t}"
                 :: "r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ bool bulk_bar_try_wait(unsigned bar, unsigned parity)
{
    unsigned done;
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                 "selp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    return done != 0;
}

__device__ __forceinline__ void bulk_bar_wait(unsigned bar, unsigned parity)
{
    if (bulk_bar_try_wait(bar, parity)) return;  // try_wait already suspends for a while when not ready
    const u64 t0 = ipcb_globaltimer();
    while (!bulk_bar_try_wait(bar, parity)) {
        if (ipcb_globaltimer() - t0 > BULK_WAIT_TIMEOUT_NS) __trap();
    }
}

// global -> shared::cta (addressed as shared::cluster: a CTA's own shared memory is part of its cluster's
// window), completion counted on the barrier.
__device__ __forceinline__ void bulk_load(unsigned dst_smem, const void* src, unsigned bytes, unsigned bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst_smem), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

// shared::cta -> global, tracked by the bulk async-group of this thread.
__device__ __forceinline__ void bulk_store(void* dst, unsigned src_smem, unsigned bytes)
{
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 :: "l"(dst), "r"(src_smem), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

#endif  // __CUDA_ARCH__ >= 900

extern "C" __global__ void __launch_bounds__(BULK_THREADS)
bulk_copy(const unsigned char* src, unsigned char* dst, u64 nbytes, unsigned piece, u64 pieces, int loops)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) unsigned char bulk_buf[];
    const u64 body = nbytes & ~15ull;
    if (blockIdx.x == 0 && threadIdx.x < nbytes - body) dst[body + threadIdx.x] = src[body + threadIdx.x];
    if (threadIdx.x != 0) return;

    const u64 total = pieces * (u64)loops;
    const u64 mine = total > blockIdx.x ? (total - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    if (mine == 0) return;
    const unsigned stage0 = bulk_smem(bulk_buf);
    const unsigned bar0 = bulk_smem(bulk_buf + (u64)BULK_STAGES * BULK_CHUNK);
    for (unsigned s = 0; s < BULK_STAGES; ++s) bulk_bar_init(bar0 + 8u * s, 1u);
    // Make the initialised barriers visible to the async proxy, whose complete_tx will update them.
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");

    // piece i of this CTA -> its byte range of the pass it belongs to
    auto start_load = [&](u64 i) {
        const u64 g = blockIdx.x + i * gridDim.x;
        const u64 off = (g % pieces) * piece;
        const u64 left = body - off;
        const unsigned bytes = left < piece ? (unsigned)left : piece;
        const unsigned s = (unsigned)(i % BULK_STAGES);
        bulk_bar_expect(bar0 + 8u * s, bytes);
        bulk_load(stage0 + s * (unsigned)BULK_CHUNK, src + off, bytes, bar0 + 8u * s);
    };

    const u64 ahead = mine < (u64)(BULK_STAGES - 1) ? mine : (u64)(BULK_STAGES - 1);
    for (u64 i = 0; i < ahead; ++i) start_load(i);
    for (u64 i = 0; i < mine; ++i) {
        const unsigned s = (unsigned)(i % BULK_STAGES);
        bulk_bar_wait(bar0 + 8u * s, (unsigned)((i / BULK_STAGES) & 1u));
        // Not required between two async-proxy accesses ordered by the barrier; kept as the conservative
        // order between this thread's acquire of the barrier and the store's reads (one fence per piece).
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        const u64 g = blockIdx.x + i * gridDim.x;
        const u64 off = (g % pieces) * piece;
        const u64 left = body - off;
        bulk_store(dst + off, stage0 + s * (unsigned)BULK_CHUNK, left < piece ? (unsigned)left : piece);
        const u64 next = i + BULK_STAGES - 1;
        if (next < mine) {
            asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
            start_load(next);
        }
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#else
    __trap();  // never launched below sm_90: the host marks the methods unavailable (core/bulk.support)
#endif
}
