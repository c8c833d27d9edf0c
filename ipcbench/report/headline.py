"""The report's headline ("At a glance"): per run, the numbers a reader came for, in a few lines at the top
of the HTML, the markdown and the terminal summary. Is the node healthy: `ipcbench check`'s judgement of the
run, the one verdict (health; the report never judges by rules of its own); then facts: every GPU pair's best
path and % of link peak, the weakest pair, what IPC buys over the host-staged paths and NCCL, the P2P latency,
what to know before quoting a number (invalid values by file:line, unverified rows, noise, a quick run), and
how the run was measured (options.py). With several runs, how many check judged healthy, unhealthy or could
not judge. Numbers come from tables.py, made of valid values only (validity.py); this module only chooses and
words them.
"""

from __future__ import annotations

from collections import Counter

from ipcbench.record.meta import Meta
from ipcbench.record.run import Run
from ipcbench.report.cells import f1, method_label, size_text, times, us
from ipcbench.report.evidence_view import glance_lines
from ipcbench.report.figure_style import series_of, size_label
from ipcbench.report.options import MAX_TERMINAL_RUN_ROWS, options_blocks, options_line, options_short, run_options
from ipcbench.report.render import Block, Callout, Heading, Para, Table, clean
from ipcbench.judging.judge import VERDICTS, not_a_check_input, shipped_verdict
from ipcbench.judging.validity import invalid
from ipcbench.results import STAGED_ENGINES
from ipcbench.status import Status

MAX_GLANCE_RUNS = 4  # runs that get a full "at a glance" block; every run gets a row in the runs table
MAX_PAIR_ROWS = 12  # pairs listed in the best-path table; beyond that, the weakest ones
WEAKEST_SHOWN = 6
WEAK_PCT = 10.0  # a run this far below the other runs of its GPU model is slow (slow_runs)
MAX_CHECKS_SHOWN = 3  # failed or unjudged checks named in a run's verdict line
MAX_INVALID_SHOWN = 3  # invalid values named (file:line) in a run's headline
MAX_RUNS_NAMED = 8  # runs named per verdict in the multi-run headline
CHECK_EXPECTATIONS = "the expectations it ships (ipcbench/judging/defaults.toml) and the node's own pairs"
# how the headline names the family of the fastest path (figure_style.Series.family)
FAMILY_WORDS = {"ce": "the copy engine", "sm read": "SM read kernels", "sm write": "SM write kernels",
                "sm_bulk read": "bulk-copy read kernels", "sm_bulk write": "bulk-copy write kernels",
                "mpi": "MPI through host memory", "shm": "shared host memory", "nccl": "NCCL send/receive",
                "ring": "pipeline rings"}


def _pair(r) -> str:
    return f"{int(r.src_gpu)}→{int(r.dst_gpu)}"


def _n(n: int, word: str) -> str:
    """'1 row', '3 rows'."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _signed(v: float) -> str:
    """+0.1%, -10.0%, and 0.0% rather than -0.0%."""
    v = round(float(v), 1)
    return "0.0%" if v == 0 else f"{v:+.1f}%"


def _engine_text(best) -> str:
    """Which engine is the fastest path, and over how many pairs: "the copy engine (copy/ce push, pool/pool_ce
    push) on every pair"."""
    series = series_of(best)
    fam = [series[(s, m)].family for s, m in zip(best["suite"], best["method"])]
    top, n = Counter(fam).most_common(1)[0]
    methods = sorted({method_label(s, m, d) for s, m, d, f in zip(best["suite"], best["method"], best["direction"], fam)
                      if f == top})
    name = FAMILY_WORDS.get(top) or str(best["method"].iloc[fam.index(top)])
    where = "on every pair" if n == len(best) else f"on {n} of {len(best)} pairs"
    return f"{name} ({', '.join(methods[:3])}{', …' if len(methods) > 3 else ''}) {where}"


def _link_desc(meta: Meta) -> str:
    """"NVSwitch (18 × NVLink 4.0, peak 450 GB/s per direction, the quoted data rate; ceiling 478, the signalling
    rate)" from meta.json's link table (both by the one convention, catalogue/links.py: % of peak divides by the
    peak, check holds a floor against the ceiling); a link of unknown kind says so."""
    descs: Counter = Counter()
    for ln in meta.links:
        if ln.peak_gbps or ln.kind == "unknown":
            kind = {"nvswitch": "NVSwitch", "nvlink": "NVLink", "pcie": "PCIe"}.get(ln.kind, ln.kind or "link")
            how = f"{ln.nvlink_count} × NVLink{' ' + ln.nvlink_version if ln.nvlink_version else ''}, " \
                if ln.nvlink_count else ""
            descs[(kind, how, ln.peak_gbps, ln.ceiling_gbps)] += 1
    parts = [(f"{kind} ({how}peak {peak:.0f} GB/s per direction, the quoted data rate"
              + (f"; ceiling {ceiling:.0f}, the signalling rate)" if ceiling and ceiling > peak else ")"))
             if peak else f"{kind} (no known rate)" for (kind, how, peak, ceiling), _ in descs.most_common(2)]
    return " and ".join(parts) + (" and other links" if len(descs) > 2 else "")


def gpu_desc(run: Run) -> str:
    """"host-a, host-b · 4 × NVIDIA H200 per host" (meta.json, else the rows)."""
    meta, frame = run.meta, run.frame
    hosts = meta.hosts or sorted(map(str, frame["host"].unique()))
    if meta.gpus:
        names = Counter(g.name for g in next(iter(meta.gpus.values())))
        g = ", ".join(f"{n} × {name}" for name, n in names.items()) + (" per host" if len(meta.gpus) > 1 else "")
    else:
        g = f"{len((set(frame['src_gpu']) | set(frame['dst_gpu'])) - {-1})} GPUs"
    h = ", ".join(hosts[:3]) + (f" (+{len(hosts) - 3} hosts)" if len(hosts) > 3 else "")
    return clean(f"{h} · {g}")


def slow_runs(runs: list[Run], best) -> dict[str, str]:
    """{run: reason} for runs whose median best path is more than 10% below the median run of the same GPU
    model (three runs or more of that model): a host whose pairs are all equally slow has no weak pair of
    its own, only the other runs show it."""
    if best.empty or len(runs) < 3:
        return {}
    med = best.groupby("run", observed=True)["bw"].median()
    model = {r.label: gpu_desc(r).split(" · ", 1)[-1] for r in runs}
    groups: dict[str, list[str]] = {}
    for label in med.index.astype(str):
        groups.setdefault(model.get(label, "?"), []).append(label)
    out = {}
    for labels in (ls for ls in groups.values() if len(ls) >= 3):
        ref = med.reindex(labels).median()
        for label in labels:
            below = 100.0 * (1 - med[label] / ref)
            if below > WEAK_PCT:
                out[label] = f"best path {below:.1f}% below the median of {len(labels)} runs, {ref:.1f} GB/s"
    return out


# ------------------------------------------------------------------------------------------ one run's facts

def _reference(n_pairs: int) -> str:
    """What every pair is held against (tables.typical): of two pairs, the other one."""
    return "the other pair" if n_pairs == 2 else "the median pair"


def _health(best) -> list[tuple[str, str]]:
    """The best path per pair and the weakest pair, as facts: whether the node is healthy is check's verdict
    (health), said once above them."""
    n_pairs = len(best)
    ref = _reference(n_pairs)
    med = float(best["bw"].median())
    pct = best["pct"].dropna()
    peak_txt = f" = **{pct.median():.1f}%** of the link peak" if len(pct) else " (no link table: % of peak unknown)"
    lo, hi = f"{best['bw'].min():.1f}", f"{best['bw'].max():.1f}"
    rng = f" (pairs {lo}–{hi})" if n_pairs > 1 and lo != hi else ""
    lines = [("info", f"**Best path per pair** at {size_text(best['bytes'].max())}: **{med:.1f} GB/s**"
                      f"{' median over ' + _n(n_pairs, 'GPU pair') if n_pairs > 1 else ''}{rng}{peak_txt}; "
                      f"fastest: {_engine_text(best)}.")]
    w = best.loc[best["bw"].idxmin()]
    host = f" ({w.host})" if best["host"].nunique() > 1 else ""
    wp = f" = {w.pct:.1f}% of peak" if w.pct == w.pct else ""
    if n_pairs > 1:
        text = (f"**Weakest pair** {_pair(w)}{host}: {w.bw:.1f} GB/s{wp}, {abs(w.below_pct):.1f}% "
                f"{'below' if w.below_pct >= 0 else 'above'} {ref}.")
    else:
        text = f"**Only one GPU pair** measured ({_pair(w)}{host}): nothing to compare it with."
    return [*lines, ("info", text)]


def _small_speedups(sp, digits: int) -> str:
    """"; at 4K, 1.2–3.4× depending on the method" from a speedup table's smallest sizes."""
    small = sp.dropna(subset=["small_speedup"])
    small = small[small["small_bytes"] == small["small_bytes"].min()]
    if not len(small):
        return ""
    lo, hi = small["small_speedup"].min(), small["small_speedup"].max()
    return (f"; at {size_text(small['small_bytes'].min())}, "
            + (f"{lo:.{digits}f}–{hi:.{digits}f}× depending on the method" if abs(hi - lo) >= 0.5 * 10 ** -digits
               else f"{lo:.{digits}f}×"))


NO_STAGED = "**What IPC buys**: no host-staged rows (staged suite) to compare with."
STOPPED_BEFORE = "the run did not complete ({why}): it stopped before"


def _ipc_buys(t: dict, run: Run) -> list[tuple[str, str]]:
    """What IPC buys over the best host-staged path, and over NCCL."""
    spg, staged, lines = t["spg"], t["staged"], []
    if len(spg):
        b = spg.iloc[0]
        base = staged.iloc[0] if len(staged) else None
        base_txt = (f"{base.method} {base.direction}, {base.bw:.1f} GB/s at {size_text(base.bytes)}"
                    if base is not None else "per size")
        lines.append(("info", f"**What IPC buys**: **{b.speedup:.1f}×** the best host-staged path ({base_txt}) with "
                              f"{method_label(b.suite, b.method, b.direction)} ({b.bw:.1f} GB/s at "
                              f"{size_text(b.bytes)}){_small_speedups(spg, 1)}; every method in the table below."))
    elif len(staged) == 0 and run.incomplete:  # an absence of a run that stopped says nothing of the node
        lines.append(("info", "**What IPC buys**: no host-staged rows: "
                              + STOPPED_BEFORE.format(why=run.incomplete) + " any, or never reached the staged suite."))
    elif len(staged) == 0:
        lines.append(("info", _same_gpu_buys(t["same"]) if t.get("same") is not None and len(t["same"]) else
                      NO_STAGED))
    nccl, spn = t.get("nccl"), t.get("spn")
    if nccl is not None and len(nccl):
        base = nccl.iloc[0]
        text = (f"**Against NCCL** (ncclSend/ncclRecv, nccl suite): NCCL reaches **{base.bw:.1f} GB/s** at "
                f"{size_text(base.bytes)} ({method_label(base.suite, base.method, base.direction)}, median over pairs)")
        if spn is None or not len(spn):
            text += "; no IPC bandwidth rows at its sizes to compare with."
        else:
            b = spn.iloc[0]
            text += (f"; the best IPC method, {method_label(b.suite, b.method, b.direction)}, is **{b.speedup:.2f}×** "
                     f"NCCL at {size_text(b.bytes)}{_small_speedups(spn, 2)}.")
        lines.append(("info", text))
    return lines


def _same_gpu_buys(same) -> str:
    """Runs whose host-staged rows are all same-GPU (ranks sharing a GPU): the best same-GPU IPC path over the
    best same-GPU host-staged path, at their largest sizes."""
    one_way = _one_way(same)
    staged = one_way[one_way["engine"].isin(STAGED_ENGINES)]
    ipc = one_way[~one_way["engine"].isin(STAGED_ENGINES + ("nccl",))]
    if staged.empty:
        return NO_STAGED
    s = staged.loc[staged["bw_median"].idxmax()]
    base = f"{method_label(s.suite, s.method, s.direction)}, {s.bw_median:.1f} GB/s at {size_text(s.size_max)}"
    if ipc.empty:
        return f"**What IPC buys**: the host-staged rows are same-GPU ({base}), and there is no same-GPU IPC row."
    b = ipc.loc[ipc["bw_median"].idxmax()]
    return (f"**What IPC buys** (same GPU: no cross-GPU pair here): **{b.bw_median / s.bw_median:.1f}×** the best "
            f"same-GPU host-staged path ({base}) with {method_label(b.suite, b.method, b.direction)} "
            f"({b.bw_median:.1f} GB/s at {size_text(b.size_max)}).")


def _no_nccl(run: Run) -> list[tuple[str, str]]:
    """Why a run has no NCCL rows, so that the headline's silence is not read as NCCL being slow or absent."""
    f = run.frame
    if (f["engine"] == "nccl").any():
        return []
    skipped = run.meta.skipped_by_suite().get("nccl")
    if skipped:  # the run recorded why its NCCL steps could not run (meta.json "skipped")
        why = "its steps could not run (" + "; ".join(skipped) + ")"
    elif run.meta.suites is not None and "nccl" not in run.meta.suites:
        why = "the nccl suite was not run"
    elif not (~f["same_gpu"] & (f["src_gpu"] >= 0) & (f["dst_gpu"] >= 0)).any():
        why = "NCCL refuses two ranks of one GPU, and every pair of this run shares one"
    elif run.incomplete:
        why = STOPPED_BEFORE.format(why=run.incomplete) + " its NCCL steps"
    else:
        why = "the nccl suite wrote none and the run recorded no reason (runs before meta.json's `skipped`)"
    return [("info", f"**No NCCL rows**: {why}; IPC is not compared with NCCL here.")]


def _latency(lat) -> list[tuple[str, str]]:
    """The P2P ping-pong, then every path's smallest message."""
    lines = []
    lat = lat.set_index("method")
    if "sm_pingpong" in lat.index:
        p = lat.loc["sm_pingpong"]
        spread = (f"median **{us(p['median'])} µs**, {us(p['min'])}–{us(p['max'])} µs over {int(p['pairs'])} pairs"
                  if p["pairs"] > 1 else f"**{us(p['median'])} µs**")
        lines.append(("info", f"**P2P latency, one way**: {spread} (sm_pingpong: half a store-and-poll round trip; "
                              "not nvbandwidth's load latency)."))
    rest = lat.drop(index=["sm_pingpong"], errors="ignore")
    data, signal = rest[rest["bytes"] > 0], rest[rest["bytes"] <= 0]
    parts = [f"at {size_label(int(b))}: " + ", ".join(f"{m} {us(r['median'])} µs"
                                                     for m, r in g.sort_values("median").iterrows())
             for b, g in data.groupby("bytes", sort=True)]
    parts += [f"{m} {us(r['median'])} µs (an event, no data)" for m, r in signal.iterrows()]
    if parts:
        suites = "latency and nccl suites" if (rest["engine"] == "nccl").any() else "latency suite"
        lines.append(("info", f"**Smallest message, one way** ({suites}, median over pairs): "
                              + "; ".join(parts) + "."))
    return lines


def _one_way(summary):
    """A method summary's one-way bandwidth rows of single pairs (all-to-all flows left out)."""
    return summary[summary["direction"].isin(("push", "pull")) & summary["bw_median"].notna()
                   & (summary["pattern"] != "alltoall")]


def _same_gpu(same, run: Run) -> list[tuple[str, str]]:
    sb = _one_way(same)
    if not len(sb):
        return []
    top = sb.loc[sb["bw_median"].idxmax()]
    mps = run.frame.loc[run.frame["same_gpu"], "mps"]
    if mps.notna().all() and mps.all():
        handoff = "under MPS the two processes' kernels run concurrently: ping-pongs there are hand-offs"
    elif mps.notna().all() and not mps.any():
        handoff = "ping-pongs there time the slicing of the two processes' kernels (no MPS), not a link"
    else:
        handoff = ("ping-pongs there time the slicing of the two processes' kernels where they ran without MPS (not "
                   "recorded for this run), not a link")
    return [("info", f"**Same GPU** (ranks sharing a GPU, not in the pair numbers above): best "
                     f"{method_label(top.suite, top.method, top.direction)} {top.bw_median:.1f} GB/s at "
                     f"{size_text(top.size_max)}, device-local; {handoff}.")]


def _methods_text(rows, limit: int = 3) -> str:
    c = Counter(method_label(s, m, d) for s, m, d in zip(rows["suite"], rows["method"], rows["direction"]))
    out = ", ".join(f"{k} ({n})" for k, n in c.most_common(limit))
    return out + (f" and {len(c) - limit} more methods" if len(c) > limit else "")


def _flags(run: Run, t: dict, flags: list[str]) -> list[tuple[str, str]]:
    """What a reader must know before quoting a number (invalid values, unverified rows, verification off, an
    incomplete run, noise, a quick run, no meta.json): facts beside the verdict, never a verdict of their own; "!"
    only for what check raises too (invalid, unverified or unchecked rows, an incomplete run, no meta.json), the
    others said as facts. `flags` gets each in a few words (the runs table)."""
    lines = _unquotable(run, t, flags)
    if len(t["noisy"]):
        flags.append(_n(len(t["noisy"]), "noisy row"))
        lines.append(("info", _noise_text(t["noisy"])))
    if run.meta.quick:
        flags.append("quick run")  # what that means: in the "How it was measured" line (report/options.py)
    if not run.meta.found:
        flags.append("no meta.json")
        lines.append(("warn", "No meta.json: options, GPUs, link peaks and versions unknown."))
    elif len(t["best"]) and not t["best"]["pct"].notna().any():
        lines.append(("info", "No NVML link table in meta.json: % of link peak unknown."))
    return lines


def _unquotable(run: Run, t: dict, flags: list[str]) -> list[tuple[str, str]]:
    """Rows no number may be quoted from, which check raises too: invalid values, unverified rows, verification
    off, an incomplete run."""
    lines = []
    bad = invalid(run)
    if bad:
        flags.append(_n(len(bad), "invalid value"))
        shown = list(bad.values())[:MAX_INVALID_SHOWN]
        more = f"; and {len(bad) - len(shown)} more" if len(bad) > len(shown) else ""
        lines.append(("warn", f"**{_n(len(bad), 'invalid value')}** (NaN, infinite, negative or above a physical "
                              f"ceiling), left out of every number here: " + "; ".join(shown) + more + "."))
    unver = t["unver"]
    if len(unver):
        flags.append(_n(len(unver), "unverified row"))
        lines.append(("warn", f"**{_n(len(unver), 'unverified row')}** (the destination did not hold what was sent, "
                              f"or the check did not run): {_methods_text(unver)}. Never quote these numbers."))
    if run.meta.verify is False:
        flags.append("verification off")
        lines.append(("warn", "**Verification off** (--no-verify): no number of this run is checked."))
    if run.incomplete:
        flags.append("the run did not complete")
        lines.append(("warn", f"**Incomplete run** ({run.incomplete}): only the rows measured before it stopped."))
    return lines


def _noise_text(noisy) -> str:
    """The rows whose own samples spread more than their kind moves between runs (tables.noisy_rows), by suite."""
    by_suite = ", ".join(f"{s} {n}" for s, n in Counter(map(str, noisy["suite"])).most_common())
    return (f"**{_n(len(noisy), 'noisy row')}** ({by_suite}): their samples spread more than their kind moves "
            f"between runs; quote them with their noise.")


def health(run: Run):
    """check's judgement of the run (judging/judge.shipped_verdict): what `ipcbench check --from RUN` says, so that
    the report and the gate cannot disagree. Judged on the run as read, as check reads it."""
    return shipped_verdict(run)


def _worst(verdict, limit: int = MAX_CHECKS_SHOWN) -> str:
    """What made check's verdict what it is: the worst failed checks (or those it could not judge), in its
    own words, and how many more."""
    status = Status(verdict.status)
    bad = sorted((c for c in verdict.checks if Status(c.status) is status), key=lambda c: -c.shortfall)
    more = f"; and {len(bad) - limit} more" if len(bad) > limit else ""
    return "; ".join(c.brief or c.reason for c in bad[:limit]) + more if bad else "nothing was judged"


NO_CHECK_INPUT = "no check input"  # a run's word where check judges nothing by design (a selftest's run)


def run_word(facts: dict) -> str:
    """The one word of a run's verdict, in the headline and in every table: check's (healthy, unhealthy, cannot
    judge: judging/judge.VERDICTS), or "no check input" for a run check does not judge by design."""
    return VERDICTS[facts["status"]] if facts["check_input"] else NO_CHECK_INPUT


def _verdict_line(verdict, run: Run | None = None) -> tuple[str, str]:
    """check's verdict in one headline line: healthy, unhealthy naming what failed, or cannot judge and why; a run
    that is no check input by design (a selftest's) says so, with no alarm."""
    if run is not None and not_a_check_input(run):
        return "info", ("**No check input**: a run of ipcbench selftest (the instrument against its own anchors); "
                        "`ipcbench selftest` judged it, not ipcbench check.")
    status = Status(verdict.status)
    against = f"against {CHECK_EXPECTATIONS}"
    if status is Status.PASS:  # one terminal line: where the expectations are is said where something failed
        return "ok", (f"**Healthy** (ipcbench check: {_n(len(verdict.checks), 'check')} passed against the "
                      f"expectations it ships and the node's own pairs).")
    if status is Status.FAIL:
        return "bad", f"**Unhealthy** (ipcbench check, {against}): {_worst(verdict)}."
    return "warn", f"**Cannot judge** the node's health (ipcbench check, {against}): {_worst(verdict)}."


def glance_facts(run: Run, t: dict) -> dict:
    """Everything the headline says about one run, as (level, words) lines, from its part of each table that
    document._tables gives the glance; check's verdict first, then facts."""
    flags: list[str] = []
    verdict = health(run)
    lines = _health(t["best"]) if len(t["best"]) else []
    lines += _ipc_buys(t, run) + _no_nccl(run)
    lines += _latency(t["lat"]) if len(t["lat"]) else []
    lines += _same_gpu(t["same"], run) if t.get("same") is not None and len(t["same"]) else []
    lines += _flags(run, t, flags)
    lines += glance_lines(run.meta, verdict)
    return dict(lines=[_verdict_line(verdict, run)] + lines, options=run_options(run.meta, run.frame), flags=flags,
                status=Status(verdict.status), verdict=verdict, check_input=not_a_check_input(run) is None)


# ------------------------------------------------------------------------------------------ the blocks

def _pair_table(best, terminal: bool) -> list[Block]:
    if best.empty:
        return []
    multi_host = best["host"].nunique() > 1
    shown, caption = best, "Best one-way path per GPU pair at the largest size (median over ranks of the pair)"
    if len(best) > MAX_PAIR_ROWS:
        shown = best.sort_values("below_pct", ascending=False).head(WEAKEST_SHOWN)
        caption = (f"The {len(shown)} weakest of {len(best)} GPU pairs (best one-way path at the largest size); "
                   "the pair heatmaps show every pair of the hosts with the weakest pairs")
    has_pct = best["pct"].notna().any()
    cols = (["host"] if multi_host else []) + ["pair", "best one-way path", "GB/s"] + \
        (["link, peak GB/s", "% of link peak"] if has_pct else []) + [f"vs {_reference(len(best))[4:]}"]
    rows = []
    for r in shown.itertuples():
        row = ([str(r.host)] if multi_host else []) + [_pair(r), method_label(r.suite, r.method, r.direction),
                                                          f1(r.bw)]
        if has_pct:
            row += [f"{r.link_kind} {r.peak_gbps:.0f}" if r.peak_gbps == r.peak_gbps else "", f1(r.pct)]
        rows.append(row + [_signed(-r.below_pct)])
    numeric = [c in ("GB/s", "% of link peak") or c.startswith("vs ") for c in cols]
    return [Table(cols, rows, numeric=numeric, caption=caption, terminal=terminal)]


SPEEDUP_TABLES = {  # baseline -> (speedup column, caption)
    "staged": ("× best staged", "What IPC buys: speedup over the best host-staged path, same pair and size "
                                "(median over pairs)"),
    "nccl": ("× NCCL", "What IPC buys over NCCL: speedup over ncclSend/ncclRecv, same pair, kind of direction "
                       "and size (median over pairs)"),
}


def _speedup_table(spg, terminal: bool, baseline: str = "staged") -> list[Block]:
    if spg.empty:
        return []
    column, caption = SPEEDUP_TABLES[baseline]
    rows = [[method_label(r.suite, r.method, r.direction), size_text(r.bytes), f1(r.bw), times(r.speedup),
             f"{r.speedup_min:.2f}–{r.speedup_max:.2f}x" if r.pairs > 1 else "",
             f"{times(r.small_speedup)} at {size_text(r.small_bytes)}" if r.small_speedup == r.small_speedup else ""]
            for r in spg.itertuples()]
    return [Table(["IPC method (best direction)", "size", "GB/s", column, "over pairs", "at the smallest size"],
                  rows, numeric=[False, True, True, True, True, True], terminal=terminal, caption=caption)]


def _run_block(run: Run, t: dict, facts: dict, several: bool) -> list[Block]:
    """One run's callout (its facts and options) and its two small tables."""
    link = _link_desc(run.meta)
    title = f"{run.label} · {gpu_desc(run)}" + (f" · {link}" if link else "")
    how = {k: v for k, v in facts["options"].items() if k != "command"}  # the command: in the run's details
    if run.meta.pairing is not None:  # the mode in short; why: in the run's details (its options line)
        how["pairs"] = options_short(run.meta, run.frame)["pairs"]
    items = facts["lines"] + [("info", "**How it was measured**: " + options_line(how))]
    out: list[Block] = [Heading(3, run.label, terminal=True)] if several else []
    out += [Callout(items, title=title, terminal=True)] + _pair_table(t["best"], terminal=True)
    out += _speedup_table(t["spg"], terminal=True)
    if t.get("spn") is not None:
        out += _speedup_table(t["spn"], terminal=True, baseline="nccl")
    return out


def _run_row(run: Run, t: dict, facts: dict) -> list[str]:
    best, spg, lat = t["best"], t["spg"], t["lat"]
    med = pct = weakest = sp = lat_txt = ""
    if len(best):
        med = f1(best["bw"].median())
        pct = f1(best["pct"].median()) if best["pct"].notna().any() else ""
        if len(best) > 1:
            w = best.loc[best["bw"].idxmin()]
            weakest = f"{_pair(w)} {_signed(-w.below_pct)}"
    if len(spg):
        sp = times(spg["speedup"].iloc[0])
    if len(lat) and (lat["method"] == "sm_pingpong").any():
        p = lat[lat["method"] == "sm_pingpong"].iloc[0]
        lat_txt = f"{us(p['median'])} ({us(p['min'])}–{us(p['max'])})" if p["pairs"] > 1 else us(p["median"])
    return [run.label, gpu_desc(run).split(" · ", 1)[-1], run_word(facts),
            options_short(run.meta, run.frame)["mode"], med, pct, weakest, sp, lat_txt,
            "; ".join(facts["flags"]) or "none"]


STATUS_FIRST = {Status.FAIL: 0, Status.UNJUDGED: 1, Status.PASS: 2}  # the runs table on a terminal: worst first
NOT_JUDGED_LAST = 3  # where a run that is no check input sorts: after every verdict, no alarm


def _counts(runs: list[Run], facts: list[dict], slow: dict[str, str]) -> list[tuple[str, str]]:
    """The multi-run verdict: how many runs check judged healthy, unhealthy, or could not judge (never "all
    healthy" for runs not judged), the runs of each that are not healthy, the runs that are no check input by
    design (said once, no alarm), and runs slower than their peers."""
    judged = [(r, f) for r, f in zip(runs, facts) if f["check_input"]]
    by = {s: [(r, f) for r, f in judged if f["status"] is s] for s in Status}
    level = "bad" if by[Status.FAIL] else "warn" if by[Status.UNJUDGED] else "ok"
    why = " (each run's headline below says what failed or why)" if by[Status.FAIL] or by[Status.UNJUDGED] else ""
    lines = [(level, f"**{_n(len(judged), 'run')} judged by ipcbench check**: {len(by[Status.PASS])} healthy, "
                     f"{len(by[Status.FAIL])} unhealthy, {len(by[Status.UNJUDGED])} cannot be judged{why}.")]
    others = [r.label for r, f in zip(runs, facts) if not f["check_input"]]
    if others:
        lines.append(("info", f"**{_n(len(others), 'run')} of ipcbench selftest, no check input by design** "
                              f"({', '.join(others[:MAX_RUNS_NAMED])}{', …' if len(others) > MAX_RUNS_NAMED else ''})"
                              ": the instrument against its own anchors, judged by `ipcbench selftest`."))
    for status, title in ((Status.FAIL, "Unhealthy"), (Status.UNJUDGED, "Cannot judge")):
        named = by[status][:MAX_RUNS_NAMED]
        if named:
            more = f"; and {len(by[status]) - len(named)} more (the check column)" if len(by[status]) > len(named) \
                else ""
            lines.append(("info", f"**{title}**: " + "; ".join(
                f"{r.label} ({_worst(f['verdict'], 1)})" for r, f in named) + more + "."))
    if slow:
        lines.append(("info", "**Slower than the other runs of their GPU model**: "
                              + "; ".join(f"{label} ({why})" for label, why in slow.items())
                              + ": every pair of such a run is slow alike (a throttled GPU, fewer NVLinks, another "
                                "load), so only the other runs show it."))
    return lines


def _runs_side_by_side(runs: list[Run], summary_rows: list, facts: list[dict], slow: dict[str, str]) -> list[Block]:
    cols = ["run", "GPUs", "check", "mode", "best path GB/s", "% of peak", "weakest pair", "IPC × staged",
            "P2P latency µs", "flags"]
    numeric = [False, False, False, False, True, True, False, True, False, False]
    caption = ("Runs side by side (check: ipcbench check's verdict of the run; best path: median over GPU pairs of "
               "each pair's fastest one-way method at the largest size; weakest pair: vs the median pair; IPC × "
               "staged: the best IPC method over the best host-staged path; P2P latency: sm_pingpong one way, "
               "median (min–max) over pairs)")
    order = sorted(range(len(runs)), key=lambda i: (STATUS_FIRST[facts[i]["status"]] if facts[i]["check_input"]
                                                    else NOT_JUDGED_LAST, runs[i].label not in slow,
                                                    not facts[i]["flags"]))
    worst_first = [summary_rows[i] for i in order]
    blocks: list[Block] = [
        Callout(_counts(runs, facts, slow), terminal=True), Table(cols, summary_rows, numeric=numeric, caption=caption),
        Table(cols, worst_first[:MAX_TERMINAL_RUN_ROWS], terminal=True, files=False, numeric=numeric,
              caption="Runs side by side (not healthy first)")]
    if len(summary_rows) > MAX_TERMINAL_RUN_ROWS:
        blocks.append(Para(f"… and {len(summary_rows) - MAX_TERMINAL_RUN_ROWS} more runs in the report.",
                           terminal=True, files=False))
    blocks += options_blocks(runs)
    if len(runs) > MAX_GLANCE_RUNS:
        blocks.append(Para(f"Full headlines for the first {MAX_GLANCE_RUNS} runs; every run is in the tables."))
    return blocks


def glance_blocks(runs: list[Run], tables: dict) -> list[Block]:
    """The "At a glance" section: per run (the first MAX_GLANCE_RUNS) a callout, its options and two small
    tables; with several runs, the count of check's verdicts and a one-row-per-run table; with runs of
    different options, a warning."""
    split = {name: dict(tuple(t.groupby("run", observed=True, sort=False))) if len(t) else {}
             for name, t in tables.items()}
    summary_rows, per_run, all_facts = [], [], []
    slow = slow_runs(runs, tables["best"])
    for i, run in enumerate(runs):
        t = {name: split[name].get(run.label, tables[name].iloc[0:0]) for name in tables}
        facts = glance_facts(run, t)
        if run.label in slow:
            facts["flags"].append("slower than the other runs")
            facts["lines"].insert(1, ("info", f"**Slower than the other runs**: {slow[run.label]}: every pair of "
                                              "this run is slow alike (a throttled GPU, fewer NVLinks, another "
                                              "load), so only the other runs show it."))
        summary_rows.append(_run_row(run, t, facts))
        all_facts.append(facts)
        if i < MAX_GLANCE_RUNS:
            per_run += _run_block(run, t, facts, len(runs) > 1)
    blocks: list[Block] = [Heading(2, "At a glance", terminal=True)]
    if len(runs) > 1:
        blocks += _runs_side_by_side(runs, summary_rows, all_facts, slow)
    return blocks + per_run
