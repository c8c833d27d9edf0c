"""Suite `nccl`: ncclSend/ncclRecv between the two ranks of a pair, the baseline people use instead of raw
CUDA IPC. Timed and verified like every other row: calls captured in CUDA graphs behind the gate where NCCL
allows (enqueued directly behind it where it does not, ipc/nccl.py), the receiver checks the seeded pattern.

- nccl push (ordered pairs, --sizes): the source rank sends from its buffer, the destination receives into
  its inbox slot; both enqueue, both gates open together, the pair's time is the longer side (core/pair.py,
  two-sided).
- nccl bidir (unordered pairs): each rank sends and receives in one NCCL group per transfer.
- nccl one-way (ordered pairs, the latency suite's sizes): the push measurement on small messages, rows
  `oneway` of kind `latency`, beside latency/ce.
- nccl pingpong (unordered pairs, 4 B): the initiator sends then receives, the responder receives then
  echoes what it received; one way = round trip / 2, beside latency/sm_pingpong. The initiator checks that
  its own pattern came back, the responder what it received.

Cross-GPU pairs only: NCCL refuses two ranks of one GPU in a communicator, so pairs of ranks sharing a GPU
have no rows (the node's lowest such rank says so once). The report divides every IPC method by NCCL at the same pair,
direction kind and size (report/tables.speedup_rows). Needs NCCL (`pip install -e '.[nccl]'`); without it
the steps are skipped with the reason (ipc/sharers.LIBRARIES, run/walk.py).
"""

from __future__ import annotations

import sys

from ipcbench.catalogue.planned import RowShape
from ipcbench.core.methods import METHODS
from ipcbench.core.pair import END_TAG, batch_maker, lockstep_timed, measure_pair, measurement_label, open_together
from ipcbench.core.rows import join_note, make_row
from ipcbench.core.sampler import take_samples
from ipcbench.core.stats import poison_seed, seed_for
from ipcbench.core.timing import time_batch
from ipcbench.core.world import ordered_pairs, unordered_pairs
from ipcbench.ipc.nccl import pair_for
from ipcbench.suites.latency import LAT_SIZES, QUICK_LAT_SIZES
from ipcbench.suites.registry import Step, SuiteSpec

NEEDS = ("legacy", "nccl")  # the legacy buffers' local halves are the send and receive buffers
PINGPONG_BYTES = 4  # as latency/sm_pingpong's flag
ONEWAY_NOTE = "push: back-to-back ncclSend/ncclRecv pairs, time per transfer (the longer side)"
SAME_GPU_SAID = "nccl_same_gpu_said"  # ctx.state key: this rank has said why same-GPU pairs have no rows


def cross_gpu(ctx, src: int, dst: int) -> bool:
    """Whether NCCL can measure this pair; for ranks sharing a GPU, the lowest such rank of the node says
    once why there is no row (as the source of its first same-GPU pair)."""
    if not ctx.same_gpu(src, dst):
        return True
    if ctx.world.local_rank == src and not ctx.state.get(SAME_GPU_SAID) and src == min(
            r for r in range(len(ctx.gpu_of)) if ctx.gpu_of.count(ctx.gpu_of[r]) > 1):
        ctx.state[SAME_GPU_SAID] = True
        print(f"ipcbench: nccl: no rows for ranks sharing a GPU (world ranks {ctx.world_rank(src)} and "
              f"{ctx.world_rank(dst)} on GPU {ctx.gpu_of[src]}, and any other such pair): NCCL refuses two "
              f"ranks of one GPU in one communicator", file=sys.stderr, flush=True)
    return False


def measure(ctx, direction: str, src: int, dst: int, sizes: list[int], latency: bool = False) -> list:
    """nccl push/bidir over `sizes` (core/pair.measure_pair, two-sided), or with `latency` the one-way rows
    of the latency sizes. Both ranks of the pair call this; src returns the rows."""
    if not cross_gpu(ctx, src, dst):
        return []
    me = ctx.world.local_rank
    about = pair_for(ctx, me, dst if me == src else src).describe()
    if latency:
        # The push step's rows share this label: its hint, from the largest push size scaled down to a few
        # bytes, would start calibration at max_count / 4 transfers. Both ranks drop it alike.
        ctx.hints.pop((measurement_label("nccl", "nccl", "push"), src, dst), None)
        return measure_pair(ctx, "nccl", METHODS["nccl"], "push", src, dst, sizes, row_direction="oneway",
                            kind="latency", note=join_note(ONEWAY_NOTE, about))
    return measure_pair(ctx, "nccl", METHODS["nccl"], direction, src, dst, sizes, note=about)


def pingpong(ctx, src: int, dst: int, sizes: list[int]) -> list:
    """k round trips per batch, the initiator (src) sending then receiving, the responder (dst) receiving
    then sending back what it received, both behind their gates, released together; one way = the
    initiator's time / k / 2. Both ranks call this; src returns the row."""
    if not cross_gpu(ctx, src, dst):
        return []
    w, gpu = ctx.world, ctx.gpu
    me = w.local_rank
    initiator = me == src
    peer = dst if initiator else src
    link = pair_for(ctx, me, peer)
    bufs = ctx.buffers["legacy"]
    inbox = bufs.inbox_slot(peer)
    send = bufs.src if initiator else inbox  # the responder echoes what it received
    nbytes = PINGPONG_BYTES
    label = "nccl/nccl_pingpong"
    sync = open_together(w, peer)
    make = batch_maker(gpu, link.transfer("send_recv" if initiator else "recv_send"), send, inbox, nbytes)
    batch = make(ctx.calibrate((label, src, dst), nbytes, lockstep_timed(ctx, peer, make, sync)))
    n = batch.count  # round trips per sample, the same on both ranks (lockstep calibration)

    def sample(s: int):
        seed = seed_for(ctx.world_rank(src), nbytes, s, label)
        if initiator:
            gpu.fill(bufs.src, nbytes, seed)
        gpu.fill(inbox, nbytes, poison_seed(seed))
        gpu.wait(what="fill/poison")
        w.pair_barrier(peer)
        ms = time_batch(gpu, batch, sync)
        theirs = w.exchange(ms, peer, tag=END_TAG)
        checks = bad = 0
        if ctx.verify:
            if ctx.corrupt == "nccl_pingpong":
                gpu.corrupt(inbox, nbytes)
            bad, checks = gpu.verify(inbox, nbytes, seed), 1
        return (ms if initiator else theirs) * 1e3 / n / 2, checks, bad

    got = take_samples(ctx.rule, n, sample)
    their_checks, their_bad = w.exchange((got.checks, got.mismatches), peer)
    if not initiator:
        return []
    note = join_note(f"one way = round trip / 2 over {n} round trips per sample: ncclSend then ncclRecv on the "
                     f"initiator, ncclRecv then ncclSend of what arrived on the responder; both check the "
                     f"initiator's pattern (the echo of the last round trip, and what the responder received)",
                     link.describe(), batch.note)
    return [make_row(ctx, suite="nccl", method="nccl_pingpong", direction="oneway", src=src, dst=dst, nbytes=nbytes,
                     per_us=got.per_transfer_us, iterations=n, moved=None, checks=got.checks + their_checks,
                     mismatches=got.mismatches + their_bad, note=note, kind="latency", required=2 *
                     len(got.per_transfer_us))]


def steps(n: int, sizes: list[int]) -> list[Step]:
    def sweep(direction, latency=False):
        return lambda ctx, src, dst, sz: measure(ctx, direction, src, dst, sz, latency)

    # cross_gpu=True: a pair of ranks sharing a GPU writes no row (the function cross_gpu above), so none is planned
    return [Step("nccl", "nccl push", ordered_pairs(n), sizes, sweep("push"), needs=NEEDS, rounds_ok=True,
                 engine="nccl", writes=(RowShape("nccl", "push"),), cross_gpu=True),
            Step("nccl", "nccl bidir", unordered_pairs(n), sizes, sweep("bidir"), needs=NEEDS, cost=2.0,
                 rounds_ok=True, engine="nccl", writes=(RowShape("nccl", "bidir"),), cross_gpu=True),
            Step("nccl", "nccl one-way", ordered_pairs(n), LAT_SIZES, sweep("push", latency=True), needs=NEEDS,
                 rounds_ok=True, quick_sizes=QUICK_LAT_SIZES, engine="nccl", writes=(RowShape("nccl", "oneway"),),
                 cross_gpu=True),
            Step("nccl", "nccl pingpong", unordered_pairs(n), [PINGPONG_BYTES], pingpong, needs=NEEDS, cost=3.0,
                 writes=(RowShape("nccl_pingpong", "oneway"),), cross_gpu=True)]



SUITE = SuiteSpec("nccl", "ncclSend/ncclRecv between the two ranks of a pair (a communicator per GPU pair): "
                  "push and bidir over the sizes, one way and a ping-pong on small messages; the baseline "
                  "the report divides IPC by (needs NCCL: pip install -e '.[nccl]')", steps)
