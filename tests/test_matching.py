"""What compare says differs between BASE and NEW (judging/matching.meta_warnings): MPS on one side only, other
GPU boards (UUIDs), other options, on the committed runs. No GPU needed."""

from __future__ import annotations

from pathlib import Path

from ipcbench.record.run import load_run
from ipcbench.judging.matching import meta_warnings

REPO = Path(__file__).resolve().parents[1]
MPS = REPO / "tests" / "data" / "mps"
RESULTS = REPO / "tests" / "data" / "onegpu"  # one-GPU runs of source 585e3e69ffcd6bf4 (its README)


def warnings(base: Path, new: Path) -> str:
    return "\n".join(meta_warnings(load_run(base / "results.csv"), load_run(new / "results.csv")))


def test_a_run_compared_with_itself_differs_in_nothing():
    assert warnings(MPS / "h100-nomps", MPS / "h100-nomps") == ""


def test_mps_on_one_side_only_is_said():
    """compare said nothing when one run had MPS and the other not."""
    text = warnings(MPS / "h100-nomps", MPS / "h100-mps")
    assert "BASE h100-nomps vs NEW h100-mps: MPS differs: without MPS (vm) vs with MPS (vm)" in text
    assert text.count("\n") == 0  # nothing else differs: same node, same options


def test_other_gpu_boards_are_said():
    """Two H100s of one model, other boards: the same model, so only the UUIDs tell."""
    text = warnings(MPS / "h100-nomps", RESULTS / "h100-nomps")
    assert "GPU models differ" not in text
    assert "GPUs differ: GPU-2dbfaaf6-8c19-b69d-f6ab-5f3880bbf446 vs GPU-afc7e8c3-c373-e145-5606-81b1b1a1d2d1" in text


def test_other_sizes_are_said():
    text = warnings(RESULTS / "h100-nomps", RESULTS / "h100-samegpu-large")
    assert "sizes differ: 17 sizes, 4K–256M vs 7 sizes, 64M–1G" in text
