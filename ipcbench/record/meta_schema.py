"""What each field of meta.json must be, and the counts that must agree: the record's rules, checked once where
meta.json is read (record/meta.parse_meta) and where a run writes it (record/meta_draft.py), so that a field of
the wrong type, out of range, an unknown schema_version or a count that disagrees with another field is one
MetaError naming the file and the field, never a reader's traceback or a gate that judged what it misread.

Every field a reader of the project reads is here (report, compare, check, the cost fit, the phases table);
the rest (platform, the MPS readings, the P2P matrix, ...) is carried as recorded. A field absent because the
run predates it is unknown, never an error: every run under results/ and tests/data reads (the types each field
holds there are the ground truth these were written from). An entry of a list (a rank, a GPU, a snapshot)
must have the keys that identify it.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from ipcbench.catalogue.links import LINK_KINDS
from ipcbench.catalogue.pairing import PAIR_MODES, PAIRS_REQUESTED, ROUND_KINDS, SERIAL_COVERAGE, SERIAL_REQUESTED
from ipcbench.catalogue.noise import NOISE_BASIS, OLD_BASIS
from ipcbench.errors import ResultsError
from ipcbench.record.fields import (Bool, Digits, Either, FieldError, Int, ListOf, MapOf, Null, Num, Obj, Spec,
                                    Text)
from ipcbench.results import DIRECTIONS, SCHEMA_VERSION


class MetaError(ResultsError):
    """A meta.json field that is not what the record says it is: `path` the file, `field` its key path
    ("ranks[0].gpu"), `why` what is wrong. A ResultsError: report skips the run, compare and check exit 2."""

    def __init__(self, path: str | os.PathLike, field: str, why: str):
        super().__init__(f"{path}: field {field}: {why}")
        self.path, self.field, self.why = str(path), field, why


NOISE_BASES = (OLD_BASIS, NOISE_BASIS)  # what a row's `noise` covers (catalogue/noise.py, docs/results.md)
COUNT, TEXT, BOOL = Int(), Text(), Bool()
RATE = Null(Num(strict=True))  # GB/s: unknown (null) where the catalogue has none, never zero


def item(value: Spec) -> Obj:
    """An evidence Item (evidence/model.py): {"value": v} when read, {"missing": why} (and a value) when not."""
    return Obj({"value": Null(value), "missing": TEXT})


LINK_READING = Obj({"link": COUNT, "active": item(BOOL), "version": item(TEXT), "speed_gbps": item(Num()),
                    "errors": item(MapOf(COUNT))}, required=("link",))
PROCESS = Obj({"pid": COUNT, "used_bytes": Null(COUNT), "name": TEXT}, required=("pid",))
GPU_READING = Obj({"index": COUNT, "uuid": TEXT, "pci_bus_id": TEXT, "model": TEXT, "links": item(ListOf(LINK_READING)),
                   **{k: item(COUNT) for k in ("pcie_gen", "pcie_width", "pcie_max_gen", "pcie_max_width",
                                               "ecc_uncorrected_volatile", "ecc_corrected_volatile",
                                               "remapped_uncorrectable")},
                   "clock_events": item(ListOf(TEXT)), "clock_event_ns": item(MapOf(COUNT)),
                   "remap_pending": item(BOOL), "remap_failure": item(BOOL), "processes": item(ListOf(PROCESS))},
                  required=("index",))
SNAPSHOT = Obj({"host": TEXT, "when": Text(("before", "after")), "time": Num(), "gpus": ListOf(GPU_READING),
                "own_pids": ListOf(COUNT), "missing": TEXT}, required=("host", "when"))
EVIDENCE = Obj({"snapshots": ListOf(SNAPSHOT)}, required=("snapshots",))

RANK = Obj({"rank": COUNT, "host": TEXT, "local_rank": COUNT, "gpu": COUNT, "pid": COUNT},
           required=("rank", "host", "gpu"))
GPU = Obj({"index": COUNT, "name": TEXT, "uuid": TEXT, "pci_bus_id": TEXT, "cc": TEXT, "sm_count": COUNT,
           "memory_bytes": COUNT, "l2_bytes": COUNT, "mem_bw_gbps": RATE}, required=("index",))
LINK = Obj({"src_gpu": COUNT, "dst_gpu": COUNT, "kind": Text(LINK_KINDS), "nvlink_count": Null(COUNT),
            "nvlink_version": Null(TEXT), "pcie_gen": Null(COUNT), "pcie_width": Null(COUNT), "peak_gbps": RATE,
            "per_link_gbps": RATE, "ceiling_gbps": RATE, "per_link_ceiling_gbps": RATE},
           required=("src_gpu", "dst_gpu"))
TOPOLOGY = Obj({"nvml": BOOL, "links": ListOf(LINK), "per_gpu": ListOf(Obj({"active": COUNT}))})
SERIAL_PAIRS = Obj({"coverage": Text(SERIAL_COVERAGE), "requested": Text(SERIAL_REQUESTED), "reason": TEXT})
PERMUTATION = Obj({"up_to": MapOf(COUNT), "reason": TEXT})  # core/schedule.Permutation
PAIR_MODE_FIELDS: dict[str, Spec] = {
    "mode": Text(PAIR_MODES), "requested": Text(PAIRS_REQUESTED),
    "reason": TEXT, "serial_pairs": SERIAL_PAIRS, "rank_pairs": TEXT, "permutation": PERMUTATION}
ROUND = Obj({"kind": Text(ROUND_KINDS), "flows": ListOf(ListOf(COUNT)), "sizes": ListOf(COUNT)},
            required=("kind", "flows", "sizes"))  # core/schedule.Group.as_dict
# the concurrency guard's checks (run/walk.check_rounds): each compared pair's two values and their relative
# difference (concurrent / sequential - 1, so never below -1)
GUARD_PAIR = Obj({"src_rank": COUNT, "dst_rank": COUNT, "concurrent": Num(strict=True), "sequential": Num(strict=True),
                  "diff": Num(-1.0), "tolerance": Num()}, required=("src_rank", "dst_rank"))
GUARD = Obj({"host": TEXT, "step": TEXT, "engine": TEXT, "round": Text(ROUND_KINDS), "bytes": Int(1),
             "pairs": ListOf(GUARD_PAIR), "worst_diff": Num(), "tolerance": Num(), "ok": BOOL}, required=("step", "ok"))
PAIR_MODE = Obj({**PAIR_MODE_FIELDS, "per_host": MapOf(Obj(PAIR_MODE_FIELDS)), "check": ListOf(GUARD),
                 "rounds": MapOf(ListOf(ROUND))})
SAMPLING = Obj({"min_time_ms": Num(strict=True), "min_samples": Int(1), "max_samples": Int(1), "noise": Num(),
                "max_time_s": Null(Num(strict=True)), "placements": Int(1), "contexts": Int(1), "floor_share": Num(),
                "short_factor": Num(strict=True)})
OPTIONS = Obj({"samples": Null(Int(1)), "min_time_ms": Num(strict=True), "verify": BOOL, "timeout_s": Num(strict=True),
               "quick": BOOL, "sm_copy": TEXT, "sm_bulk": TEXT, "pairs": TEXT, "serial_pairs": TEXT,
               "twin_sizes": Text(("every size", "every other size")), "sampling": SAMPLING})
SKIPPED = Obj({"suite": TEXT, "step": TEXT, "reason": TEXT, "host": TEXT}, required=("suite", "step", "reason"))
PLAN_STEP = Obj({"suite": TEXT, "label": TEXT, "engine": TEXT, "sizes": ListOf(COUNT), "walked": COUNT,
                 "cost": Num(), "min_sample_s": Num(), "two_sided": BOOL, "all_ranks": BOOL},
                required=("suite", "label", "sizes"))
PHASE = Obj({"s": Num(), "n": COUNT})
# what the run planned (catalogue/planned.PlannedStep): each step's hosts, pairs (node-local ranks), sizes, and the
# rows each pair writes at each size
PLANNED_ROW = Obj({"method": TEXT, "direction": Text(DIRECTIONS), "bytes": COUNT, "unless": TEXT},
                  required=("method", "direction"))
PLANNED_STEP = Obj({"suite": TEXT, "step": TEXT, "hosts": ListOf(TEXT), "pairs": ListOf(ListOf(COUNT, length=2)),
                    "sizes": ListOf(COUNT), "rows": ListOf(PLANNED_ROW)},
                   required=("suite", "step", "hosts", "pairs", "sizes", "rows"))

META = Obj({
    "run_id": TEXT, "schema_version": Int(1, SCHEMA_VERSION), "ipcbench_version": TEXT, "git_commit": Null(TEXT),
    "source_digest": TEXT, "command": Either((ListOf(TEXT), TEXT)), "start": TEXT, "end": Null(TEXT),
    "status": TEXT, "platform": TEXT, "python_executable": TEXT, "noise_basis": Text(NOISE_BASES),
    "hosts": ListOf(TEXT), "ranks": ListOf(RANK), "gpus": MapOf(ListOf(GPU)), "ranks_per_gpu": Int(1),
    "topology": MapOf(TOPOLOGY), "pair_mode": PAIR_MODE, "versions": MapOf(Null(Either((TEXT, Int())))),
    "suites": ListOf(TEXT), "sizes": ListOf(Int(1)), "options": OPTIONS, "slurm_job_id": Null(TEXT),
    "mps": MapOf(Obj({"gpus": MapOf(BOOL, key=Digits())})), "plan": ListOf(PLAN_STEP),
    "planned_rows": ListOf(PLANNED_STEP), "skipped": ListOf(SKIPPED),
    "time_breakdown_s": MapOf(MapOf(PHASE)), "evidence": EVIDENCE, "wall_s": Num(), "rows": COUNT,
    "failed_rows": COUNT, "suite_wall_s": MapOf(Num()), "selftest": Obj({"anchor_units": COUNT}),
})


# From schema 4 on a field every writer writes is required: a run of schema 4 without it was damaged, not written
# before the field existed (reading it as unknown let check judge a run without its evidence, its ranks or a GPU's
# UUID as an older one: tests/test_reading_fuzz.py). By the schema that made each required: what the run writes when
# it starts, and what it adds once it completes (status "complete": a run that died keeps the first). Schema 5: the
# planned rows, and the rows count results.csv is held to (record/agreement.py).
REQUIRED_SCHEMA = 4
REQUIRED_AT_START = {4: ("hosts", "ranks", "gpus"),  # who ran where: what check's coverage and evidence rules key on
                     5: ("planned_rows",)}
# once complete: NVML's word on the node before and after (what check's evidence rules judge) and the rows written
# (what record/agreement.py holds results.csv to: every complete run of schema 4 recorded carries it)
REQUIRED_COMPLETE = {4: ("evidence", "rows")}


def required(version: int, complete: bool) -> tuple[str, ...]:
    """The fields a run of schema `version` always has (once complete: those it adds when it completes too)."""
    return tuple(k for since, keys in sorted(REQUIRED_AT_START.items()) if version >= since for k in keys) + \
        tuple(k for since, keys in sorted(REQUIRED_COMPLETE.items()) if complete and version >= since for k in keys)


def check_meta(raw: Any, path: str | os.PathLike) -> None:
    """MetaError (naming `path` and the field) where meta.json's object `raw` is not what the record says."""
    try:
        if isinstance(raw, dict) and "schema_version" in raw:
            _known_version(raw["schema_version"])
        META.check(raw, "")
        check_required(raw)
        check_counts(raw)
    except FieldError as e:
        raise MetaError(path, e.field or "(the object)", e.why) from None


def check_required(raw: dict) -> None:
    """FieldError for a field a run of REQUIRED_SCHEMA or later must have (`required`: REQUIRED_AT_START, and
    REQUIRED_COMPLETE once complete, of its schema and those before; every GPU's uuid): absent there, it was lost,
    not never written."""
    version = raw.get("schema_version", 1)
    if not isinstance(version, int) or version < REQUIRED_SCHEMA:
        return
    for key in required(version, raw.get("status") == "complete"):
        if key not in raw:
            raise FieldError(key, f"absent from a run of schema {version}, whose writer always writes it")
    for host, gpus in raw["gpus"].items():
        for i, g in enumerate(gpus):
            if "uuid" not in g:
                raise FieldError(f"gpus.{host}[{i}].uuid", f"absent from a run of schema {version}, whose writer "
                                                             "always writes it")


def _known_version(v: Any) -> None:
    if isinstance(v, int) and not isinstance(v, bool) and not 1 <= v <= SCHEMA_VERSION:
        raise FieldError("schema_version", f"{v} is not a schema this reader knows (1..{SCHEMA_VERSION}): a run "
                                           "of a newer ipcbench, or an edited file")


def check_counts(raw: dict) -> None:
    """The fields that count the same things agree: the hosts and the ranks' hosts, each rank's GPU and the GPU
    list of its host, ranks_per_gpu and the ranks on one GPU, every rank listed once (where both are recorded)."""
    ranks = raw.get("ranks")
    if not ranks:
        return
    seen = Counter(r["rank"] for r in ranks)
    twice = [i for i, r in enumerate(ranks) if seen[r["rank"]] > 1]
    if twice:
        raise FieldError(f"ranks[{twice[-1]}].rank", f"rank {ranks[twice[-1]]['rank']} is listed twice")
    hosts = raw.get("hosts")
    if hosts is not None and set(hosts) != {r["host"] for r in ranks}:
        raise FieldError("hosts", f"{sorted(set(hosts))} but the ranks ran on {sorted({r['host'] for r in ranks})}")
    gpus = raw.get("gpus")
    if gpus is not None:
        for i, r in enumerate(ranks):
            listed = [g["index"] for g in gpus.get(r["host"], [])]
            if r["gpu"] not in listed:
                raise FieldError(f"ranks[{i}].gpu", f"GPU {r['gpu']} of {r['host']} is not in gpus.{r['host']} "
                                                    f"({', '.join(map(str, listed)) or 'none'})")
    per_gpu = raw.get("ranks_per_gpu")
    counted = max(Counter((r["host"], r["gpu"]) for r in ranks).values())
    if per_gpu is not None and per_gpu != counted:
        raise FieldError("ranks_per_gpu", f"{per_gpu} but the ranks put at most {counted} on one GPU")
