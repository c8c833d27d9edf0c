// Cross-process flags for host-staged pipelines (ipcbench/staged.py, method shm_staged).
//
// Two processes share a host buffer (POSIX shm, cudaHostRegister'ed mapped in both). Per slot of
// that buffer there is a "full" flag (written by the producer after its device->host copy of a chunk)
// and a "free" flag (written by the consumer after its host->device copy out of the slot). Flag values
// only ever grow: each side keeps, in its own device memory, how many times it has used each slot
// (`seq`), so the same CUDA graph can be launched again and again without resetting anything.
//
//   producer, per chunk: flag_wait(free[s], seq[s], plus=0)  D2H into slot s  flag_post(full[s], seq[s])
//   consumer, per chunk: flag_wait(full[s], seq[s], plus=1)  H2D out of slot s  flag_post(free[s], seq[s])
// (flag_post_wait fuses the post of one chunk with the wait of the next.)
//
// A wait gives up after `timeout_ns` (GPU global timer): it writes `code` into *status and sets the
// shared *abort word, and every later wait on either side returns at once when *abort is set, so a
// lost peer costs one timeout, never a hang. The host reads status/abort after the batch.
// Launch all with one block of 32 threads (thread 0 does the work).
#include "common.cuh"

__device__ __forceinline__ void ipcb_flag_wait(const volatile unsigned int* flag, const unsigned int* seq,
                                               unsigned int plus, volatile unsigned int* abort_word,
                                               volatile unsigned int* status, unsigned int code,
                                               unsigned long long timeout_ns)
{
    const unsigned int target = *seq + plus;
    const unsigned long long t0 = ipcb_globaltimer();
    while ((int)(*flag - target) < 0) {
        if (*abort_word != 0u) return;
        if (ipcb_globaltimer() - t0 > timeout_ns) {
            *status = code;
            __threadfence_system();
            *abort_word = 1u;
            __threadfence_system();
            return;
        }
        __nanosleep(64);
    }
}

__device__ __forceinline__ void ipcb_flag_post(volatile unsigned int* flag, unsigned int* seq)
{
    const unsigned int v = *seq + 1u;
    *seq = v;
    __threadfence_system();
    *flag = v;
    __threadfence_system();
}

// Wait until *flag >= *seq + plus (wrap-safe comparison of 32-bit counters).
extern "C" __global__ void flag_wait(const volatile unsigned int* flag, const unsigned int* seq,
                                     unsigned int plus, volatile unsigned int* abort_word,
                                     volatile unsigned int* status, unsigned int code,
                                     unsigned long long timeout_ns)
{
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    ipcb_flag_wait(flag, seq, plus, abort_word, status, code, timeout_ns);
}

// ++*seq, then publish the new count in *flag. The copy before this kernel in the stream has
// completed when it starts; the fence orders this thread's writes for the other process.
extern "C" __global__ void flag_post(volatile unsigned int* flag, unsigned int* seq)
{
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    ipcb_flag_post(flag, seq);
}

// flag_post for the chunk just copied, then flag_wait for the next chunk's slot, in one launch: between
// two copies of a pipeline there is one kernel node, not two (the gap is on the critical path).
extern "C" __global__ void flag_post_wait(volatile unsigned int* post_flag, unsigned int* post_seq,
                                          const volatile unsigned int* wait_flag, const unsigned int* wait_seq,
                                          unsigned int plus, volatile unsigned int* abort_word,
                                          volatile unsigned int* status, unsigned int code,
                                          unsigned long long timeout_ns)
{
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    ipcb_flag_post(post_flag, post_seq);
    ipcb_flag_wait(wait_flag, wait_seq, plus, abort_word, status, code, timeout_ns);
}
