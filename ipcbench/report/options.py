"""How each run was measured, as the report shows it: quick or full, the sampling rule, min-time, sizes,
ranks per GPU, pair mode and the command line, from meta.json (older runs: "not recorded"), and the
warning when runs reported side by side were measured differently. Used by headline.py and document.py.
"""

from __future__ import annotations

from ipcbench.judging.measured import is_quick, sizes_of, sizes_text
from ipcbench.record.meta import Meta
from ipcbench.record.run import Run
from ipcbench.report.cells import size_text
from ipcbench.report.render import Block, Callout, Para, Table, clean

MAX_TERMINAL_RUN_ROWS = 20
COMPARED = ("mode", "sampling", "sizes", "ranks/GPU", "pairs")
PAIR_MODES = {"sequential": ("one pair at a time", "one at a time"),  # (the options line, the short table)
              "concurrent": ("disjoint pairs at once", "at once")}


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def run_options(meta: Meta, frame=None) -> dict[str, str]:
    """How a run was measured, as {field: text}: mode, sampling, sizes, ranks per GPU, pairs (and verify,
    command when known). Fields meta.json lacks (older runs) say "not recorded"."""
    o, samp = meta.options, meta.sampling
    quick = is_quick(meta)
    out = {"mode": "quick (--quick)" if quick else "full" if quick is False else "not recorded"}
    min_time = o.get("min_time_ms", samp.get("min_time_ms"))
    each = f", each sample ≥ {min_time:g} ms" if _number(min_time) else ""
    if o.get("samples"):
        out["sampling"] = f"{o['samples']} samples per row (fixed){each}"
    elif samp:
        noise, lo, hi, tmax = (samp.get(k) for k in ("noise", "min_samples", "max_samples", "max_time_s"))
        rule = f"{lo}–{hi} samples per row" if lo and hi else "samples per row"
        rule += f" until the median is known to ±{float(noise or 0) * 100:g}%" if _number(noise) else ""
        out["sampling"] = rule + (f" (or {tmax:g} s)" if _number(tmax) else "") + each
    else:
        out["sampling"] = ("rule not recorded" + each) if o else "not recorded"
    sizes = sizes_of(meta, frame)
    out["sizes"] = sizes_text(sizes)
    out["ranks per GPU"] = "not recorded" if meta.ranks_per_gpu is None else str(meta.ranks_per_gpu)
    pm = meta.pair_mode
    if pm.get("mode"):
        why = f" (--pairs {pm['requested']}" + (f": {pm['reason']}" if pm.get("reason") else "") + ")" \
            if pm.get("requested") else ""
        out["pairs"] = PAIR_MODES.get(pm["mode"], (pm["mode"],))[0] + why + _serial_text(meta)
    else:
        out["pairs"] = "not recorded"
    if o.get("verify") is False:
        out["verify"] = "off (--no-verify): no row is checked"
    if meta.command:
        out["command"] = " ".join(meta.command)
    return {k: clean(v) for k, v in out.items()}


def _serial_text(meta: Meta) -> str:
    """The serial steps' pair coverage (older runs: every pair, said by nothing): a ring leaves most pairs
    without host-staged, handle, ping-pong and pipeline rows."""
    if not meta.serial_ring:
        return ""
    sp = meta.pair_mode["serial_pairs"]
    return (f"; host-staged, handle, ping-pong and pipeline steps on a ring of pairs (--serial-pairs "
            f"{sp.get('requested', '?')}" + (f": {sp['reason']}" if sp.get("reason") else "") + ")")


def options_line(opts: dict[str, str]) -> str:
    """One line of markdown-ish text: "**quick (--quick) run**: …; sizes …; ranks per GPU …"."""
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


def options_short(meta: Meta, frame=None) -> dict[str, str]:
    """The options of a run in a few characters each, for the side-by-side table: mode, sampling, sizes,
    ranks per GPU, pairs."""
    o, samp = meta.options, meta.sampling
    quick = is_quick(meta)
    out = {"mode": "quick" if quick else "full" if quick is False else "?"}
    mt = o.get("min_time_ms", samp.get("min_time_ms"))
    each = f" × ≥{mt:g} ms" if _number(mt) else ""
    if o.get("samples"):
        out["sampling"] = f"{o['samples']} fixed{each}"
    elif samp:
        noise = samp.get("noise")
        out["sampling"] = (f"{samp.get('min_samples', '?')}–{samp.get('max_samples', '?')}{each}"
                           + (f", to ±{float(noise or 0) * 100:g}%" if _number(noise) else ""))
    else:
        out["sampling"] = "?"
    sizes = sizes_of(meta, frame)
    out["sizes"] = f"{len(sizes)}: {size_text(min(sizes))}–{size_text(max(sizes))}" if sizes else "?"
    out["ranks/GPU"] = "?" if meta.ranks_per_gpu is None else str(meta.ranks_per_gpu)
    mode = meta.pair_mode.get("mode")
    out["pairs"] = (PAIR_MODES.get(mode, ("", str(mode)))[1] + (", serial on a ring" if meta.serial_ring else "")
                    if mode else "?")
    return {k: clean(v) for k, v in out.items()}


def options_blocks(runs: list[Run]) -> list[Block]:
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
    blocks: list[Block] = [
        Callout([("warn", "**Runs of different options side by side** (they differ in " + ", ".join(differ)
                  + "): their numbers are not equally careful or not measured the same way; compare like with "
                    "like.")], terminal=True),
        Table(["run", *COMPARED], rows, caption=caption),
        Table(["run", *COMPARED], rows[:MAX_TERMINAL_RUN_ROWS], terminal=True, files=False,
              caption="How each run was measured")]
    if len(rows) > MAX_TERMINAL_RUN_ROWS:
        blocks.append(Para(f"… and {len(rows) - MAX_TERMINAL_RUN_ROWS} more runs in the report.", terminal=True,
                           files=False))
    return blocks
