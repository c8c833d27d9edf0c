"""The result schema: writer/reader round trip, and malformed or truncated files named by file:line by the one
reader (record/table.py: read_table, and read_rows, the same table as Rows)."""

from __future__ import annotations

import csv
import json
import math
import re

import pandas as pd
import pytest

from ipcbench.errors import ResultsError
from ipcbench.record.meta import read_meta
from ipcbench.record.run import find_runs
from ipcbench.record.table import read_rows, read_table
from ipcbench.results import BASE_COLUMNS, COLUMNS, ResultsWriter, Row, write_meta


def _row(i: int = 0, **kw) -> Row:
    base = dict(run_id="r1", host="hostA", suite="copy", method="ce", direction="push", src_rank=0, dst_rank=1,
                src_gpu=0, dst_gpu=1, same_gpu=False, bytes=4096 << i, iterations=100 + i, samples=5,
                time_us_median=2.5 + i, time_us_min=2.4 + i, time_us_max=2.7 + i, bw_gbps_median=1.6 * (i + 1),
                bw_gbps_max=1.7 * (i + 1), cv=0.01, verified=True, note="")
    base.update(kw)
    return Row(**base)


def _write(tmp_path, rows):
    with ResultsWriter(tmp_path) as w:
        w.write(rows)
    return tmp_path / "results.csv"


ROWS = [_row(0), _row(1, direction="bidir", note="ring=4 p99_us=3.1"),
        _row(2, suite="latency", direction="oneway", bw_gbps_median=None, bw_gbps_max=None),
        _row(3, suite="handles", method="ipc_open_first", direction="op", bw_gbps_median=None,
             bw_gbps_max=None, same_gpu=True, dst_gpu=0, time_us_median=180.0),
        _row(4, dst_rank=-1, verified=False, cv=None, note='has, a comma and "quotes"'),
        _row(5, bytes=1 << 30, time_us_median=123456.7, bw_gbps_median=8.7)]


def test_round_trip_read_rows(tmp_path):
    path = _write(tmp_path, ROWS)
    back = read_rows(path)
    assert len(back) == len(ROWS)
    for a, b in zip(ROWS, back):
        for c in COLUMNS:
            va, vb = getattr(a, c), getattr(b, c)
            if isinstance(va, float):
                assert math.isclose(va, vb, rel_tol=1e-5), c
            else:
                assert va == vb, c


def test_round_trip_read_table(tmp_path):
    path = _write(tmp_path, ROWS)
    df = read_table(path)
    assert list(df.columns) == list(COLUMNS)
    assert len(df) == len(ROWS)
    for c in ("src_rank", "dst_rank", "src_gpu", "dst_gpu", "bytes", "iterations", "samples"):
        assert df[c].dtype.kind == "i", c
    for c in ("time_us_median", "bw_gbps_median", "cv"):
        assert df[c].dtype.kind == "f", c
    assert df["same_gpu"].dtype == bool and df["verified"].dtype == bool
    for a, (_, r) in zip(ROWS, df.iterrows()):
        for c in COLUMNS:
            va, vb = getattr(a, c), r[c]
            if va is None:
                assert vb is pd.NA if c == "mps" else (isinstance(vb, float) and math.isnan(vb)), c
            elif isinstance(va, float):
                assert math.isclose(va, vb, rel_tol=1e-5), c
            else:
                assert va == vb, c


def test_read_table_keeps_extra_columns(tmp_path):
    path = _write(tmp_path, ROWS[:2])
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0] + ",extra"] + [ln + ",x" for ln in lines[1:]]) + "\n")
    df = read_table(path)
    assert list(df.columns)[: len(COLUMNS)] == list(COLUMNS) and list(df["extra"]) == ["x", "x"]
    assert len(read_rows(path)) == 2


def test_header_only_is_empty(tmp_path):
    with ResultsWriter(tmp_path):
        pass
    assert read_rows(tmp_path / "results.csv") == []
    assert len(read_table(tmp_path / "results.csv")) == 0


def _both_fail(path, line: int, words: str = ""):
    """The reader (as a table and as rows) raises ResultsError naming path:line (the same text)."""
    msgs = []
    for loader in (read_rows, read_table):
        with pytest.raises(ResultsError) as e:
            loader(path)
        msg = str(e.value)
        assert msg.startswith(f"{path}:{line}:"), (loader.__name__, msg)
        assert "\n" not in msg and "Traceback" not in msg
        if words:
            assert words in msg, (loader.__name__, msg)
        msgs.append(msg)
    assert msgs[0] == msgs[1]


def _both_drop_cut_tail(path, line: int, kept: int):
    """The reader drops a last line cut short, keeps every row before it and says which line it dropped."""
    for loader in (read_rows, read_table):
        warnings: list[str] = []
        got = loader(path, warnings)
        assert len(got) == kept, loader.__name__
        assert len(warnings) == 1 and warnings[0].startswith(f"{path}:{line}: last line cut short"), warnings


def test_truncated_last_line_is_dropped_and_the_rest_kept(tmp_path):
    path = _write(tmp_path, ROWS)
    text = path.read_text()
    path.write_text(text[: len(text) - 40])  # a crash in the middle of the last row
    _both_drop_cut_tail(path, len(ROWS) + 1, len(ROWS) - 1)
    assert [r.bytes for r in read_rows(path)] == [r.bytes for r in ROWS[:-1]]


def test_truncated_after_blank_lines_and_quoted_note(tmp_path):
    path = _write(tmp_path, ROWS)
    lines = path.read_text().splitlines()
    # a blank line after row 2, and the last row cut short: line numbers count physical lines
    text = "\n".join(lines[:3] + [""] + lines[3:]) + "\n"
    path.write_text(text[:-30])
    _both_drop_cut_tail(path, len(ROWS) + 2, len(ROWS) - 1)


def test_a_last_row_that_only_lacks_its_newline_was_cut(tmp_path):
    """The writer ends every row with a newline: a last line without one was cut, even where it parses (a cut at
    a field boundary leaves an empty last column; a number cut short is still a number): dropped, said."""
    path = _write(tmp_path, ROWS)
    path.write_text(path.read_text().rstrip("\r\n"))
    _both_drop_cut_tail(path, len(ROWS) + 1, len(ROWS) - 1)


@pytest.mark.parametrize("cut_at", ["field boundary", "inside the last field"])
def test_a_last_row_cut_where_it_still_parses_is_dropped(tmp_path, cut_at):
    path = _write(tmp_path, ROWS)
    text = path.read_text()
    head, last = text[:-1].rsplit("\n", 1)
    last = last[: last.rindex(",") + 1] if cut_at == "field boundary" else last[:-1]
    path.write_text(head + "\n" + last)
    _both_drop_cut_tail(path, len(ROWS) + 1, len(ROWS) - 1)


def test_a_last_row_whose_note_spans_lines_is_dropped_from_where_it_starts(tmp_path):
    rows = ROWS[:-1] + [_row(9, note="two\nlines")]
    path = _write(tmp_path, rows)
    path.write_text(path.read_text()[:-1])
    _both_drop_cut_tail(path, len(rows) + 1, len(rows) - 1)


def test_a_bad_line_in_the_middle_still_fails(tmp_path):
    path = _write(tmp_path, ROWS)
    lines = path.read_text().splitlines()
    lines[2] = lines[2][:-40]  # cut, but not the last line: not what a killed writer leaves
    path.write_text("\n".join(lines) + "\n")
    _both_fail(path, 3, "truncated")


def test_line_numbers_with_multiline_note(tmp_path):
    rows = [_row(0, note="two\nlines"), _row(1), _row(2)]
    path = _write(tmp_path, rows)
    lines = path.read_text().split("\n")
    # the record of rows[2] starts on physical line 5 (header, 2 lines of row 0, row 1)
    lines[4] = lines[4].replace(",push,", ",sideways,")
    path.write_text("\n".join(lines))
    _both_fail(path, 5, "direction")


@pytest.mark.parametrize("column,value,words", [
    ("bytes", "4K", "'bytes'"),
    ("bytes", "-1", "negative"),
    ("src_gpu", "", "'src_gpu'"),
    ("time_us_median", "fast", "'time_us_median'"),
    ("verified", "maybe", "'verified'"),
    ("same_gpu", "", "'same_gpu'"),
    ("direction", "sideways", "direction"),
])
def test_bad_value_names_line_and_column(tmp_path, column, value, words):
    path = _write(tmp_path, ROWS)
    lines = path.read_text().splitlines()
    fields = lines[3].split(",")
    fields[COLUMNS.index(column)] = value
    lines[3] = ",".join(fields)
    path.write_text("\n".join(lines) + "\n")
    _both_fail(path, 4, words)


def test_extra_field(tmp_path):
    path = _write(tmp_path, ROWS)
    lines = path.read_text().splitlines()
    lines[2] += ",surplus"
    path.write_text("\n".join(lines) + "\n")
    _both_fail(path, 3, f"{len(COLUMNS) + 1} fields")


def test_crlf_line_endings(tmp_path):
    path = _write(tmp_path, ROWS)
    path.write_bytes(path.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
    assert len(read_table(path)) == len(ROWS) == len(read_rows(path))


def test_header_missing_column(tmp_path):
    path = _write(tmp_path, ROWS)
    text = path.read_text().replace("bw_gbps_median", "bandwidth", 1)
    path.write_text(text)
    _both_fail(path, 1, "bw_gbps_median")


def test_empty_and_missing_files(tmp_path):
    empty = tmp_path / "results.csv"
    empty.write_text("")
    for loader in (read_rows, read_table):
        with pytest.raises(ResultsError, match=re.escape(str(empty)) + ".*empty"):
            loader(empty)
        with pytest.raises(ResultsError, match="cannot open"):
            loader(tmp_path / "nope.csv")


def test_meta_round_trip_and_errors(tmp_path):
    meta = {"run_id": "r1", "hosts": ["hostA"], "gpus": {"hostA": [{"index": 0, "uuid": "GPU-1"}]}}
    write_meta(tmp_path, meta)
    m = read_meta(tmp_path)
    assert m.found and m.raw == meta and m.run_id == "r1" and m.hosts == ["hostA"]
    assert m.uuids() == {("hostA", 0): "GPU-1"} and m.schema_version == 1  # written before schema_version
    assert not read_meta(tmp_path / "sub").found
    (tmp_path / "meta.json").write_text('{\n  "run_id": "r1",\n  oops\n}\n')
    with pytest.raises(ResultsError, match=re.escape(str(tmp_path / "meta.json")) + r":3: invalid JSON"):
        read_meta(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps([1, 2]))
    with pytest.raises(ResultsError, match="not a JSON object"):
        read_meta(tmp_path)


def test_find_runs(tmp_path):
    for name in ("a", "b/c"):
        _write(tmp_path / name, ROWS[:1])
    runs = find_runs([tmp_path, tmp_path / "a", tmp_path / "a" / "results.csv"])
    assert runs == sorted({(tmp_path / "a").resolve(), (tmp_path / "b" / "c").resolve()})


def test_writer_never_appends_to_an_existing_file(tmp_path):
    with ResultsWriter(tmp_path) as w:
        w.write(ROWS[:1])
    before = (tmp_path / "results.csv").read_bytes()
    with pytest.raises(FileExistsError):
        ResultsWriter(tmp_path)
    assert (tmp_path / "results.csv").read_bytes() == before


def test_the_kind_of_rows_that_do_not_say(tmp_path):
    """Runs written before the `kind` column (and rows made without one) get it derived by one rule: an error
    probe's method is err_*, a row of the latency suite or of direction oneway is latency (the nccl suite's
    one-way rows, the pipeline's ring latency), a row with GB/s is bandwidth, else op."""
    rows = [_row(0), _row(1, suite="nccl", method="nccl", direction="oneway", bw_gbps_median=None, bw_gbps_max=None),
            _row(2, suite="pipeline", method="ring_d4_latency", direction="oneway", bw_gbps_median=None,
                 bw_gbps_max=None),
            _row(3, suite="latency", method="ce", direction="oneway", bw_gbps_median=1.0),
            _row(4, suite="handles", method="ipc_get_mem_handle", direction="op", bw_gbps_median=None,
                 bw_gbps_max=None),
            _row(5, suite="handles", method="err_open_own_handle", direction="op", bw_gbps_median=None,
                 bw_gbps_max=None)]
    want = ["bandwidth", "latency", "latency", "latency", "op", "error"]
    assert [r.kind for r in rows] == want  # made without a kind
    path = _write(tmp_path, rows)
    lines = path.read_text().splitlines()
    n = len(BASE_COLUMNS)  # the first version's columns only, as a run of then wrote them
    path.write_text("\n".join(",".join(next(csv.reader([ln]))[:n]) for ln in lines) + "\n")
    assert list(read_table(path)["kind"]) == want


def test_rows_are_flushed_at_every_write_and_synced_at_most_every_two_seconds(tmp_path, monkeypatch):
    """A crash of the run loses no row (flushed at each write); the disk sync, ~1 s of a run when done at every
    step, runs at a write FSYNC_EVERY_S after the last one, and at close."""
    import os

    from ipcbench import results

    syncs = []
    clock = [100.0]
    monkeypatch.setattr(results.os, "fsync", lambda fd: syncs.append(fd))
    monkeypatch.setattr(results.time, "monotonic", lambda: clock[0])
    w = results.ResultsWriter(tmp_path)
    row = _row()
    w.write([row])
    assert syncs == [] and len((tmp_path / results.CSV_NAME).read_text().splitlines()) == 2  # flushed, not synced
    clock[0] += results.FSYNC_EVERY_S
    w.write([row])
    assert len(syncs) == 1
    w.write([row])
    assert len(syncs) == 1
    w.close()
    assert len(syncs) == 2 and os.path.getsize(tmp_path / results.CSV_NAME) > 0
