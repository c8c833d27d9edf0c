"""How each run was measured, as the report shows it: quick or full, the sampling rule, min-time, sizes,
ranks per GPU, pair mode and the command line, from meta.json (older runs: "not recorded"), and the
warning when runs reported side by side were measured differently. Used by headline.py and document.py.
"""

from __future__ import annotations

from collections import Counter

from ipcbench.report.cells import size_text
from ipcbench.report.render import Callout, Para, Table, clean

MAX_TERMINAL_RUN_ROWS = 20


def ranks_per_gpu(meta: dict) -> int | None:
    """Ranks per GPU of a run from meta.json (older runs: counted from its ranks), None when unknown."""
    rpg = meta.get("ranks_per_gpu")
    if isinstance(rpg, int) and rpg > 0:
        return rpg
    ranks = meta.get("ranks")
    if isinstance(ranks, list) and ranks and all(isinstance(r, dict) and "gpu" in r for r in ranks):
        return max(Counter((str(r.get("host")), r.get("gpu")) for r in ranks).values())
    return None


def run_options(meta: dict | None, frame=None) -> dict[str, str]:
    """How a run was measured, as {field: text}: mode, sampling, sizes, ranks per GPU, pairs (and verify,
    command when known). Fields meta.json lacks (older runs) say "not recorded"."""
    meta = meta or {}
    o = meta.get("options") if isinstance(meta.get("options"), dict) else {}
    samp = o.get("sampling") if isinstance(o.get("sampling"), dict) else {}
    out: dict[str, str] = {}
    quick = o.get("quick")
    out["mode"] = "quick (--quick)" if quick else "full" if quick is False else "not recorded"
    min_time = o.get("min_time_ms", samp.get("min_time_ms"))
    each = f", each sample ≥ {min_time:g} ms" if isinstance(min_time, (int, float)) else ""
    if o.get("samples"):
        out["sampling"] = f"{o['samples']} samples per row (fixed){each}"
    elif samp:
        noise, lo, hi, tmax = (samp.get(k) for k in ("noise", "min_samples", "max_samples", "max_time_s"))
        rule = f"{lo}–{hi} samples per row" if lo and hi else "samples per row"
        if isinstance(noise, (int, float)):
            rule += f" until the median is known to ±{noise * 100:g}%"
        if isinstance(tmax, (int, float)):
            rule += f" (or {tmax:g} s)"
        out["sampling"] = rule + each
    else:
        out["sampling"] = ("rule not recorded" + each) if o else "not recorded"
    sizes = meta.get("sizes")
    if not (isinstance(sizes, list) and sizes) and frame is not None and len(frame):
        sizes = sorted(int(b) for b in set(frame["bytes"]) if b > 0)
    if isinstance(sizes, list) and sizes:
        out["sizes"] = f"{len(sizes)} sizes, {size_text(min(sizes))}–{size_text(max(sizes))}"
    else:
        out["sizes"] = "not recorded"
    rpg = ranks_per_gpu(meta)
    out["ranks per GPU"] = "not recorded" if rpg is None else str(rpg)
    pm = meta.get("pair_mode")
    if isinstance(pm, dict) and pm.get("mode"):
        mode = {"sequential": "one pair at a time", "concurrent": "disjoint pairs at once"}.get(pm["mode"], pm["mode"])
        why = f" (--pairs {pm['requested']}" + (f": {pm['reason']}" if pm.get("reason") else "") + ")" \
            if pm.get("requested") else ""
        out["pairs"] = mode + why + _serial_text(pm)
    else:
        out["pairs"] = "not recorded"
    if o.get("verify") is False:
        out["verify"] = "off (--no-verify): no row is checked"
    cmd = meta.get("command")
    if isinstance(cmd, list) and cmd:
        out["command"] = " ".join(map(str, cmd))
    return {k: clean(v) for k, v in out.items()}


def _serial_ring(pm: dict) -> bool:
    sp = pm.get("serial_pairs")
    return isinstance(sp, dict) and sp.get("coverage") == "ring"


def _serial_text(pm: dict) -> str:
    """The serial steps' pair coverage (meta.json pair_mode.serial_pairs; older runs: every pair, said by
    nothing): a ring leaves most pairs without host-staged, handle, ping-pong and pipeline rows."""
    if not _serial_ring(pm):
        return ""
    sp = pm["serial_pairs"]
    return (f"; host-staged, handle, ping-pong and pipeline steps on a ring of pairs (--serial-pairs "
            f"{sp.get('requested', '?')}" + (f": {sp['reason']}" if sp.get("reason") else "") + ")")


def options_line(opts: dict[str, str]) -> str:
    """One line of markdown-ish text: "**quick (--quick)** sampling: …; sizes …; ranks per GPU …"."""
    mode = opts.get("mode", "not recorded")
    head = f"**{mode} run**" if mode != "not recorded" else "**options not recorded** (no meta.json, or an older one)"
    parts = [f"{head}: {opts['sampling']}" if opts.get("sampling") != "not recorded" else head,
             opts.get("sizes", ""), ranks_text(opts.get("ranks per GPU", "not recorded")),
             f"pairs: {opts.get('pairs')}"]
    if opts.get("verify"):
        parts.append(f"verify {opts['verify']}")
    if opts.get("command"):
        parts.append(f"`{opts['command']}`")
    return "; ".join(p for p in parts if p)


def ranks_text(v: str) -> str:
    return "ranks per GPU not recorded" if v == "not recorded" else f"{v} rank per GPU" if v == "1" else \
        f"{v} ranks per GPU (same-GPU rows measured)"


def options_short(meta: dict | None, frame=None) -> dict[str, str]:
    """The options of a run in a few characters each, for the side-by-side table and the comparison: mode,
    sampling, sizes, ranks per GPU, pairs."""
    meta = meta or {}
    o = meta.get("options") if isinstance(meta.get("options"), dict) else {}
    samp = o.get("sampling") if isinstance(o.get("sampling"), dict) else {}
    quick = o.get("quick")
    out = {"mode": "quick" if quick else "full" if quick is False else "?"}
    mt = o.get("min_time_ms", samp.get("min_time_ms"))
    each = f" × ≥{mt:g} ms" if isinstance(mt, (int, float)) else ""
    if o.get("samples"):
        out["sampling"] = f"{o['samples']} fixed{each}"
    elif samp:
        noise = samp.get("noise")
        out["sampling"] = (f"{samp.get('min_samples', '?')}–{samp.get('max_samples', '?')}{each}"
                           + (f", to ±{noise * 100:g}%" if isinstance(noise, (int, float)) else ""))
    else:
        out["sampling"] = "?"
    sizes = meta.get("sizes")
    if not (isinstance(sizes, list) and sizes) and frame is not None and len(frame):
        sizes = sorted(int(b) for b in set(frame["bytes"]) if b > 0)
    out["sizes"] = f"{len(sizes)}: {size_text(min(sizes))}–{size_text(max(sizes))}" if sizes else "?"
    rpg = ranks_per_gpu(meta)
    out["ranks/GPU"] = "?" if rpg is None else str(rpg)
    pm = meta.get("pair_mode")
    out["pairs"] = ({"sequential": "one at a time", "concurrent": "at once"}.get(pm.get("mode"), str(pm.get("mode")))
                    + (", serial on a ring" if _serial_ring(pm) else "")
                    if isinstance(pm, dict) and pm.get("mode") else "?")
    return {k: clean(v) for k, v in out.items()}


COMPARED = ("mode", "sampling", "sizes", "ranks/GPU", "pairs")


def options_blocks(runs) -> list:
    """Several runs: their options side by side and a warning naming the options that differ; one line when
    every run was measured the same way."""
    if len(runs) < 2:
        return []
    rows = [[r.label] + [options_short(r.meta, r.frame)[k] for k in COMPARED] for r in runs]
    differ = [k for i, k in enumerate(COMPARED) if len({row[i + 1] for row in rows}) > 1]
    if not differ:
        same = "; ".join(f"{k} {v}" for k, v in zip(COMPARED, rows[0][1:]))
        return [Para(f"**Every run was measured the same way**: {same}.", terminal=True)]
    caption = ("How each run was measured (mode: quick or full sampling; sampling: samples per row × minimum "
               "sample time, stopping rule; ?: not in an older meta.json)")
    blocks = [Callout([("warn", "**Runs of different options side by side** (they differ in " + ", ".join(differ)
                        + "): their numbers are not equally careful or not measured the same way; compare like "
                          "with like.")], terminal=True),
              Table(["run", *COMPARED], rows, caption=caption),
              Table(["run", *COMPARED], rows[:MAX_TERMINAL_RUN_ROWS], terminal=True, files=False,
                    caption="How each run was measured")]
    if len(rows) > MAX_TERMINAL_RUN_ROWS:
        blocks.append(Para(f"… and {len(rows) - MAX_TERMINAL_RUN_ROWS} more runs in the report.", terminal=True,
                           files=False))
    return blocks
