"""core/rows.py: the one row builder, and core/stats.py's numbers (pure logic, no GPU, no MPI)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from ipcbench.core.context import Ctx
from ipcbench.core.rows import failed, join_note, make_row
from ipcbench.core.sampler import SamplingRule
from ipcbench.core.stats import percentile, poison_seed, seed_for, summarize


def ctx(verify: bool = True) -> Ctx:
    return Ctx(world=SimpleNamespace(host="nodeA"), gpu=None, buffers={}, rule=SamplingRule(), verify=verify,
               run_id="run-1", gpu_of=[0, 1, 1], node_ranks=[8, 9, 10])


def row(c=None, per_us=(2.0, 2.0, 4.0), checks=3, mismatches=0, **kw):
    args = dict(moved=4000, note="", kind="", required=None)
    args.update(kw)
    return make_row(c or ctx(), suite="copy", method="ce", direction="push", src=1, dst=2, nbytes=4000,
                    per_us=list(per_us), iterations=50, moved=args.pop("moved"), checks=checks, mismatches=mismatches,
                    **args)


def test_a_checked_clean_row_is_verified_with_its_numbers():
    r = row()
    assert r.verified and r.note == "" and r.checks == 3
    assert (r.run_id, r.host, r.src_rank, r.dst_rank, r.src_gpu, r.dst_gpu) == ("run-1", "nodeA", 9, 10, 1, 1)
    assert r.same_gpu and r.bytes == 4000 and r.iterations == 50 and r.samples == 3
    assert (r.time_us_median, r.time_us_min, r.time_us_max) == (2.0, 2.0, 4.0)
    assert r.bw_gbps_median == pytest.approx(2.0) and r.bw_gbps_max == pytest.approx(2.0)  # 4000 B / 2 us
    assert r.samples_us == "2 2 4" and r.kind == "bandwidth" and r.noise > 0
    assert not failed(r, True)


def test_mismatches_fail_the_row_and_are_counted_in_the_note():
    r = row(mismatches=12, note="first")
    assert not r.verified and r.note == "first; 12 mismatched words" and failed(r, True)


def test_missing_checks_fail_the_row():
    r = row(checks=2)
    assert not r.verified and r.note == "destination checked in 2 of 3 samples" and failed(r, True)
    # a bidirectional row needs two checks per sample
    r = row(checks=3, required=6)
    assert not r.verified and "checked in 3 of 6 samples" in r.note
    assert row(checks=6, required=6).verified


def test_zero_required_checks_is_never_verified():
    assert not row(checks=0, required=0).verified


def test_no_verify_and_error_rows():
    r = row(ctx(verify=False), checks=3)
    assert not r.verified and r.checks == 0 and r.note == "not verified (--no-verify)"
    assert not failed(r, False)
    e = row(checks=3, kind="error", note="clear error: x", moved=None)
    assert not e.verified and e.checks == 0 and e.kind == "error" and e.note == "clear error: x"
    assert not failed(e, True)  # an error probe never fails the run


def test_latency_rows_have_no_bandwidth_and_one_sample_has_no_noise():
    r = row(per_us=(7.5,), checks=1, moved=None, kind="latency")
    assert r.bw_gbps_median is None and r.bw_gbps_max is None and r.noise is None and r.cv == 0.0


def test_rows_without_a_pair():
    r = make_row(ctx(), suite="handles", method="op", direction="op", src=-1, dst=-1, nbytes=0, per_us=[1.0, 1.0],
                 iterations=1, moved=None, checks=2, mismatches=0)
    assert (r.src_rank, r.dst_rank, r.src_gpu, r.dst_gpu, r.same_gpu) == (-1, -1, -1, -1, False)


def test_samples_us_override():
    r = row(samples_us=[9.0, 8.0])
    assert r.samples_us == "9 8" and r.samples == 3


def test_join_note_skips_empty_parts():
    assert join_note("a", "", "b") == "a; b" and join_note("", "") == ""


def test_summarize():
    s = summarize([1.0, 2.0, 3.0, 10.0], 1000)
    assert (s.median_us, s.min_us, s.max_us) == (2.5, 1.0, 10.0)
    assert s.bw_median == pytest.approx(1000 / 2.5e-6 / 1e9) and s.bw_max == pytest.approx(1.0)
    assert s.cv == pytest.approx(math.sqrt(((1 - 4) ** 2 + (2 - 4) ** 2 + 1 + 36) / 4) / 4)
    z = summarize([0.0], 1000)
    assert z.bw_median is None and z.bw_max is None and math.isnan(z.cv)
    with pytest.raises(ValueError):
        summarize([], None)


def test_percentile_nearest_rank():
    v = [float(i) for i in range(10, 0, -1)]
    assert percentile(v, 0) == 1.0 and percentile(v, 50) == 5.0 and percentile(v, 90) == 9.0
    assert percentile(v, 100) == 10.0


def test_seeds_differ_by_every_input_and_poison_differs():
    seeds = {seed_for(r, n, s, m) for r in (0, 1) for n in (4, 8) for s in (0, 1) for m in ("a", "b")}
    assert len(seeds) == 16 and all(0 <= x < 2**32 for x in seeds)
    s = seed_for(0, 4, 0, "a")
    assert poison_seed(s) != s and poison_seed(poison_seed(s)) == s
