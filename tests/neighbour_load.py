"""A neighbour that loads a GPU link: copy-engine peer copies GPU SRC -> GPU DST in a loop for SECONDS.

Used to check that `ipcbench compare` catches a real slowdown (run it in the background during a run,
then compare that run with a quiet one). Not a test; needs two GPUs. Usage:
    python tests/neighbour_load.py SECONDS [SRC DST]
"""

from __future__ import annotations

import sys
import time

import cupy
from cupy.cuda import runtime


def main() -> int:
    seconds = float(sys.argv[1])
    src, dst = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (0, 1)
    nbytes = 256 << 20
    with cupy.cuda.Device(src):
        a = runtime.malloc(nbytes)
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
        copies += 8
    print(f"neighbour: {copies} copies of 256 MiB GPU{src}->GPU{dst} in {seconds:g} s "
          f"({copies * nbytes / seconds / 1e9:.0f} GB/s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
