// Gate kernel: holds a stream until the host writes a value >= `target` into a host-mapped flag,
// so that a whole batch of work can be enqueued behind it and timed without the host in the way.
// It gives up after `timeout_ns` (writes `target` into status[0]) so a lost release can never hang.
// On release it writes the SM clock it ran at while it held the stream into status[1] (kHz: SM cycles of
// clock64 over ns of %globaltimer): the clock the batch behind it starts at (docs/measurement.md, "What moves
// a row between runs").
#include "common.cuh"

extern "C" __global__ void gate(const volatile unsigned int* flag, unsigned int target,
                                volatile unsigned int* status, unsigned long long timeout_ns)
{
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const unsigned long long t0 = ipcb_globaltimer();
    const long long c0 = clock64();
    unsigned long long t = t0;
    while (*flag < target) {
        t = ipcb_globaltimer();
        if (t - t0 > timeout_ns) {
            status[0] = target;
            return;
        }
        __nanosleep(200);
    }
    const long long c1 = clock64();
    t = ipcb_globaltimer();
    // Below ~20 us the timer's granularity (up to 1 us) makes the ratio meaningless: 0 = not measured.
    status[1] = (t - t0 >= 20000) ? (unsigned int)((c1 - c0) * 1000000LL / (long long)(t - t0)) : 0u;
}

// Writes the GPU's global timer (ns) to *out: a device-side timestamp between stream operations.
extern "C" __global__ void stamp(unsigned long long* out)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) *out = ipcb_globaltimer();
}
