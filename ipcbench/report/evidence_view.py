"""The node's evidence beside the numbers: what NVML said of each GPU at the end of the run (NVLinks up, their
speed, PCIe training, ECC, remaps, clocks, other processes), what changed during it (evidence/delta.py), and every
item that is not available with why. A run recorded before ipcbench read it says "no node evidence recorded".

`evidence_blocks` is the report's "Node evidence" section of a run; `glance_lines` the headline's warnings (only
what may explain a number: a change during the run, a link down, a PCIe link below its maximum, another process);
`notable` the same facts as short texts for compare's warning (judging/compare.py). Pure: the record in, words out.
"""

from __future__ import annotations

from ipcbench.evidence.delta import changes, describe, foreign
from ipcbench.evidence.model import NA, Evidence, GpuReading, Snapshot
from ipcbench.judging.evidence_notes import MALFORMED, NO_EVIDENCE, listed, notable, pcie_text
from ipcbench.report.render import Block, Heading, Para, Table



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
        changed = [c.text for c in changes(before, after)]
        blocks.append(Para("**during the run**: " + (listed(changed) if changed else
                                                     "nothing changed in what was read"), terminal=True))
        missing = ([f"before the run: {before.missing}"] if before.missing else []) + _missing(after)
    else:
        missing = _missing(shown)
    if missing:
        blocks.append(Para(f"**{NA}**: " + listed(missing), terminal=True))
    return blocks


def evidence_blocks(ev: Evidence) -> list[Block]:
    """A run's "Node evidence" section ("unreadable" where meta.json's evidence is malformed)."""
    try:
        return _evidence_blocks(ev)
    except MALFORMED as e:
        return [Para(f"**node evidence** unreadable in meta.json ({type(e).__name__}: {e})", terminal=True)]


def _evidence_blocks(ev: Evidence) -> list[Block]:
    if not ev:
        return [Para(f"**node evidence** {NO_EVIDENCE}", terminal=True)]
    blocks: list[Block] = [Heading(3, "Node evidence", terminal=True)]
    for host in ev.hosts():
        blocks += host_blocks(ev, host)
    return blocks


def glance_lines(ev: Evidence) -> list[tuple[str, str]]:
    """The headline's warning about the node's evidence, when it has something that may explain a number (none where
    it is malformed: the Node evidence section says so)."""
    try:
        return _glance_lines(ev)
    except MALFORMED:
        return []


def _glance_lines(ev: Evidence) -> list[tuple[str, str]]:
    found = [t for texts in notable(ev).values() for t in texts]
    if not found:
        return []
    return [("warn", "**Node evidence**: " + listed(found) + " (see Node evidence)")]
