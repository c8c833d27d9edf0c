// Bulk-copy kernel (Hopper, sm_90+): moves bytes with the TMA unit's bulk asynchronous copies instead of
// 16-byte loads and stores in registers. Either pointer may be a peer's (CUDA IPC maps it into the unified
// address space, so it is a plain global address): with src remote it is a read (sm_bulk_read, pull), with
// dst remote a write (sm_bulk_write, push). The host side is ipcbench/core/bulk.py (plan, sequence) and
// core/gpu.py (launch_bulk_copy).
//
// The bytes [0, body) (body = nbytes rounded down to 16) are cut into `pieces` pieces of `piece` bytes
// (a multiple of 16, at most BULK_CHUNK; the last piece of a pass may be shorter). The pieces of all
// `loops` passes form one sequence g = 0 .. pieces*loops-1 (piece g % pieces of pass g / pieces), which
// the CTAs take in order from a counter in device memory, one atomicAdd per piece: a CTA that runs slower
// takes fewer pieces, so every CTA ends within about one piece's time of the others. Dealt statically
// (CTA b copying g = b, b+G, ...), CTAs with the same number of pieces drifted apart by about 50 us a
// pass on an H100 (12.8 ms after 256 passes of 256 MiB), so the time per pass depended on how many passes
// one launch held (220 us at 1, 182 at 16, 175.5 at 256: a 20 ms sample read 2-3% under a 50 ms one);
// taken from the counter they end within ~7 us (198, 180.5 and 179.2 us). The counter costs its round
// trips, about 1.8 us a launch: a copy that gives each CTA only a few pieces (core/bulk.DYNAMIC_MIN_SHARE),
// where no drift can build up, passes `next` = NULL and is dealt statically, CTA b taking pieces b, b+G,
// b+2G, ... (G = gridDim.x). A CTA takes `grab` pieces
// (consecutive in the sequence) per atomicAdd: 1 on the whole GPU, more when the grid covers a few SMs
// (`--sm-bulk ...@N`), where each CTA moves its pieces so fast that a round trip to the counter per piece
// (about a microsecond) would hold it back (core/bulk.plan says how many). `next` is the launching
// stream's own pair of counters (core/gpu.py): next[0] the next piece, next[1] the CTAs done; the last
// CTA to finish sets both back to zero, so the stream's next launch, which starts after this one ends,
// finds them zeroed. The 0-15 bytes after the body are copied once, with plain loads and stores, by CTA 0.
//
// Per CTA, one thread (thread 0) runs a pipeline over BULK_STAGES buffers of BULK_CHUNK bytes in dynamic
// shared memory, one mbarrier per stage. The i-th piece this CTA takes uses stage i % S, for the (i / S)-th
// time, so its barrier phase has parity (i / S) & 1. A take past the sequence's end means none is left
// (the counter only grows), and the CTA stops at the first stage that holds none.
//   prologue: take pieces 0 .. S-2 and start their loads
//   piece i:  wait for load i (mbarrier phase), start the store of stage i % S (bulk_group, committed
//             alone), then wait until every store but the newest has finished READING shared memory
//             (wait_group.read 1) - so store i-1 is done with stage (i-1) % S - and start the load of piece
//             i+S-1 (taken now) into that stage.
//   end:      wait until every store has completed (wait_group 0) before the CTA and its shared memory go.
// So up to S-1 loads and two stores are in flight per CTA. Shared memory is only ever accessed by the
// async proxy (the bulk copies); the mbarrier orders a load's writes before the store issued after the
// wait, and wait_group.read orders a store's reads before the load that refills its stage.
//
// Launch with core/bulk.THREADS (32) threads and BULK_STAGES * (BULK_CHUNK + 8) bytes of dynamic shared
// memory, and `next` NULL or zeroed before the stream's first launch; src and dst must be 16-byte aligned (the
// host checks). Launches that share a `next` must not run at the same time (one stream each). `smids`: NULL,
// or room for one word per CTA, where each CTA writes the SM it runs on.
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
bulk_copy(const unsigned char* src, unsigned char* dst, u64 nbytes, unsigned piece, u64 pieces, int loops,
          u64* next, unsigned grab, unsigned* smids)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) unsigned char bulk_buf[];
    // `smids` (NULL but in a launch that checks where the CTAs ran: core/gpu.Gpu.bulk_sms_seen): the SM each
    // CTA runs on
    if (smids && threadIdx.x == 0) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        smids[blockIdx.x] = sm;
    }
    const u64 body = nbytes & ~15ull;
    if (blockIdx.x == 0 && threadIdx.x < nbytes - body) dst[body + threadIdx.x] = src[body + threadIdx.x];
    if (threadIdx.x != 0) return;

    const u64 total = pieces * (u64)loops;
    const u64 NONE = ~0ull;
    const unsigned stage0 = bulk_smem(bulk_buf);
    const unsigned bar0 = bulk_smem(bulk_buf + (u64)BULK_STAGES * BULK_CHUNK);
    for (unsigned s = 0; s < BULK_STAGES; ++s) bulk_bar_init(bar0 + 8u * s, 1u);
    // Make the initialised barriers visible to the async proxy, whose complete_tx will update them.
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");

    u64 held[BULK_STAGES];  // the piece (of the sequence) each stage holds, or NONE
    bool left = true;       // whether the sequence may still have pieces for this CTA
    // dynamic: pieces [mine, end) of the sequence taken by this CTA and not yet loaded; static: mine is
    // this CTA's next piece
    u64 mine = next ? 0 : blockIdx.x, end = 0;
    // take the next piece of the sequence into stage s and start its load
    auto take = [&](unsigned s) {
        u64 g = NONE;
        if (left && !next) {
            g = mine;
            mine += gridDim.x;
        } else if (left) {
            if (mine == end) {
                mine = atomicAdd(next, (u64)grab);
                end = mine + grab;
            }
            g = mine++;
        }
        if (g >= total) {
            held[s] = NONE;
            left = false;
            return;
        }
        held[s] = g;
        const u64 off = (g % pieces) * piece;
        const u64 rest = body - off;
        const unsigned bytes = rest < piece ? (unsigned)rest : piece;
        bulk_bar_expect(bar0 + 8u * s, bytes);
        bulk_load(stage0 + s * (unsigned)BULK_CHUNK, src + off, bytes, bar0 + 8u * s);
    };

    for (unsigned s = 0; s + 1 < BULK_STAGES; ++s) take(s);
    for (u64 i = 0;; ++i) {
        const unsigned s = (unsigned)(i % BULK_STAGES);
        if (held[s] == NONE) break;
        bulk_bar_wait(bar0 + 8u * s, (unsigned)((i / BULK_STAGES) & 1u));
        // Not required between two async-proxy accesses ordered by the barrier; kept as the conservative
        // order between this thread's acquire of the barrier and the store's reads (one fence per piece).
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        const u64 off = (held[s] % pieces) * piece;
        const u64 rest = body - off;
        bulk_store(dst + off, stage0 + s * (unsigned)BULK_CHUNK, rest < piece ? (unsigned)rest : piece);
        // every store but the newest has finished reading shared memory: stage (i-1) % S is free
        asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
        take((unsigned)((i + BULK_STAGES - 1) % BULK_STAGES));
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    // The last CTA out zeroes the counters for the stream's next launch (every CTA has taken its last
    // piece before it counts itself done).
    if (!next) return;
    __threadfence();
    if (atomicAdd(next + 1, 1ull) == (u64)gridDim.x - 1) {
        next[0] = 0;
        next[1] = 0;
        __threadfence();
    }
#else
    __trap();  // never launched below sm_90: the host marks the methods unavailable (core/bulk.support)
#endif
}
