"""The between-runs floors (report/significance.FLOORS) are what the recorded runs of unchanged code say, by the
rule written beside them: per engine and size band, the largest move of a run's median from the runs' common
median, times 1.25, rounded up (0.5% steps below 20%, 5% above), never below 0.5%. Rederived here from the
files, so a floor that drifts from its source, or a new recorded run that moves further, fails this test."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ipcbench.record.run import load_run
from ipcbench.report.significance import BANDS, FLOORS, between_runs_floor, row_kinds, size_band, time_sliced

DATA = Path(__file__).resolve().parent / "data"
SETS = [[DATA / "h100x2" / f"all-{i}" for i in (1, 2, 3)], [DATA / "compare" / f"quiet{i}" for i in (1, 2, 3)]]
FIVE = DATA / "h100x2" / "five-fresh-runs-spread.txt"
ENGINE_OF = {"ce": "ce", "sm_read": "sm", "sm_write": "sm", "sm_bulk_read": "sm_bulk", "sm_bulk_write": "sm_bulk"}


def moves_of_runs(dirs: list[Path]) -> pd.DataFrame:
    """(engine, bytes, move) of every row of every run: |median / common median - 1| in log terms, expm1'd."""
    frames = []
    for d in dirs:
        f = load_run(d / "results.csv").frame
        f = f[~time_sliced(f) & (f["kind"] != "error")].copy()
        f["value"] = np.where(f["kind"] == "bandwidth", f["bw_gbps_median"], f["time_us_median"])
        f["seq"] = f.groupby(["suite", "method", "direction", "src_gpu", "dst_gpu", "bytes"]).cumcount()
        frames.append(f)
    f = pd.concat(frames)
    lv = np.log(f["value"])
    common = lv.groupby([f[c] for c in ("suite", "method", "direction", "src_gpu", "dst_gpu", "bytes", "seq")]) \
        .transform("median")
    return pd.DataFrame({"engine": f["engine"], "bytes": f["bytes"], "move": np.expm1((lv - common).abs())})


def moves_of_five() -> pd.DataFrame:
    """The same from the five fresh runs' medians (one line per row: `method dir src dst bytes | medians | ...`)."""
    rows = []
    for line in FIVE.read_text().splitlines():
        parts = line.split("|")
        if len(parts) != 4 or parts[0].startswith("method"):
            continue
        method, _, _, _, size = parts[0].split()
        lv = np.log(np.array(parts[1].split(), dtype=float))
        move = math.expm1(np.abs(lv - np.median(lv)).max())
        rows.append({"engine": ENGINE_OF[method], "bytes": int(size), "move": move})
    return pd.DataFrame(rows)


def rule(move: float) -> float:
    y = 1.25 * move
    step = 0.005 if y < 0.2 else 0.05
    return max(0.005, math.ceil(y / step - 1e-9) * step)


def test_every_floor_is_its_rule_applied_to_the_recorded_runs():
    moves = pd.concat([moves_of_runs(d) for d in SETS] + [moves_of_five()], ignore_index=True)
    moves["band"] = size_band(moves["bytes"])
    worst = moves.groupby(["engine", "band"])["move"].max()
    assert len(worst) >= 20
    for (engine, band), move in worst.items():
        assert FLOORS[engine][band] == pytest.approx(rule(move)), (engine, BANDS[band][1], move)
    # bands without a recorded row take the engine's measured band (event: latency rows, <= 256K only)
    seen = set(worst.index)
    for engine, floors in FLOORS.items():
        if engine == "time-sliced":
            continue
        measured = [floors[b] for b in range(3) if (engine, b) in seen]
        assert measured, engine
        for b in range(3):
            if (engine, b) not in seen:
                assert floors[b] == max(measured), (engine, b)


def test_the_time_sliced_floor():
    """Two H100 runs of the same shm_staged code put same-GPU hand-off rows up to 2.3x apart (docs/report.md):
    sqrt(2.3) from their middle."""
    assert FLOORS["time-sliced"] == (rule(math.sqrt(2.3) - 1),) * 3


def test_floor_lookup_and_kinds():
    nbytes = [4096, 256 << 10, (256 << 10) + 1, 32 << 20, (64 << 20) - 1, 64 << 20, 1 << 30]
    assert list(size_band(nbytes)) == [0, 0, 1, 1, 1, 2, 2]
    assert list(between_runs_floor(["sm"] * 7, nbytes)) == [0.135, 0.135, 0.055, 0.055, 0.055, 0.005, 0.005]
    assert row_kinds(["ce", "", "time-sliced"], [4096, 1 << 20, 1 << 30]) == [
        "ce <= 256K", "other 256K-64M", "time-sliced >= 64M"]
    assert list(between_runs_floor(["", "cuda_graph"], [4096, 4096])) == [FLOORS["sm"][0]] * 2  # unknown: sm's
