"""Interprocess CUDA events: created with cudaEventInterprocess | cudaEventDisableTiming, shared as handles."""

from __future__ import annotations

from cupy.cuda import runtime

from ipcbench.errors import ShareError


class EventIpc:
    """Interprocess events: created with cudaEventInterprocess | cudaEventDisableTiming, shared as handles."""

    def __init__(self, gpu, rank: int):
        self.gpu = gpu
        self.rank = rank
        self.owned: list[int] = []
        self.opened: list[int] = []

    def create(self) -> int:
        ev = runtime.eventCreateWithFlags(runtime.eventInterprocess | runtime.eventDisableTiming)
        self.owned.append(ev)
        return ev

    def export(self, ev: int) -> bytes:
        try:
            return bytes(runtime.ipcGetEventHandle(ev))
        except runtime.CUDARuntimeError as e:
            raise ShareError(f"rank {self.rank}: cudaIpcGetEventHandle failed: {e}") from None

    def open(self, handle: bytes, owner: int) -> int:
        try:
            ev = runtime.ipcOpenEventHandle(handle)
        except runtime.CUDARuntimeError as e:
            raise ShareError(f"rank {self.rank}: cudaIpcOpenEventHandle of an event owned by rank {owner} "
                             f"failed: {e}") from None
        self.opened.append(ev)
        return ev

    def close(self) -> None:
        for ev in self.opened + self.owned:
            try:
                runtime.eventDestroy(ev)
            except runtime.CUDARuntimeError:
                pass
        self.opened.clear()
        self.owned.clear()
