"""What a rank needs to measure: the world, its GPU, the shared buffers, the sampling rule, the run's
identity, and what to release at the end of the run. Built once by run/runner.py after every collective of
the setup is done, so reading any field never talks to another rank. docs/architecture.md."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from ipcbench.catalogue import noise
from ipcbench.catalogue.row_kind import HANDOFF, RowKind, time_sliced
from ipcbench.core import sampler
from ipcbench.core.sampler import SamplingRule


@dataclass
class Ctx:
    world: object  # core.world.World
    gpu: object  # core.gpu.Gpu (or a test's fake)
    buffers: dict  # buffer kind ("legacy", "pool") -> ipc.buffers.BufferSet
    rule: SamplingRule
    verify: bool
    run_id: str
    gpu_of: list[int]  # node-local rank -> GPU index
    node_ranks: list[int]  # node-local rank -> world rank
    # a need (Step.needs: buffer kind, library, GPU feature) -> why it is missing on this node
    unavailable: dict[str, str] = field(default_factory=dict)
    libraries: set[str] = field(default_factory=set)  # libraries every rank of the node can use (ipc/sharers.LIBRARIES)
    features: set[str] = field(default_factory=set)  # GPU features every rank's GPU has (ipc/sharers.GPU_FEATURES)
    mps: bool = False  # the ranks' contexts run under MPS (same-GPU kernels can run concurrently)
    state: dict = field(default_factory=dict)  # per-run caches a suite keeps between pairs (streams, events)
    # processes the run started itself beside its ranks (Step.prelude: suites/handles.py's exporting child): the
    # run's own in its node evidence (evidence/take.start_snapshot)
    helper_pids: list[int] = field(default_factory=list)
    hints: dict = field(default_factory=dict)  # calibration: (label, src, dst) -> (bytes, ms per transfer)
    # Test hook (IPCBENCH_FAULT_CORRUPT=<method>): the receiver overwrites a few words of what it received
    # before the check, so a GPU test can prove that a bad destination gives verified=false and exit 1.
    corrupt: str = ""
    # one stream per green context and its pair of timing events (core/lanes.py): what a row's samples spread over;
    # empty where the run samples one context (--contexts 1, or the driver made none: meta.json says why)
    lanes: list = field(default_factory=list)
    lane_events: list = field(default_factory=list)
    # what add_cleanup was given, in order: run last first by clean_up at the end of the run
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    def add_cleanup(self, release: Callable[[], None]) -> None:
        """Have `release()` run at the end of the run (clean_up): the one way the setup and the suites free
        what they made for the whole run (the shared buffers, interprocess events, NCCL communicators). A
        release that talks to other ranks must be added by every rank concerned, in the same order."""
        self.cleanups.append(release)

    def clean_up(self) -> None:
        """Collective where the releases are: run every release once, the last added first, so a resource is
        released before what it was made after and may still use (NCCL's communicators before the shared
        buffers their last calls touched: the buffers are added at setup, before any suite runs)."""
        while self.cleanups:
            self.cleanups.pop()()

    def has(self, need: str) -> bool:
        """Whether a step's need (Step.needs: a buffer kind, a library or a GPU feature) is there on this node."""
        return need in self.buffers or need in self.libraries or need in self.features

    def same_gpu(self, a: int, b: int) -> bool:
        return self.gpu_of[a] == self.gpu_of[b]

    def world_rank(self, local: int) -> int:
        return self.node_ranks[local]

    @property
    def gpu_model(self) -> str:
        """This rank's GPU's name ("" for a test's fake without one): which between-runs floors its rows take."""
        info = getattr(self.gpu, "info", None)
        return str(getattr(info, "name", "") or "")

    def time_sliced(self, a: int, b: int) -> bool:
        """Two processes on one GPU without MPS: their kernels never run at the same time (the time slice of a
        hand-off between them: catalogue/row_kind.time_sliced)."""
        return time_sliced(HANDOFF, self.same_gpu(a, b), self.mps)

    def enough_noise(self, engine: str, timing: str, nbytes: int, a: int, b: int, contexts: int = 1) -> float:
        """The within-run noise at which sampling a row of this kind (engine, timing, size, node-local ranks a and
        b, sampled over `contexts`) may stop: the rule's floor_share of its between-runs floor (catalogue/noise.py;
        core/rows.state_noise states the same floor in the row). The two ranks of a pair may hold different GPUs:
        they agree on the smaller of their two values before sampling (take_samples needs the same `enough` on
        both)."""
        if self.rule.floor_share <= 0:
            return 0.0
        kind = RowKind(engine, timing, nbytes, same_gpu=self.same_gpu(a, b), mps=self.mps, contexts=contexts)
        return self.rule.floor_share * noise.floor_of(self.gpu_model, kind).fraction

    def calibrate(self, key: tuple, nbytes: int, timed, sample_factor: float = 1.0, max_count: int | None = None):
        """sampler.calibrate with a hint from the previous size of the same (label, pair); remembers.
        `sample_factor` makes this measurement's samples that many times longer than --min-time; `max_count`
        caps the transfers of one sample (below the rule's own cap)."""
        prev = self.hints.get(key)
        hint = sampler.scale_hint(prev[1], prev[0], nbytes) if prev else None
        rule = self.rule if sample_factor == 1.0 else replace(self.rule,
                                                              min_time_s=self.rule.min_time_s * sample_factor)
        if max_count is not None and max_count < rule.max_count:
            rule = replace(rule, max_count=max_count)
        count, per_ms = sampler.calibrate(rule, timed, hint)
        self.hints[key] = (nbytes, per_ms)
        return count
