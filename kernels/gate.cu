// Gate kernel: holds a stream until the host writes a value >= `target` into a host-mapped flag,
// so that a whole batch of work can be enqueued behind it and timed without the host in the way.
// It gives up after `timeout_ns` (writes `target` into *status) so a lost release can never hang.
#include "common.cuh"

extern "C" __global__ void gate(const volatile unsigned int* flag, unsigned int target,
                                volatile unsigned int* status, unsigned long long timeout_ns)
{
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const unsigned long long t0 = ipcb_globaltimer();
    while (*flag < target) {
        if (ipcb_globaltimer() - t0 > timeout_ns) {
            *status = target;
            return;
        }
        __nanosleep(200);
    }
}

// Writes the GPU's global timer (ns) to *out: a device-side timestamp between stream operations.
extern "C" __global__ void stamp(unsigned long long* out)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) *out = ipcb_globaltimer();
}
