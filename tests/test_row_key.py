"""A row's one identity (judging/row_key.RowKey) and a GPU pair in words (pair_name, pair_cell): check's judge,
compare's table and the selftest name rows and pairs only through them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ipcbench.judging.row_key import RowKey, pair_cell, pair_name


def test_a_rows_key_is_its_host_gpus_method_direction_and_size():
    row = SimpleNamespace(host="n1", src_gpu=0, dst_gpu=1, method="ce", direction="push", bytes=4096, src_rank=3,
                          dst_rank=5, bw_gbps_median=1.0)
    key = RowKey.of(row)
    assert key == RowKey("n1", 0, 1, "ce", "push", 4096) and tuple(vars(key)) == RowKey.COLUMNS
    assert key != RowKey.of(SimpleNamespace(**{**vars(row), "bytes": 8192}))
    assert RowKey.of(SimpleNamespace(**{**vars(row), "src_rank": 4})) == key  # the ranks are not the row's identity
    assert {key: 1}[RowKey.of(row)] == 1 and key.pair == "GPU 0 -> GPU 1"


@pytest.mark.parametrize("args, words", [((0, 1), "GPU 0 -> GPU 1"), ((0, 1, 2, 3), "GPU 0 -> GPU 1"),
                                         ((2, 2, 0, 1), "GPU 2 ranks 0 -> 1"), ((2, 2), "GPU 2 (same GPU)"),
                                         ((2, 2, 0, None), "GPU 2 (same GPU)")])
def test_a_gpu_pair_in_checks_words(args, words):
    assert pair_name(*args) == words


@pytest.mark.parametrize("args, cell", [((0, 1, False), "0→1"), ((1, 1, True), "1→1 (same GPU)"),
                                        ((-1, -1, False), "all"), ((0, -1, False), "all"), ((-1, 0, False), "all")])
def test_a_gpu_pair_in_a_tables_cell(args, cell):
    assert pair_cell(*args) == cell
