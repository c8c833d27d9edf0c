"""`ipcbench compare`'s outcome in words (judging/compare.py judges; report/compare_command.py is the command): the
warnings, the changed rows, NEW's impossible and invalid rows, what is missing, new or not judged, the noise rule,
the smallest change caught per kind of row, the counts and the verdict; as text, markdown or CSV (every row)."""

from __future__ import annotations

import math

from ipcbench.judging.bounds import pct
from ipcbench.judging.compare import Comparison
from ipcbench.judging.row_key import pair_cell
from ipcbench.judging.row_verdict import ORDER, RowVerdict
from ipcbench.judging.significance import BANDS
from ipcbench.sizes import fmt_size

MAX_LISTED = 40  # rows per section in text/md (csv lists every row)
CSV_COLUMNS = ["suite", "method", "direction", "host", "src_gpu", "dst_gpu", "same_gpu", "bytes", "seq", "kind",
               "timing", "sliced", "unit", "base", "new", "ratio", "change", "p", "test", "base_runs", "spread",
               "verdict", "note", "impossible", "bound", "rule", "invalid"]


def _pair(r) -> str:
    return pair_cell(int(r.src_gpu), int(r.dst_gpu), bool(r.same_gpu))


def _num(v, unit) -> str:
    if v is None or v != v:
        return ""
    if unit == "GB/s":
        return f"{v:.1f}" if v >= 1 else f"{v:.3g}"
    return f"{v:.0f}" if v >= 1000 else f"{v:.3g}"


def _p(v) -> str:
    if v is None or v != v:
        return ""
    return "<0.001" if v < 0.001 else f"{v:.3f}"


_HEAD = ["method", "direction", "host", "pair", "size", "unit", "base", "new", "change", "factor", "bound", "p",
         "test", "verdict", "note"]
_NUMERIC = [False] * 4 + [True, False, True, True, True, True, True, True, False, False, False]


def _cells(r) -> list[str]:
    change = "" if r.change != r.change else f"{100 * r.change:+.1f}%"
    factor = "" if r.gain != r.gain else f"{math.exp(abs(r.gain)):.3f}x"
    bound = "" if r.bound != r.bound else f"±{pct(r.bound)}"
    return [f"{r.suite}/{r.method}", r.direction, str(r.host), _pair(r), fmt_size(int(r.bytes)), r.unit,
            _num(r.base, r.unit), _num(r.new, r.unit), change, factor, bound, _p(r.p), r.test, r.verdict, r.note]


def _groups(rows) -> list[str]:
    """Missing or new rows, one line per suite/method/direction: how many, which sizes and pairs."""
    lines = []
    for (suite, method, direction), g in rows.groupby(["suite", "method", "direction"], sort=True):
        sizes = sorted(set(int(b) for b in g["bytes"]))
        size = fmt_size(sizes[0]) + (f"–{fmt_size(sizes[-1])}" if len(sizes) > 1 else "")
        pairs = sorted(set(_pair(r) for r in g.itertuples()))
        lines.append(f"{suite}/{method} {direction}: {len(g)} row(s), {len(sizes)} size(s) {size}, "
                     f"pair(s) {', '.join(pairs[:6])}{' …' if len(pairs) > 6 else ''}")
    if len(lines) > MAX_LISTED:
        lines = lines[:MAX_LISTED] + [f"… and {len(lines) - MAX_LISTED} more (--format csv lists every row)"]
    return lines


def _impossible_table(imp):
    """NEW's rows above a ceiling, one line per reason (an all-to-all sum names every flow it adds up)."""
    from ipcbench.report.render import Table

    rows = []
    for (host, suite, method, direction, size, reason), g in imp.groupby(
            ["host", "suite", "method", "direction", "bytes", "reason"], sort=True):
        pairs = sorted(set(_pair(r) for r in g.itertuples()))
        rows.append([f"{suite}/{method}", direction, str(host), ", ".join(pairs), fmt_size(int(size)), str(len(g)),
                     _num(float(g["value_gbps"].iloc[0]), "GB/s"), _num(float(g["ceiling_gbps"].iloc[0]), "GB/s"),
                     reason])
    return Table(["method", "direction", "host", "pair(s)", "size", "rows", "GB/s", "ceiling GB/s", "reason"],
                 rows[:MAX_LISTED], terminal=True, numeric=[False] * 4 + [True] * 4 + [False]), len(rows)


def _invalid_table(rows):
    """NEW's rows with an invalid value, one line each, naming the value."""
    from ipcbench.report.render import Table

    cells = [[f"{r.suite}/{r.method}", r.direction, str(r.host), _pair(r), fmt_size(int(r.bytes)), r.invalid]
             for r in rows.head(MAX_LISTED).itertuples()]
    return Table(["method", "direction", "host", "pair", "size", "invalid value"], cells, terminal=True,
                 numeric=[False] * 4 + [True, False])


def rule_line(c: Comparison) -> str:
    """Which noise rule judged the rows (the runs' noise basis)."""
    return f"noise rule: {c.info['noise_rule']}"


def catches_line(c: Comparison) -> str:
    """What a pass covers: per kind of row, the smallest change the gate would have caught (typical: the median
    over the kind's rows); a size band where every engine is at the threshold said once."""
    thr = c.info["threshold"]
    parts = []
    for band in BANDS:
        got = [x for x in c.info.get("catches", []) if x["band"] == band]
        if got and all(x["at_threshold"] for x in got):
            parts.append(f"every engine {band}: {pct(thr)} (the threshold)")
            continue
        parts += [f"{x['kind']}: {pct(x['smallest_change'])}" + (" (the threshold)" if x["at_threshold"] else "")
                  for x in got]
    return "smallest change caught (typical per kind of row): " + ("; ".join(parts) or "no row judged by value")


def summary_line(c: Comparison) -> str:
    n = c.counts()
    info = c.info
    parts = ", ".join(f"{n[v]} {v}" for v in ORDER) + f", {n['impossible']} impossible, {n['invalid']} invalid"
    base = f"{info['base_runs']} BASE run(s)"
    return (f"{info['matched']} rows matched ({info['mode']}; {base}; threshold {100 * info['threshold']:g}%, "
            f"alpha {info['alpha']:g}{'; --subset' if info['subset'] else ''}): {parts}")


def verdict_line(c: Comparison) -> str:
    fail = c.failures()
    if not fail:
        extra = " (rows missing from NEW allowed by --subset)" if c.counts()[RowVerdict.MISSING] else ""
        return "verdict: no regression" + extra
    words = {"regression": "row(s) worse", "missing": "row(s) missing from NEW",
             "impossible": "NEW row(s) above a physical ceiling", "invalid": "NEW row(s) with an invalid value"}
    what = ", ".join(f"{v} {words[k]}" for k, v in fail.items())
    return f"verdict: {'REGRESSION' if 'regression' in fail else 'FAIL'} ({what})"


def _blocks(c: Comparison) -> list:
    """The text/md document: warnings, changed rows, impossible rows, missing/new/not-judged summaries."""
    from ipcbench.report.render import Heading, Para, Table

    t = c.table
    blocks: list = [Para(f"warning: {w}", terminal=True) for w in c.warnings]
    changed = t[t["verdict"].isin([RowVerdict.REGRESSION, RowVerdict.IMPROVEMENT])]
    blocks.append(Heading(3, f"Changed rows: {len(changed)}", terminal=True))
    if len(changed):
        blocks.append(Table(_HEAD, [_cells(r) for r in changed.head(MAX_LISTED).itertuples()], terminal=True,
                            numeric=_NUMERIC))
        if len(changed) > MAX_LISTED:
            blocks.append(Para(f"… and {len(changed) - MAX_LISTED} more (--format csv lists every row)",
                               terminal=True))
    if len(c.impossible):
        blocks.append(Heading(3, f"Impossible numbers in NEW (above a physical ceiling): {len(c.impossible)} row(s)",
                              terminal=True))
        table, n = _impossible_table(c.impossible)
        blocks.append(table)
        if n > MAX_LISTED:
            blocks.append(Para(f"… and {n - MAX_LISTED} more", terminal=True))
    bad = t[t["invalid"] != ""]
    if len(bad):
        blocks.append(Heading(3, f"Invalid values in NEW: {len(bad)} row(s)", terminal=True))
        blocks.append(_invalid_table(bad))
        if len(bad) > MAX_LISTED:
            blocks.append(Para(f"… and {len(bad) - MAX_LISTED} more (--format csv lists every row)", terminal=True))
    missing = "Missing from NEW" + (" (allowed by --subset)" if c.info["subset"] else "")
    for verdict, title in ((RowVerdict.MISSING, missing), (RowVerdict.NEW, "Only in NEW")):
        rows = t[t["verdict"] == verdict]
        if len(rows):
            blocks.append(Heading(3, f"{title}: {len(rows)} row(s)", terminal=True))
            blocks += [Para(f"- {line}", terminal=True) for line in _groups(rows)]
    nj = t[t["verdict"] == RowVerdict.NOT_JUDGED]
    if len(nj):
        blocks.append(Heading(3, f"Not judged: {len(nj)} row(s)", terminal=True))
        for why, g in nj.groupby("note", sort=True):
            methods = sorted(set(g["suite"] + "/" + g["method"]))
            blocks.append(Para(f"- {why}: {len(g)} ({', '.join(methods[:16])}{' …' if len(methods) > 16 else ''})",
                               terminal=True))
    blocks.append(Para(rule_line(c), terminal=True))
    blocks.append(Para(catches_line(c), terminal=True))
    blocks.append(Para(summary_line(c), terminal=True))
    return blocks


def render(c: Comparison, fmt: str) -> str:
    from ipcbench.report.render import to_markdown, to_text

    if fmt == "csv":
        return c.table[CSV_COLUMNS].to_csv(index=False, float_format="%.6g")
    blocks = _blocks(c)
    if fmt == "md":
        return f"**{verdict_line(c)}**\n\n" + to_markdown(blocks)
    return to_text(blocks).rstrip() + "\n" + verdict_line(c) + "\n"
