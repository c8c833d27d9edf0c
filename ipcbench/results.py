"""The result schema, the CSV writer, meta.json, and the loader/validator that report and compare use.

One row per measurement. The column names and their order are fixed (DESIGN.md): new columns may be
appended at the end, none renamed. Nothing here imports MPI or CUDA.
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

    def __init__(self, run_dir: str | os.PathLike, name: str = CSV_NAME):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / name
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



# --- fast loader for report/compare -------------------------------------------------------------------
# read_rows() above builds one Row per record; fine for a run, too slow for a fleet of them. load_frame()
# applies the same rules to a whole file at once with pandas and numpy, and on the first bad record still
# names the file and the line (the message comes from parse_row, so both loaders word errors alike).

_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def _line_table(data: bytes, path: Path, n_header: int):
    """Physical line number (1-based) of every non-blank data record, after checking field counts.

    Without quote characters a record is a line, and fields are counted with numpy; with quotes (a note
    holding a comma or a newline) the csv module does the counting, as read_rows does.
    """
    import numpy as np

    if b'"' in data:
        text = data.decode("utf-8", errors="replace")
        reader = csv.reader(text.splitlines(keepends=True))
        next(reader, None)
        lines = []
        for record in reader:
            if not record:
                continue
            if len(record) != n_header:
                raise ResultsError(f"{path}:{reader.line_num}: {len(record)} fields, header has {n_header} "
                                   "(truncated or malformed line)")
            lines.append(reader.line_num)
        return np.asarray(lines, dtype=np.int64)
    buf = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(buf == 10)
    if len(buf) and buf[-1] != 10:
        ends = np.append(ends, len(buf))
    starts = np.concatenate(([0], ends[:-1] + 1))
    length = ends - starts
    cr = np.zeros(len(ends), dtype=bool)
    nonempty = length > 0
    cr[nonempty] = buf[ends[nonempty] - 1] == 13
    blank = (length - cr) <= 0
    commas = np.flatnonzero(buf == 44)
    fields = np.searchsorted(commas, ends) - np.searchsorted(commas, starts) + 1
    lineno = np.arange(1, len(ends) + 1)
    data_lines = (lineno > 1) & ~blank
    bad = data_lines & (fields != n_header)
    if bad.any():
        i = int(np.argmax(bad))
        raise ResultsError(f"{path}:{lineno[i]}: {fields[i]} fields, header has {n_header} "
                           "(truncated or malformed line)")
    return lineno[data_lines]


def load_frame(csv_path: str | os.PathLike):
    """Read and validate a results.csv into a pandas DataFrame (the columns of COLUMNS, typed, plus any
    extra columns as text). Same rules as read_rows; ResultsError names the file and line of the first
    problem. Integer columns are int64, float columns float64 (NaN where empty), booleans bool."""
    import io

    import numpy as np
    import pandas as pd

    path = Path(csv_path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ResultsError(f"{path}: cannot open ({e.strerror or e})") from None
    first_nl = data.find(b"\n")
    header_text = (data if first_nl < 0 else data[:first_nl]).decode("utf-8", errors="replace").strip()
    if not header_text:
        raise ResultsError(f"{path}: empty file (no header)")
    header = next(csv.reader([header_text]))
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise ResultsError(f"{path}:1: header lacks column(s) {', '.join(missing)}")
    lines = _line_table(data, path, len(header))
    text_cols = [c for c in COLUMNS if c not in _INT_COLS and c not in _FLOAT_COLS]
    try:
        # numbers are parsed by pandas' C parser; a column with anything unparsable comes back as text
        raw = pd.read_csv(io.BytesIO(data), dtype={c: str for c in text_cols}, keep_default_na=False,
                          na_values=[""], encoding_errors="replace", low_memory=False)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:
        raise ResultsError(f"{path}: cannot parse ({str(e).splitlines()[0]})") from None
    if len(raw) != len(lines):  # the two readers disagree about records: let the strict one speak
        read_rows(path)
        raise ResultsError(f"{path}: cannot parse (record count mismatch)")

    n = len(raw)
    out = {}
    bad = np.zeros(n, dtype=bool)
    for c in raw.columns:
        s = raw[c]
        if c in _INT_COLS:
            if s.dtype.kind != "i":
                v = pd.to_numeric(s, errors="coerce").astype("float64")
                ok = v.notna().to_numpy() & (v.fillna(0) % 1 == 0).to_numpy()
                bad |= ~ok
                s = v.where(ok, 0)
            out[c] = s.astype("int64")
        elif c in _FLOAT_COLS:
            if s.dtype.kind not in "fi":
                v = pd.to_numeric(s, errors="coerce").astype("float64")
                bad |= (v.isna() & s.notna() & (s.astype(str).str.strip() != "")).to_numpy()
                s = v
            out[c] = s.astype("float64")
        elif c in _BOOL_COLS:
            t = s.fillna("")
            if not t.isin(("true", "false")).all():
                t = t.str.strip().str.lower()
            is_true = t.isin(_TRUE).to_numpy()
            bad |= ~(is_true | t.isin(_FALSE).to_numpy())
            out[c] = is_true
        else:
            out[c] = s.fillna("") if s.dtype.kind in "OUT" or str(s.dtype) == "str" else s
    frame = pd.DataFrame(out, index=raw.index)
    bad |= ~frame["direction"].isin(DIRECTIONS).to_numpy()
    bad |= frame["bytes"].to_numpy() < 0
    if bad.any():
        i = int(np.argmax(bad))
        text = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False, na_filter=False,
                           encoding_errors="replace")
        record = {c: text[c].iat[i] for c in text.columns}
        try:
            parse_row(record)
            reason = "invalid value"
        except ValueError as e:
            reason = str(e)
        raise ResultsError(f"{path}:{int(lines[i])}: {reason}")
    cols = list(COLUMNS) + [c for c in frame.columns if c not in COLUMNS]
    return frame[cols]


def read_meta_optional(run_dir: str | os.PathLike) -> dict | None:
    """meta.json of a run, or None when there is none; invalid JSON still raises ResultsError (file:line)."""
    if not (Path(run_dir) / META_NAME).exists():
        return None
    meta = read_meta(run_dir)
    if not isinstance(meta, dict):
        raise ResultsError(f"{Path(run_dir) / META_NAME}:1: not a JSON object")
    return meta
