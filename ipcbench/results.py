"""The result schema (COLUMNS, Row, row kinds, the facts a row states), the CSV writer and meta.json: what a
run writes.

One row per measurement. The column names and their order are fixed: new columns may be appended at the end,
none renamed, so every run ever written still loads (the run model, ipcbench/record/, derives what an older
run lacks). Nothing here imports MPI or CUDA. docs/results.md describes every column.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Iterable

# meta.json "schema_version", and what each version added:
# 1: the 25 columns up to samples_us (runs before it carry no version)
# 2: the row facts appended (FACT_COLUMNS)
# 3: sms_used, placements, sm_clock_mhz, noise_within and noise_floor appended (`noise` then holds both levels:
#    ipcbench/catalogue/noise.py)
# 4: the same columns; meta.json's fields every writer writes required (record/meta_schema.check_required), with
#    pair_mode's rounds and permutation
# 5: meta.json's planned_rows, what the run planned (required, and its rows count once complete: results.csv holds
#    exactly the planned rows, record/agreement.py); the columns it appends: none
# 6: contexts, context_us and noise_contexts appended: rows under 64 MiB spread their samples over CUDA contexts and
#    state the noise measured between them (core/lanes.py); meta.json's sampling records `contexts`
SCHEMA_VERSION = 6
FACT_COLUMNS = ("engine", "access", "mechanism", "pattern", "timing", "mps", "round_pairs")
COLUMNS = (
    "run_id", "host", "suite", "method", "direction", "src_rank", "dst_rank", "src_gpu", "dst_gpu",
    "same_gpu", "bytes", "iterations", "samples", "time_us_median", "time_us_min", "time_us_max",
    "bw_gbps_median", "bw_gbps_max", "cv", "verified", "note",
    # appended later (a results.csv without them still loads: they are derived on read, or left empty)
    "kind", "checks", "noise", "samples_us", *FACT_COLUMNS, "sms_used", "placements", "sm_clock_mhz",
    "noise_within", "noise_floor", "contexts", "context_us", "noise_contexts",
)
BASE_COLUMNS = COLUMNS[:21]  # the columns every results.csv has had since the first version
# What names a row within its run: no two rows of a run share it, and schema 5's planned rows are these keys
# (catalogue/planned.py, record/agreement.py). Across runs, where ranks may differ, judging/row_key.RowKey names it.
RUN_KEY = ("host", "suite", "method", "direction", "src_rank", "dst_rank", "src_gpu", "dst_gpu", "bytes")
ROW_KINDS = ("bandwidth", "latency", "op", "error")
DIRECTIONS = ("push", "pull", "bidir", "oneway", "op")
CSV_NAME = "results.csv"
META_NAME = "meta.json"

# how each column is typed when read back (ipcbench/record/table.py); every other column is text
INT_COLUMNS = ("src_rank", "dst_rank", "src_gpu", "dst_gpu", "bytes", "iterations", "samples")
OPT_INT_COLUMNS = ("checks", "round_pairs", "sms_used", "placements", "contexts")
FLOAT_COLUMNS = ("time_us_median", "time_us_min", "time_us_max", "bw_gbps_median", "bw_gbps_max", "cv", "noise",
                 "sm_clock_mhz", "noise_within", "noise_floor", "noise_contexts")
BOOL_COLUMNS = ("same_gpu", "verified")
OPT_BOOL_COLUMNS = ("mps",)


ACCESS = {"push": "write", "pull": "read"}  # what a one-way direction (or a method's style) does to the peer
STAGED_ENGINES = ("shm", "mpi")  # the host-staged paths that IPC replaces (a baseline, never IPC)


@dataclass(frozen=True)
class RowFacts:
    """What every row of one method is, declared once: by the method table (core/methods.METHODS, through
    suites/transfer.facts_of) or by the suite that writes the rows (SuiteSpec.rows). `described` adds
    what depends on the row itself."""

    engine: str  # what moves the bytes: ce, sm, sm_bulk, nccl; shm, mpi (host-staged); event; api (a host call)
    mechanism: str  # how the two processes share memory: legacy, pool, vmm, core, nccl, shm, mpi, event
    pattern: str = "batch"  # batch (back-to-back transfers), alltoall, pingpong, ring, op
    timing: str = "gated"  # gated (events around a gated batch), window, handoff, host (see described)
    access: str = ""  # the engine's one-way style: write (into the peer) or read (from it); "" where none


def described(facts: RowFacts | None, direction: str, same_gpu: bool) -> tuple[str, str, str, str, str]:
    """(engine, access, mechanism, pattern, timing) of one row: its method's facts, with the access of its
    direction (push writes, pull reads) and, for a gated batch both ways on one GPU, one window on the GPU's
    clock (core/pair.py times both processes' transfers so). All "" for a method nobody declared."""
    if facts is None:
        return "", "", "", "", ""
    access = ACCESS.get(direction, facts.access) if facts.access else ""
    timing = "window" if facts.timing == "gated" and same_gpu and direction == "bidir" else facts.timing
    return facts.engine, access, facts.mechanism, facts.pattern, timing


@dataclass
class Row:
    """One measurement. Times are per transfer (or per operation) in µs; bandwidth in GB/s (1e9 B/s)."""

    run_id: str
    host: str
    suite: str
    method: str
    direction: str
    src_rank: int
    dst_rank: int
    src_gpu: int
    dst_gpu: int
    same_gpu: bool
    bytes: int
    iterations: int
    samples: int
    time_us_median: float | None
    time_us_min: float | None
    time_us_max: float | None
    bw_gbps_median: float | None
    bw_gbps_max: float | None
    cv: float | None
    verified: bool
    note: str = ""
    kind: str = ""  # bandwidth | latency | op | error: the row's natural unit (see derive_kind)
    checks: int | None = None  # samples whose destination was checked (None: not recorded, older runs)
    noise: float | None = None  # how far the median moves between runs (fraction): noise_within and noise_floor
    samples_us: str = ""  # every sample's time per transfer/operation in µs, space-separated
    # the row's facts (RowFacts, `described`), set by describe() before the row is written
    engine: str = ""
    access: str = ""
    mechanism: str = ""
    pattern: str = ""
    timing: str = ""
    mps: bool | None = None  # the processes ran under MPS (None: not recorded)
    round_pairs: int | None = None  # pairs measured at the same time, this one included (1: alone)
    sms_used: int | None = None  # SMs the transfer's CTAs were seen running on (sm_bulk rows: core/gpu.py)
    placements: int | None = None  # places of its buffers the samples rotated over (core/placement.py)
    sm_clock_mhz: float | None = None  # SM clock the driving GPU's gates ran at, median of the samples (MHz)
    noise_within: float | None = None  # the noise of the run's own samples (`noise` before the floor)
    noise_floor: float | None = None  # the between-runs floor of the row's kind (ipcbench/catalogue/noise.py)
    contexts: int | None = None  # CUDA contexts its samples spread over (core/lanes.py; 1: the primary alone)
    context_us: str = ""  # each context's time per transfer in µs (median over the samples), space-separated
    noise_contexts: float | None = None  # 2 standard errors of the mean over its contexts (fraction; 2+ contexts)

    def __post_init__(self):
        if not self.kind:
            self.kind = str(derive_kind(self.suite, self.method, self.direction, self.bw_gbps_median is not None))

    def describe(self, facts: RowFacts | None, mps: bool | None, round_pairs: int | None) -> None:
        self.engine, self.access, self.mechanism, self.pattern, self.timing = described(facts, self.direction,
                                                                                         self.same_gpu)
        self.mps, self.round_pairs = mps, round_pairs

    def as_csv(self) -> list[str]:
        return [_fmt(getattr(self, c)) for c in COLUMNS]


assert tuple(f.name for f in fields(Row)) == COLUMNS


def derive_kind(suite, method, direction, has_bandwidth):
    """The kind of a row that does not say (rows made without one; runs written before the `kind` column):
    arrays of rows (numpy or pandas), or one row's values (then a 0-d array; str() it)."""
    import numpy as np

    method, suite, direction = (np.asarray(v, dtype=str) for v in (method, suite, direction))
    latency = (suite == "latency") | (direction == "oneway")
    return np.where(np.char.startswith(method, "err_"), "error",
                    np.where(latency, "latency", np.where(np.asarray(has_bandwidth), "bandwidth", "op")))


def format_samples(values) -> str:
    return " ".join(f"{v:.6g}" for v in values)


def parse_samples(text: str) -> list[float]:
    return [float(x) for x in str(text).split()] if text and str(text).strip() else []


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return ""
        return f"{v:.6g}" if abs(v) < 1e5 else f"{v:.1f}"
    return str(v)


# results.csv is flushed at every write (a crash of the run loses nothing) and synced to disk at a write at least this
# long after the last sync, and at close: a crash of the machine may lose what came since the last sync.
FSYNC_EVERY_S = 2.0


class ResultsWriter:
    """Writes a new results.csv and flushes every row, so a crash keeps everything measured so far.

    The file must not exist yet (opened with "x"): one run per file, and a user's results are never
    appended to or overwritten (run/outdir.py refuses such a directory before any GPU work).
    """

    def __init__(self, run_dir: str | os.PathLike, name: str = CSV_NAME):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / name
        self._fh = open(self.path, "x", newline="")
        self._csv = csv.writer(self._fh)
        self._csv.writerow(COLUMNS)
        self._fh.flush()
        self.count = 0
        self._synced = time.monotonic()

    def write(self, rows: Iterable[Row]) -> None:
        """Append rows and flush them to the OS at once (a crash of the run keeps them); sync the file to disk at a
        write FSYNC_EVERY_S or more after the last sync, and at close (an fsync a step cost ~1 s of a run)."""
        for row in rows:
            self._csv.writerow(row.as_csv())
            self.count += 1
        self._fh.flush()
        now = time.monotonic()
        if now - self._synced >= FSYNC_EVERY_S:
            os.fsync(self._fh.fileno())
            self._synced = now

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def write_meta(run_dir: str | os.PathLike, meta: dict) -> Path:
    path = Path(run_dir) / META_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, indent=2, sort_keys=False, default=str) + "\n")
    tmp.replace(path)
    return path
