"""The one protocol of the `handles` suite's sharing-cost rows for mechanisms whose export is a POSIX fd
(pool: handles_pool.py, cuda.core: handles_core.py, VMM: handles_vmm.py). Each mechanism says only how it
exports and imports once (a `ShareCosts`); this module does the rest, the same way for all three:

- both ranks of the pair say whether the mechanism works on their GPU, always, before anything else (a rank
  that returned alone would leave its peer waiting), and then whether their setup (`ShareCosts.open`) worked,
  before the pair's communicator is made (MPI's Create_group has no deadline);
- the fd goes over a Unix socket of just the two ranks (fdpass.FdExchange over a communicator that only the
  pair creates), the export data over MPI;
- per size class, `repeats` repetitions, each with a FRESH export (as the legacy-handle rows do): the
  exporter creates, fills with a seeded pattern, exports and sends (`ShareCosts.export_once`), then keeps
  its memory until the importer acknowledges; the importer imports, checks the pattern through what it
  imported, releases (`ShareCosts.import_once`), and acknowledges;
- a failure on either side reaches the other: an exporter that fails before sending sends its message in
  place of the export data, an importer that fails acknowledges with its message; both then stop with
  the same words (`ShareError`), so no rank waits for the timeout;
- the importer's timings and checks go to the exporter, which writes the rows: exporter steps then
  importer steps, each row `op`, `bytes` = the size class, every row carrying the repetitions' checks.

Host-side API costs, timed with time.perf_counter_ns() around the call(s) (handles.py says why).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable

from ipcbench.catalogue.planned import RowShape
from ipcbench.core.rows import make_row
from ipcbench.core.stats import seed_for
from ipcbench.errors import ShareError
from ipcbench.ipc.fdpass import FdExchange

SUPPORT_TAG_OFFSET, TIMES_TAG_OFFSET, OPEN_TAG_OFFSET = 20, 10, 30  # MPI tags: the ShareCosts' ack tag plus these


def us_between(t0: int, t1: int) -> float:
    """µs between two time.perf_counter_ns() readings."""
    return (t1 - t0) / 1e3


@dataclass(frozen=True)
class ExportFailed:
    """Sent in place of the export data when the exporter failed before sending: the importer stops too."""

    message: str


class PairIo:
    """What one repetition's export_once / import_once may use to talk to the other rank of the pair."""

    def __init__(self, ctx, fx, peer: int, pair_peer: int, tags: tuple[int, int], rep: int):
        self.ctx, self.fx, self.peer, self.pair_peer, self.rep = ctx, fx, peer, pair_peer, rep
        self.data_tag, self.ack_tag = tags
        self.sent = False  # the export data went out (after that a failure is reported through the ack)

    def send(self, data) -> None:
        """The export data (picklable) to the importer."""
        self.ctx.world.send(data, self.peer, tag=self.data_tag)
        self.sent = True

    def send_fd(self, fd: int) -> float:
        """The fd over the pair's Unix socket; returns the send call's µs (the fd_transfer rows)."""
        t0 = time.perf_counter_ns()
        self.fx.send_fd(self.pair_peer, fd, tag=self.rep)
        return us_between(t0, time.perf_counter_ns())

    def recv(self, what: str):
        data = self.ctx.world.recv(self.peer, tag=self.data_tag, what=what)
        if isinstance(data, ExportFailed):
            raise ShareError(f"(reported by the exporter) {data.message}")
        return data

    def recv_fd(self) -> int:
        return self.fx.recv_fd(self.pair_peer, tag=self.rep)


@dataclass(frozen=True)
class ShareCosts:
    """One mechanism's repetition, both sides.

    export_once(ctx, state, io, nbytes, seed) -> (timings {row: µs}, release): make a fresh allocation of
        nbytes, fill it with pattern(seed), export it, io.send(export data) and io.send_fd(fd) (closing its
        fd after); `release()` frees it once the importer is done.
    import_once(ctx, state, io, data, fd, nbytes, seed) -> (timings {row: µs}, bad words or None if not
        checked): import what `data` and `fd` name (this module closes `fd` afterwards), check the pattern
        through it (when ctx.verify), release it.
    open(ctx) -> state, close(state): per-pair resources both sides use (streams, devices), or None.
    """

    label: str  # "pool", "core", "vmm": the seed's label is handles/<label>
    exporter_rows: tuple[str, ...]
    importer_rows: tuple[str, ...]
    tags: tuple[int, int]  # MPI tags (data, ack); unique per mechanism
    supported: Callable[[Any], bool]  # supported(ctx): this rank's GPU can share this way
    export_once: Callable
    import_once: Callable
    awaits: str  # what the exporter waits for, in its timeout message ("the importer to release the pool")
    note: Callable[[Any, int], str]  # note(ctx, nbytes): the rows' note
    open: Callable[[Any], Any] = lambda ctx: None
    close: Callable[[Any], None] = lambda state: None

    @property
    def writes(self) -> tuple[RowShape, ...]:
        """The step's rows per pair and size class (registry.Step.writes): the exporter's, then the importer's, all
        of them or none (measure_share_costs writes none where a GPU of the pair cannot share this way)."""
        unless = f"a GPU of the pair cannot share memory this way ({self.label}: its suite says why it skips)"
        return tuple(RowShape(m, "op", unless=unless) for m in self.exporter_rows + self.importer_rows)


def _pair_comm(world, src: int, dst: int):
    """A communicator of just the two ranks (MPI Create_group, which only the pair calls)."""
    group = world.node.group.Incl([src, dst])
    try:
        return world.node.Create_group(group, tag=77)
    finally:
        group.Free()


def _export(ctx, spec: ShareCosts, state, io: PairIo, nbytes: int, seed: int) -> dict:
    w = ctx.world
    try:
        times, release = spec.export_once(ctx, state, io, nbytes, seed)
    except Exception as e:
        why = f"rank {w.rank}: {spec.label} export failed ({type(e).__name__}: {e})"
        if not io.sent:  # the importer waits for the data: give it the reason instead
            w.send(ExportFailed(why), io.peer, tag=io.data_tag)
        raise ShareError(why) from e
    try:
        ack = w.recv(io.peer, tag=io.ack_tag, what=f"rank {ctx.world_rank(io.peer)} to {spec.awaits}")
    finally:
        release()
    if isinstance(ack, str):
        raise ShareError(f"(reported by the importer) {ack}")
    return times


def _import(ctx, spec: ShareCosts, state, io: PairIo, nbytes: int, seed: int):
    w = ctx.world
    data = io.recv(f"{spec.label} export data from rank {ctx.world_rank(io.peer)}")
    fd = io.recv_fd()
    ack: bool | str = True
    out: tuple[dict, int | None] = ({}, None)
    try:
        out = spec.import_once(ctx, state, io, data, fd, nbytes, seed)
    except Exception as e:  # tell the owner, then fail with the same message
        ack = f"rank {w.rank}: {spec.label} import failed ({type(e).__name__}: {e})"
    finally:
        os.close(fd)
    w.send(ack, io.peer, tag=io.ack_tag)
    if isinstance(ack, str):
        raise ShareError(ack)
    return out


def _open_both(ctx, spec: ShareCosts, peer: int):
    """spec.open on both ranks, each told whether the other's worked, before the pair's communicator is made:
    MPI's Create_group has no deadline, so a rank that failed here alone would leave its peer in it forever."""
    w = ctx.world
    state, why = None, None
    try:
        state = spec.open(ctx)
    except Exception as e:
        why = f"rank {w.rank}: {spec.label} setup failed ({type(e).__name__}: {e})"
    theirs = w.exchange(why, peer, tag=spec.tags[1] + OPEN_TAG_OFFSET)
    if why is None and theirs is None:
        return state
    if why is None:
        spec.close(state)
    raise ShareError(why or f"(reported by the peer) {theirs}")


def measure_share_costs(ctx, spec: ShareCosts, src: int, dst: int, sizes: list[int]) -> list:
    """Both ranks of the pair call this; src returns the rows ([] where either GPU cannot share this way:
    the suite of the mechanism says why when it skips)."""
    w = ctx.world
    me = w.local_rank
    peer = dst if me == src else src
    ok = bool(spec.supported(ctx))
    # Exchange first, always: a rank that returned here alone would leave its peer waiting in the exchange.
    if not (w.exchange(ok, peer, tag=spec.tags[1] + SUPPORT_TAG_OFFSET) and ok):
        return []
    repeats = max(5, ctx.rule.min_samples)
    mine = spec.exporter_rows if me == src else spec.importer_rows
    state = _open_both(ctx, spec, peer)
    try:
        pair = _pair_comm(w, src, dst)
    except BaseException:
        spec.close(state)
        raise
    rows = []
    try:
        with FdExchange(pair, timeout=w.timeout) as fx:
            for nbytes in sizes:
                t: dict[str, list[float]] = {k: [] for k in mine}
                bad = checks = 0
                for rep in range(repeats):
                    seed = seed_for(ctx.world_rank(src), nbytes, rep, f"handles/{spec.label}")
                    io = PairIo(ctx, fx, peer, 1 if me == src else 0, spec.tags, rep)
                    if me == src:
                        got = _export(ctx, spec, state, io, nbytes, seed)
                    else:
                        got, found = _import(ctx, spec, state, io, nbytes, seed)
                        if found is not None:
                            bad, checks = bad + found, checks + 1
                    for k in mine:
                        t[k].append(got[k])
                theirs = w.exchange((t, bad, checks) if me == dst else None, peer,
                                    tag=spec.tags[1] + TIMES_TAG_OFFSET)
                if me != src:
                    continue
                imp_t, imp_bad, imp_checks = theirs
                note = spec.note(ctx, nbytes)
                # Each repetition was checked through what the importer imported: every step carries the check.
                for method in (shape.method for shape in spec.writes):
                    vals = t[method] if method in t else imp_t[method]
                    rows.append(make_row(ctx, suite="handles", method=method, direction="op", src=src, dst=dst,
                                         nbytes=nbytes, per_us=vals, iterations=1, moved=None, checks=imp_checks,
                                         mismatches=imp_bad, note=note, kind="op", required=repeats))
    finally:
        pair.Free()
        spec.close(state)
    return rows
