"""Values validated once, when a run is read (record/validate.py, through record/run.load_run): every value that is
impossible (above a physical ceiling), negative, NaN or infinite is named once with its file:line, and kept out of
every number (the frame's `invalid` column, the values NaN, Run.invalid the list). On copies of a committed
2 x H200 run edited as a newcomer would (issue 27)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ipcbench.record.run import load_run
from ipcbench.judging import ceilings

DATA = Path(__file__).resolve().parent / "data"
H200 = DATA / "h200x2" / "20261123-090753-vm"
ROOT = Path(__file__).resolve().parents[1]


def edited(tmp_path: Path, edit) -> Path:
    """A copy of the H200 run whose records `edit(header, records)` changed; returns its results.csv."""
    run = tmp_path / "run"
    shutil.copytree(H200, run)
    with open(run / "results.csv", newline="") as fh:
        header, *records = list(csv.reader(fh))
    edit(header, records)
    with open(run / "results.csv", "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows([header, *records])
    return run / "results.csv"


def at(header, records, **want) -> int:
    """The index of the one record with these values."""
    ix = {c: i for i, c in enumerate(header)}
    hits = [i for i, r in enumerate(records) if all(r[ix[k]] == str(v) for k, v in want.items())]
    assert len(hits) == 1, (want, hits)
    return hits[0]


CE_PUSH_256M = dict(suite="copy", method="ce", direction="push", src_gpu=0, dst_gpu=1, bytes=256 << 20)


def set_value(column, value, **where):
    def edit(header, records):
        records[at(header, records, **where)][header.index(column)] = value
    return edit


def test_a_nan_is_named_at_its_own_line(tmp_path):
    """A NaN written as text made the reader refuse the file, naming the first empty (and valid) field of the
    column, hundreds of lines later; a note over two lines moves every later row's line."""
    def edit(header, records):
        records[1][header.index("note")] = "a note\\nover two lines".replace("\\n", "\n")
        records[at(header, records, **CE_PUSH_256M)][header.index("bw_gbps_median")] = "nan"

    path = edited(tmp_path, edit)
    text = path.read_text().splitlines()
    line = next(i + 1 for i, t in enumerate(text) if ",nan," in t)
    run = load_run(path)
    assert run.invalid == [f"results.csv:{line}: bw_gbps_median is NaN"]
    bad = run.frame[run.frame["invalid"] != ""]
    assert len(bad) == 1 and bad["bytes"].tolist() == [256 << 20] and bad["bw_gbps_median"].isna().all()


@pytest.mark.parametrize("value, said", [("-480", "bw_gbps_median -480 GB/s is negative"),
                                         ("0", "bw_gbps_median 0 GB/s is zero"),
                                         ("inf", "bw_gbps_median is infinite (inf)")])
def test_negative_and_infinite_values_are_named_and_blanked(tmp_path, value, said):
    path = edited(tmp_path, set_value("bw_gbps_median", value, **CE_PUSH_256M))
    run = load_run(path)
    assert len(run.invalid) == 1 and run.invalid[0].endswith(said) and run.invalid[0].startswith("results.csv:")
    row = run.frame[run.frame["invalid"] != ""]
    assert row["bw_gbps_median"].isna().all() and row["time_us_median"].notna().all()  # only the bad value
    bw = run.frame["bw_gbps_median"].dropna()
    assert np.isfinite(bw).all() and (bw >= 0).all()


def test_a_negative_time_is_named(tmp_path):
    run = load_run(edited(tmp_path, set_value("time_us_min", "-1", **CE_PUSH_256M)))
    assert len(run.invalid) == 1 and run.invalid[0].endswith("time_us_min -1 µs is negative")


def test_a_rate_above_the_links_ceiling_is_named_and_kept_out_of_every_number(tmp_path):
    """ce push 0→1 256M at 600 GB/s on an H200 pair (18 NVLink 4 links: ceiling 478 GB/s)."""
    path = edited(tmp_path, set_value("bw_gbps_median", "600", **CE_PUSH_256M))
    run = load_run(path)
    assert len(run.invalid) == 1
    assert "bw_gbps_median 600 GB/s on GPU 0→1 is above the link's ceiling 478 GB/s" in run.invalid[0]
    row = run.frame[run.frame["invalid"] != ""].iloc[0]
    assert all(np.isnan(row[c]) for c in ("bw_gbps_median", "bw_gbps_max", "time_us_median", "time_us_min"))
    # judging/ceilings.py, as report, compare and check call it, still gives the row, as recorded
    imp = ceilings.impossible_rows(run.frame, run.meta)
    assert len(imp) == 1 and imp["bw_gbps_median"].tolist() == [600.0] and imp["check"].tolist() == ["link"]
    assert imp["ceiling_gbps"].tolist() == [pytest.approx(478.125)]


@pytest.mark.parametrize("path", sorted(p for d in ("results", "tests/data/h200x2", "tests/data/h100x2",
                                                    "tests/data/mps") for p in (ROOT / d).rglob("results.csv")),
                         ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_the_committed_runs_have_no_invalid_value(path):
    run = load_run(path)
    assert run.invalid == [] and (run.frame["invalid"] == "").all()


def test_a_fleet_nodes_part_file_is_validated_with_its_own_name(tmp_path):
    """Rows recovered from nodes/<host>.csv are named by that file and its lines."""
    run_dir = edited(tmp_path, lambda h, r: None).parent
    (run_dir / "nodes").mkdir()
    with open(run_dir / "results.csv", newline="") as fh:
        header, *records = list(csv.reader(fh))
    ix = {c: i for i, c in enumerate(header)}
    part = [r[:] for r in records[:3]]
    for r in part:  # the other node's ranks, as meta.json lists them (the run's rows are held to its ranks)
        r[ix["host"]] = "other"
        r[ix["src_rank"]], r[ix["dst_rank"]] = str(int(r[ix["src_rank"]]) + 2), str(int(r[ix["dst_rank"]]) + 2)
    part[2][ix["bw_gbps_median"]] = "-1"
    meta = json.loads((run_dir / "meta.json").read_text())
    meta["hosts"].append("other")
    meta["gpus"]["other"] = meta["gpus"][meta["hosts"][0]]
    meta["ranks"] += [{**r, "rank": r["rank"] + 2, "host": "other"} for r in meta["ranks"]]
    (run_dir / "meta.json").write_text(json.dumps(meta))
    with open(run_dir / "nodes" / "other.csv", "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows([header, *part])
    run = load_run(run_dir / "results.csv")
    assert run.invalid == ["nodes/other.csv:4: bw_gbps_median -1 GB/s is negative"]
