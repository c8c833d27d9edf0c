"""What changed on a host between its snapshot before a run and after it (pure: two Snapshots in, Changes out).

`changes` names what grew or turned: an NVLink error counter that grew ("12 replays on GPU 1 link 4 during the
run"), a link that went down, new uncorrectable ECC errors, a row remap that became pending, time the clocks were
held down for a reason ("GPU 0 throttled for power for 0.8 s of the run") or a slowdown reason seen at the end, a
process of another job that appeared. A counter that went back (a driver reload, a reset by an administrator) is
"counter_reset": its growth during the run is unknown, said as such. An item missing on either side is no change,
but not "nothing happened" either: `not_compared` names it, so a gate that needs it cannot call it healthy.
Judging is check's (judging/evidence_rules.py); the report and compare show these texts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ipcbench.evidence.model import GpuReading, Item, LinkReading, ProcessReading, Snapshot

KINDS = ("link_error", "counter_reset", "link_down", "ecc_uncorrected", "remap_pending", "clock_event", "process")
UNREAD = "unread"  # the kind of not_compared's entries

COUNTER_WORDS = {"replay": ("replay", "replays"), "recovery": ("recovery", "recoveries"),
                 "crc_flit": ("CRC flit error", "CRC flit errors"), "crc_data": ("CRC data error", "CRC data errors"),
                 "crc": ("CRC error", "CRC errors")}
# what each clocks-event reason did to the clocks, as a sentence says it ("GPU 0 throttled for power ...")
REASON_WORDS = {"sw_power_cap": "throttled for power", "hw_slowdown": "slowed down by hardware",
                "hw_thermal_slowdown": "slowed down for heat (hardware)",
                "sw_thermal_slowdown": "slowed down for heat (software)", "thermal": "throttled for heat",
                "hw_power_brake": "power-braked", "sync_boost": "held to its sync-boost group",
                "board_limit": "held to a board limit", "reliability": "held down for reliability"}
# reasons that are not a slowdown: an idle GPU, clocks an administrator set, the display
BENIGN_REASONS = ("idle", "applications_clocks", "display_clock")
MPS_SERVER = "nvidia-cuda-mps-server"  # runs the work of MPS clients (the run's ranks under MPS): not another job


@dataclass(frozen=True)
class Change:
    """One thing that changed on a host's GPU during the run, with its sentence."""

    host: str
    gpu: int
    kind: str  # one of KINDS, or "unread" (not_compared)
    link: int | None
    before: Any
    after: Any
    text: str


def paired(before: Snapshot, after: Snapshot) -> list[tuple[GpuReading, GpuReading]]:
    """The GPUs of both snapshots, matched by UUID where both have one, else by NVML index (check's Prometheus
    gauges pair them so too)."""
    out = []
    for a in after.gpus:
        b = next((g for g in before.gpus if a.uuid and g.uuid == a.uuid), None) or before.gpu(a.index)
        if b is not None:
            out.append((b, a))
    return out


def _both(b: Item, a: Item) -> bool:
    return b.ok and a.ok and b.value is not None and a.value is not None


def seconds(ns: float) -> str:
    return f"{ns / 1e9:.2g} s" if ns < 1e10 else f"{ns / 1e9:.0f} s"


def _counted(n: int, words: tuple[str, str]) -> str:
    return f"{n} {words[0] if n == 1 else words[1]}"


def _reset(host: str, gpu: int, link: int | None, what: str, b: Any, a: Any) -> Change:
    where = f"GPU {gpu}" + (f" link {link}" if link is not None else "")
    return Change(host, gpu, "counter_reset", link, b, a,
                  f"{what} of {where} went back from {b} to {a} during the run (reset): its growth is unknown")


def counter_growth(lb: LinkReading, la: LinkReading) -> list[tuple[str, int, int]]:
    """(counter, before, after) of each error counter of one link read on both sides: it grew by after - before
    during the run (below zero: it was reset). The one place a counter's growth is taken: `changes` names it,
    check's Prometheus gauges export it."""
    if not _both(lb.errors, la.errors):
        return []
    return [(name, nb, la.errors.value[name]) for name, nb in lb.errors.value.items()
            if la.errors.value.get(name) is not None]


def _link_changes(host: str, gpu: int, b: GpuReading, a: GpuReading) -> list[Change]:
    if not _both(b.links, a.links):
        return []
    out = []
    after = {ln.link: ln for ln in a.links.value}
    for lb in b.links.value:
        la = after.get(lb.link)
        if la is None:
            continue
        if _both(lb.active, la.active) and lb.active.value and not la.active.value:
            out.append(Change(host, gpu, "link_down", lb.link, True, False,
                              f"GPU {gpu} link {lb.link} went down during the run"))
        for name, nb, na in counter_growth(lb, la):
            if na == nb:
                continue
            if na < nb:
                out.append(_reset(host, gpu, lb.link, f"the {name} counter", nb, na))
            else:
                out.append(Change(host, gpu, "link_error", lb.link, {name: nb}, {name: na},
                                  f"{_counted(na - nb, COUNTER_WORDS.get(name, (name, name)))} on GPU {gpu} link "
                                  f"{lb.link} during the run"))
    return out


def time_growth(b: GpuReading, a: GpuReading) -> list[tuple[str, int, int]]:
    """(reason, ns before, ns after) of each clock event reason whose cumulative time both readings give: the clocks
    were held down for it by after - before during the run (below zero: reset). `changes` names it, check's
    Prometheus gauges export it."""
    if not _both(b.clock_event_ns, a.clock_event_ns):
        return []
    return [(reason, nb, a.clock_event_ns.value[reason]) for reason, nb in b.clock_event_ns.value.items()
            if a.clock_event_ns.value.get(reason) is not None]


def _clock_changes(host: str, gpu: int, b: GpuReading, a: GpuReading) -> list[Change]:
    out = []
    grew = set()
    for reason, nb, na in time_growth(b, a):
        if na == nb or reason in BENIGN_REASONS:
            continue
        if na < nb:
            out.append(_reset(host, gpu, None, f"the {reason} time", nb, na))
            continue
        grew.add(reason)
        out.append(Change(host, gpu, "clock_event", None, {reason: nb}, {reason: na},
                          f"GPU {gpu} {REASON_WORDS.get(reason, reason)} for {seconds(na - nb)} of the run"))
    if a.clock_events.ok and a.clock_events.value:
        for reason in a.clock_events.value:
            if reason in BENIGN_REASONS or reason in grew:
                continue
            was = b.clock_events.value if b.clock_events.ok else None
            out.append(Change(host, gpu, "clock_event", None, was, reason,
                              f"GPU {gpu} {REASON_WORDS.get(reason, reason)} at the end of the run"))
    return out


def foreign(snapshot: Snapshot) -> list[tuple[int, ProcessReading]]:
    """(GPU, process) of every compute process that is not one of the run's ranks (`own_pids`) nor the MPS
    server that runs them: another job's, holding that GPU."""
    own = set(snapshot.own_pids)
    return [(g.index, p) for g in snapshot.gpus if g.processes.ok for p in g.processes.value
            if p.pid not in own and p.name.rsplit("/", 1)[-1] != MPS_SERVER]


def describe(p: ProcessReading) -> str:
    """'pid 4242 (python3, 2.0 GiB)'."""
    facts = [p.name] if p.name else []
    if p.used_bytes is not None:
        facts.append(f"{p.used_bytes / 2**30:.1f} GiB")
    return f"pid {p.pid}" + (f" ({', '.join(facts)})" if facts else "")


def changes(before: Snapshot, after: Snapshot) -> list[Change]:
    """What grew or turned on `after.host` between the two snapshots, GPU by GPU (see the module's doc)."""
    host = after.host
    out: list[Change] = []
    earlier = {(g, p.pid) for g, p in foreign(before)}
    for b, a in paired(before, after):
        gpu = a.index
        out += _link_changes(host, gpu, b, a)
        if _both(b.ecc_uncorrected_volatile, a.ecc_uncorrected_volatile):
            nb, na = b.ecc_uncorrected_volatile.value, a.ecc_uncorrected_volatile.value
            if na > nb:
                out.append(Change(host, gpu, "ecc_uncorrected", None, nb, na,
                                  f"{na - nb} new uncorrectable ECC error{'s' if na - nb > 1 else ''} on GPU {gpu} "
                                  "during the run"))
            elif na < nb:
                out.append(_reset(host, gpu, None, "the uncorrectable ECC count", nb, na))
        if _both(b.remap_pending, a.remap_pending) and not b.remap_pending.value and a.remap_pending.value:
            out.append(Change(host, gpu, "remap_pending", None, False, True,
                              f"GPU {gpu}: a row remap became pending during the run (a reset applies it)"))
        out += _clock_changes(host, gpu, b, a)
    for gpu, p in foreign(after):
        if (gpu, p.pid) not in earlier:
            out.append(Change(host, gpu, "process", None, None, p.as_json(),
                              f"another process, {describe(p)}, appeared on GPU {gpu} during the run"))
    return out


def not_compared(before: Snapshot, after: Snapshot) -> list[Change]:
    """The items `changes` needs that either snapshot lacks, once per GPU and item (kind "unread"): no change
    can be named there, and none can be ruled out."""
    out: list[Change] = []
    host = after.host or before.host
    for snap in (before, after):
        if snap.missing:
            return [Change(host, -1, UNREAD, None, None, None, f"{snap.when} the run: {snap.missing}")]
    pairs = paired(before, after)
    for a in after.gpus:
        if all(a is not x for _, x in pairs):
            out.append(Change(host, a.index, UNREAD, None, None, None, f"GPU {a.index}: no reading before the run"))
    for b, a in pairs:
        gpu = a.index
        items = {"NVLink state and errors": (b.links, a.links), "uncorrectable ECC": (b.ecc_uncorrected_volatile,
                 a.ecc_uncorrected_volatile), "row remaps": (b.remap_pending, a.remap_pending),
                 "clock event time": (b.clock_event_ns, a.clock_event_ns), "clock events": (b.clock_events,
                 a.clock_events), "processes": (b.processes, a.processes)}
        for what, (ib, ia) in items.items():
            if not (ib.ok and ia.ok):
                out.append(Change(host, gpu, UNREAD, None, ib.missing, ia.missing,
                                  f"GPU {gpu} {what}: not compared ({_sides(ib, ia)})"))
        if _both(b.links, a.links):
            out += _links_not_compared(host, gpu, b, a)
    return out


def _sides(b: Item, a: Item) -> str:
    if not b.ok and not a.ok and b.missing == a.missing:
        return b.missing
    return "; ".join(f"{side}: {i.missing}" for side, i in (("before", b), ("after", a)) if not i.ok)


def _links_not_compared(host: str, gpu: int, b: GpuReading, a: GpuReading) -> list[Change]:
    """Links whose state or counters a side lacks, grouped by why: one entry per reason, naming the links."""
    after = {ln.link: ln for ln in a.links.value}
    why: dict[str, list[int]] = {}
    for lb in b.links.value:
        la = after.get(lb.link)
        if la is None:
            why.setdefault("after: not listed", []).append(lb.link)
            continue
        for what, ib, ia in (("state", lb.active, la.active), ("error counters", lb.errors, la.errors)):
            if not (ib.ok and ia.ok):
                why.setdefault(f"{what}: {_sides(ib, ia)}", []).append(lb.link)
    return [Change(host, gpu, UNREAD, None, None, None,
                   f"GPU {gpu} {links_text(links)} not compared ({reason})")
            for reason, links in why.items()]


def links_text(links) -> str:
    """"link 7", "links 3, 9", "links 0-17": how every sentence of the evidence names links (check's too)."""
    return f"link{'s' if len(set(links)) > 1 else ''} {ranges(list(links))}"


def ranges(ns: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5' (runs of three or more as a range)."""
    runs: list[list[int]] = []
    for n in sorted(set(ns)):
        if runs and runs[-1][-1] == n - 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)
