"""A realistic synthetic run directory (results.csv + meta.json) for report/compare tests.

Numbers follow a 4x H200 node with NVLink 4 (18 links x 26.562 GB/s = 478 GB/s per direction): the copy
engine reaches ~394 GB/s one way at 256M, SM copies ~372, host-staged paths ~50, small-message latency
~2 us. Rows are written with the project's own ResultsWriter, so the file looks exactly like a real one, with
every column of the current schema: `kind`, `checks`, `noise` and `samples_us` (five samples whose median,
min and max are the row's). meta.json has what compare and the ceilings read: GPU UUIDs, L2 size and memory
bandwidth, the NVML link table with per-GPU active links, options, ranks and ranks_per_gpu.

Helpers for compare tests: read_csv/write_csv (the file as lists of text), scale_rows (make rows faster or
slower, samples included), set_samples (give a row new samples, its statistics recomputed), old_style (strip
a run back to the columns of the first version).
"""

from __future__ import annotations

import csv
import math
import random
import statistics
from pathlib import Path

from ipcbench.results import BASE_COLUMNS, COLUMNS, ResultsWriter, Row, format_samples, write_meta

K, M = 1 << 10, 1 << 20
DEFAULT_SIZES = [4 * K << i for i in range(17)]  # 4K .. 256M
LATENCY_SIZES = [8 << (3 * i) for i in range(5)] + [64 * K]  # 8 B .. 32K, 64K

# (suite, method, directions, peak GB/s one way at large size, latency floor us)
BW_METHODS = [
    ("copy", "ce", ("push", "pull", "bidir"), 394.0, 2.2),
    ("copy", "ce_alltoall", ("push",), None, 2.6),  # per flow: ALLTOALL_TOTAL / (n_gpus - 1)
    ("kernel", "sm_read", ("pull", "bidir"), 372.0, 1.8),
    ("kernel", "sm_write", ("push", "bidir"), 380.0, 1.8),
    ("pool", "pool_ce", ("push", "pull"), 393.0, 2.3),
    ("pool", "pool_sm_read", ("pull",), 370.0, 1.9),
    ("pool", "pool_sm_write", ("push",), 378.0, 1.9),
    ("staged", "mpi_staged", ("push", "bidir"), 48.0, 9.0),
    ("staged", "shm_staged", ("push", "bidir"), 52.0, 7.0),
    ("pipeline", "ring_d4", ("push",), 385.0, 3.0),
]
LAT_METHODS = [("latency", "ce", 2.1), ("latency", "sm_pingpong", 1.6), ("latency", "event_pingpong", 4.5)]
# The nccl suite (make_run(nccl=True)): send/receive bandwidth, one way and a ping-pong on small messages.
NCCL_BW = [("nccl", "nccl", ("push", "bidir"), 340.0, 9.0)]
NCCL_LAT = [("nccl", "nccl", 8.5), ("nccl", "nccl_pingpong", 10.0)]
ERROR_OPS = [("err_open_own_handle", 44.0), ("err_open_freed_handle", 82.0)]
HANDLE_OPS = [("ipc_get_mem_handle", 1.5), ("ipc_open_mem_handle_first", 180.0), ("ipc_open_mem_handle_repeat", 0.8),
              ("ipc_close_mem_handle", 40.0), ("ipc_get_event_handle", 1.0), ("ipc_open_event_handle", 9.0)]
ALLTOALL_TOTAL = 450.0  # GB/s leaving one GPU in the all-to-all, shared by its flows (NVLink aggregate 478)
SAME_GPU_FACTOR = 2.2  # same-GPU IPC copies are device-local: much faster than NVLink


def _bw(size: int, peak: float, lat_us: float) -> float:
    """GB/s for a transfer of `size` bytes: a fixed cost plus size / peak."""
    t_us = lat_us + size / (peak * 1e3)
    return size / (t_us * 1e3)


def make_run(root: str | Path, run_id: str = "20261122-190000-synth", hosts=("hostA",), n_gpus: int = 4,
             sizes=None, seed: int = 1, same_gpu: bool = True, weak_pair=None, noisy=None,
             unverified=None, host_scale=None, suites=None, meta: bool = True, links: bool = True,
             uuid_prefix: str = "GPU-synth", samples: bool = True, options=None, errors: bool = False,
             nccl: bool = False, cv_range: tuple[float, float] = (0.001, 0.02)) -> Path:
    """Write a run into root/run_id and return that directory.

    weak_pair: (host, src_gpu, dst_gpu, factor) multiplies that pair's bandwidth by factor (all methods).
    noisy: list of (suite, method, direction, src_gpu, dst_gpu, bytes) rows given cv 0.2.
    cv_range: every other row's cv, drawn uniformly from it (its noise: 1.2533 cv / sqrt(5)).
    unverified: list of the same keys written with verified=false.
    host_scale: {host: factor} scales all bandwidth of a host (fleet outliers).
    suites: subset of suites to write (default: all).
    samples: write samples_us (five samples: the row's min, median and max and two between); False leaves
    it empty, as a run written before that column.
    options: meta.json "options" to use instead of the default.
    errors: add the handles suite's error-path rows (kind error, verified false, one sample), as real runs have.
    nccl: add the nccl suite's rows (push and bidir over the sizes, one way over the latency sizes, ping-pong).
    """
    rng = random.Random(seed)
    sizes = list(sizes or DEFAULT_SIZES)
    noisy = set(map(tuple, noisy or ()))
    unverified = set(map(tuple, unverified or ()))
    host_scale = host_scale or {}
    want = set(suites) if suites else None
    run_dir = Path(root) / run_id
    rows: list[Row] = []
    pairs = [(s, d) for s in range(n_gpus) for d in range(n_gpus) if s != d]

    def add(host, suite, method, direction, s, d, size, t_us, bw, src_rank=None, dst_rank=None, note="", n=5,
            verified=True):
        key = (suite, method, direction, s, d, size)
        cv = 0.2 if key in noisy else rng.uniform(*cv_range)
        spread = 1.0 + 2 * cv
        kind = "error" if method.startswith("err_") else ("latency" if direction == "oneway" else
                                                          "bandwidth" if bw is not None else "op")
        times = [t_us / spread, t_us * (1 - cv / 2), t_us, t_us * (1 + cv / 2), t_us * spread] if n > 1 else [t_us]
        if n == 1:
            cv, spread = 0.0, 1.0
        first = hosts.index(host) * n_gpus * (2 if same_gpu else 1)  # the host's first world rank (make_meta's)
        rows.append(Row(
            run_id=run_id, host=host, suite=suite, method=method, direction=direction,
            src_rank=first + (s if src_rank is None else src_rank),
            dst_rank=first + (d if dst_rank is None else dst_rank),
            src_gpu=s, dst_gpu=d, same_gpu=(s == d), bytes=size,
            iterations=max(1, int(10_000 / (1 + t_us))), samples=n,
            time_us_median=t_us, time_us_min=t_us / spread, time_us_max=t_us * spread,
            bw_gbps_median=bw, bw_gbps_max=None if bw is None else bw * spread,
            cv=cv, verified=verified and key not in unverified, note=note, kind=kind, checks=n if verified else 0,
            noise=1.2533 * cv / math.sqrt(n), samples_us=format_samples(times) if samples else ""))

    for hi, host in enumerate(hosts):
        hscale = host_scale.get(host, 1.0)
        for suite, method, directions, peak, lat in BW_METHODS + (NCCL_BW if nccl else []):
            if want and suite not in want:
                continue
            if peak is None:
                peak = ALLTOALL_TOTAL / max(1, n_gpus - 1)
            for direction in directions:
                for s, d in pairs:
                    f = hscale * rng.uniform(0.985, 1.01)
                    if weak_pair and weak_pair[0] == host and (s, d) == tuple(weak_pair[1:3]):
                        f *= weak_pair[3]
                    for size in sizes:
                        total = size * (2 if direction == "bidir" else 1)
                        bw = _bw(size, peak * f, lat) * (2 if direction == "bidir" else 1)
                        t_us = total / (bw * 1e3)
                        note = f"ring=4 p99_us={t_us * 1.3:.1f}" if suite == "pipeline" else ""
                        add(host, suite, method, direction, s, d, size, t_us, bw, note=note)
                if same_gpu and suite == "copy" and method == "ce" and direction != "bidir":
                    for g in range(n_gpus):  # ranks g and g + n_gpus share GPU g
                        for size in sizes:
                            bw = _bw(size, peak * SAME_GPU_FACTOR * hscale, lat)
                            add(host, suite, method, direction, g, g, size, size / (bw * 1e3), bw,
                                src_rank=g, dst_rank=g + n_gpus)
        for suite, method, lat in LAT_METHODS + (NCCL_LAT if nccl else []):
            if not want or suite in want:
                for s, d in pairs:
                    for size in ([4] if method.endswith("pingpong") and suite == "nccl" else LATENCY_SIZES):
                        t = (lat + size / 300e3) * rng.uniform(0.98, 1.03)
                        add(host, suite, method, "oneway", s, d, size, t, None)
        if not want or "handles" in want:
            for op, t in HANDLE_OPS:
                for s, d in pairs[: n_gpus - 1]:
                    add(host, "handles", op, "op", s, d, 64 * M, t * rng.uniform(0.95, 1.05), None)
                if same_gpu:
                    add(host, "handles", op, "op", 0, 0, 64 * M, t * 0.9, None, src_rank=0, dst_rank=n_gpus)
            if errors:
                for op, t in ERROR_OPS:
                    add(host, "handles", op, "op", 0, 1, 0, t * rng.uniform(0.9, 1.1), None,
                        note="clear error: cudaErrorInvalidValue", n=1, verified=False)

    with ResultsWriter(run_dir) as w:
        w.write(rows)
    if meta:
        m = make_meta(run_id, hosts, n_gpus, sizes, links=links, uuid_prefix=uuid_prefix, same_gpu=same_gpu)
        if options is not None:
            m["options"] = options
        write_meta(run_dir, m)
    return run_dir


def make_meta(run_id, hosts, n_gpus, sizes, links=True, uuid_prefix="GPU-synth", same_gpu=True) -> dict:
    nranks = n_gpus * (2 if same_gpu else 1)
    meta = {
        "run_id": run_id, "ipcbench_version": "0.1.0", "git_commit": "abc123",
        "command": ["ipcbench", "all"], "start": "2026-11-22T19:00:00+00:00", "end": "2026-11-22T19:20:00+00:00",
        "hosts": list(hosts),
        "ranks": [{"rank": r + i * nranks, "host": h, "local_rank": r, "gpu": r % n_gpus}
                  for i, h in enumerate(hosts) for r in range(nranks)],
        "gpus": {h: [{"index": g, "name": "NVIDIA H200", "uuid": f"{uuid_prefix}-{h}-{g:04d}",
                      "pci_bus_id": f"00000000:{g + 6:02X}:00.0", "sm_count": 132,
                      "memory_bytes": 150_754_820_096, "cc": "9.0", "l2_bytes": 62_914_560, "mem_bw_gbps": 4814.3}
                     for g in range(n_gpus)] for h in hosts},
        "ranks_per_gpu": 2 if same_gpu else 1,
        "versions": {"driver": "580.159.04", "cuda_driver": 13000, "cuda_runtime": 13000, "cupy": "14.2.0",
                     "cuda_python": "13.3.1", "mpi4py": "4.1.2", "mpi_library": "Open MPI v4.1.6",
                     "python": "3.12.3"},
        "suites": ["copy", "kernel", "pool", "staged", "latency", "handles", "pipeline"],
        "sizes": list(sizes),
        "options": {"samples": None, "min_time_ms": 5.0, "verify": True, "quick": False,
                    "sampling": {"min_time_ms": 5.0, "min_samples": 3, "max_samples": 15, "noise": 0.005,
                                 "max_time_s": 0.25}},
    }
    if links:
        meta["topology"] = {h: {
            "p2p_matrix": [[1] * n_gpus for _ in range(n_gpus)],
            "links": [{"src_gpu": s, "dst_gpu": d, "kind": "nvlink", "nvlink_count": 18, "per_link_gbps": 26.562,
                       "peak_gbps": round(18 * 26.562, 1), "pcie_gen": 5, "pcie_width": 16}
                      for s in range(n_gpus) for d in range(n_gpus) if s != d],
            "per_gpu": [{"active": 18, "version": 6, "pcie_gen": 5, "pcie_width": 16} for _ in range(n_gpus)]}
            for h in hosts}
    return meta


# ------------------------------------------------------------------------------------------ editing runs

def read_csv(run_dir: Path) -> tuple[list[str], list[list[str]]]:
    """(header, records) of a run's results.csv, as text."""
    with open(Path(run_dir) / "results.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    return rows[0], rows[1:]


def write_csv(run_dir: Path, header: list[str], records: list[list[str]]) -> None:
    with open(Path(run_dir) / "results.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([header] + records)


def _f(v: float) -> str:
    return f"{v:.6g}"


def scale_rows(run_dir: Path, pick, factor: float) -> list[int]:
    """Make rows `factor` times faster (factor < 1: slower): bandwidth columns times factor, times and
    samples divided by it. `pick`: a predicate on the record (a dict of text) or a collection of 0-based
    row indices. Returns the indices of the rows changed."""
    header, records = read_csv(run_dir)
    ix = {c: i for i, c in enumerate(header)}
    chosen = pick if callable(pick) else (lambda _r, _want=set(pick): _r["_index"] in _want)
    done = []
    for i, r in enumerate(records):
        if not chosen({**dict(zip(header, r)), "_index": i}):
            continue
        done.append(i)
        for c in ("bw_gbps_median", "bw_gbps_max"):
            if r[ix[c]]:
                r[ix[c]] = _f(float(r[ix[c]]) * factor)
        for c in ("time_us_median", "time_us_min", "time_us_max"):
            if r[ix[c]]:
                r[ix[c]] = _f(float(r[ix[c]]) / factor)
        if "samples_us" in ix and r[ix["samples_us"]]:
            r[ix["samples_us"]] = format_samples(float(x) / factor for x in r[ix["samples_us"]].split())
    write_csv(run_dir, header, records)
    return done


def set_samples(run_dir: Path, index: int, times_us: list[float]) -> None:
    """Give row `index` these samples (µs per transfer) and the statistics that follow from them: median,
    min, max, cv, noise, samples, and GB/s for a bandwidth row (bytes x 2 for bidir over the time)."""
    header, records = read_csv(run_dir)
    ix = {c: i for i, c in enumerate(header)}
    r = records[index]
    med = statistics.median(times_us)
    cv = statistics.stdev(times_us) / statistics.mean(times_us) if len(times_us) > 1 else 0.0
    r[ix["samples_us"]] = format_samples(times_us)
    r[ix["samples"]] = str(len(times_us))
    r[ix["time_us_median"]], r[ix["time_us_min"]], r[ix["time_us_max"]] = _f(med), _f(min(times_us)), _f(max(times_us))
    r[ix["cv"]] = _f(cv)
    r[ix["noise"]] = _f(1.2533 * cv / math.sqrt(len(times_us)))
    if r[ix["bw_gbps_median"]]:
        total = int(r[ix["bytes"]]) * (2 if r[ix["direction"]] == "bidir" else 1)
        r[ix["bw_gbps_median"]] = _f(total / (med * 1e3))
        r[ix["bw_gbps_max"]] = _f(total / (min(times_us) * 1e3))
    write_csv(run_dir, header, records)


def old_style(run_dir: Path) -> None:
    """Rewrite a run as the first version wrote it: only the original 21 columns (no kind, checks, noise,
    samples_us), and latency rows with a GB/s value, as they had then."""
    header, records = read_csv(run_dir)
    ix = {c: i for i, c in enumerate(header)}
    out = []
    for r in records:
        if r[ix["kind"]] == "latency" and not r[ix["bw_gbps_median"]]:
            r[ix["bw_gbps_median"]] = _f(int(r[ix["bytes"]]) / (float(r[ix["time_us_median"]]) * 1e3))
        out.append([r[ix[c]] for c in BASE_COLUMNS])
    write_csv(run_dir, list(BASE_COLUMNS), out)


assert len(COLUMNS) > len(BASE_COLUMNS)


def counted(run_dir: Path) -> Path:
    """The run's rows count in meta.json made its results.csv's, as a run measured without the rows a test dropped
    would have it (a count that disagrees with the rows is refused before anything is judged: record/agreement.py)."""
    import json

    meta = json.loads((Path(run_dir) / "meta.json").read_text())
    if "rows" in meta:
        meta["rows"] = len(read_csv(run_dir)[1])
        write_meta(run_dir, meta)
    return Path(run_dir)


# ------------------------------------------------------------------------------------------ schema 5

def with_planned_rows(run_dir: Path, skipped: list[dict] | None = None) -> Path:
    """Make a run one of schema 5: its meta.json records the rows its results.csv holds as what it planned
    (planned_rows, derived here from the rows: per suite, method and direction, the pairs that share their sizes),
    its rows count and status complete; `skipped` steps (meta.json's form) are planned too, and recorded as skipped.
    Most runs under results/ and tests/data predate the record; a run carrying it lets the reader's checks be
    tested end to end."""
    import json

    from ipcbench.catalogue.suites import ROWS

    run_dir = Path(run_dir)
    header, records = read_csv(run_dir)
    ix = {c: i for i, c in enumerate(header)}
    meta = json.loads((run_dir / "meta.json").read_text())
    local = {r["rank"]: r.get("local_rank", r["rank"]) for r in meta["ranks"]}
    groups: dict[tuple, dict[tuple[int, int], list[int]]] = {}
    for r in records:
        g = groups.setdefault((r[ix["host"]], r[ix["suite"]], r[ix["method"]], r[ix["direction"]]), {})
        g.setdefault((local[int(r[ix["src_rank"]])], local[int(r[ix["dst_rank"]])]), []).append(int(r[ix["bytes"]]))
    planned = []
    for (host, suite, method, direction), pairs in groups.items():
        by_sizes: dict[tuple[int, ...], list[list[int]]] = {}
        for pair, sizes in pairs.items():
            by_sizes.setdefault(tuple(sorted(sizes)), []).append(list(pair))
        for i, (sizes, ps) in enumerate(by_sizes.items()):
            planned.append({"suite": suite, "step": f"{method} {direction}" + (f" #{i + 1}" if i else ""),
                            "hosts": [host], "pairs": ps, "sizes": list(sizes),
                            "rows": [{"method": method, "direction": direction}]})
    for s in skipped or []:  # a row of its suite's first method, pushed from rank 0 to 1 at 4K
        planned.append({"suite": s["suite"], "step": s["step"], "hosts": [s["host"]], "pairs": [[0, 1]],
                        "sizes": [4096], "rows": [{"method": next(iter(ROWS[s["suite"]])), "direction": "push"}]})
    meta.update(schema_version=5, status="complete", rows=len(records), planned_rows=planned,
                skipped=list(skipped or []))
    write_meta(run_dir, meta)
    return run_dir


def fleet_sizes() -> list[int]:
    """Coarse sizes used for the 200k-row fleet benchmark."""
    return [4 * K, 64 * K, 1 * M, 16 * M, 256 * M]


if __name__ == "__main__":  # python tests/synth.py OUTDIR
    import sys

    print(make_run(sys.argv[1] if len(sys.argv) > 1 else "synth-results"))
    assert math.isclose(_bw(256 * M, 394.0, 2.2), 394.0, rel_tol=0.01)
