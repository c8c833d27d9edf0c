"""The numbers docs/measurement.md states of sampling over CUDA contexts ("The level is the CUDA context's"), recomputed
from the recorded output of tests/bench_contexts.py on one H200 (tests/data/contexts-h200x1-1129: two ranks, 8 new
contexts each, and 16 in a run stopped part way)."""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data" / "contexts-h200x1-1129"
KINDS = ("legacy", "pool", "vmm", "core")


def _bench():
    spec = importlib.util.spec_from_file_location("bench_contexts", Path(__file__).parent / "bench_contexts.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def recs():
    return {p.name: json.loads(p.read_text().splitlines()[0]) for p in sorted(DATA.glob("k*.rank*"))}


def test_every_buffer_kind_is_reached_from_a_new_context_by_both_engines(recs):
    for name, rec in recs.items():
        for kind in KINDS:
            for engine in ("ce", "sm"):
                for direction in ("push", "pull"):
                    assert rec["access"][f"{kind}/{engine}/{direction}"] == "ok", (name, kind, engine, direction)
        cupy_module = rec["access"].get("legacy/sm-cupy-module/push")  # its progress log kept no failed access
        assert cupy_module is None or cupy_module.startswith("ERROR CUDA_ERROR_INVALID_HANDLE"), name
    assert sum("legacy/sm-cupy-module/push" in r["access"] for r in recs.values()) == 2  # both ranks of the 8


def test_a_context_costs_a_quarter_second_and_a_gib(recs):
    for name, rec in recs.items():
        per = rec["cost"]["contexts_s"] / rec["contexts"]
        assert 0.25 <= per <= 0.34, (name, per)
        assert 0.95 <= rec["cost"]["mib_per_context"] / 1024 <= 1.03, name


def test_a_copy_engine_copy_from_primary_memory_is_slow_from_a_new_context(recs):
    values = _bench().context_values
    for name, rec in recs.items():
        rows = values(rec)
        for (engine, kind, nbytes, count), v in rows.items():
            ratio = statistics.mean(v[1:]) / v[0]
            if (engine, kind) == ("ce", "legacy"):
                assert 4.5 <= ratio <= 8.5, (name, nbytes, count, ratio)  # 9-13 us against 1.5-2.1
            else:
                assert 0.9 <= ratio <= 1.1, (name, engine, kind, nbytes, count, ratio)  # VMM, and SM kernels


def _sd(rec, engine, kind, nbytes):
    v = _bench().context_values(rec)[(engine, kind, nbytes, 256)][1:]
    return statistics.stdev(v) / statistics.mean(v)


@pytest.mark.parametrize("engine, kind, nbytes, lo, hi", [
    ("ce", "vmm", 4096, 0.046, 0.054), ("ce", "vmm", 65536, 0.027, 0.032), ("ce", "vmm", 1 << 20, 0.034, 0.039),
    ("sm", "legacy", 4096, 0.030, 0.039), ("sm", "legacy", 65536, 0.020, 0.026),
    ("sm", "legacy", 1 << 20, 0.020, 0.026)])
def test_how_far_contexts_spread(recs, engine, kind, nbytes, lo, hi):
    got = [_sd(rec, engine, kind, nbytes) for rec in recs.values() if (engine, kind, nbytes, 256) in
           _bench().context_values(rec)]
    assert got and all(lo - 0.0005 <= g <= hi + 0.0005 for g in got), got


def test_contexts_a_five_percent_gate_would_need(recs):
    """K = 2 (4.5 sd / 5%)^2: the contexts whose mean catches a 5% change under a family-wise rule of ~4.5 standard
    errors; the docs say about 45 for a 4 KiB copy-engine copy and 8-11 for SM copies of 64 KiB and 1 MiB."""
    def need(sd):
        return math.ceil(2 * (4.5 * sd / 0.05) ** 2)

    ce4k = [need(_sd(r, "ce", "vmm", 4096)) for r in recs.values() if ("ce", "vmm", 4096, 256) in
            _bench().context_values(r)]
    assert 35 <= min(ce4k) and max(ce4k) <= 50, ce4k
    sm = [need(_sd(r, "sm", "legacy", n)) for r in recs.values() for n in (65536, 1 << 20)
          if ("sm", "legacy", n, 256) in _bench().context_values(r)]
    assert 7 <= min(sm) and max(sm) <= 12, sm


@pytest.fixture(scope="module")
def green():
    return [json.loads(p.read_text().splitlines()[0]) for p in sorted(DATA.glob("green12.rank*"))]


def test_green_contexts_cost_milliseconds_and_megabytes(green):
    assert len(green) == 2
    for rec in green:
        assert rec["cost"]["green"] and rec["contexts"] == 12
        assert rec["cost"]["contexts_s"] / rec["contexts"] < 0.005  # against 0.26-0.33 s for cuCtxCreate's
        assert rec["cost"]["mib_per_context"] <= 16  # against about 1 GiB


def test_green_contexts_reach_every_buffer_and_run_cupys_kernels(green):
    for rec in green:
        assert set(rec["access"].values()) == {"ok"}, rec["access"]  # CuPy's primary-context module too
        assert not [x for x in rec["levels"] if "error" in x]


def test_green_contexts_time_the_copy_engine_at_its_rate_and_spread_as_contexts_do(green):
    values = _bench().context_values
    for rec in green:
        for (engine, kind, nbytes, count), v in values(rec).items():
            assert 0.95 <= statistics.mean(v[1:]) / v[0] <= 1.2, (engine, kind, nbytes, count)  # no 5x path
            sd = statistics.stdev(v[1:]) / statistics.mean(v[1:])
            assert 0.024 <= sd <= 0.046, (engine, kind, nbytes, count, sd)
