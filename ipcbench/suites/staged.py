"""Suite `staged`: the host paths that CUDA IPC replaces, for every ordered pair (push rows).

shm_staged (suites/staged_shm.py: pinned POSIX shared memory, device-side flags, no Python timed) and
mpi_staged (suites/staged_mpi.py: pinned host buffers + MPI Isend/Irecv, chunked and pipelined by the
ranks). The report divides every IPC method's bandwidth by the best of these. The latency suite runs the
same sweep at its small sizes (`sweep_staged`). Both fill the source with seed_for(source rank, size,
sample, label), poison the destination and verify it after every sample, like core/pair.py.
"""

from __future__ import annotations

from ipcbench.catalogue.planned import RowShape
from ipcbench.catalogue.suites import STAGED as STAGED_FACTS
from ipcbench.core.pair import measurement_label
from ipcbench.core.rows import join_note, make_row
from ipcbench.core.sampler import take_samples
from ipcbench.core.stats import poison_seed, seed_for
from ipcbench.core.world import ordered_pairs
from ipcbench.errors import UsageError
from ipcbench.ipc.shm import AGREE_TAG
from ipcbench.suites import staged_mpi, staged_shm
from ipcbench.suites.registry import Step, SuiteSpec
from ipcbench.suites.staged_plan import plan_chunks, staged_params

ABOUT = ("host-staged baselines: shm_staged (D2H/H2D pipelined through pinned POSIX shared memory with "
         "device-side flags) and mpi_staged (pinned host buffers + MPI Isend/Irecv, chunked)")


# shm_staged is a pipeline timed on the GPU (D2H of one chunk overlaps H2D of the previous), and every
# sample pays one pipeline fill. At 3 ms samples it read 6-11% under 10 ms samples at 16-64 MiB on an H200
# pair (43.6 vs 49.3 GB/s at 16M): its bandwidth rows take samples of at least this long. Latency rows
# (many small messages per sample) are not affected; mpi_staged is timed on the host with Python in the
# loop, and its run-to-run noise (5-20%) dwarfs the fill, so longer samples would only cost time.
STAGED_MIN_SAMPLE_S = 0.010


def params() -> dict[str, int]:
    """Chunk sizes and slot counts (IPCBENCH_{SHM,MPI}_{CHUNK,SLOTS}); a bad value is a usage error."""
    try:
        return staged_params()
    except ValueError as e:
        raise UsageError(str(e)) from None


def _shm_note(ctx, src, dst, plan) -> str:
    text = (f"{plan.describe()} in POSIX shm pinned by both ranks (cudaHostRegister); D2H of chunk k+1 "
            f"overlaps H2D of chunk k; device-side flag kernels, CUDA graphs behind a gate; no Python "
            f"in the timed region")
    if ctx.time_sliced(src, dst):
        text += ("; same GPU: the two processes' spinning flag kernels time-slice the GPU (no MPS), "
                 "so small messages pay context switches")
    elif ctx.same_gpu(src, dst):
        text += "; one GPU under MPS: the two processes' flag kernels run concurrently"
    return text


def _mpi_note(ctx, src, dst, plan) -> str:
    pipelined = "pipelined" if plan.n_chunks > 1 else "one chunk per message, messages pipelined"
    return (f"D2H -> pinned host (cudaHostAlloc) -> MPI Isend/Irecv -> H2D, {plan.describe()}, "
            f"{pipelined} by the Python ranks (Python in the loop, as in an app without IPC); "
            f"host clock from a pair barrier to the last send / last H2D done, the longer side")


def sweep_staged(ctx, method: str, src: int, dst: int, sizes: list[int], suite: str = "staged",
                 direction: str = "push", kind: str = "", note: str = "") -> list:
    """Both ranks of the pair call this; the source rank returns the rows. Opens the method's pipe for
    the pair, calibrates and samples every size through core/sampler.py, closes the pipe (also on error)."""
    p = params()
    Pipe: type[staged_shm.ShmPipe] | type[staged_mpi.MpiPipe]
    if method == "shm_staged":
        Pipe = staged_shm.ShmPipe
        chunk, slots, note_fn = p["shm_chunk"], p["shm_slots"], _shm_note
    else:
        Pipe = staged_mpi.MpiPipe
        chunk, slots, note_fn = p["mpi_chunk"], p["mpi_slots"], _mpi_note
    w, gpu = ctx.world, ctx.gpu
    me = w.local_rank
    peer = dst if me == src else src
    pipe = Pipe(ctx, "src" if me == src else "dst", peer, chunk, slots, max(sizes))
    label = measurement_label(suite, method, "push")  # the one-way latency rows too
    rows = []
    try:
        pipe.open(max(sizes))
        for nbytes in sizes:
            plan = plan_chunks(nbytes, pipe.chunk, slots)
            factor = (max(1.0, STAGED_MIN_SAMPLE_S / ctx.rule.min_time_s)
                      if method == "shm_staged" and kind != "latency" else 1.0)
            count = ctx.calibrate((label, src, dst), nbytes, lambda c: pipe.timed(plan, c), factor)
            facts = STAGED_FACTS[method]
            enough = ctx.enough_noise(facts.engine, facts.timing, nbytes, src, dst)
            their_count, their_enough = w.exchange((count, enough), peer, AGREE_TAG)
            count = count if me == src else their_count  # the source decides (both computed the same anyway)
            enough = min(enough, their_enough)

            def sample(s: int):
                seed = seed_for(ctx.world_rank(src), nbytes, s, label)
                gpu.fill(pipe.buf, nbytes, seed if me == src else poison_seed(seed))
                gpu.wait(what="fill/poison")
                ms, done = pipe.timed(plan, count)
                bad = checks = 0
                if me == dst and ctx.verify:
                    bad, checks = gpu.verify(pipe.buf, nbytes, seed), 1
                return ms * 1e3 / done, checks, bad

            got = take_samples(ctx.rule, count, sample, enough)
            checks, bad = w.exchange((got.checks, got.mismatches), peer, AGREE_TAG)
            if me == src:
                rows.append(make_row(ctx, suite=suite, method=method, direction=direction, src=src, dst=dst,
                                     nbytes=nbytes, per_us=got.per_transfer_us, iterations=count, moved=None if kind ==
                                     "latency" else nbytes, checks=checks + got.checks, mismatches=bad +
                                     got.mismatches, note=join_note(note, note_fn(ctx, src, dst, plan)), kind=kind))
    except BaseException:
        try:  # cleanup while another error is on its way out: that error is the one to report
            pipe.close()
        except Exception:
            pass
        raise
    pipe.close()
    return rows


def steps(n: int, sizes: list[int]) -> list[Step]:
    params()  # a bad IPCBENCH_* value is reported before anything runs
    pairs = ordered_pairs(n)

    def shm(ctx, src, dst, sizes):
        return sweep_staged(ctx, "shm_staged", src, dst, sizes)

    def mpi(ctx, src, dst, sizes):
        return sweep_staged(ctx, "mpi_staged", src, dst, sizes)

    return [Step("staged", "shm_staged push", pairs, sizes, shm, cost=1.5, min_sample_s=STAGED_MIN_SAMPLE_S,
                 writes=(RowShape("shm_staged", "push"),)),
            Step("staged", "mpi_staged push", pairs, sizes, mpi, cost=2.5, writes=(RowShape("mpi_staged", "push"),))]


# shm_staged's time is a hand-off between the two processes' flag kernels; mpi_staged's the host clock's
SUITE = SuiteSpec("staged", ABOUT, steps)
