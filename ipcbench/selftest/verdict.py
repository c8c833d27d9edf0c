"""The selftest's verdict (pure): each of ipcbench's one-way rows against its anchor, within both noises
plus a tolerance; the table a person reads and the CSV a script reads."""

from __future__ import annotations

import csv
import os
import statistics
from dataclasses import asdict, dataclass

from ipcbench.selftest.plan import Tolerance, anchor_key
from ipcbench.sizes import fmt_size


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
class Check:
    method: str
    direction: str
    src_rank: int
    dst_rank: int
    src_gpu: int
    dst_gpu: int
    bytes: int
    ipcbench_gbps: float
    ipcbench_noise: float
    anchor: str
    anchor_gbps: float | None
    anchor_noise: float | None
    diff: float | None  # ipcbench / anchor - 1
    tolerance: float | None  # the tolerance of the transfer's size (plan.Tolerance.of)
    allowed: float | None  # both noises + the tolerance
    ok: bool
    why: str = ""


def judge(rows, anchors: dict, tolerance: Tolerance) -> list[Check]:
    """A Check per one-way bandwidth row: ok when |row / anchor - 1| <= row noise + anchor noise + the
    tolerance of its size (plan.Tolerance), the row and its anchor verified. A row without an anchor, or an
    unverified one, is not ok. `anchors`: {(host, AnchorKey, bytes): Anchor}, per driver; a row is held
    against its transfer's anchors of every driver combined (by_transfer)."""
    combined = by_transfer(anchors)
    out = []
    for r in rows:
        if r.direction not in ("push", "pull") or r.bw_gbps_median is None:
            continue
        key = anchor_key(r.method, r.direction, r.src_rank, r.dst_rank, r.src_gpu, r.dst_gpu).transfer()
        a, drivers = combined.get((r.host, key, r.bytes), (None, []))
        noise = r.noise if r.noise is not None else float("inf")
        base = dict(method=r.method, direction=r.direction, src_rank=r.src_rank, dst_rank=r.dst_rank,
                    src_gpu=r.src_gpu, dst_gpu=r.dst_gpu, bytes=r.bytes, ipcbench_gbps=r.bw_gbps_median,
                    ipcbench_noise=noise, anchor=key.describe(drivers))
        if a is None:
            out.append(Check(**base, anchor_gbps=None, anchor_noise=None, diff=None, tolerance=None, allowed=None,
                             ok=False, why="no anchor was measured"))
            continue
        diff = r.bw_gbps_median / a.gbps - 1
        tol = tolerance.of(r.bytes, a.gbps)
        allowed = noise + a.noise + tol
        why = ("the row failed verification" if not r.verified else
               "the anchor's copy failed verification" if a.mismatches else
               f"{diff:+.1%} is beyond {allowed:.1%}" if abs(diff) > allowed else "")
        out.append(Check(**base, anchor_gbps=a.gbps, anchor_noise=a.noise, diff=diff, tolerance=tol,
                         allowed=allowed, ok=not why, why=why))
    return out


def table(checks: list[Check]) -> str:
    """One line per (method, direction, pair), one column per size: the difference from the anchor, with
    '!' where it is beyond what is allowed."""
    sizes = sorted({c.bytes for c in checks})
    lines: dict[tuple, dict[int, Check]] = {}
    for c in checks:
        lines.setdefault((c.method, c.direction, c.src_rank, c.dst_rank, c.src_gpu, c.dst_gpu), {})[c.bytes] = c
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


def write_csv(path: str | os.PathLike, checks: list[Check]) -> None:
    """Every check as a row (a new file: the selftest writes into its own new run directory)."""
    with open(path, "x", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(Check.__dataclass_fields__))
        w.writeheader()
        for c in checks:
            w.writerow({k: ("" if v is None else v) for k, v in asdict(c).items()})


def summary(checks: list[Check], tolerance: Tolerance) -> dict:
    """What meta.json records of the verdict."""
    bad = [c for c in checks if not c.ok]
    return {"rows": len(checks), "mismatches": len(bad), "tolerance": tolerance.large,
            "small_tolerance": tolerance.small, "small_us": tolerance.small_us,
            "worst": max((abs(c.diff) for c in checks if c.diff is not None), default=None)}
