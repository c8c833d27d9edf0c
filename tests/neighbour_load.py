"""A neighbour that loads a GPU: copy-engine copies GPU SRC -> GPU DST in a loop for SECONDS (SRC = DST: copies
within the one GPU, which time-slice with every other process on it).

Used to check that `ipcbench compare` and `ipcbench check` catch a real slowdown (run it in the background
during a run; tests/test_gpu_check.py does). Not a test. Prints "neighbour: loading" once it copies. Usage:
    python tests/neighbour_load.py SECONDS [SRC DST]      (default 0 1; 0 0 on a machine with one GPU)
"""

from __future__ import annotations

import sys
import time

import cupy
from cupy.cuda import runtime


def main() -> int:
    seconds = float(sys.argv[1])
    one_gpu = runtime.getDeviceCount() == 1
    src, dst = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (0, 0 if one_gpu else 1)
    nbytes = 256 << 20
    with cupy.cuda.Device(src):
        a = runtime.malloc(nbytes)
        if dst != src:
            runtime.deviceEnablePeerAccess(dst)
    with cupy.cuda.Device(dst):
        b = runtime.malloc(nbytes)
    stream = cupy.cuda.Stream(non_blocking=True)
    end = time.monotonic() + seconds
    copies = 0
    while time.monotonic() < end:
        for _ in range(8):
            runtime.memcpyPeerAsync(b, dst, a, src, nbytes, stream.ptr)
        stream.synchronize()
        if copies == 0:
            print("neighbour: loading", flush=True)
        copies += 8
    print(f"neighbour: {copies} copies of 256 MiB GPU{src}->GPU{dst} in {seconds:g} s "
          f"({copies * nbytes / seconds / 1e9:.0f} GB/s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
