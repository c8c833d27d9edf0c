"""meta.json's fields and the pair mode's words, each declared once (issue 44, "The record declared once"):
record/meta_schema.META is the one list of meta.json's fields, which the writer's draft (record/meta_draft.MetaDraft)
lists in its order and the reader (record/meta.Meta) reads, each under its own name, under the names HELD_AS gives, or
carried as recorded (CARRIED); catalogue/pairing.py is the one list of the pair mode's words, which --pairs and
--serial-pairs offer, the node decides among and the record accepts. A field or a word added in one place only fails
here.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from ipcbench.catalogue import pairing
from ipcbench.catalogue.planned import PlannedStep, RowShape
from ipcbench.record.meta import CARRIED, HELD_AS, Meta, parse_meta
from ipcbench.record.meta_draft import ALWAYS_WRITTEN, MetaDraft
from ipcbench.record.meta_schema import META, PAIR_MODE, PAIR_MODE_FIELDS, ROUND

ROOT = Path(__file__).resolve().parents[1]
# between them every field of meta.json: a run with steps skipped (plan, evidence, ...) and a selftest (its own field)
RECORDED = [ROOT / "results" / "h200x4-np8-quick" / "meta.json", ROOT / "results" / "h200x1-selftest-1" / "meta.json"]
FALLBACKS = {"ipcbench_version": "versions", "ranks_per_gpu": "ranks"}  # read from these where absent
PLANNED = PlannedStep("copy", "ce push", ("vm",), ((0, 1),), (4096,), (RowShape("ce", "push"),))


def test_the_draft_writes_the_schemas_fields_in_its_order():
    assert tuple(f.name for f in fields(MetaDraft)) == tuple(META.fields)
    assert set(ALWAYS_WRITTEN) <= set(META.fields)


def test_the_reader_holds_every_field_of_the_schema():
    """Each field of META is a field of Meta, held under other names (HELD_AS) or carried as recorded (CARRIED), and
    each field of Meta holds one of META's (found and raw: the record itself)."""
    typed = {f.name for f in fields(Meta)} - {"found", "raw"}
    for key in META.fields:
        assert (key in typed) + (key in HELD_AS) + (key in CARRIED) >= 1, f"meta.json's {key} is read by no reader"
        assert key not in CARRIED or key not in typed | set(HELD_AS)
    held = {name for names in HELD_AS.values() for name in names}
    assert typed <= set(META.fields) | held, typed - set(META.fields) - held
    assert set(HELD_AS) <= set(META.fields) and set(CARRIED) <= set(META.fields)


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.parent.name)
def test_a_field_the_reader_reads_changes_the_record_when_it_is_gone(path):
    """What the declaration says, the reader does: each field of a recorded run removed (with the field it falls back
    on; the schema version left out, so that nothing is required) changes the typed record, but a carried one: a run
    with steps skipped and a selftest hold every field between them."""
    raw = {k: v for k, v in json.loads(path.read_text()).items() if k != "schema_version"}
    raw.setdefault("planned_rows", [PLANNED.as_json()])  # schema 5's: no run under results/ has it
    whole = parse_meta(raw)
    for key in set(raw) & set(META.fields):
        if raw[key] in ([], {}):  # nothing recorded reads as nothing recorded
            continue
        gone = {key, FALLBACKS.get(key)}
        without = parse_meta({k: v for k, v in raw.items() if k not in gone})
        assert (without == whole) is (key in CARRIED), key


def test_the_recorded_runs_hold_every_field():
    held = {k for p in RECORDED for k, v in json.loads(p.read_text()).items() if v not in ([], {})}
    assert set(META.fields) == held | {"planned_rows"}


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
