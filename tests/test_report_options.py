"""How the report says a run was measured (report/options.py), read through the strict record's typed accessors
(record/meta.Meta: quick, verify, rule, pairing): the sampling rule, --pairs (permutation rounds included) and the
serial steps' ring; and compare's warning when two runs were sampled differently (judging/matching.py)."""

from __future__ import annotations

import ast
from pathlib import Path

from ipcbench.judging.matching import _options
from ipcbench.record.meta import Meta
from ipcbench.report.options import options_short, run_options

REPORT = Path(__file__).resolve().parents[1] / "ipcbench" / "report"
RULE = {"min_samples": 5, "max_samples": 15, "noise": 0.005, "max_time_s": 0.25, "min_time_ms": 2.0}


def meta(**fields) -> Meta:
    return Meta.from_json(fields)


def test_the_sampling_rule_in_words():
    full = meta(options={"quick": False, "samples": None, "min_time_ms": 2.0, "sampling": RULE})
    assert run_options(full)["sampling"] == ("5–15 samples per row until the median is known to ±0.5% (or 0.25 s), "
                                             "each sample ≥ 2 ms")
    assert options_short(full)["sampling"] == "5–15 × ≥2 ms, to ±0.5%"
    fixed = meta(options={"samples": 7, "min_time_ms": 5.0, "sampling": RULE})
    assert run_options(fixed)["sampling"] == "7 samples per row (fixed), each sample ≥ 5 ms"
    assert options_short(fixed)["sampling"] == "7 fixed × ≥5 ms"
    older = meta(options={"samples": None, "min_time_ms": 3.0, "quick": True})  # before options.sampling
    assert run_options(older)["sampling"] == "rule not recorded, each sample ≥ 3 ms"
    assert run_options(older)["mode"] == "quick (--quick)" and options_short(older)["mode"] == "quick"
    assert run_options(meta())["sampling"] == "not recorded" and options_short(meta())["sampling"] == "?"


def test_verification_off_is_said():
    assert run_options(meta(options={"verify": False}))["verify"] == "off (--no-verify): no row is checked"
    assert "verify" not in run_options(meta(options={"verify": True}))


def test_pairs_one_at_a_time_say_why_once():
    m = meta(pair_mode={"mode": "sequential", "requested": "sequential", "reason": "--pairs sequential"})
    assert run_options(m)["pairs"] == "one pair at a time (--pairs sequential)"
    m = meta(pair_mode={"mode": "sequential", "requested": "auto", "reason": "2 ranks: one pair per round anyway"})
    assert run_options(m)["pairs"] == "one pair at a time (--pairs auto: 2 ranks: one pair per round anyway)"
    assert options_short(m)["pairs"] == "one at a time"
    assert run_options(meta())["pairs"] == "not recorded" and options_short(meta())["pairs"] == "?"


def test_permutation_rounds_are_said():
    every = {"up_to": {"ce": 1 << 62, "sm": 1 << 62, "sm_bulk": 1 << 62}, "reason": "--pairs permutation"}
    m = meta(pair_mode={"mode": "concurrent", "requested": "permutation", "reason": "--pairs permutation",
                        "permutation": every})
    assert run_options(m)["pairs"] == ("disjoint pairs at once (--pairs permutation); every one-way row in "
                                       "permutation rounds (each GPU sending once and receiving once)")
    assert options_short(m)["pairs"] == "at once, permutation rounds"
    some = {"up_to": {"sm": 1 << 62, "ce": 1 << 20}, "reason": "measured to hold"}
    m = meta(pair_mode={"mode": "concurrent", "requested": "auto", "reason": "NVSwitch", "permutation": some})
    assert run_options(m)["pairs"].endswith("permutation rounds (each GPU sending once and receiving once): ce up "
                                            "to 1M, sm at every size")
    none = meta(pair_mode={"mode": "concurrent", "requested": "auto", "reason": "NVSwitch",
                           "permutation": {"up_to": {}, "reason": "not every GPU pair is linked through NVSwitch"}})
    assert "permutation" not in run_options(none)["pairs"] and options_short(none)["pairs"] == "at once"


def test_a_ring_of_serial_pairs_is_said():
    ring = {"coverage": "ring", "requested": "auto", "reason": "4 GPUs through NVSwitch"}
    m = meta(pair_mode={"mode": "concurrent", "requested": "auto", "reason": "r", "serial_pairs": ring})
    assert run_options(m)["pairs"].endswith("; host-staged, handle, ping-pong and pipeline steps on a ring of pairs "
                                            "(--serial-pairs auto: 4 GPUs through NVSwitch)")
    assert options_short(m)["pairs"] == "at once, serial on a ring"
    every = dict(ring, coverage="all")
    assert "ring" not in run_options(meta(pair_mode={"mode": "concurrent", "serial_pairs": every}))["pairs"]


def test_compare_names_each_sampling_option_that_differs():
    base = meta(options={"quick": False, "verify": True, "samples": None, "min_time_ms": 2.0, "sm_copy": "8x512x4",
                         "sampling": RULE})
    new = meta(options={"quick": True, "verify": True, "samples": None, "min_time_ms": 2.0, "sm_copy": "8x512x2",
                        "sampling": dict(RULE, noise=0.02, max_samples=6)})
    differ = {o: (b, n) for (o, b), (_, n) in zip(_options(base), _options(new)) if b != n}
    assert differ == {"quick": (False, True), "noise": (0.005, 0.02), "max_samples": (15, 6),
                      "sm_copy": ("8x512x4", "8x512x2")}


def test_the_report_reads_no_raw_meta_json():
    """The report reads the strict record through its typed fields (record/meta.Meta), never meta.json as
    recorded (`raw`) nor the options as a dict."""
    for path in sorted(REPORT.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("raw", "options", "sampling"):
                holder = node.value.attr if isinstance(node.value, ast.Attribute) else getattr(node.value, "id", "")
                assert holder not in ("meta", "bm", "nm"), f"{path.name}:{node.lineno}: {holder}.{node.attr}"
