"""How each run was measured, as the report shows it: quick or full, the sampling rule, min-time, sizes,
ranks per GPU, pair mode and the command line, from meta.json (older runs: "not recorded"), and the
warning when runs reported side by side were measured differently. Used by headline.py and document.py.
"""

from __future__ import annotations

from ipcbench.judging.measured import sizes_of, sizes_text
from ipcbench.record.meta import Meta, PairingRecord, SamplingRecord
from ipcbench.record.run import Run
from ipcbench.report.cells import size_text
from ipcbench.report.render import Block, Callout, Para, Table, clean

MAX_TERMINAL_RUN_ROWS = 20
COMPARED = ("mode", "sampling", "sizes", "ranks/GPU", "pairs")
PAIR_MODES = {"sequential": ("one pair at a time", "one at a time"),  # (the options line, the short table)
              "concurrent": ("disjoint pairs at once", "at once")}
QUICK_WORDS = "a looser stopping rule, for a health check, not for numbers to quote"
PERMUTATION_WORDS = "permutation rounds (each GPU sending once and receiving once)"
EVERY_SIZE = 1 << 60  # a permutation limit this large: every size (core/schedule.decide_permutation)


def _sampling(rule: SamplingRecord | None) -> str:
    """The stopping rule in words: fixed samples, or min–max samples until the median is known to ±noise (or
    a time limit), each sample's least length; "not recorded" without options."""
    if rule is None:
        return "not recorded"
    each = f", each sample ≥ {rule.min_time_ms:g} ms" if rule.min_time_ms is not None else ""
    if rule.fixed_samples:
        return f"{rule.fixed_samples} samples per row (fixed){each}"
    if not _rule_recorded(rule):
        return "rule not recorded" + each
    lo, hi = rule.min_samples, rule.max_samples
    text = f"{lo}–{hi} samples per row" if lo and hi else "samples per row"
    text += f" until the median is known to ±{rule.noise * 100:g}%" if rule.noise is not None else ""
    return text + (f" (or {rule.max_time_s:g} s)" if rule.max_time_s is not None else "") + each


def _rule_recorded(rule: SamplingRecord) -> bool:
    """options.sampling was recorded (runs before it have only min_time_ms and samples)."""
    return any(v is not None for v in (rule.noise, rule.min_samples, rule.max_samples, rule.max_time_s))


def run_options(meta: Meta, frame=None) -> dict[str, str]:
    """How a run was measured, as {field: text}: mode, sampling, sizes, ranks per GPU, pairs (and verify,
    command when known). Fields meta.json lacks (older runs) say "not recorded"."""
    quick = meta.quick
    out = {"mode": "quick (--quick)" if quick else "full" if quick is False else "not recorded",
           "sampling": _sampling(meta.rule), "sizes": sizes_text(sizes_of(meta, frame)),
           "ranks per GPU": "not recorded" if meta.ranks_per_gpu is None else str(meta.ranks_per_gpu),
           "pairs": _pairs_text(meta)}
    if meta.verify is False:
        out["verify"] = "off (--no-verify): no row is checked"
    if meta.command:
        out["command"] = " ".join(meta.command)
    return {k: clean(v) for k, v in out.items()}


def _pairs_text(meta: Meta) -> str:
    """How the pairs were measured: one at a time or disjoint pairs at once, as --pairs asked and why; the one-way
    rows measured in permutation rounds; the serial steps' coverage."""
    pm = meta.pairing
    if pm is None:
        return "not recorded"
    said = pm.reason and pm.reason != f"--pairs {pm.requested}"  # "--pairs sequential: --pairs sequential" once
    why = (f" (--pairs {pm.requested}" + (f": {pm.reason}" if said else "") + ")") if pm.requested else ""
    return PAIR_MODES.get(pm.mode, (pm.mode,))[0] + why + _permutation_text(meta) + _serial_text(pm)


def _permutation_limits(meta: Meta) -> dict[str, int]:
    """{engine: the largest size of its one-way rows measured in permutation rounds} (pair_mode.permutation,
    core/schedule.Permutation; {}: none, or a run before them)."""
    return dict(meta.pair_mode.get("permutation", {}).get("up_to", {}))


def _permutation_text(meta: Meta) -> str:
    """The one-way rows measured in permutation rounds (every one under --pairs permutation; under auto, the
    engines and sizes measured to hold), where the run measured any."""
    limits = _permutation_limits(meta)
    if not limits:
        return ""
    if all(n >= EVERY_SIZE for n in limits.values()):
        return f"; every one-way row in {PERMUTATION_WORDS}"
    return f"; one-way rows in {PERMUTATION_WORDS}: " + ", ".join(
        f"{engine} up to {size_text(n)}" if n < EVERY_SIZE else f"{engine} at every size"
        for engine, n in sorted(limits.items()))


def _serial_text(pm: PairingRecord) -> str:
    """The serial steps' pair coverage (older runs: every pair, said by nothing): a ring leaves most pairs
    without host-staged, handle, ping-pong and pipeline rows."""
    if pm.serial_coverage != "ring":
        return ""
    return (f"; host-staged, handle, ping-pong and pipeline steps on a ring of pairs (--serial-pairs "
            f"{pm.serial_requested or '?'}" + (f": {pm.serial_reason}" if pm.serial_reason else "") + ")")


def options_line(opts: dict[str, str]) -> str:
    """One line of markdown-ish text: "**quick (--quick) run**: …; sizes …; ranks per GPU …"."""
    mode = opts.get("mode", "not recorded")
    head = f"**{mode} run**" if mode != "not recorded" else "**options not recorded** (no meta.json, or an older one)"
    if opts.get("mode", "").startswith("quick"):
        head += f" ({QUICK_WORDS})"
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
    quick = meta.quick
    out = {"mode": "quick" if quick else "full" if quick is False else "?", "sampling": _sampling_short(meta.rule)}
    sizes = sizes_of(meta, frame)
    out["sizes"] = f"{len(sizes)}: {size_text(min(sizes))}–{size_text(max(sizes))}" if sizes else "?"
    out["ranks/GPU"] = "?" if meta.ranks_per_gpu is None else str(meta.ranks_per_gpu)
    pm = meta.pairing
    out["pairs"] = "?" if pm is None else (PAIR_MODES.get(pm.mode, ("", pm.mode))[1]
                                          + (", permutation rounds" if _permutation_limits(meta) else "")
                                          + (", serial on a ring" if meta.serial_ring else ""))
    return {k: clean(v) for k, v in out.items()}


def _sampling_short(rule: SamplingRecord | None) -> str:
    if rule is None:
        return "?"
    each = f" × ≥{rule.min_time_ms:g} ms" if rule.min_time_ms is not None else ""
    if rule.fixed_samples:
        return f"{rule.fixed_samples} fixed{each}"
    if not _rule_recorded(rule):
        return "?"
    lo = "?" if rule.min_samples is None else rule.min_samples
    hi = "?" if rule.max_samples is None else rule.max_samples
    return f"{lo}–{hi}{each}" + (f", to ±{rule.noise * 100:g}%" if rule.noise is not None else "")


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
