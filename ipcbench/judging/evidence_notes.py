"""What in a node's evidence may explain a number (evidence/ reads it, evidence/delta.py says what changed): a change
during the run, a link down, a PCIe link below its maximum width, another job's process, as short texts (`notable`);
the headline's warning says them (report/evidence_view.py), compare warns where BASE and NEW differ in them
(`compare_warnings`, judging/compare.py). Pure: the record in, words out; never a verdict (the rows decide the
exit)."""

from __future__ import annotations

from ipcbench.evidence.delta import COUNTER_WORDS, Change, changes, describe, foreign
from ipcbench.evidence.model import NA, Evidence, GpuReading, Item

NO_EVIDENCE = "no node evidence recorded"
MAX_LISTED = 12  # changes and missing items listed per host (all are counted)

# A meta.json edited by hand or by another tool may hold values of the wrong type (a counter "x"): the reading side
# says so and goes on, never a traceback (check fails closed on the same: evidence_rules).
MALFORMED = (TypeError, ValueError, KeyError, AttributeError)


def pcie_text(g: GpuReading) -> str:
    """'gen5 x16 (max gen5 x16)'; a part NVML did not give as '?'."""
    if not any(i.ok for i in (g.pcie_gen, g.pcie_width, g.pcie_max_gen, g.pcie_max_width)):
        return NA

    def v(i: Item, prefix: str) -> str:
        return f"{prefix}{i.value}" if i.ok else f"{prefix}?"

    return f"{v(g.pcie_gen, 'gen')} {v(g.pcie_width, 'x')} (max {v(g.pcie_max_gen, 'gen')} {v(g.pcie_max_width, 'x')})"


def narrow_pcie(g: GpuReading) -> bool:
    """The PCIe link trained narrower than its maximum width. Only the width: an idle GPU lowers its PCIe
    generation to save power, so a generation below the maximum in a snapshot is shown but says nothing alone."""
    return g.pcie_width.ok and g.pcie_max_width.ok and g.pcie_width.value < g.pcie_max_width.value


def listed(texts: list[str]) -> str:
    shown = texts[:MAX_LISTED]
    return "; ".join(shown) + (f" (+{len(texts) - MAX_LISTED} more)" if len(texts) > MAX_LISTED else "")


def notable(ev: Evidence) -> dict[str, list[str]]:
    """What may explain a number, as short texts keyed by what it is (compare warns where BASE and NEW differ
    in a key): 'throttling', 'process' (another job's, before or after), 'links' (one down, or not all active),
    'pcie' (narrower than its maximum), 'counters' (grew or reset during the run), 'ecc', 'remap'."""
    out: dict[str, list[str]] = {}
    keys = {"clock_event": "throttling", "link_down": "links", "link_error": "counters", "counter_reset": "counters",
            "ecc_uncorrected": "ecc", "remap_pending": "remap"}
    for host in ev.hosts():
        before, after = ev.before(host), ev.after(host)
        snaps = [s for s in (before, after) if s is not None and not s.missing]
        if not snaps:
            continue
        if len(snaps) == 2:
            found = changes(snaps[0], snaps[1])
            for c in found:
                if c.kind in keys and c.kind != "link_error":
                    out.setdefault(keys[c.kind], []).append(f"{host}: {c.text}")
            out.setdefault("counters", []).extend(f"{host}: {t}" for t in _grown([c for c in found
                                                                                   if c.kind == "link_error"]))
        for g in snaps[-1].gpus:
            n = g.active_links()
            if n is not None and n != len(g.links.value):
                out.setdefault("links", []).append(f"{host}: GPU {g.index}: {n} of {len(g.links.value)} NVLinks active")
            if narrow_pcie(g):
                out.setdefault("pcie", []).append(f"{host}: GPU {g.index}: PCIe {pcie_text(g)}")
        procs = {(gpu, p.pid): p for s in snaps for gpu, p in foreign(s)}
        out["process"] = out.get("process", []) + [f"{host}: another process on GPU {gpu}: {describe(p)}"
                                                   for (gpu, _), p in sorted(procs.items())]
    return {k: v for k, v in out.items() if v}


def _grown(grew: list[Change]) -> list[str]:
    """The NVLink counters that grew on one host, one text per counter: a single link's own sentence, several
    links' in one ("CRC data errors on 72 links of GPUs 0, 1, 2, 3, 91–434 each, during the run"), so that a warning
    says what moved, not a list of every link (the per-link table is the report's Node evidence)."""
    by_name: dict[str, list[Change]] = {}
    for c in grew:
        by_name.setdefault(next(iter(c.before)), []).append(c)
    out = []
    for name, cs in by_name.items():
        if len(cs) == 1:
            out.append(cs[0].text)
            continue
        grown = [c.after[name] - c.before[name] for c in cs]
        gpus = sorted({c.gpu for c in cs})
        where = f"GPU {gpus[0]}" if len(gpus) == 1 else f"GPUs {', '.join(map(str, gpus))}"
        each = f"{min(grown)}–{max(grown)}" if min(grown) != max(grown) else f"{min(grown)}"
        out.append(f"{COUNTER_WORDS.get(name, (name, name))[1]} on {len(cs)} links of {where}, {each} each, during "
                   "the run")
    return out


# what each key of `notable` is, as compare's warning names it
NOTABLE_WORDS = {"throttling": "clocks held down", "process": "another job's process",
                 "links": "NVLinks not all active", "pcie": "PCIe narrower than its maximum",
                 "counters": "NVLink error counters moved", "ecc": "new uncorrectable ECC errors",
                 "remap": "a row remap pending"}


def compare_warnings(base_label: str, base: Evidence, new_label: str, new: Evidence) -> list[str]:
    """_compare_warnings, or one line saying the evidence could not be read (the rows still decide the exit)."""
    try:
        return _compare_warnings(base_label, base, new_label, new)
    except MALFORMED as e:
        return [f"warning: the node evidence of {base_label} or {new_label} is unreadable in meta.json "
                f"({type(e).__name__}: {e}): not compared"]


def _compare_warnings(base_label: str, base: Evidence, new_label: str, new: Evidence) -> list[str]:
    """compare's warnings where NEW's node evidence differs from BASE's in a way that explains a changed row:
    clocks held down, another job's process, NVLinks or PCIe width, counters that moved, in one run and not the
    other (or not alike in both). A run without evidence has nothing to set beside the other's: its facts are
    said, with that. One line per kind of fact; never a verdict (the exit status is the rows')."""
    if not base and not new:
        return []
    who = f"BASE {base_label} vs NEW {new_label}"
    nb, nn = notable(base), notable(new)
    out = []
    for key, words in NOTABLE_WORDS.items():
        b, n = nb.get(key, []), nn.get(key, [])
        alike = (bool(b) == bool(n)) if key in ("throttling", "counters", "ecc", "remap") else set(b) == set(n)
        if alike:
            continue
        sides = [f"{side} {listed(texts) if texts else ('none' if ev else NO_EVIDENCE)}"
                 for side, texts, ev in (("NEW", n, new), ("BASE", b, base))]
        out.append(f"{who}: node evidence differs ({words}): " + "; ".join(sides) +
                   ": read the changed rows against it")
    return out
