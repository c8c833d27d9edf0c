"""The selftest's verdict (pure): each of ipcbench's one-way rows against its anchor, within both noises
plus a tolerance, as a Status (ipcbench/status.py: pass, fail, cannot judge); the whole is the Status of its
rows; the table a person reads and the CSV a script reads."""

from __future__ import annotations

import csv
import os
import statistics
from dataclasses import asdict, dataclass

from ipcbench.judging.row_key import RowKey
from ipcbench.selftest.plan import Tolerance, anchor_key
from ipcbench.sizes import fmt_size
from ipcbench.status import Status


@dataclass(frozen=True)
class Anchor:
    """One anchor measurement: GB/s of the median repetition, the relative half-width of its median's
    interval (core/sampler.median_noise), repetitions, transfers per repetition, destination mismatches."""

    gbps: float
    noise: float
    reps: int
    transfers: int
    mismatches: int = 0


def combine(measurements: list[Anchor]) -> Anchor:
    """One anchor from several measurements of one transfer (its buffers' placements; the processes of every
    rank that drives it): the median GB/s; noise the larger of the measurements' own (their median
    interval) and the farthest of them from the median. Measurements of one transfer that differ say how
    well it can be known, and a row lies where one of them might (its buffer at one place, its process one
    of these): a small copy's rate takes a few levels by where its buffer lies, and the median may sit at
    one level while the row sits at another (docs/measurement.md)."""
    gbps = [a.gbps for a in measurements]
    med = statistics.median(gbps)
    mid = sorted(measurements, key=lambda a: a.gbps)[len(measurements) // 2]
    spread = max(abs(g / med - 1) for g in gbps) if med > 0 else float("inf")
    return Anchor(gbps=med, noise=max(max(a.noise for a in measurements), spread),
                  reps=sum(a.reps for a in measurements), transfers=mid.transfers,
                  mismatches=sum(a.mismatches for a in measurements))


def by_transfer(anchors: dict) -> dict:
    """{(host, transfer key (driver -1), bytes): (Anchor, drivers)}: each driver's anchor of one transfer on
    one host combined (combine), with the world ranks whose processes measured it."""
    groups: dict[tuple, list[tuple[int, Anchor]]] = {}
    for (host, key, n), a in anchors.items():
        groups.setdefault((host, key.transfer(), n), []).append((key.driver, a))
    return {k: (combine([a for _, a in v]), sorted(d for d, _ in v)) for k, v in groups.items()}


@dataclass(frozen=True)
class RowVsAnchor:
    """One of ipcbench's rows held against its anchor: the row's RowKey (judging/row_key.py) and its ranks."""

    key: RowKey
    src_rank: int
    dst_rank: int
    ipcbench_gbps: float
    ipcbench_noise: float
    anchor: str
    anchor_gbps: float | None
    anchor_noise: float | None
    diff: float | None  # ipcbench / anchor - 1
    tolerance: float | None  # the tolerance of the transfer's size (plan.Tolerance.of)
    allowed: float | None  # both noises + the tolerance
    status: Status  # pass; fail (beyond what is allowed, or a copy failed verification); cannot judge (no anchor)
    why: str = ""

    @property
    def ok(self) -> bool:
        return self.status is Status.PASS

    def as_row(self) -> dict:
        """The check as selftest.csv writes it: the key's fields, then the others, then `ok`."""
        fields = {k: v for k, v in asdict(self).items() if k != "key"}
        return {**asdict(self.key), **fields, "ok": self.ok}


def judge(rows, anchors: dict, tolerance: Tolerance) -> list[RowVsAnchor]:
    """A RowVsAnchor per one-way bandwidth row: PASS when |row / anchor - 1| <= row noise + anchor noise + the
    tolerance of its size (plan.Tolerance), the row and its anchor verified; FAIL when beyond, or either
    failed verification; UNJUDGED when no anchor of its transfer was measured. `anchors`: {(host, AnchorKey,
    bytes): Anchor}, per driver; a row is held against its transfer's anchors of every driver combined
    (by_transfer)."""
    combined = by_transfer(anchors)
    out = []
    for r in rows:
        if r.direction not in ("push", "pull") or r.bw_gbps_median is None:
            continue
        key = anchor_key(r.method, r.direction, r.src_rank, r.dst_rank, r.src_gpu, r.dst_gpu).transfer()
        a, drivers = combined.get((r.host, key, r.bytes), (None, []))
        noise = r.noise if r.noise is not None else float("inf")
        base = dict(key=RowKey.of(r), src_rank=r.src_rank, dst_rank=r.dst_rank, ipcbench_gbps=r.bw_gbps_median,
                    ipcbench_noise=noise, anchor=key.describe(drivers))
        if a is None:
            out.append(RowVsAnchor(**base, anchor_gbps=None, anchor_noise=None, diff=None, tolerance=None,
                                   allowed=None, status=Status.UNJUDGED, why="no anchor was measured"))
            continue
        diff = r.bw_gbps_median / a.gbps - 1
        tol = tolerance.of(r.bytes, a.gbps)
        allowed = noise + a.noise + tol
        why = ("the row failed verification" if not r.verified else
               "the anchor's copy failed verification" if a.mismatches else
               f"{diff:+.1%} is beyond {allowed:.1%}" if abs(diff) > allowed else "")
        out.append(RowVsAnchor(**base, anchor_gbps=a.gbps, anchor_noise=a.noise, diff=diff, tolerance=tol,
                               allowed=allowed, status=Status.FAIL if why else Status.PASS, why=why))
    return out


def overall(checks: list[RowVsAnchor]) -> Status:
    """The selftest's verdict: FAIL if a row failed, else UNJUDGED if a row could not be judged or none was,
    else PASS (exit 0, 1, 2: Status.exit_code)."""
    return Status.of(c.status for c in checks)


def table(checks: list[RowVsAnchor]) -> str:
    """One line per (method, direction, pair), one column per size: the difference from the anchor, with
    '!' where it is beyond what is allowed."""
    sizes = sorted({c.key.bytes for c in checks})
    lines: dict[tuple, dict[int, RowVsAnchor]] = {}
    for c in checks:
        k = c.key
        lines.setdefault((k.method, k.direction, c.src_rank, c.dst_rank, k.src_gpu, k.dst_gpu), {})[k.bytes] = c
    head = f"{'method':14s} {'dir':4s} {'ranks':7s} {'GPUs':6s}" + "".join(f"{fmt_size(s):>8s}" for s in sizes)
    out = [head]
    for (m, d, a, b, ga, gb), by_size in lines.items():
        cells = []
        for s in sizes:
            cell = by_size.get(s)
            cells.append("" if cell is None else "n/a" if cell.diff is None else f"{cell.diff:+.1%}"
                         + ("!" if not cell.ok else ""))
        out.append(f"{m:14s} {d:4s} {f'{a}->{b}':7s} {f'{ga}->{gb}':6s}" + "".join(f"{x:>8s}" for x in cells))
    return "\n".join(out)


def anchors_table(anchors: dict) -> str:
    """The anchors' GB/s, one line per (host, anchor), one column per size."""
    sizes = sorted({n for _, _, n in anchors})
    keys = sorted({(h, k) for h, k, _ in anchors}, key=lambda hk: (hk[0], hk[1].engine, hk[1].style, hk[1].src_gpu,
                                                                   hk[1].dst_gpu, hk[1].driver))
    many = len({h for h, _ in keys}) > 1
    out = [f"{'anchor (GB/s)':34s}" + "".join(f"{fmt_size(s):>8s}" for s in sizes)]
    for h, k in keys:
        name = f"{h}: {k.describe()}" if many else k.describe()
        out.append(f"{name:34s}" + "".join(
            f"{anchors[(h, k, s)].gbps:8.1f}" if (h, k, s) in anchors else f"{'':8s}" for s in sizes))
    return "\n".join(out)


def write_csv(path: str | os.PathLike, checks: list[RowVsAnchor]) -> None:
    """Every check as a row (a new file: the selftest writes into its own new run directory): its key's fields
    (host, GPUs, method, direction, bytes) and ranks, the rest, `status` in the vocabulary's words (pass, fail,
    unknown), and `ok` (True only for pass) as before."""
    fields = [*RowKey.COLUMNS, *(f for f in RowVsAnchor.__dataclass_fields__ if f != "key"), "ok"]
    with open(path, "x", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        for c in checks:
            w.writerow({k: ("" if v is None else str(v)) for k, v in c.as_row().items()})


def summary(checks: list[RowVsAnchor], tolerance: Tolerance) -> dict:
    """What meta.json records of the verdict: its status, rows, those beyond their anchor (mismatches) and
    those that could not be judged."""
    return {"status": overall(checks).value, "rows": len(checks),
            "mismatches": sum(c.status is Status.FAIL for c in checks),
            "unjudged": sum(c.status is Status.UNJUDGED for c in checks), "tolerance": tolerance.large,
            "small_tolerance": tolerance.small, "small_us": tolerance.small_us,
            "worst": max((abs(c.diff) for c in checks if c.diff is not None), default=None)}
