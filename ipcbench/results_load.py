"""Reading runs back: results.csv and meta.json, validated, for report and compare.

Two loaders apply the same rules: read_rows (one Row per record, simple) and load_frame (a whole file at once
with pandas and numpy, for fleets of runs). On the first bad record both raise ResultsError naming file:line,
worded alike (load_frame takes the message from parse_row). The schema is results.py (docs/architecture.md).
Nothing here imports MPI or CUDA; pandas and numpy only inside load_frame and its helpers.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Iterable

from ipcbench.results import (BASE_COLUMNS, BOOL_COLUMNS, COLUMNS, CSV_NAME, DIRECTIONS, FLOAT_COLUMNS, INT_COLUMNS,
                              KINDS, META_NAME, OPT_INT_COLUMNS, Row, derive_kind)


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
            if c in BASE_COLUMNS:
                raise ValueError(f"missing column {c!r}")
            continue  # a later column that an older run does not have: the Row default
        try:
            if c in INT_COLUMNS:
                kw[c] = int(raw)
            elif c in OPT_INT_COLUMNS:
                kw[c] = int(raw) if raw.strip() else None
            elif c in FLOAT_COLUMNS:
                kw[c] = _parse_opt_float(raw)
            elif c in BOOL_COLUMNS:
                kw[c] = _parse_bool(raw)
            else:
                kw[c] = raw
        except ValueError:
            raise ValueError(f"column {c!r}: cannot read {raw!r}") from None
    if kw["direction"] not in DIRECTIONS:
        raise ValueError(f"column 'direction': {kw['direction']!r} is not one of {', '.join(DIRECTIONS)}")
    if kw["bytes"] < 0:
        raise ValueError("column 'bytes': negative")
    if not kw.get("kind"):
        kw["kind"] = derive_kind(kw["suite"], kw["method"], kw["direction"], kw["bw_gbps_median"] is not None)
    elif kw["kind"] not in KINDS:
        raise ValueError(f"column 'kind': {kw['kind']!r} is not one of {', '.join(KINDS)}")
    return Row(**kw)


def cut_tail(data: bytes, path: Path, n_header: int) -> tuple[bytes, str | None]:
    """Drop a last line that a killed writer cut short: the writer ends every row with a newline and
    flushes it, so a last line without one that does not parse is a partial row. Returns the data to
    read and a warning naming the dropped line (None when nothing was cut). The other rows are kept."""
    if not data or data.endswith(b"\n"):
        return data, None
    start = data.rfind(b"\n") + 1
    tail = data[start:].decode("utf-8", errors="replace")
    try:
        record = next(csv.reader([tail]), [])
        if len(record) == n_header:
            header = next(csv.reader([data[:data.find(b"\n")].decode("utf-8", errors="replace").strip()]))
            parse_row(dict(zip(header, record)))
            return data, None  # a complete row that only lacks its newline
    except (ValueError, csv.Error):
        pass
    line = data.count(b"\n") + 1
    return data[:start], (f"{path}:{line}: last line cut short ({len(tail)} bytes, no newline: what a killed "
                          f"writer leaves): dropped, the {line - 2} rows before it kept")


def read_rows(csv_path: str | os.PathLike, warnings: list[str] | None = None) -> list[Row]:
    """Read and validate a results.csv; ResultsError names the file and line of the first problem. A last
    line cut short is dropped with a message appended to `warnings` (cut_tail)."""
    path = Path(csv_path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ResultsError(f"{path}: cannot open ({e.strerror})") from None
    first = next(csv.reader([data[:data.find(b"\n")].decode("utf-8", errors="replace")]), []) if data else []
    data, cut = cut_tail(data, path, len(first))
    if cut and warnings is not None:
        warnings.append(cut)
    with io.StringIO(data.decode("utf-8", errors="replace"), newline="") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise ResultsError(f"{path}: empty file (no header)") from None
        missing = [c for c in BASE_COLUMNS if c not in header]
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


def read_meta_optional(run_dir: str | os.PathLike) -> dict | None:
    """meta.json of a run, or None when there is none; invalid JSON still raises ResultsError (file:line)."""
    if not (Path(run_dir) / META_NAME).exists():
        return None
    meta = read_meta(run_dir)
    if not isinstance(meta, dict):
        raise ResultsError(f"{Path(run_dir) / META_NAME}:1: not a JSON object")
    return meta


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


def load_frame(csv_path: str | os.PathLike, warnings: list[str] | None = None):
    """Read and validate a results.csv into a pandas DataFrame (the columns of COLUMNS, typed, plus any
    extra columns as text). Same rules as read_rows; ResultsError names the file and line of the first
    problem. Integer columns are int64, float columns float64 (NaN where empty), booleans bool. A last line
    cut short is dropped with a message appended to `warnings` (cut_tail)."""
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
    missing = [c for c in BASE_COLUMNS if c not in header]
    if missing:
        raise ResultsError(f"{path}:1: header lacks column(s) {', '.join(missing)}")
    data, cut = cut_tail(data, path, len(header))
    if cut and warnings is not None:
        warnings.append(cut)
    lines = _line_table(data, path, len(header))
    text_cols = [c for c in COLUMNS if c not in INT_COLUMNS and c not in FLOAT_COLUMNS and c not in OPT_INT_COLUMNS]
    try:
        # numbers are parsed by pandas' C parser; a column with anything unparsable comes back as text
        raw = pd.read_csv(io.BytesIO(data), dtype={c: str for c in text_cols}, keep_default_na=False,
                          na_values=[""], encoding_errors="replace", low_memory=False)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:
        raise ResultsError(f"{path}: cannot parse ({str(e).splitlines()[0]})") from None
    if len(raw) != len(lines):  # the two readers disagree about records: let the strict one speak
        read_rows(path, [])
        raise ResultsError(f"{path}: cannot parse (record count mismatch)")

    n = len(raw)
    out = {}
    bad = np.zeros(n, dtype=bool)
    for c in raw.columns:
        s = raw[c]
        if c in OPT_INT_COLUMNS:  # nullable: float64 with NaN where empty
            v = pd.to_numeric(s, errors="coerce").astype("float64")
            bad |= (v.isna() & s.notna() & (s.astype(str).str.strip() != "")).to_numpy()
            out[c] = v
        elif c in INT_COLUMNS:
            if s.dtype.kind != "i":
                v = pd.to_numeric(s, errors="coerce").astype("float64")
                ok = v.notna().to_numpy() & (v.fillna(0) % 1 == 0).to_numpy()
                bad |= ~ok
                s = v.where(ok, 0)
            out[c] = s.astype("int64")
        elif c in FLOAT_COLUMNS:
            if s.dtype.kind not in "fi":
                v = pd.to_numeric(s, errors="coerce").astype("float64")
                bad |= (v.isna() & s.notna() & (s.astype(str).str.strip() != "")).to_numpy()
                s = v
            out[c] = s.astype("float64")
        elif c in BOOL_COLUMNS:
            t = s.fillna("")
            if not t.isin(("true", "false")).all():
                t = t.str.strip().str.lower()
            is_true = t.isin(_TRUE).to_numpy()
            bad |= ~(is_true | t.isin(_FALSE).to_numpy())
            out[c] = is_true
        else:
            out[c] = s.fillna("") if s.dtype.kind in "OUT" or str(s.dtype) == "str" else s
    frame = pd.DataFrame(out, index=raw.index)
    _complete_later_columns(frame)
    bad |= ~frame["direction"].isin(DIRECTIONS).to_numpy()
    bad |= ~frame["kind"].isin(KINDS).to_numpy()
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


def _complete_later_columns(frame) -> None:
    """Add the columns appended after the first version where a run lacks them, and derive `kind`."""
    import numpy as np

    n = len(frame)
    for c in ("checks", "noise", "sms_used"):
        if c not in frame.columns:
            frame[c] = np.full(n, np.nan)
    if "samples_us" not in frame.columns:
        frame["samples_us"] = ""
    kind = frame["kind"].fillna("").astype(str) if "kind" in frame.columns else None
    if kind is None or (kind == "").any():
        method = frame["method"].astype(str)
        latency = (frame["suite"] == "latency") | (frame["direction"] == "oneway")
        derived = np.where(method.str.startswith("err_"), "error",
                           np.where(latency, "latency", np.where(frame["bw_gbps_median"].notna(), "bandwidth", "op")))
        frame["kind"] = derived if kind is None else np.where(kind == "", derived, kind)
