"""The run's configuration: every option validated once, frozen, and read by everything downstream.

cli.py turns argv into a RunConfig and nothing else reads argparse. Pure Python: no CUDA, no MPI, so
validation (exit code 2, one line) happens before any rank touches a GPU, identically on every rank.
docs/architecture.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ipcbench.core.bulk import BulkShape
from ipcbench.core.link_rates import PLANNED_KINDS
from ipcbench.core.placement import MAX_PLACEMENTS
from ipcbench.core.sampler import SamplingRule
from ipcbench.core.schedule import MODES as PAIRS_MODES, SERIAL_PAIRS  # noqa: F401 (the CLI's choices)
from ipcbench.core.sm_copy import CopyShape
from ipcbench.errors import UsageError
from ipcbench.sizes import SizeError, fmt_size, parse_sizes
from ipcbench.suites.registry import UnknownSuite, plan, resolve

DEFAULT_SIZES = "4K:256M"
# --quick is a fleet check: every pair and method at the two ends of the default sweep (the per-transfer
# cost and the peak), latency at 3 sizes (suites/latency.QUICK_LAT_SIZES), serial steps on a ring
# (core/schedule.decide_serial_pairs), a looser stopping rule: 8 GPUs in under 30 s (run/dryrun.py).
QUICK_SIZES = "4K,256M"
MAX_BYTES = 64 << 30  # no GPU of today holds more per buffer set
TOPOLOGIES = PLANNED_KINDS  # --topology: how every GPU pair is linked on the node a dry run plans for
MAX_PLANNED_RANKS = 1024  # --ranks: a node's ranks a dry run plans for (64 GPUs of 16 ranks each)
# The default stopping rule (docs/architecture.md, "Sampling"): careful enough that every largest-size
# copy/kernel number is within 0.5% of a run with --samples 15 --min-time 50; at least 5 samples, so that a
# row with two modes rarely settles in one (core/sampler.py). Samples of 2 ms (3 ms until 2026-11-25): on two
# H100s `all` with --min-time 2 took 27.4 s where 3 ms took 30.4, and compared with a run of 3 ms samples it
# changed no row (917 matched, 0 regression, 0 improvement; docs/suites.md, "Where a run's time goes").
# --quick is looser: 4 samples at least (a 50/50 mixture settles in one mode 12.5% of the time), 2%.
# Contexts a sample of a row under 64 MiB spreads over (core/lanes.py; docs/measurement.md says what K buys and costs)
DEFAULT_CONTEXTS = 16
MAX_CONTEXTS = 128
DEFAULT_RULE = SamplingRule(min_time_s=0.002, min_samples=5, max_samples=15, noise=0.005, max_time_s=0.25,
                            contexts=DEFAULT_CONTEXTS)
QUICK_RULE = SamplingRule(min_time_s=0.002, min_samples=4, max_samples=6, noise=0.02, max_time_s=0.05,
                          contexts=DEFAULT_CONTEXTS)
# An explicit --min-time is every row's sample length (short_factor 1); an explicit --noise every row's target
# (floor_share 0).


@dataclass(frozen=True)
class RunConfig:
    suites: tuple[str, ...]
    sizes: tuple[int, ...]
    rule: SamplingRule
    verify: bool = True
    timeout_s: float = 300.0
    out: str | None = None
    dry_run: bool = False
    json_plan: bool = False
    topology: str | None = None  # the dry run plans for a node of this link kind (TOPOLOGIES), not NVML's
    ranks: int | None = None  # the dry run without mpirun plans this many ranks on the node (--ranks), not NVML's GPUs
    quiet: bool = False
    quick: bool = False
    pairs: str = "auto"
    serial_pairs: str = "auto"
    copy_shape: CopyShape = field(default_factory=CopyShape)  # the SM copy kernel's (core/sm_copy.py)
    bulk_shape: BulkShape = field(default_factory=BulkShape)  # the sm_bulk kernel's (core/bulk.py)
    argv: tuple[str, ...] = ()
    sizes_given: bool = False  # --sizes was given: every step measures every size (no thinned twins)
    # one rank pair per GPU pair where ranks share GPUs (core/schedule.per_gpu_pair): --quick, a fleet check of links;
    # not `check`, which judges every rank pair
    gpu_pairs: bool = False

    @property
    def thin_twins(self) -> bool:
        """Twin steps (pool, vmm, cuda.core: suites/registry.Step.twin) at every other size: under the
        default sweep only, so what a user asks for with --sizes is what every step measures."""
        return not self.sizes_given and not self.quick

    def steps(self, n_local: int) -> list:
        """The plan of this run for n_local ranks per node (suites/registry.plan)."""
        return plan(list(self.suites), n_local, list(self.sizes), self.quick, self.thin_twins)

    @classmethod
    def from_options(cls, *, suites, sizes: str | None = None, quick: bool = False, samples: int | None = None,
                     min_time: float | None = None, noise: float | None = None, max_time: float | None = None,
                     placements: int | None = None, contexts: int | None = None, no_verify: bool = False,
                     timeout: float = 300.0,
                     out: str | None = None, dry_run: bool = False, json: bool = False, quiet: bool = False,
                     pairs: str = "auto", serial_pairs: str = "auto", sm_copy: str | None = None,
                     sm_bulk: str | None = None, topology: str | None = None, ranks: int | None = None, argv=(),
                     gpu_pairs: bool = True) -> RunConfig:
        """A run's configuration from the bench command's options, by keyword as a command line gives them (None:
        not given; sizes as --sizes writes them, min_time in ms, noise in percent): every one checked, UsageError
        naming the option and why. cli.py (through build_config), check and selftest build theirs here."""
        names = _suites(suites)
        for option, given in (("--json", json), ("--topology", topology), ("--ranks", ranks is not None)):
            if given and not dry_run:
                raise UsageError(f"{option} goes with --dry-run (it shapes the plan, and a run measures what it "
                                 "finds)")
        if ranks is not None and not 2 <= ranks <= MAX_PLANNED_RANKS:
            raise UsageError(f"--ranks must be in 2..{MAX_PLANNED_RANKS} (got {ranks}): ipcbench measures pairs of "
                             "ranks on one node")
        spec = _sizes(sizes, quick)
        rule = _rule(quick, samples, min_time, noise, max_time, placements, contexts)
        if not (5 <= timeout <= 86400) or math.isnan(timeout):
            raise UsageError(f"--timeout must be in [5, 86400] s (got {timeout:g}): shorter waits would fire "
                             f"while a peer is still compiling kernels or verifying")
        shape, bulk = _shapes(sm_copy, sm_bulk)
        return cls(suites=names, sizes=spec, rule=rule, verify=not no_verify, timeout_s=timeout, out=out,
                   dry_run=dry_run, json_plan=json, topology=topology, ranks=ranks, quiet=quiet, quick=quick,
                   pairs=pairs, serial_pairs=serial_pairs, copy_shape=shape, bulk_shape=bulk, argv=tuple(argv),
                   sizes_given=sizes is not None, gpu_pairs=bool(quick) and gpu_pairs)

    def options_meta(self) -> dict:
        """What meta.json records under `options` (the report and compare read it)."""
        return {"samples": self.rule.max_samples if self.rule.is_fixed else None,
                "min_time_ms": self.rule.min_time_s * 1e3, "verify": self.verify, "timeout_s": self.timeout_s,
                "quick": self.quick, "sm_copy": str(self.copy_shape),
                "sm_bulk": str(self.bulk_shape), "pairs": self.pairs, "serial_pairs": self.serial_pairs,
                "twin_sizes": "every other size" if self.thin_twins else "every size",
                "sampling": self.rule.as_dict()}


# The bench command's options (cli.py's parser), each a keyword of RunConfig.from_options
OPTIONS = ("suites", "sizes", "quick", "samples", "min_time", "noise", "max_time", "placements", "contexts",
           "no_verify", "timeout", "out", "dry_run", "json", "quiet", "pairs", "serial_pairs", "sm_copy", "sm_bulk",
           "topology", "ranks", "argv", "gpu_pairs")


def build_config(ns) -> RunConfig:
    """Validate an argparse namespace of the bench command (RunConfig.from_options: the options it has, the others
    at their defaults); UsageError names the option and why."""
    return RunConfig.from_options(**{k: getattr(ns, k) for k in OPTIONS if hasattr(ns, k)})


def _suites(names) -> tuple[str, ...]:
    try:
        return tuple(resolve(list(names)))
    except UnknownSuite as e:
        raise UsageError(str(e.args[0])) from None


def _sizes(spec: str | None, quick: bool) -> tuple[int, ...]:
    """--sizes checked: None is 'not given' (the default sweep, or --quick's sizes); an empty or blank --sizes is a
    mistake, never the default sweep."""
    try:
        sizes = parse_sizes(spec if spec is not None else (QUICK_SIZES if quick else DEFAULT_SIZES))
    except SizeError as e:
        raise UsageError(f"--sizes: {e}") from None
    for s in sizes:
        if s < 4 or s % 4:
            raise UsageError(f"--sizes: {fmt_size(s)} B cannot be checked: sizes must be multiples of 4 bytes "
                             f"(the verification pattern's word), at least 4")
    if max(sizes) > MAX_BYTES:
        raise UsageError(f"--sizes: {fmt_size(max(sizes))} is larger than any GPU buffer "
                         f"(at most {fmt_size(MAX_BYTES)})")
    return tuple(sizes)


def _rule(quick: bool, samples: int | None, min_time: float | None, noise: float | None, max_time: float | None,
          placements: int | None, contexts: int | None = None) -> SamplingRule:
    """The stopping rule: --quick's or the default, each option given over it (checked)."""
    base = QUICK_RULE if quick else DEFAULT_RULE
    min_time_s = base.min_time_s if min_time is None else min_time / 1e3
    if not (0.05 <= min_time_s * 1e3 <= 1000):
        raise UsageError(f"--min-time must be in [0.05, 1000] ms (got {min_time_s * 1e3:g}): a sample shorter than "
                         f"50 µs is dominated by the gate, longer than 1 s makes a run take hours")
    if samples is not None:
        if not (1 <= samples <= 1000):
            raise UsageError(f"--samples must be in 1..1000 (got {samples})")
        rule = SamplingRule.fixed(samples, min_time_s)
    else:
        target = base.noise if noise is None else noise / 100
        if not (0 < target < 0.5):
            raise UsageError(f"--noise must be in (0, 50) percent (got {noise:g})")
        limit = base.max_time_s if max_time is None else max_time
        if not (min_time_s * base.min_samples <= limit <= 600):
            raise UsageError(f"--max-time must be in [{min_time_s * base.min_samples:g}, 600] s: at least "
                             f"{base.min_samples} samples of --min-time (got {limit:g})")
        # An explicit --noise asks for that precision of every row: no stopping at a share of its floor.
        rule = SamplingRule(min_time_s=min_time_s, min_samples=base.min_samples, max_samples=base.max_samples,
                            noise=target, max_time_s=limit, floor_share=base.floor_share if noise is None else 0.0,
                            short_factor=base.short_factor if min_time is None else 1.0)
    places = base.placements if placements is None else placements
    if not (1 <= places <= MAX_PLACEMENTS):
        raise UsageError(f"--placements must be in 1..{MAX_PLACEMENTS} (got {places})")
    k = base.contexts if contexts is None else contexts
    if not (1 <= k <= MAX_CONTEXTS):
        raise UsageError(f"--contexts must be in 1..{MAX_CONTEXTS} (got {k}): 1 samples the primary context alone")
    return replace(rule, placements=places, contexts=k)


def _shapes(sm_copy: str | None, sm_bulk: str | None) -> tuple[CopyShape, BulkShape]:
    try:
        shape = CopyShape.parse(sm_copy) if sm_copy else CopyShape()
    except ValueError as e:
        raise UsageError(f"--sm-copy: {e}") from None
    try:
        bulk = BulkShape.parse(sm_bulk) if sm_bulk else BulkShape()
    except ValueError as e:
        raise UsageError(f"--sm-bulk: {e}") from None
    return shape, bulk
