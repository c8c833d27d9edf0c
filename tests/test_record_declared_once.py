"""The pair mode's words, declared once (issue 44, "The record declared once"): catalogue/pairing.py is the one list
of them, which --pairs and --serial-pairs offer, the node decides among and the record accepts. A word added in one
place only fails here.
"""

from __future__ import annotations

from ipcbench.catalogue import pairing
from ipcbench.record.meta import Meta
from ipcbench.record.meta_schema import PAIR_MODE, PAIR_MODE_FIELDS, ROUND


def test_the_pair_modes_words_are_the_catalogues():
    from ipcbench import config
    from ipcbench.core import schedule

    assert config.PAIRS_MODES is schedule.MODES is pairing.PAIRS_REQUESTED
    assert config.SERIAL_PAIRS is schedule.SERIAL_PAIRS is pairing.SERIAL_REQUESTED
    assert PAIR_MODE_FIELDS["mode"].choices == pairing.PAIR_MODES
    assert PAIR_MODE_FIELDS["requested"].choices == pairing.PAIRS_REQUESTED
    serial = PAIR_MODE_FIELDS["serial_pairs"].fields
    assert (serial["coverage"].choices, serial["requested"].choices) == (pairing.SERIAL_COVERAGE,
                                                                          pairing.SERIAL_REQUESTED)
    assert ROUND.fields["kind"].choices == PAIR_MODE.fields["check"].item.fields["round"].choices == pairing.ROUND_KINDS
    assert set(pairing.SERIAL_COVERAGE) < set(pairing.SERIAL_REQUESTED)
    assert set(pairing.PAIR_MODES) < set(pairing.PAIRS_REQUESTED)


def test_every_decision_of_a_node_is_a_word_the_record_accepts():
    """decide_mode over every request and kind of node: its mode, serial coverage and rounds' kinds are the
    catalogue's words (a word a decision makes that the record refuses would fail the run that wrote it)."""
    from ipcbench.core.schedule import decide_mode
    from ipcbench.run.walk import groups_of
    from ipcbench.suites.registry import ORDER, plan

    steps = plan(list(ORDER), 4, [4096, 1 << 20])
    for requested in pairing.PAIRS_REQUESTED:
        for serial in pairing.SERIAL_REQUESTED:
            for kinds in (None, ["nvswitch"] * 12, ["nvlink"] * 12):
                mode = decide_mode(requested, 1, kinds, 4, serial)
                assert mode.mode in pairing.PAIR_MODES and mode.serial.coverage in pairing.SERIAL_COVERAGE
                assert Meta.from_json({"pair_mode": mode.as_dict()}).pair_mode == mode.as_dict()
                rounds = {g.kind for s in steps for g in groups_of(s, mode)} - {"alone", "all"}
                assert rounds <= set(pairing.ROUND_KINDS)
