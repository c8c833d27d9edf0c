"""Every bound a thresholds file may set is checked at its edges (judging/expect.py): the last value accepted and
the first refused, each refusal one line naming the file, the line and the key; and what an accepted value reads
as. A gate must never run on a threshold it misread."""

from __future__ import annotations

import math

import pytest

from ipcbench.errors import UsageError
from ipcbench.judging import expect

EXPECT = ('[[expect]]\ngpu = "G"\nlink = "nvswitch"\nmethod = "ce"\ndirection = "push"\nsizes = "{sizes}"\n{bound}\n'
          'why = "w"\n')
EVIDENCE = '[[evidence]]\ngpu = "G"\n{line}\nwhy = "w"\n'


@pytest.mark.parametrize("bound, ok", [
    ("floor_gbps = 0.001", True), ("floor_gbps = 0", False), ("floor_gbps = -1", False), ("floor_gbps = inf", False),
    ("floor_gbps = nan", False), ("floor_gbps = true", False), ("floor_peak = 1", True), ("floor_peak = 1.0001", False),
    ("floor_peak = 0.001", True), ("floor_peak = 0", False), ("max_us = 0.001", True), ("max_us = 0", False),
    ("max_us = inf", False)])
def test_each_bound_of_an_expectation_at_its_edges(bound, ok):
    text = EXPECT.format(sizes="4K", bound=bound)
    if ok:
        (e,) = expect.parse(text, "t.toml")
        key, value = bound.split(" = ")
        assert getattr(e, key) == float(value) and e.where == "t.toml:1"
        assert [getattr(e, k) for k in expect.BOUNDS if k != key] == [None, None]
    else:
        with pytest.raises(UsageError, match=rf"^t\.toml:7: {bound.split(' = ')[0]}: "):
            expect.parse(text, "t.toml")


@pytest.mark.parametrize("sizes, lo, hi", [("4K", 4096, 4096), ("4K:4K", 4096, 4096), ("64M:1G", 64 << 20, 1 << 30)])
def test_sizes_are_one_size_or_a_range_whose_ends_are_in_it(sizes, lo, hi):
    (e,) = expect.parse(EXPECT.format(sizes=sizes, bound="floor_gbps = 1"), "t.toml")
    assert (e.lo, e.hi) == (lo, hi)
    assert e.matches("G", "nvswitch", "ce", "push", lo) and e.matches("G", "nvswitch", "ce", "push", hi)
    assert not e.matches("G", "nvswitch", "ce", "push", hi + 1) and not e.matches("G", "nvswitch", "ce", "push", lo - 1)
    assert not e.matches("G", "pcie", "ce", "push", lo) and not e.matches("G", "nvswitch", "ce", "pull", lo)
    assert not e.matches("G", "nvswitch", "sm_read", "push", lo) and not e.matches("H", "nvswitch", "ce", "push", lo)


@pytest.mark.parametrize("line, ok", [
    ("nvlinks = 0", True), ("nvlinks = 64", True), ("nvlinks = 65", False), ("nvlinks = -1", False),
    ("nvlinks = true", False), ("nvlink_gbps = 0.1", True), ("nvlink_gbps = 0", False), ("nvlink_gbps = inf", False),
    ("nvlink_gbps = true", False), ("pcie_gen = 1", True), ("pcie_gen = 7", True), ("pcie_gen = 0", False),
    ("pcie_gen = 8", False), ("pcie_width = 1", True), ("pcie_width = 32", True), ("pcie_width = 0", False),
    ("pcie_width = 33", False), ("link_errors_allowed = 0", True), ("link_errors_allowed = -1", False),
    ("link_errors_allowed = {crc = -1}", False), ("link_errors_allowed = 1.5", False),
    ("link_error_rate_allowed = 0", True), ("link_error_rate_allowed = -0.5", False),
    ("link_error_rate_allowed = inf", False), ("link_error_rate_allowed = true", False),
    ("link_error_rate_allowed = {replay = 1}", False), ("link_error_rate_allowed = {crc_data = -1}", False),
    ("foreign_processes_allowed = 0", True), ("foreign_processes_allowed = -1", False),
    ('slowdowns = ["hw_slowdown", "sw_power_cap"]', True), ('slowdowns = ["hot"]', False), ('slowdowns = [""]', False),
    ('processes_ignored = ["python*"]', True), ("processes_ignored = [1]", False), ('processes_ignored = "x"', False),
    ('require = ["recorded", "ecc"]', True), ('require = ["ecc", "bogus"]', False)])
def test_each_evidence_key_at_its_edges(line, ok):
    text = EVIDENCE.format(line=line)
    key = line.split(" = ")[0]
    if ok:
        (t,) = expect.parse_evidence(text, "t.toml")
        assert [k for k, _ in t.values] == [key] and t.where == "t.toml:1"
    else:
        with pytest.raises(UsageError, match=rf"^t\.toml:3: {key}: "):
            expect.parse_evidence(text, "t.toml")


def test_an_error_allowance_reads_as_one_number_per_counter():
    def value(line: str):
        (t,) = expect.parse_evidence(EVIDENCE.format(line=line), "t.toml")
        return t.get(line.split(" = ")[0])

    assert value("link_errors_allowed = 3") == {c: 3 for c in expect.NVLINK_COUNTERS}
    assert value("link_errors_allowed = {replay = 2}") == {c: 2 if c == "replay" else 0 for c in expect.NVLINK_COUNTERS}
    assert value("link_error_rate_allowed = 100") == {c: 100.0 for c in expect.CRC_COUNTERS}
    assert value("link_error_rate_allowed = {crc_data = 50}") == {"crc_flit": 0.0, "crc_data": 50.0, "crc": 0.0}
    assert value("nvlink_gbps = 25") == 25.0 and isinstance(value("nvlink_gbps = 25"), float)
    assert value('slowdowns = ["hw_slowdown"]') == ("hw_slowdown",) and math.isfinite(value("pcie_gen = 5"))


def test_a_thresholds_file_holds_tables_and_sets_something():
    for text, words in (('[expect]\ngpu = "G"\n', "t.toml:1: expect: must be [[expect]] tables"),
                        ('colour = 1\n[[expect]]\ngpu = "G"\n', "t.toml:1: colour: unknown key"),
                        ("# nothing\n", "t.toml: no [[expect]] or [[evidence]] table")):
        with pytest.raises(UsageError) as e:
            expect.parse(text, "t.toml")
        assert str(e.value).startswith(words), str(e.value)
