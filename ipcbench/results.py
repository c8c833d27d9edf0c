"""The result schema (COLUMNS, Row, kinds), the CSV writer and meta.json: what a run writes.

One row per measurement. The column names and their order are fixed: new columns may be appended at the end,
none renamed, so every run ever written still loads. Reading a run back (with validation) is results_load.py
(docs/architecture.md), so the ranks that write never load the readers. Nothing here imports MPI or CUDA.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Iterable

COLUMNS = (
    "run_id", "host", "suite", "method", "direction", "src_rank", "dst_rank", "src_gpu", "dst_gpu",
    "same_gpu", "bytes", "iterations", "samples", "time_us_median", "time_us_min", "time_us_max",
    "bw_gbps_median", "bw_gbps_max", "cv", "verified", "note",
    # appended later (a results.csv without them still loads: kind is derived, the others left empty)
    "kind", "checks", "noise", "samples_us", "sms_used",
)
BASE_COLUMNS = COLUMNS[:21]  # the columns every results.csv has had since the first version
KINDS = ("bandwidth", "latency", "op", "error")
DIRECTIONS = ("push", "pull", "bidir", "oneway", "op")
CSV_NAME = "results.csv"
META_NAME = "meta.json"

# how each column is typed when read back (results_load.py); every other column is text
INT_COLUMNS = ("src_rank", "dst_rank", "src_gpu", "dst_gpu", "bytes", "iterations", "samples")
OPT_INT_COLUMNS = ("checks", "sms_used")
FLOAT_COLUMNS = ("time_us_median", "time_us_min", "time_us_max", "bw_gbps_median", "bw_gbps_max", "cv", "noise")
BOOL_COLUMNS = ("same_gpu", "verified")


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
    noise: float | None = None  # relative half-width of the median's distribution-free interval (core/sampler.py)
    samples_us: str = ""  # every sample's time per transfer/operation in µs, space-separated
    sms_used: int | None = None  # SMs the transfer's CTAs were seen running on (sm_bulk rows: core/gpu.py)

    def __post_init__(self):
        if not self.kind:
            self.kind = derive_kind(self.suite, self.method, self.direction, self.bw_gbps_median is not None)

    def as_csv(self) -> list[str]:
        return [_fmt(getattr(self, c)) for c in COLUMNS]


assert tuple(f.name for f in fields(Row)) == COLUMNS


def derive_kind(suite: str, method: str, direction: str, has_bandwidth: bool) -> str:
    """The kind of a row that does not say (runs written before the `kind` column existed)."""
    if method.startswith("err_"):
        return "error"
    if suite == "latency" or direction == "oneway":
        return "latency"
    return "bandwidth" if has_bandwidth else "op"


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

    def write(self, rows: Iterable[Row]) -> None:
        for row in rows:
            self._csv.writerow(row.as_csv())
            self.count += 1
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if not self._fh.closed:
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
