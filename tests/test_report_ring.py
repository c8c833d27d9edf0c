"""A run whose serial steps measured a ring of pairs (--serial-pairs ring, the default on NVSwitch nodes of 4
or more GPUs): host-staged rows exist for i -> i+1 only, IPC rows for every pair. The speedup over the best
staged path must use the pair's own staged row where there is one and the best staged method's median over
the pairs that have one elsewhere (report/tables.speedup_rows), and the whole report must still work."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synth  # noqa: E402
from ipcbench.report import command as report  # noqa: E402
from ipcbench.report import tables as T  # noqa: E402
from ipcbench.record.run import load_runs  # noqa: E402

N = 4
RING = {(i, (i + 1) % N) for i in range(N)}
SERIAL = {"coverage": "ring", "requested": "auto",
          "reason": "every GPU pair is linked through NVSwitch: pairs are alike"}


@pytest.fixture
def ring_run(tmp_path):
    """A 4-GPU synthetic run, its staged rows cut down to the ring and meta.json saying so."""
    run = synth.make_run(tmp_path / "results", n_gpus=N, suites=["copy", "staged", "latency"], same_gpu=False)
    header, records = synth.read_csv(run)
    col = {c: i for i, c in enumerate(header)}
    keep = [r for r in records if r[col["suite"]] != "staged"
            or (int(r[col["src_gpu"]]), int(r[col["dst_gpu"]])) in RING]
    assert len(keep) < len(records)
    synth.write_csv(run, header, keep)
    meta = json.loads((run / "meta.json").read_text())
    meta["pair_mode"] = {"mode": "concurrent", "requested": "auto", "reason": "every GPU pair is linked through "
                         "NVSwitch", "serial_pairs": SERIAL}
    (run / "meta.json").write_text(json.dumps(meta))
    return run


def test_speedup_falls_back_to_the_ring_pairs_median(ring_run):
    (run,), warnings = load_runs([ring_run])
    df = T.add_scope(run.frame.assign(run=run.label))
    sp = T.speedup_rows(df)
    one = sp[sp["direction"] != "bidir"]
    big = one["bytes"].max()
    staged = df[df["method"].astype(str).str.endswith("_staged") & (df["direction"] != "bidir")
                & (df["bytes"] == big)]
    assert {(int(s), int(d)) for s, d in zip(staged["src_gpu"], staged["dst_gpu"])} == RING
    # elsewhere: the best staged method's median over the ring pairs, the same for every other pair
    fallback = staged.groupby("method", observed=True)["bw_gbps_median"].median().max()
    at_big = one[one["bytes"] == big]
    for (s, d), g in at_big.groupby(["src_gpu", "dst_gpu"]):
        if (s, d) in RING:
            own = staged[(staged["src_gpu"] == s) & (staged["dst_gpu"] == d)]["bw_gbps_median"].max()
            assert set(g["basis"]) == {"pair"} and g["baseline"].tolist() == pytest.approx([own] * len(g))
        else:
            assert set(g["basis"]) == {"all pairs"} and g["baseline"].tolist() == pytest.approx([fallback] * len(g))
    pairs = {(int(s), int(d)) for s, d in zip(at_big["src_gpu"], at_big["dst_gpu"])}
    assert len(pairs) == N * (N - 1) and not at_big["speedup"].isna().any()


def test_the_report_of_a_ring_run(ring_run, capsys):
    parser = argparse.ArgumentParser()
    report.add_arguments(parser)
    rc = report.run(parser.parse_args([str(ring_run.parent), "--no-figures"]))
    out, err = capsys.readouterr()
    assert rc == 0, err
    md = (ring_run.parent / "report" / "report.md").read_text()
    assert "What IPC buys" in out and "What IPC buys" in md
    assert "host-staged, handle, ping-pong and pipeline steps on a ring of pairs (--serial-pairs auto" in md
    lines = md.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.lstrip("#").strip() == "Speedup over the best host-staged path")
    assert any(ln.startswith("| copy | ce | push") for ln in lines[i:i + 20])
    assert "| nan" not in md.lower()
