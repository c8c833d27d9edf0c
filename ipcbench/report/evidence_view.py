"""The node's evidence beside the numbers: what NVML said of each GPU at the end of the run (NVLinks up, their
speed, PCIe training, ECC, remaps, clocks, other processes), what changed during it (evidence/delta.py: every NVLink
error counter that grew, link by link, in a table of its own), and every item that is not available with why. A run
recorded before ipcbench read it says "no node evidence recorded".

`evidence_blocks` is the report's "Node evidence" section of a run; `glance_lines` the headline's word on it, in
`ipcbench check`'s voice: what check's evidence rules found (judging/evidence_rules.py, through the run's verdict,
judging/judge.shipped_verdict), one line per kind of finding, never a judgement of its own. Pure: the record and
the verdict in, words out.
"""

from __future__ import annotations

from ipcbench.evidence.delta import COUNTER_WORDS, Change, changes, describe, foreign
from ipcbench.evidence.model import NA, Evidence, GpuReading, Snapshot
from ipcbench.judging.evidence_notes import NO_EVIDENCE, listed, pcie_text
from ipcbench.judging.evidence_rules import ITEM_WORDS, SOURCE
from ipcbench.judging.expect import evidence_defaults, resolve
from ipcbench.judging.judge import VERDICTS
from ipcbench.record.meta import Meta
from ipcbench.report.render import Block, Heading, Para, Table
from ipcbench.status import Status

MAX_TERMINAL_COUNTERS = 8  # links of the counter table on a terminal (the report lists every one)
RATE_KEY = "link_error_rate_allowed"  # the [[evidence]] key of the CRC counters' rates (judging/defaults.toml)


def links_text(g: GpuReading) -> str:
    """'18 of 18 active', or 'not available'."""
    n = g.active_links()
    return NA if n is None else f"{n} of {len(g.links.value)} active"


def speed_text(g: GpuReading) -> str:
    """The active links' rate per direction: '26.562 GB/s' when alike, each rate with its links otherwise; a rate
    from the catalogue (NVML gave none) is marked."""
    if not g.links.ok:
        return NA
    rates: dict[str, list[int]] = {}
    for ln in g.links.value:
        if ln.active.ok and ln.active.value and ln.speed_gbps.value is not None:
            rates.setdefault(f"{ln.speed_gbps.value:g} GB/s" + ("" if ln.speed_gbps.ok else " (catalogue)"),
                             []).append(ln.link)
    if not rates:
        return NA if any(ln.active.value for ln in g.links.value) else "-"
    if len(rates) == 1:
        return next(iter(rates))
    return "; ".join(f"{r} (link{'s' if len(ls) > 1 else ''} {', '.join(map(str, ls))})" for r, ls in rates.items())


def ecc_text(g: GpuReading) -> str:
    parts = []
    if g.ecc_uncorrected_volatile.ok:
        parts.append(f"{g.ecc_uncorrected_volatile.value} uncorrectable")
    if g.ecc_corrected_volatile.ok:
        parts.append(f"{g.ecc_corrected_volatile.value} corrected")
    return ", ".join(parts) + " (volatile)" if parts else NA


def remap_text(g: GpuReading) -> str:
    if not (g.remap_pending.ok or g.remapped_uncorrectable.ok):
        return NA
    parts = []
    if g.remap_pending.ok:
        parts.append("pending" if g.remap_pending.value else "none pending")
    if g.remap_failure.ok and g.remap_failure.value:
        parts.append("a remap FAILED")
    if g.remapped_uncorrectable.ok:
        parts.append(f"{g.remapped_uncorrectable.value} rows remapped (uncorrectable)")
    return ", ".join(parts)


def clocks_text(g: GpuReading) -> str:
    if not g.clock_events.ok:
        return NA
    return ", ".join(g.clock_events.value) or "none"


def processes_text(g: GpuReading, snap: Snapshot) -> str:
    if not g.processes.ok:
        return NA
    others = [p for i, p in foreign(snap) if i == g.index]
    return "; ".join(describe(p) for p in others) or "none"


COLUMNS = ["GPU", "NVLinks", "link speed", "PCIe", "ECC", "row remaps", "clock events at the end", "other processes"]


def _gpu_row(g: GpuReading, snap: Snapshot) -> list[str]:
    return [str(g.index), links_text(g), speed_text(g), pcie_text(g), ecc_text(g), remap_text(g), clocks_text(g),
            processes_text(g, snap)]


def _missing(snap: Snapshot) -> list[str]:
    """Every item not available on some GPU of `snap`, grouped: 'link error counters (GPUs 0-7): not supported by
    the driver'."""
    names = {"links": "NVLinks", "pcie_gen": "PCIe generation", "pcie_width": "PCIe width",
             "pcie_max_gen": "PCIe maximum generation", "pcie_max_width": "PCIe maximum width",
             "clock_events": "clock event reasons", "clock_event_ns": "clock event time",
             "ecc_uncorrected_volatile": "uncorrectable ECC count", "ecc_corrected_volatile": "corrected ECC count",
             "remap_pending": "row remap state", "remap_failure": "row remap failure",
             "remapped_uncorrectable": "rows remapped", "processes": "compute processes"}
    link_names = {"active": "NVLink state", "version": "NVLink version", "speed_gbps": "NVLink speed",
                  "errors": "NVLink error counters"}
    seen: dict[tuple[str, str], set[int]] = {}
    for g in snap.gpus:
        for key, name in names.items():
            item = getattr(g, key)
            if not item.ok:
                seen.setdefault((name, item.missing), set()).add(g.index)
        for ln in g.links.value if g.links.ok else []:
            for key, name in link_names.items():
                item = getattr(ln, key)
                if not item.ok:
                    seen.setdefault((name, item.missing), set()).add(g.index)
    return [f"{name} ({_gpus(sorted(gpus))}): {why}" for (name, why), gpus in seen.items()]


def _gpus(ids: list[int]) -> str:
    return f"GPU {ids[0]}" if len(ids) == 1 else "GPUs " + ", ".join(map(str, ids))


def host_blocks(ev: Evidence, host: str) -> list[Block]:
    """One host's part of the Node evidence section: its GPUs at the end, what changed during the run, the
    counters that grew, what is not available."""
    before, after = ev.before(host), ev.after(host)
    shown = after or before
    assert shown is not None
    title = f"**{host}**" + ("" if before and after else f" (only {shown.when} the run)")
    if shown.missing:
        return [Para(f"{title}: every item {NA}: {shown.missing}", terminal=True)]
    blocks: list[Block] = [Para(f"{title}: read through NVML before the first measurement and after the last; "
                                "each GPU as it was at the end" if before and after else title, terminal=True),
                           Table(COLUMNS, [_gpu_row(g, shown) for g in shown.gpus], terminal=True)]
    if before and after:
        changed = changes(before, after)
        said = [c.text for c in changed if c.kind != "link_error"]
        links = len(changed) - len(said)
        said += [f"NVLink error counters grew on {links} link{'s' if links != 1 else ''} (below)"] if links else []
        blocks.append(Para("**during the run**: " + (listed(said) if said else "nothing changed in what was read"),
                           terminal=True))
        blocks += counter_blocks([c for c in changed if c.kind == "link_error"], after.time - before.time)
        missing = ([f"before the run: {before.missing}"] if before.missing else []) + _missing(after)
    else:
        missing = _missing(shown)
    if missing:
        blocks.append(Para(f"**{NA}**: " + listed(missing), terminal=True))
    return blocks


def counter_blocks(grown: list[Change], window_s: float) -> list[Block]:
    """Every NVLink error counter that grew during the run, link by link: how much, and how many a second of the
    run (what check's rates judge: judging/evidence_rules.py); the terminal shows the largest few."""
    if not grown:
        return []
    rows = []
    for c in sorted(grown, key=lambda c: (-_growth(c), c.gpu, c.link)):
        (counter, was), now = next(iter(c.before.items())), next(iter(c.after.values()))
        rate = f"{(now - was) / window_s:.3g}" if window_s > 0 else "?"
        rows.append([str(c.gpu), str(c.link), COUNTER_WORDS.get(counter, (counter, counter))[1], str(was), str(now),
                     str(now - was), rate])
    cols = ["GPU", "link", "counter", "before", "after", "grew", "per second"]
    numeric = [True, True, False, True, True, True, True]
    caption = f"NVLink error counters that grew during the run ({len(rows)} link{'s' if len(rows) != 1 else ''})"
    blocks: list[Block] = [Table(cols, rows, numeric=numeric, caption=caption),
                           Table(cols, rows[:MAX_TERMINAL_COUNTERS], numeric=numeric, terminal=True, files=False,
                                 caption=caption + (", the largest" if len(rows) > MAX_TERMINAL_COUNTERS else ""))]
    if len(rows) > MAX_TERMINAL_COUNTERS:
        blocks.append(Para(f"… and {len(rows) - MAX_TERMINAL_COUNTERS} more links in the report.", terminal=True,
                           files=False))
    return blocks


def _growth(c: Change) -> int:
    return next(iter(c.after.values())) - next(iter(c.before.values()))


def evidence_blocks(ev: Evidence) -> list[Block]:
    """A run's "Node evidence" section."""
    if not ev:
        return [Para(f"**node evidence** {NO_EVIDENCE}", terminal=True)]
    blocks: list[Block] = [Heading(3, "Node evidence", terminal=True)]
    for host in ev.hosts():
        blocks += host_blocks(ev, host)
    return blocks


# ------------------------------------------------------------------------------------------ the headline

def glance_lines(meta: Meta, verdict) -> list[tuple[str, str]]:
    """The headline's word on the node's evidence, as ipcbench check judged it (the run's verdict,
    judging/judge.shipped_verdict): each kind of evidence finding that is not healthy, one line naming what check
    found (unhealthy, or cannot judge); the kinds judged healthy, one line, with the NVLink error counters that grew
    below the rates check fails at counted; check's notes (a power cap, no evidence recorded), one line."""
    found = [c for c in verdict.checks if c.source == SOURCE]
    by_kind: dict[str, list] = {}
    for c in sorted(found, key=lambda c: list(ITEM_WORDS).index(c.method) if c.method in ITEM_WORDS else 99):
        by_kind.setdefault(c.method, []).append(c)
    hosts = len({c.host for c in found}) > 1
    lines, healthy = [], []
    for kind, found_here in by_kind.items():
        status = Status.of(c.status for c in found_here)
        if status is Status.PASS:
            healthy.append(SHORT_WORDS.get(kind, kind) + (_counters_text(meta) if kind == "nvlink_errors" else ""))
            continue
        briefs = [f"{c.host}: {c.brief or c.reason}" if hosts else c.brief or c.reason
                  for c in found_here if c.status is status]
        lines.append(("bad" if status is Status.FAIL else "warn",
                      f"**{ITEM_WORDS.get(kind, kind)}** ({VERDICTS[status]}, ipcbench check): {listed(briefs)}."))
    if healthy:
        gpus = len({(c.host, c.src_gpu) for c in found if c.src_gpu >= 0})
        lines.append(("info", f"**Node evidence**, as ipcbench check judged it: healthy on {gpus} "
                              f"GPU{'s' if gpus != 1 else ''}: {', '.join(healthy)} (see Node evidence)."))
    if verdict.notes:
        lines.append(("info", "**check notes**: " + "; ".join(verdict.notes) + "."))
    return lines


# each kind of evidence finding in a few words (the headline's healthy line; judging/evidence_rules.ITEM_WORDS)
SHORT_WORDS = {"nvlinks": "NVLinks up", "nvlink_speed": "their speed", "nvlink_errors": "their error counters",
               "pcie": "PCIe", "clock_events": "clocks", "clock_event_ns": "clock times", "ecc": "ECC",
               "remap": "row remaps", "processes": "no other job"}


def _counters_text(meta: Meta) -> str:
    """" (CRC data errors on 7 links, 23–119 each, at most 6.173/s: below the 100/s check fails at)": the NVLink
    error counters that grew during a run whose counters check judged healthy, per counter: on how many links, by
    how much, at most how many a second, and the rate check fails at (the shipped [[evidence]] tables its verdict
    used); "" where none grew."""
    grown: dict[str, list[tuple[int, float]]] = {}
    limits: dict[str, set[float]] = {}
    for host in meta.evidence.hosts():
        before, after = meta.evidence.before(host), meta.evidence.after(host)
        if before is None or after is None or before.missing or after.missing:
            continue
        window = after.time - before.time
        for c in changes(before, after):
            if c.kind == "link_error":
                counter = next(iter(c.after))
                grown.setdefault(counter, []).append((_growth(c), _growth(c) / window if window > 0 else 0.0))
                limits.setdefault(counter, set()).update(_rates(meta, host, c.gpu).get(counter, ()))
    parts = []
    for counter, seen in sorted(grown.items()):
        counts = sorted(n for n, _ in seen)
        span = f"{counts[0]}" if counts[0] == counts[-1] else f"{counts[0]}–{counts[-1]}"
        rate = "/".join(f"{r:g}" for r in sorted(limits.get(counter, ())))
        parts.append(f"{COUNTER_WORDS.get(counter, (counter, counter))[1]} on {len(seen)} link"
                     f"{'s' if len(seen) != 1 else ''}, {span} each, at most {max(r for _, r in seen):.4g}/s"
                     + (f": below the {rate}/s check fails at" if rate else ""))
    return f" ({'; '.join(parts)})" if parts else ""


def _rates(meta: Meta, host: str, gpu: int) -> dict[str, tuple[float]]:
    """{counter: (its rate,)} at which check fails a link of this GPU (the shipped tables of its model)."""
    g = meta.gpu(host, gpu)
    setting = resolve(evidence_defaults(), g.name if g is not None else "").get(RATE_KEY)
    return {k: (float(v),) for k, v in dict(setting.value).items()} if setting is not None else {}
