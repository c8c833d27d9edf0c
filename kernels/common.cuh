// Shared device helpers for ipcbench kernels.
#pragma once

__device__ __forceinline__ unsigned long long ipcb_globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
