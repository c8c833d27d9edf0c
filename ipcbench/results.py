"""The result schema, the CSV writer, meta.json, and the loader/validator that report and compare use.

One row per measurement. The column names and their order are fixed (DESIGN.md): new columns may be
appended at the end, none renamed. Nothing here imports MPI or CUDA.
"""

from __future__ import annotations

import csv
import dataclasses
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
)
DIRECTIONS = ("push", "pull", "bidir", "oneway", "op")
CSV_NAME = "results.csv"
META_NAME = "meta.json"

_INT_COLS = ("src_rank", "dst_rank", "src_gpu", "dst_gpu", "bytes", "iterations", "samples")
_FLOAT_COLS = ("time_us_median", "time_us_min", "time_us_max", "bw_gbps_median", "bw_gbps_max", "cv")
_BOOL_COLS = ("same_gpu", "verified")


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

    def as_csv(self) -> list[str]:
        return [_fmt(getattr(self, c)) for c in COLUMNS]


assert tuple(f.name for f in fields(Row)) == COLUMNS


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
    """Appends rows to results.csv and flushes each one, so a crash keeps everything measured so far."""

    def __init__(self, run_dir: str | os.PathLike):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / CSV_NAME
        new = not self.path.exists() or self.path.stat().st_size == 0
        self._fh = open(self.path, "a", newline="")
        self._csv = csv.writer(self._fh)
        if new:
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


class ResultsError(ValueError):
    """A results file that cannot be used; the message names the file (and line where there is one)."""


def _parse_bool(s: str) -> bool:
    t = s.strip().lower()
    if t in ("true", "1", "yes"):
        return True
    if t in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {s!r}")


def _parse_opt_float(s: str) -> float | None:
    s = s.strip()
    return None if s == "" else float(s)


def parse_row(values: dict[str, str]) -> Row:
    """Turn one CSV record (column -> text) into a Row; raises ValueError naming the bad column."""
    kw = {}
    for c in COLUMNS:
        raw = values.get(c)
        if raw is None:
            raise ValueError(f"missing column {c!r}")
        try:
            if c in _INT_COLS:
                kw[c] = int(raw)
            elif c in _FLOAT_COLS:
                kw[c] = _parse_opt_float(raw)
            elif c in _BOOL_COLS:
                kw[c] = _parse_bool(raw)
            else:
                kw[c] = raw
        except ValueError:
            raise ValueError(f"column {c!r}: cannot read {raw!r}") from None
    if kw["direction"] not in DIRECTIONS:
        raise ValueError(f"column 'direction': {kw['direction']!r} is not one of {', '.join(DIRECTIONS)}")
    if kw["bytes"] < 0:
        raise ValueError("column 'bytes': negative")
    return Row(**kw)


def read_rows(csv_path: str | os.PathLike) -> list[Row]:
    """Read and validate a results.csv; ResultsError names the file and line of the first problem."""
    path = Path(csv_path)
    try:
        fh = open(path, newline="")
    except OSError as e:
        raise ResultsError(f"{path}: cannot open ({e.strerror})") from None
    with fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise ResultsError(f"{path}: empty file (no header)") from None
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise ResultsError(f"{path}:1: header lacks column(s) {', '.join(missing)}")
        rows = []
        for record in reader:
            line = reader.line_num
            if not record:
                continue
            if len(record) != len(header):
                raise ResultsError(
                    f"{path}:{line}: {len(record)} fields, header has {len(header)} (truncated or malformed line)")
            try:
                rows.append(parse_row(dict(zip(header, record))))
            except ValueError as e:
                raise ResultsError(f"{path}:{line}: {e}") from None
    return rows


def read_meta(run_dir: str | os.PathLike) -> dict:
    path = Path(run_dir) / META_NAME
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ResultsError(f"{path}: missing (every run directory needs meta.json)") from None
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None


def find_runs(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Every directory under the given paths that holds a results.csv, sorted, without duplicates."""
    found: set[Path] = set()
    for p in paths:
        p = Path(p)
        if p.is_file() and p.name == CSV_NAME:
            found.add(p.parent.resolve())
        elif p.is_dir():
            if (p / CSV_NAME).is_file():
                found.add(p.resolve())
            for csv_file in p.rglob(CSV_NAME):
                found.add(csv_file.parent.resolve())
    return sorted(found)


def row_dict(row: Row) -> dict:
    return dataclasses.asdict(row)
