"""record/fields.py and record/meta_schema.py's rules one by one: each bound, each form and each count that must
agree, so that a change to any of them fails here (the fuzz test, tests/test_record_fuzz.py, covers the fields of
the recorded runs; these cover the edges it does not reach)."""

from __future__ import annotations

import math

import pytest

from ipcbench.record.fields import INT64, Bool, Digits, Either, FieldError, Int, ListOf, MapOf, Null, Num, Obj, Text
from ipcbench.record.meta import Meta, MetaError
from ipcbench.results import SCHEMA_VERSION


def bad(spec, value) -> FieldError:
    with pytest.raises(FieldError) as e:
        spec.check(value, "f")
    return e.value


@pytest.mark.parametrize("spec,good,wrong", [
    (Int(), [0, INT64 - 1], [-1, INT64, True, 1.0, "1", None]),
    (Int(1, 3), [1, 3], [0, 4]),
    (Num(), [0, 0.0, 2, 1e18], [-0.5, math.inf, -math.inf, math.nan, False, "1", float(INT64), 1e300]),
    (Num(strict=True), [1e-9], [0, 0.0]),
    (Text(), ["", "x"], [1, None, []]),
    (Text(("a", "b")), ["a", "b"], ["c", ""]),
    (Bool(), [True, False], [0, 1, "true", None]),
    (Null(Int()), [None, 0], [-1, "x"]),
    (Either((ListOf(Text()), Text())), [[], ["a"], "a"], [1, [1], None]),
    (ListOf(Int()), [[], [1, 2]], [{}, "x", [1, -1]]),
    (MapOf(Bool(), key=Digits()), [{}, {"0": True, "12": False}], [[], {"x": True}, {"-1": True}, {"0": 1}]),
])
def test_each_spec_takes_its_values_and_names_the_others(spec, good, wrong):
    for v in good:
        spec.check(v, "f")
    for v in wrong:
        assert bad(spec, v).field.startswith("f")


def test_an_error_names_the_deepest_field_that_is_wrong():
    spec = Obj({"a": ListOf(Obj({"b": Int()}, required=("b",)))})
    assert bad(spec, {"a": [{"b": 1}, {"b": "x"}]}).field == "f.a[1].b"
    assert bad(spec, {"a": [{}]}).field == "f.a[0]" and "lacks 'b'" in bad(spec, {"a": [{}]}).why
    assert bad(Null(ListOf(Int())), [1, "x"]).field == "f[1]"  # null allowed, the list's element named
    assert bad(Either((ListOf(Int()), Text())), [1, "x"]).field == "f[1]"
    spec.check({"a": [{"b": 1, "later": "x"}], "other": 1}, "f")  # keys a spec does not name are carried
    assert "a string ('x'), expected an integer >= 0" == bad(Int(), "x").why


@pytest.mark.parametrize("version", [0, SCHEMA_VERSION + 1, 99])
def test_a_schema_version_this_reader_does_not_know_is_an_error(version):
    with pytest.raises(MetaError) as e:
        Meta.from_json({"schema_version": version})
    assert e.value.field == "schema_version" and f"{version} is not a schema this reader knows" in e.value.why


WHO_RAN = {"hosts": ["h"], "ranks": [{"rank": 0, "host": "h", "gpu": 0}], "gpus": {"h": [{"index": 0, "uuid": "G"}]}}


def test_every_schema_version_this_reader_knows_reads():
    """Every version reads; from REQUIRED_SCHEMA (4) on with what its writer always writes (check_required), schema 5
    with its planned rows too; once complete, from schema 4 its evidence and its rows count. Schema 6 added columns
    only (contexts, context_us, noise_contexts): its meta.json holds what schema 5's does."""
    from ipcbench.record.meta_schema import REQUIRED_SCHEMA, required

    for version in range(1, SCHEMA_VERSION + 1):
        fields = {**(WHO_RAN if version >= REQUIRED_SCHEMA else {}), **({"planned_rows": []} if version >= 5 else {})}
        assert Meta.from_json({"schema_version": version, **fields}).schema_version == version
    assert REQUIRED_SCHEMA == 4 and SCHEMA_VERSION == 6
    assert required(4, True) == ("hosts", "ranks", "gpus", "evidence", "rows")
    assert required(5, False) == ("hosts", "ranks", "gpus", "planned_rows")
    assert required(5, True) == ("hosts", "ranks", "gpus", "planned_rows", "evidence", "rows")


@pytest.mark.parametrize("drop, named", [("hosts", "hosts"), ("ranks", "ranks"), ("gpus", "gpus"),
                                         ("uuid", "gpus.h[0].uuid"), ("evidence", "evidence"), ("rows", "rows")])
def test_a_run_of_schema_4_lacks_nothing_its_writer_writes(drop, named):
    """A schema-4 run without its hosts, ranks, GPUs or a GPU's UUID, or a complete one without its evidence, was
    damaged, not written before the field: one error naming it (read as unknown, check judged it as an older run:
    tests/test_reading_fuzz.py). A run that died before completing has no evidence yet, and reads."""
    raw = {"schema_version": 4, **WHO_RAN, "status": "complete", "evidence": {"snapshots": []}, "rows": 0}
    if drop == "uuid":
        raw["gpus"] = {"h": [{"index": 0}]}
    else:
        raw.pop(drop)
    with pytest.raises(MetaError) as e:
        Meta.from_json(raw)
    assert e.value.field == named and "absent from a run of schema 4" in e.value.why
    assert Meta.from_json({**raw, "schema_version": 3}).schema_version == 3  # an older run: unknown, as before
    running = {"schema_version": 4, **WHO_RAN, "status": "running"}
    assert Meta.from_json(running).status == "running"


RANKS = [{"rank": 0, "host": "h", "gpu": 0}, {"rank": 1, "host": "h", "gpu": 1}]
GPUS = {"h": [{"index": 0}, {"index": 1}]}


@pytest.mark.parametrize("change,named", [
    ({"ranks": [RANKS[0], {**RANKS[1], "rank": 0}]}, "ranks[1].rank"),
    ({"hosts": ["h", "g"]}, "hosts"),
    ({"gpus": {"h": [{"index": 0}]}}, "ranks[1].gpu"),
    ({"gpus": {"g": GPUS["h"]}}, "ranks[0].gpu"),
    ({"ranks_per_gpu": 2}, "ranks_per_gpu"),
])
def test_counts_that_disagree_are_an_error(change, named):
    good = {"hosts": ["h"], "ranks": RANKS, "gpus": GPUS, "ranks_per_gpu": 1}
    assert Meta.from_json(good).ranks_per_gpu == 1
    with pytest.raises(MetaError) as e:
        Meta.from_json({**good, **change})
    assert e.value.field == named


def test_counts_are_checked_only_where_both_sides_are_recorded():
    assert Meta.from_json({"ranks": RANKS}).ranks_per_gpu == 1  # counted from the ranks
    assert Meta.from_json({"hosts": ["h", "g"], "ranks_per_gpu": 3}).n_ranks is None


def test_a_meta_error_is_a_results_error_naming_file_and_field():
    from ipcbench.errors import ResultsError

    e = MetaError("run/meta.json", "ranks[0].gpu", "a string ('0'), expected an integer >= 0")
    assert isinstance(e, ResultsError) and (e.path, e.field) == ("run/meta.json", "ranks[0].gpu")
    assert str(e) == "run/meta.json: field ranks[0].gpu: a string ('0'), expected an integer >= 0"


@pytest.mark.parametrize("path,value", [
    ("topology.vm.links[0].peak_gbps", 0), ("topology.vm.links[0].ceiling_gbps", -1.0),
    ("topology.vm.links[0].kind", "infiniband"), ("gpus.vm[0].mem_bw_gbps", 0), ("sizes[0]", 0),
    ("ranks_per_gpu", 0), ("options.sampling.min_samples", 0), ("options.sampling.min_time_ms", 0),
    ("options.samples", 0), ("options.twin_sizes", "some sizes"), ("pair_mode.requested", "rounds"),
    ("pair_mode.serial_pairs.coverage", "half"), ("pair_mode.per_host.vm.mode", "rounds"),
    ("evidence.snapshots[0].when", "during"), ("noise_basis", "per-row"), ("mps.vm.gpus", {"zero": True}),
    ("plan[0].sizes[0]", -4), ("skipped", [{"suite": "copy", "step": "x"}]), ("selftest", {"anchor_units": -1}),
    ("time_breakdown_s.rank 0.start.n", -1), ("versions.cupy", 1.5), ("command", [1]),
])
def test_the_bounds_and_forms_of_the_record(path, value):
    """Each is a value of the right JSON type that no writer writes: a zero or negative rate, count or size, a
    name outside its vocabulary."""
    import json
    from pathlib import Path

    from test_record_strict import BASE, set_path

    raw = json.loads((Path(BASE) / "meta.json").read_text())
    raw.setdefault("selftest", {"anchor_units": 1})
    Meta.from_json(raw)  # as recorded: reads
    set_path(path, value)(raw)
    with pytest.raises(MetaError) as e:
        Meta.from_json(raw)
    assert e.value.field.startswith(path.split("[")[0].split(".")[0]), str(e.value)
