"""compare judges runs older than the between-runs noise with the catalogue's floors (catalogue/noise.py, the same
numbers a run of the current code states in its `noise`): per row, noise.floor_for of the runs' GPU model, the
row's engine, timing and size, the time-sliced level for a same-GPU hand-off without MPS. And those floors are
enough for the runs they were measured on: every ordered pair of the three back-to-back H100 runs of unchanged
code (tests/data/h100x2/all-1..3) passes at --threshold 0. (tests/test_placement_noise.py checks how many rows of
the placement experiment they cover.)"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ipcbench.catalogue import noise
from ipcbench.judging import compare
from ipcbench.judging.bounds import gpu_model

DATA = Path(__file__).resolve().parent / "data"
H100 = DATA / "h100x2"


def copies(src: Path, dst: Path, n: int, meta_from: Path | None = None, gpu_name: str | None = None) -> list[Path]:
    """n runs with src's rows, each under a run id of its own (meta.json from `meta_from` when src has none), their
    GPUs renamed to `gpu_name` where given."""
    out = []
    for i in range(n):
        d = dst / f"{src.name}-{i}"
        shutil.copytree(src, d)
        meta = json.loads(((meta_from or src) / "meta.json").read_text())
        for gs in meta["gpus"].values():
            for g in gs:
                g["name"] = gpu_name or g["name"]
        (d / "meta.json").write_text(json.dumps({**meta, "run_id": d.name, "start": d.name}))
        out.append(d)
    return out


def without_noise(paths: list[Path]):
    """The runs loaded with every `noise` missing: each side's honest noise is its floor alone."""
    runs = [compare.load(p) for p in paths]
    for r in runs:
        r.frame["noise"] = np.nan
    return runs


def floors_of(table, gpu_model: str):
    return np.array([noise.floor_for(gpu_model, e, t, int(b), bool(s)).fraction
                     for e, t, b, s in zip(table["engine"], table["timing"], table["bytes"], table["sliced"])])


@pytest.mark.parametrize("gpu_name, family", [(None, "H100"), ("NVIDIA H200", "H200"), ("NVIDIA B200", None)])
def test_each_rows_bound_is_the_catalogues_floor_of_its_gpu_engine_timing_and_size(tmp_path, gpu_name, family):
    """Two BASE runs and NEW, identical, no noise stated: every judged row's bound is twice (BASE's and NEW's) the
    catalogue's floor of the run's GPU model (H100 as recorded, the same rows renamed H200, a GPU never measured:
    the largest known floor), by the row's engine, timing and size band: hand-off rows too, and host-timed rows
    where that is above their tail."""
    runs = without_noise(copies(H100 / "all-1", tmp_path, 3, gpu_name=gpu_name))
    assert noise.family(runs[0].meta.gpus["vm"][0].name) == family
    c = compare.compare(runs[:2], runs[2], threshold=0.0)
    t = c.table[c.table["rule"] != ""]
    key = ["suite", "method", "direction", "src_gpu", "dst_gpu", "bytes"]
    f = runs[2].frame.drop_duplicates(key)
    engine = dict(zip(f[key].itertuples(index=False, name=None), f["engine"]))
    t = t.assign(engine=[engine[k] for k in t[key].itertuples(index=False, name=None)])
    assert len(t) > 800 and {"gated", "handoff", "host"} <= set(t["timing"])
    model = runs[0].meta.gpus["vm"][0].name
    want = 2 * floors_of(t, model)
    host = (t["timing"] == "host").to_numpy()  # host-timed rows: never below their tail (catalogue/noise.HOST_TAIL)
    want[host] = np.fmax(want[host], [noise.host_tail(e, int(b)).fraction
                                      for e, b in zip(t["engine"][host], t["bytes"][host])])
    assert (want[host] > 2 * floors_of(t, model)[host]).any()
    assert t["bound"].to_numpy() == pytest.approx(want, rel=1e-12)
    assert set(t["verdict"]) == {"unchanged"}
    # the GPU model matters: the H200's pair floors (four H200s, 2026-11-28) are never under the H100's and above
    # them where that set moved more (the copy engine from 256 KiB, an SM copy from 64 MiB), its event ping-pong
    # the largest known; a GPU never measured takes the largest known floor of each kind
    h100, h200 = floors_of(t, "NVIDIA H100 80GB HBM3"), floors_of(t, "NVIDIA H200")
    event = (t["engine"] == "event").to_numpy()
    assert event.any() and (h100[event] == 0.06).all() and (h200[event] == 0.40).all()
    assert (h200 >= h100).all()
    ce_mid = ((t["engine"] == "ce") & (t["bytes"] > 256 << 10) & (t["bytes"] < 64 << 20)).to_numpy()
    assert ce_mid.any() and (h200[ce_mid] == 0.035).all() and (h100[ce_mid] == 0.02).all()
    assert (floors_of(t, "") == np.fmax(h100, h200)).all()
    assert (floors_of(t, model) == floors_of(t, "NVIDIA H200" if family != "H100" else "NVIDIA H100")).all()


def test_a_same_gpu_hand_off_without_mps_takes_the_time_sliced_level(tmp_path):
    """tests/data/mps: the same node without MPS (same-GPU hand-offs time-sliced) and under MPS. Without MPS those
    rows' floor is noise.TIME_SLICED whatever their engine; under MPS the same rows take their engine's floor."""
    (nomps, mps) = (without_noise(copies(DATA / "mps" / n, tmp_path / n, 3)) for n in ("h100-nomps", "h100-mps"))
    handoff = {"shm_staged", "sm_pingpong", "event_pingpong", "ring_d8"}
    for runs, sliced in ((nomps, True), (mps, False)):
        t = compare.compare(runs[:2], runs[2], threshold=0.0).table
        rows = t[t["method"].isin(handoff) & t["same_gpu"] & (t["rule"] != "")]
        assert len(rows) >= 20 and set(rows["sliced"]) == {sliced}
        if sliced:
            assert rows["bound"].to_numpy() == pytest.approx(2 * noise.TIME_SLICED)
        else:
            assert (rows["bound"] < 2 * noise.TIME_SLICED).all()


@pytest.mark.parametrize("base, new", list(itertools.permutations(["all-1", "all-2", "all-3"], 2)))
def test_the_h100_floors_cover_the_recorded_h100_runs(tmp_path, base, new):
    """Unchanged code, three back-to-back runs on 2 x H100, each with all-1's meta.json (all-2 and all-3 kept none,
    and without a GPU model compare would take the largest known floors): at --threshold 0 no row moves
    beyond its within-run noise and the catalogue's H100 floor combined."""
    b, n = (copies(H100 / r, tmp_path / r, 1, meta_from=H100 / "all-1")[0] for r in (base, new))
    c = compare.compare([compare.load(b)], compare.load(n), threshold=0.0)
    assert gpu_model(compare.load(n)) == "NVIDIA H100 80GB HBM3"
    t = c.table[c.table["rule"] != ""]
    worst = t.assign(over=np.abs(t["gain"]) / np.log1p(t["bound"])).sort_values("over").tail(3)
    assert c.exit_code == 0, worst[["method", "direction", "bytes", "change", "bound", "verdict"]].to_string()
    assert len(t) > 700 and (t["rule"] == "noise+floor").all()
