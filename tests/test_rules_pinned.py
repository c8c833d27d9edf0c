"""Rules that no test pinned (issue 44, "Rules that no test pins"), each with a test that fails when the rule is
broken (the evidence rules' own: tests/test_check_evidence_pinned.py):

- a same-GPU row states the same-GPU floor (core/rows.state_noise keeps `same_gpu`);
- check's outputs are refused anywhere inside a run directory, subdirectories included;
- a terminal stream that cannot show what ipcbench prints (latin-1) gets the ASCII fallbacks, no UnicodeEncodeError;
- the all-to-all's stopping rule asks for the all-to-all's window floor, not the gated floor of its engine.
"""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from ipcbench.catalogue import noise
from ipcbench.errors import UsageError

H100 = "NVIDIA H100 80GB HBM3"


# ---- the row's noise: a same-GPU row states the same-GPU floor ------------------------------------------------

def test_a_same_gpu_row_states_the_same_gpu_floor_not_the_pairs():
    """H100 ce 4K: two ranks of one GPU move 9% between runs, a pair of GPUs 6.5%; a state_noise that dropped
    `same_gpu` stated the pair's floor for both."""
    from ipcbench.core.rows import state_noise
    from test_placement_noise import row

    same, pair = row(same_gpu=True, src_gpu=0, dst_gpu=0, mps=True), row()
    state_noise([same, pair], H100)
    assert same.noise_floor == noise.SAME_GPU_FLOORS["H100"][("ce", "gated")][0] == 0.09
    assert pair.noise_floor == noise.FLOORS["H100"][("ce", "gated")][0] == 0.065
    assert same.noise == pytest.approx((0.003 ** 2 + 0.09 ** 2) ** 0.5)


# ---- check's outputs: never inside a run directory, at any depth --------------------------------------------

@pytest.mark.parametrize("where", ["x.xml", "sub/x.xml", "sub/deeper/x.prom", "new/x.xml"])
def test_an_output_anywhere_inside_a_run_directory_is_refused(tmp_path, where):
    from ipcbench.check.inputs import check_outputs

    run = tmp_path / "run"
    (run / "sub" / "deeper").mkdir(parents=True)
    (run / "results.csv").write_text("")
    with pytest.raises(UsageError, match=f"inside the run directory {run}: check never writes into a run"):
        check_outputs({"--junit": str(run / where)}, [run], {})
    check_outputs({"--junit": str(tmp_path / "x.xml")}, [run], {})  # beside it: fine


# ---- ASCII terminals: the fallback probe of a stream ----------------------------------------------------------

def test_a_latin1_terminal_gets_the_fallbacks_of_what_it_cannot_show():
    """latin-1 shows µ but not → or ✓: a probe of a character it can show took the stream as able to show them all,
    and the first → ended in a UnicodeEncodeError."""
    from ipcbench.cli import terminal_fallbacks

    stream = io.TextIOWrapper(io.BytesIO(), encoding="latin-1")
    terminal_fallbacks([stream])
    stream.write("1→0 µs ✓")
    stream.flush()
    assert stream.buffer.getvalue().decode("latin-1") == "1->0 µs ok"


# ---- the all-to-all's noise: its stopping rule asks for its window floor ---------------------------------------

def test_the_alltoalls_stopping_rule_asks_for_the_window_floor(monkeypatch):
    """The all-to-all's flows are timed in one window of every flow (noise kind ce/window): on an H100 its mid band
    is 5.5% (the largest measured, an H200's), the gated copy's 2%; asking for the gated floor stops sampling at a
    third of the wrong level."""
    from fakes import FakeNode
    from ipcbench.core.sampler import SamplingRule
    from ipcbench.suites import alltoall

    asked: list[float] = []
    real = alltoall.take_samples

    def take_samples(rule, count, sample, enough=0.0):
        asked.append(enough)
        return real(rule, count, sample, enough)

    monkeypatch.setattr(alltoall, "take_samples", take_samples)
    rule = SamplingRule(min_time_s=2e-5)
    node = FakeNode(n=3, rule=rule, slot_bytes=1 << 20)  # a mid-band size: 256K-64M

    def measure(ctx):
        ctx.gpu.info = SimpleNamespace(name=H100)
        return alltoall.measure_alltoall(ctx, "ce_alltoall", [1 << 20])

    node.run(measure)
    window = noise.floor_for(H100, "ce", "window", 1 << 20).fraction
    assert window == 0.055 and noise.floor_for(H100, "ce", "gated", 1 << 20).fraction == 0.02
    assert asked == [pytest.approx(rule.floor_share * window)] * 3
