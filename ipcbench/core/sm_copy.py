"""The SM copy kernel's launch shape (kernels/copy.cu; methods sm_read, sm_write and their pool/vmm twins):
`--sm-copy BxTxU`. Pure, like the bulk-copy kernel's shape beside it (core/bulk.BulkShape): config.py
validates it before any rank starts, core/gpu.py launches with it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CopyShape:
    """Launch shape of the SM copy kernel: blocks per SM, threads per block, 16-byte loads in flight."""

    # 8 blocks/SM x 512 threads x 4 loads in flight was the best of 7 shapes on an H200 pair at 256 MiB
    # (sm_read 375.0, sm_write 370.6 GB/s; 4x512x8: 373.8 / 370.1; 1x1024x12: 373.9 / 371.0).
    blocks_per_sm: int = 8
    threads: int = 512
    unroll: int = 4

    @classmethod
    def parse(cls, text: str) -> "CopyShape":
        try:
            b, t, u = (int(x) for x in text.lower().split("x"))
        except ValueError:
            raise ValueError(f"{text!r} is not BxTxU (e.g. 1x1024x12)") from None
        if not (1 <= b <= 32 and t in (128, 256, 512, 1024) and u in (1, 2, 4, 8, 12, 16)):
            raise ValueError(f"{text!r}: B in 1..32, T in 128/256/512/1024, U in 1/2/4/8/12/16")
        return cls(b, t, u)

    def __str__(self) -> str:
        return f"{self.blocks_per_sm}x{self.threads}x{self.unroll}"
