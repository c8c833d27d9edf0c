"""The one reader of a results.csv (and of a fleet node's part file): text -> a typed DataFrame, validated.

The csv module splits the text into records (a note may hold commas, quotes, newlines) and names the line of
each; pandas' C parser reads the values (fast, and one string object per distinct text); the columns are typed
and checked at once. The first bad record raises ResultsError naming file:line and the column. A last line
without its newline, which only a killed writer leaves (wherever it cut), is dropped with a warning and every
row before it kept. Columns appended to the schema after a run was written are added empty (`kind` derived here; the row
facts by record/run.py, which knows the run's meta.json). pandas only inside the functions.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ipcbench.errors import ResultsError
from ipcbench.results import (BASE_COLUMNS, BOOL_COLUMNS, COLUMNS, DIRECTIONS, FLOAT_COLUMNS, INT_COLUMNS,
                              OPT_BOOL_COLUMNS, OPT_INT_COLUMNS, ROW_KINDS, Row, derive_kind)

TRUE, FALSE = ("true", "1", "yes"), ("false", "0", "no")
Frame = Any  # a pandas.DataFrame: pandas is imported only inside the functions that use it


@dataclass
class Table:
    """A CSV of rows as read: the typed frame, the physical line of each row (a note may span lines), and
    per value column where a NaN was written as text ("nan": an empty field is no value, "nan" a bad one)."""

    frame: Frame
    lines: list[int]
    nan_text: dict[str, Any] = field(default_factory=dict)  # column -> bool array over the rows


def read_table(csv_path: str | os.PathLike, warnings: list[str] | None = None) -> Frame:
    """The rows of a results.csv as a DataFrame: the columns of COLUMNS typed (int64; float64 with NaN where
    empty, also for `checks` and `round_pairs`; bool; `mps` pandas' nullable boolean), any extra column as
    text. A cut-short last line is dropped with a message appended to `warnings`."""
    return read_lines(csv_path, warnings).frame


def read_lines(csv_path: str | os.PathLike, warnings: list[str] | None = None) -> Table:
    """read_table, with the line of each row and the NaNs written as text (what record/validate.py names)."""
    import pandas as pd

    path = Path(csv_path)
    text, header = _text(path, warnings)
    records, lines = _records(path, text, len(header))
    raw = _values(text, header, len(records))
    if raw is None:  # pandas split the text otherwise than the csv module: the records as they are, as text
        raw = pd.DataFrame(dict(zip(header, map(list, zip(*records)))) if records else {c: [] for c in header},
                           dtype=object)
    typed, problems, nan_text = _typed(raw, lambda i, c: records[i][header.index(c)])
    if problems:
        i, _, message = min(problems)  # the first bad record; its first unreadable column, else its first bad value
        raise ResultsError(f"{path}:{lines[i]}: {message}")
    return Table(typed[list(COLUMNS) + [c for c in typed.columns if c not in COLUMNS]], lines, nan_text)


def read_rows(csv_path: str | os.PathLike, warnings: list[str] | None = None) -> list[Row]:
    """The same rows as Row objects (a run's rows one by one, as the writer made them)."""
    import pandas as pd

    frame = read_table(csv_path, warnings)
    out = []
    for rec in frame[list(COLUMNS)].to_dict("records"):
        for c, v in rec.items():
            if pd.isna(v):
                rec[c] = None
            elif c in OPT_INT_COLUMNS:
                rec[c] = int(v)
            elif c in OPT_BOOL_COLUMNS:
                rec[c] = bool(v)
        out.append(Row(**rec))
    return out


def _text(path: Path, warnings: list[str] | None) -> tuple[str, list[str]]:
    """(the file's text without a cut-short last line, its header), the header checked."""
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as e:
        raise ResultsError(f"{path}: cannot open ({e.strerror or e})") from None
    header = next(csv.reader(io.StringIO(text, newline="")), None)
    if not header:
        raise ResultsError(f"{path}: empty file (no header)")
    missing = [c for c in BASE_COLUMNS if c not in header]
    if missing:
        raise ResultsError(f"{path}:1: header lacks column(s) {', '.join(missing)}")
    text, cut = _cut_tail(text, path, header)
    if cut and warnings is not None:
        warnings.append(cut)
    return text, header


def _records(path: Path, text: str, n_fields: int) -> tuple[list[list[str]], list[int]]:
    """Every record (the csv module: a note may hold commas, quotes, newlines) and its physical line;
    ResultsError at the first record whose field count is not the header's (pandas' parser fills a short
    record up, so the fields are counted here)."""
    reader = csv.reader(io.StringIO(text, newline=""))
    next(reader)
    records, lines = [], []
    for record in reader:
        if not record:
            continue
        if len(record) != n_fields:
            raise ResultsError(f"{path}:{reader.line_num}: {len(record)} fields, header has {n_fields} "
                               "(truncated or malformed line)")
        records.append(record)
        lines.append(reader.line_num)
    return records, lines


def _values(text: str, header: list[str], n_records: int) -> Frame | None:
    """The records' values as pandas' C parser reads them: numbers as numbers where a whole column is (an empty
    field NaN), every other column as text; None where it finds another number of records."""
    import pandas as pd

    numeric = set(INT_COLUMNS + OPT_INT_COLUMNS + FLOAT_COLUMNS)
    try:
        raw = pd.read_csv(io.StringIO(text), dtype={c: str for c in header if c not in numeric},
                          keep_default_na=False, na_values={c: [""] for c in numeric})
    except (pd.errors.ParserError, ValueError):
        return None
    return raw if len(raw) == n_records and list(raw.columns) == header else None


def _cut_tail(text: str, path: Path, header: list[str]) -> tuple[str, str | None]:
    """Drop a last line that a killed writer cut short. The writer ends every row with a newline and flushes it,
    so a last line without one was cut, wherever the cut fell: inside a field, at a field boundary (the fields
    after it an empty column reads as blank) or right before the newline (a number cut short is still a
    number), so it is never read as a row. Returns the text to read and a warning naming the dropped line
    (None when nothing was cut)."""
    if not text or text.endswith("\n"):
        return text, None
    line = _last_record_line(text)
    if line == 1:
        return text, None  # the header alone: no row to drop
    start = 0
    for _ in range(line - 1):
        start = text.index("\n", start) + 1
    rows = len([r for r in csv.reader(io.StringIO(text[:start], newline="")) if r]) - 1
    return text[:start], (f"{path}:{line}: last line cut short ({len(text[start:].encode())} bytes, no newline: "
                          f"what a killed writer leaves): dropped, the {rows} rows before it kept")


def _last_record_line(text: str) -> int:
    """The physical line where the text's last record starts (a quoted note may span lines)."""
    reader = csv.reader(io.StringIO(text, newline=""))
    start = last = 1
    for record in reader:
        if record:
            last = start
        start = reader.line_num + 1
    return last


NAN_TEXT = ("nan", "+nan", "-nan")  # how a NaN may be written: read (as NaN), then named (record/validate.py)


def _typed(raw: Frame, text_of=None) -> tuple[Frame, list[tuple[int, int, str]], dict[str, Any]]:
    """(the typed frame, [(record index, check number, message)]: the first record each check finds bad;
    the checks in column order, then the values' own rules, {float column: where a NaN was written as text}).
    `text_of(i, column)`: a field as written."""
    import numpy as np
    import pandas as pd

    out: dict = {}
    problems: list[tuple[int, int, str]] = []
    nan_text: dict[str, Any] = {}

    def bad(mask, message) -> None:
        mask = np.asarray(mask, dtype=bool)
        if mask.any():
            i = int(np.argmax(mask))
            problems.append((i, len(problems), message(i)))

    text_of = text_of or (lambda i, c: raw[c].iat[i])
    for c in raw.columns:
        col = raw[c]
        parsed = col.dtype.kind in "if"  # pandas read every field as a number, or empty (NaN)
        if c in INT_COLUMNS or c in OPT_INT_COLUMNS:
            values = col if parsed else pd.to_numeric(col, errors="coerce")
            blank = values.isna() if parsed else values.isna() & _blank(col, values)
            ok = (values.notna() & (values % 1 == 0)).to_numpy() | (blank.to_numpy() & (c in OPT_INT_COLUMNS))
            out[c] = values.astype("int64") if c in INT_COLUMNS and ok.all() else values.astype("float64")
        elif c in FLOAT_COLUMNS:
            values = (col if parsed else pd.to_numeric(col, errors="coerce")).astype("float64")
            ok = values.notna() | (values.isna() if parsed else _blank(col, values, NAN_TEXT))
            out[c] = values
            if not parsed:
                nan_text[c] = (values.isna() & ~_blank(col, values)).to_numpy()
        elif c in BOOL_COLUMNS or c in OPT_BOOL_COLUMNS:
            low = col if col.isin(("true", "false")).all() else col.str.strip().str.lower()
            yes, no = low.isin(TRUE).to_numpy(), low.isin(FALSE).to_numpy()
            empty = (low == "").to_numpy()
            ok = yes | no | (empty & (c in OPT_BOOL_COLUMNS))
            out[c] = yes if c in BOOL_COLUMNS else pd.array(np.where(empty, None, yes), dtype="boolean")
        else:
            out[c] = col.astype(str)
            continue
        bad(~np.asarray(ok), lambda i, c=c: f"column {c!r}: cannot read {text_of(i, c)!r}")
    frame = pd.DataFrame(out, index=raw.index)
    _complete(frame)
    bad(~frame["direction"].isin(DIRECTIONS), lambda i: f"column 'direction': {frame['direction'].iat[i]!r} is "
                                                             f"not one of {', '.join(DIRECTIONS)}")
    bad(frame["bytes"].to_numpy() < 0, lambda i: "column 'bytes': negative")
    bad(~frame["kind"].isin(ROW_KINDS), lambda i: f"column 'kind': {frame['kind'].iat[i]!r} is not one of "
                                                   f"{', '.join(ROW_KINDS)}")
    return frame, problems, nan_text


def _blank(col, values, also: tuple[str, ...] = ()):
    """Where a column did not read as a number, whether it is empty (white space only) or one of `also`:
    the text is looked at only there."""
    out = values.notna() & False
    miss = values.isna()
    if miss.any():
        # pandas gives an empty field of a numeric column as NaN even where the column is text (it holds a "nan"
        # elsewhere): that is blank too, not a field that cannot be read (which once named the wrong line)
        text = col[miss]
        out[miss] = text.isna() | text.astype(str).str.strip().str.lower().isin(("",) + also)
    return out


def _complete(frame) -> None:
    """Add the columns appended after a run was written: empty, and `kind` derived where it is empty."""
    import numpy as np
    import pandas as pd

    for c in COLUMNS:
        if c not in frame.columns:
            frame[c] = (np.full(len(frame), np.nan) if c in FLOAT_COLUMNS or c in OPT_INT_COLUMNS else
                        pd.array([None] * len(frame), dtype="boolean") if c in OPT_BOOL_COLUMNS else "")
    empty = (frame["kind"] == "").to_numpy()
    if empty.any():
        derived = derive_kind(frame["suite"], frame["method"], frame["direction"], frame["bw_gbps_median"].notna())
        frame["kind"] = np.where(empty, derived, frame["kind"])
