"""The words of a run's pair mode, declared once: what --pairs and --serial-pairs accept, what a node decides, and
the kinds of round a walk records. The measuring side decides with them (core/schedule.py, config.py's choices)
and the record checks meta.json's pair_mode against them (record/meta_schema.py): a word added here is one both
accept, and a word added anywhere else is one the other refuses (tests/test_record_declared_once.py).
"""

from __future__ import annotations

PAIRS_REQUESTED = ("auto", "sequential", "concurrent", "permutation")  # --pairs
PAIR_MODES = ("sequential", "concurrent")  # what a node decided (pair_mode.mode)
SERIAL_REQUESTED = ("auto", "all", "ring")  # --serial-pairs
SERIAL_COVERAGE = ("all", "ring")  # which pairs the serial steps measured (pair_mode.serial_pairs.coverage)
ROUND_KINDS = ("disjoint", "permutation")  # the rounds pair_mode.rounds and its concurrency checks record
