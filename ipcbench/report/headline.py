"""The report's headline ("At a glance"); the run options it shows come from options.py.

Per run, the numbers a reader came for, in a few lines at the top of the HTML, the markdown and the
terminal summary: is the node healthy (every GPU pair's best path and % of link peak, the weakest pair and
by how much, red flags), what IPC buys over the best host-staged path, the P2P latency with its spread over
pairs, and how the run was measured (quick or full sampling, samples and stopping rule, min-time, sizes,
ranks per GPU, pair mode). Numbers come from tables.py; this module only chooses and words them. pandas is
only used through the frames it is given.
"""

from __future__ import annotations

from collections import Counter

from ipcbench.report.cells import f1, method_label, size_text, times, us
from ipcbench.report.options import MAX_TERMINAL_RUN_ROWS, options_blocks, options_line, options_short, run_options
from ipcbench.report.render import Callout, Heading, Para, Table, clean

MAX_GLANCE_RUNS = 4  # runs that get a full "at a glance" block; every run gets a row in the runs table
MAX_PAIR_ROWS = 12  # pairs listed in the best-path table; beyond that, the weakest ones
WEAKEST_SHOWN = 6


def slow_runs(runs, best) -> dict[str, str]:
    """{run: reason} for runs whose median best path is more than 10% below the median run of the same GPU
    model (three runs or more of that model): a host whose pairs are all equally slow has no weak pair of
    its own, only the other runs show it."""
    if best.empty or len(runs) < 3:
        return {}
    med = best.groupby("run", observed=True)["bw"].median()
    model = {r.label: _gpu_desc(r.meta, r.frame).split(" · ", 1)[-1] for r in runs}
    out = {}
    groups: dict[str, list[str]] = {}
    for label in med.index.astype(str):
        groups.setdefault(model.get(label, "?"), []).append(label)
    for labels in groups.values():
        if len(labels) < 3:
            continue
        ref = med.reindex(labels).median()
        for label in labels:
            below = 100.0 * (1 - med[label] / ref)
            if below > 10:
                out[label] = f"best path {below:.1f}% below the median of {len(labels)} runs, {ref:.1f} GB/s"
    return out


# ------------------------------------------------------------------------------------------ glance

def _pair(r) -> str:
    return f"{int(r.src_gpu)}→{int(r.dst_gpu)}"


def _n(n: int, word: str) -> str:
    """'1 row', '3 rows'."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _signed(v: float) -> str:
    """+0.1%, -10.0%, and 0.0% rather than -0.0%."""
    v = round(float(v), 1)
    return "0.0%" if v == 0 else f"{v:+.1f}%"


def _bytes(b) -> str:
    b = int(b)
    return f"{b} B" if b < 1024 else size_text(b)


ENGINES = {"ce": "the copy engine", "sm_read": "SM read kernels", "sm_write": "SM write kernels",
           "sm_bulk_read": "bulk-copy read kernels", "sm_bulk_write": "bulk-copy write kernels",
           "mpi_staged": "MPI through host memory", "shm_staged": "shared host memory",
           "nccl": "NCCL send/receive"}


def _engine_text(best) -> str:
    """Which engine is the fastest path, and over how many pairs: "the copy engine (copy/ce push, pool/pool_ce
    push) on every pair"."""
    from ipcbench.report.figures import engine_of

    eng = Counter(engine_of(m) for m in best["method"].astype(str))
    top, n = eng.most_common(1)[0]
    methods = sorted({method_label(s, m, d) for s, m, d in zip(best["suite"], best["method"], best["direction"])
                      if engine_of(str(m)) == top})
    name = ENGINES.get(top, "pipeline rings" if top.startswith("ring") else top)
    where = "on every pair" if n == len(best) else f"on {n} of {len(best)} pairs"
    return f"{name} ({', '.join(methods[:3])}{', …' if len(methods) > 3 else ''}) {where}"


def _link_desc(meta: dict | None) -> str:
    """"NVSwitch (18 × NVLink 4.0, 478 GB/s per direction)" from meta.json's link table."""
    topo = (meta or {}).get("topology")
    descs = Counter()
    if isinstance(topo, dict):
        for t in topo.values():
            for link in ((t or {}).get("links") or []) if isinstance(t, dict) else []:
                if not isinstance(link, dict) or not link.get("peak_gbps"):
                    continue
                kind = {"nvswitch": "NVSwitch", "nvlink": "NVLink", "pcie": "PCIe"}.get(
                    str(link.get("kind")), str(link.get("kind") or "link"))
                n, ver = link.get("nvlink_count"), link.get("nvlink_version")
                how = f"{n} × NVLink{' ' + str(ver) if ver else ''}, " if n else ""
                descs[(kind, how, float(link["peak_gbps"]))] += 1
    if not descs:
        return ""
    parts = [f"{kind} ({how}{peak:.0f} GB/s per direction)" for (kind, how, peak), _ in descs.most_common(2)]
    return " and ".join(parts) + (" and other links" if len(descs) > 2 else "")


def _gpu_desc(meta: dict | None, frame) -> str:
    gpus = (meta or {}).get("gpus")
    hosts = (meta or {}).get("hosts") or sorted(map(str, frame["host"].unique()))
    if isinstance(gpus, dict) and gpus:
        first = next(iter(gpus.values())) or []
        names = Counter(str(g.get("name", "?")) for g in first if isinstance(g, dict))
        g = ", ".join(f"{n} × {name}" for name, n in names.items())
        g += " per host" if len(gpus) > 1 else ""
    else:
        g = f"{len((set(frame['src_gpu']) | set(frame['dst_gpu'])) - {-1})} GPUs"
    h = ", ".join(map(str, hosts[:3])) + (f" (+{len(hosts) - 3} hosts)" if len(hosts) > 3 else "")
    return clean(f"{h} · {g}")


def _noisy_text(noisy_run, cv_threshold: float) -> str:
    by_suite = Counter(map(str, noisy_run["suite"]))
    parts = ", ".join(f"{s} {n}" for s, n in by_suite.most_common())
    return f"{_n(len(noisy_run), 'noisy row')} (CV above {cv_threshold:g}): {parts}"


def _methods_text(rows, limit: int = 3) -> str:
    c = Counter(method_label(s, m, d) for s, m, d in zip(rows["suite"], rows["method"], rows["direction"]))
    out = ", ".join(f"{k} ({n})" for k, n in c.most_common(limit))
    return out + (f" and {len(c) - limit} more methods" if len(c) > limit else "")


def glance_facts(run, best, staged, spg, lat, weak, noisy, unver, impossible, cv_threshold: float,
                 same=None, nccl=None, spn=None) -> dict:
    """Everything the headline says about one run, as words and small tables (the frames already restricted
    to the run; `same`: the method summary's same-GPU rows; `nccl`/`spn`: NCCL's best one-way path and the
    IPC methods' speedup over it, like `staged`/`spg`)."""
    meta = run.meta or {}
    reds, ambers, lines = [], [], []
    # --- health: best path per pair
    n_pairs = len(best)
    if n_pairs:
        med = float(best["bw"].median())
        pct = best["pct"].dropna()
        peak_txt = (f" = **{pct.median():.1f}%** of the link peak" if len(pct) else
                    " (no link table: % of peak unknown)")
        lo, hi = f"{best['bw'].min():.1f}", f"{best['bw'].max():.1f}"
        rng = f" (pairs {lo}–{hi})" if n_pairs > 1 and lo != hi else ""
        lines.append(("info", f"**Best path per pair** at {size_text(best['bytes'].max())}: **{med:.1f} GB/s**"
                              f"{' median over ' + _n(n_pairs, 'GPU pair') if n_pairs > 1 else ''}{rng}{peak_txt}; "
                              f"fastest: {_engine_text(best)}."))
        w = best.loc[best["bw"].idxmin()]
        host = f" ({w.host})" if best["host"].nunique() > 1 else ""
        wp = f" = {w.pct:.1f}% of peak" if w.pct == w.pct else ""
        level = "bad" if w.below_pct > 10 else "ok"
        if n_pairs > 1:
            text = (f"**Weakest pair** {_pair(w)}{host}: {w.bw:.1f} GB/s{wp}, {abs(w.below_pct):.1f}% "
                    f"{'below' if w.below_pct >= 0 else 'above'} the median pair")
            text += " (more than 10%: a slow or degraded link)." if level == "bad" else "."
        else:
            text = f"**Only one GPU pair** measured ({_pair(w)}{host}): nothing to compare it with."
        lines.append((level, text))
        low = best[best["below_pct"] > 10]
        if len(low) > 1:
            hosts = Counter(map(str, low["host"]))
            where = ""
            if best["host"].nunique() > 1:
                where = " on " + ", ".join(f"{h} ({n})" for h, n in hosts.most_common(4))
                where += f" and {len(hosts) - 4} more hosts" if len(hosts) > 4 else ""
            reds.append(f"{len(low)} of {n_pairs} GPU pairs more than 10% below the median pair{where}")
        elif level == "bad":
            reds.append(f"pair {_pair(w)}{host} is {w.below_pct:.1f}% below the median pair")
    # --- what IPC buys
    if len(spg):
        b = spg.iloc[0]
        base = staged.iloc[0] if len(staged) else None
        base_txt = (f"{base.method} {base.direction}, {base.bw:.1f} GB/s at {size_text(base.bytes)}"
                    if base is not None else "per size")
        small = spg.dropna(subset=["small_speedup"])
        small = small[small["small_bytes"] == small["small_bytes"].min()]
        small_txt = ""
        if len(small):
            sb = size_text(small["small_bytes"].min())
            lo, hi = small["small_speedup"].min(), small["small_speedup"].max()
            small_txt = (f"; at {sb}, {lo:.1f}–{hi:.1f}× depending on the method" if abs(hi - lo) >= 0.05 else
                         f"; at {sb}, {lo:.1f}×")
        lines.append(("info", f"**What IPC buys**: **{b.speedup:.1f}×** the best host-staged path ({base_txt}) with "
                              f"{method_label(b.suite, b.method, b.direction)} ({b.bw:.1f} GB/s at "
                              f"{size_text(b.bytes)}){small_txt}; every method in the table below."))
    elif len(staged) == 0:
        lines.append(("info", "**What IPC buys**: no host-staged rows (staged suite) to compare with."))
    if nccl is not None and len(nccl):
        lines.append(("info", _nccl_text(nccl.iloc[0], spn if spn is not None else nccl.iloc[0:0])))
    # --- latency
    if len(lat):
        lat = lat.set_index("method")
        if "sm_pingpong" in lat.index:
            p = lat.loc["sm_pingpong"]
            spread = (f"median **{us(p['median'])} µs**, {us(p['min'])}–{us(p['max'])} µs over "
                      f"{int(p['pairs'])} pairs" if p["pairs"] > 1 else f"**{us(p['median'])} µs** (1 pair)")
            lines.append(("info", f"**P2P latency, one way**: {spread} (sm_pingpong: half a store-and-poll round "
                                  "trip between two kernels spinning on flags in each other's memory; not "
                                  "nvbandwidth's load latency)."))
        rest = lat.drop(index=["sm_pingpong"], errors="ignore")
        data, signal = rest[rest["bytes"] > 0], rest[rest["bytes"] <= 0]
        parts = []
        for b, g in data.groupby("bytes", sort=True):
            g = g.sort_values("median")
            parts.append(f"at {_bytes(b)}: " + ", ".join(f"{m} {us(r['median'])} µs" for m, r in g.iterrows()))
        parts += [f"{m} {us(r['median'])} µs (an event, no data)" for m, r in signal.iterrows()]
        if parts:
            suites = "latency and nccl suites" if rest.index.astype(str).str.startswith("nccl").any() else \
                "latency suite"
            lines.append(("info", f"**Smallest message, one way** ({suites}, median over pairs): "
                                  + "; ".join(parts) + "."))
    # --- ranks sharing a GPU
    if same is not None and len(same):
        sb = same[same["direction"].isin(("push", "pull")) & same["bw_median"].notna()
                  & ~same["method"].astype(str).str.endswith("_alltoall")]
        if len(sb):
            top = sb.loc[sb["bw_median"].idxmax()]
            lines.append(("info", f"**Same GPU** (ranks sharing a GPU, left out of the pair numbers above): best "
                                  f"{method_label(top.suite, top.method, top.direction)} {top.bw_median:.1f} GB/s at "
                                  f"{size_text(top.size_max)} (device-local copies, no link crossed); ping-pong "
                                  "latencies there measure the time-slicing of the two processes' kernels (no MPS), "
                                  "not a link."))
    # --- flags
    if len(unver):
        reds.append(_n(len(unver), "unverified row"))
        lines.append(("bad", f"**{_n(len(unver), 'unverified row')}** (the destination did not hold what was sent, or "
                             f"the check did not run): {_methods_text(unver)}. Never quote these numbers."))
    if len(impossible):
        reds.append(_n(len(impossible), "impossible number"))
        lines.append(("bad", f"**{_n(len(impossible), 'impossible number')}** (above a physical ceiling): "
                             f"{_methods_text(impossible)}. A timing bug or flows counted twice."))
    if len(weak):
        pairs = Counter(f"{int(s)}→{int(d)}" for s, d in zip(weak["src_gpu"], weak["dst_gpu"]))
        reds.append(_n(len(weak), "weak-pair row") + " (" + ", ".join(p for p, _ in pairs.most_common(4)) + ")")
        lines.append(("bad", f"**{_n(len(weak), 'weak-pair row')}** (a pair more than 10% below its method's "
                             "median): " + ", ".join(f"{p} ({_n(n, 'method')})" for p, n in pairs.most_common(4))
                             + f", up to {weak['below_pct'].max():.0f}% below."))
    status = meta.get("status")
    if status not in (None, "complete") or any("did not complete" in n for n in run.notes):
        reds.append("the run did not complete")
        lines.append(("bad", f"**Incomplete run** (meta.json status: {status}): only the rows measured before "
                             "it stopped."))
    if len(noisy):
        ambers.append("noisy rows")
        lines.append(("warn", _noisy_text(noisy, cv_threshold) + ": re-measure those with more samples or on a "
                              "quieter machine before quoting them (host-timed ops are often noisy)."))
    if not run.meta:
        ambers.append("no meta.json")
        lines.append(("warn", "No meta.json: options, GPUs, link peaks and versions unknown."))
    elif n_pairs and not best["pct"].notna().any():
        lines.append(("info", "No NVML link table in meta.json: % of link peak unknown."))
    opts = run_options(run.meta, run.frame)
    if opts.get("mode", "").startswith("quick"):
        ambers.append("quick run")
        lines.append(("warn", "**Quick run** (--quick): a looser stopping rule, fine for a health check; re-run "
                              "without --quick for numbers to quote."))
    if opts.get("verify"):
        reds.append("verification off")
        lines.append(("bad", f"**Verification {opts['verify']}**: no number of this run is checked."))
    verdict_ok = not reds
    checks = "every row verified, no impossible numbers, no pair more than 10% below the median"
    if reds:
        verdict = ("bad", "**Check**: " + "; ".join(reds) + ".")
    elif not n_pairs:
        verdict = ("warn", "**No health verdict**: no cross-GPU bandwidth rows (run the copy, kernel or pool suite "
                           "on two GPUs or more); nothing else is flagged.")
    else:
        verdict = ("ok", f"**Healthy**: {checks}" + (", run complete." if status == "complete" else "."))
    lines.insert(0, verdict)
    return dict(lines=lines, options=opts, reds=reds, ambers=ambers, ok=verdict_ok)


def _nccl_text(base, spn) -> str:
    """The NCCL line: its best one-way bandwidth, and what the best IPC method gets over it at the largest
    and the smallest size."""
    text = (f"**Against NCCL** (ncclSend/ncclRecv, nccl suite): NCCL reaches **{base.bw:.1f} GB/s** at "
            f"{size_text(base.bytes)} ({method_label(base.suite, base.method, base.direction)}, median over pairs)")
    if not len(spn):
        return text + "; no IPC bandwidth rows at its sizes to compare with."
    b = spn.iloc[0]
    small = spn.dropna(subset=["small_speedup"])
    small = small[small["small_bytes"] == small["small_bytes"].min()]
    small_txt = ""
    if len(small):
        lo, hi = small["small_speedup"].min(), small["small_speedup"].max()
        small_txt = (f"; at {size_text(small['small_bytes'].min())}, "
                     + (f"{lo:.2f}–{hi:.2f}× depending on the method" if abs(hi - lo) >= 0.005 else f"{lo:.2f}×"))
    return (text + f"; the best IPC method, {method_label(b.suite, b.method, b.direction)}, is **{b.speedup:.2f}×** "
                   f"NCCL at {size_text(b.bytes)}{small_txt}.")


def _pair_table(best, terminal: bool) -> list:
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
        (["link, peak GB/s", "% of link peak"] if has_pct else []) + ["vs median pair"]
    rows = []
    for r in shown.itertuples():
        row = ([str(r.host)] if multi_host else []) + [_pair(r), method_label(r.suite, r.method, r.direction),
                                                          f1(r.bw)]
        if has_pct:
            row += [f"{r.link_kind} {r.peak_gbps:.0f}" if r.peak_gbps == r.peak_gbps else "", f1(r.pct)]
        row.append(_signed(-r.below_pct))
        rows.append(row)
    numeric = [c in ("GB/s", "% of link peak", "vs median pair") for c in cols]
    return [Table(cols, rows, numeric=numeric, caption=caption, terminal=terminal)]


SPEEDUP_TABLES = {  # baseline -> (speedup column, caption)
    "staged": ("× best staged", "What IPC buys: speedup over the best host-staged path, same pair and size "
                                "(median over pairs)"),
    "nccl": ("× NCCL", "What IPC buys over NCCL: speedup over ncclSend/ncclRecv, same pair, kind of direction "
                       "and size (median over pairs)"),
}


def _speedup_table(spg, terminal: bool, baseline: str = "staged") -> list:
    if spg.empty:
        return []
    column, caption = SPEEDUP_TABLES[baseline]
    rows = []
    for r in spg.itertuples():
        rng = f"{r.speedup_min:.2f}–{r.speedup_max:.2f}x" if r.pairs > 1 else ""
        rows.append([method_label(r.suite, r.method, r.direction), size_text(r.bytes), f1(r.bw), times(r.speedup),
                     rng, f"{times(r.small_speedup)} at {size_text(r.small_bytes)}"
                     if r.small_speedup == r.small_speedup else ""])
    return [Table(["IPC method (best direction)", "size", "GB/s", column, "over pairs", "at the smallest size"],
                  rows, numeric=[False, True, True, True, True, True], terminal=terminal, caption=caption)]


def glance_blocks(runs, tables: dict, cv_threshold: float) -> list:
    """The "At a glance" section: per run (the first MAX_GLANCE_RUNS) a callout, its options and two small
    tables; with several runs, a one-row-per-run table; with runs of different options, a warning."""
    blocks = [Heading(2, "At a glance", terminal=True)]
    split = {name: dict(tuple(t.groupby("run", observed=True, sort=False))) if len(t) else {}
             for name, t in tables.items()}

    def part(name, label):
        t = tables[name]
        return split[name].get(label, t.iloc[0:0])

    summary_rows, per_run, to_check = [], [], []
    slow = slow_runs(runs, tables["best"])
    for i, run in enumerate(runs):
        facts = glance_facts(run, part("best", run.label), part("staged", run.label), part("spg", run.label),
                             part("lat", run.label), part("weak", run.label), part("noisy", run.label),
                             part("unver", run.label), part("impossible", run.label), cv_threshold,
                             part("same", run.label), nccl=_part_or_none(tables, split, "nccl", run.label),
                             spn=_part_or_none(tables, split, "spn", run.label))
        if run.label in slow:
            facts["reds"].append(slow[run.label])
            facts["lines"][0] = ("bad", "**Check**: " + "; ".join(facts["reds"]) + ".")
            facts["lines"].insert(1, ("bad", f"**Slow against the other runs**: {slow[run.label]}: every pair "
                                             "of this run is slow alike (a throttled GPU, fewer NVLinks, another "
                                             "load), so only the other runs show it."))
        summary_rows.append(_run_row(run, part("best", run.label), part("spg", run.label), part("lat", run.label),
                                     facts))
        if facts["reds"]:
            to_check.append(f"{run.label} ({'; '.join(facts['reds'])})")
        if i >= MAX_GLANCE_RUNS:
            continue
        link = _link_desc(run.meta)
        title = f"{run.label} · {_gpu_desc(run.meta, run.frame)}" + (f" · {link}" if link else "")
        if len(runs) > 1:
            per_run.append(Heading(3, f"{run.label}", terminal=True))
        items = facts["lines"] + [("info", "**How it was measured**: " + options_line(facts["options"]))]
        per_run.append(Callout(items, title=title, terminal=True))
        per_run += _pair_table(part("best", run.label), terminal=True)
        per_run += _speedup_table(part("spg", run.label), terminal=True)
        if "spn" in tables:
            per_run += _speedup_table(part("spn", run.label), terminal=True, baseline="nccl")
    if len(runs) > 1:
        cols = ["run", "GPUs", "mode", "best path GB/s", "% of peak", "weakest pair", "IPC × staged",
                "P2P latency µs", "flags"]
        numeric = [False, False, False, True, True, False, True, False, False]
        if to_check:
            shown = to_check[:8]
            verdict = ("bad", f"**{len(to_check)} of {len(runs)} runs to check**: " + "; ".join(shown)
                       + (f"; and {len(to_check) - len(shown)} more (the flags column)" if len(to_check) > 8 else "")
                       + ".")
        else:
            verdict = ("ok", f"**All {len(runs)} runs healthy**: every row verified, no impossible numbers, no pair "
                             "more than 10% below its run's median, no run more than 10% below the others.")
        blocks.append(Callout([verdict], terminal=True))
        caption = ("Runs side by side (best path: median over GPU pairs of each pair's fastest one-way method at "
                   "the largest size; weakest pair: vs the median pair; IPC × staged: the best IPC method over the "
                   "best host-staged path; P2P latency: sm_pingpong one way, median (min–max) over pairs)")
        blocks.append(Table(cols, summary_rows, numeric=numeric, caption=caption))
        flagged_first = sorted(summary_rows, key=lambda r: r[-1] == "none" or r[-1].startswith(("noisy", "quick")))
        blocks.append(Table(cols, flagged_first[:MAX_TERMINAL_RUN_ROWS], terminal=True, files=False, numeric=numeric,
                            caption="Runs side by side" + (" (runs to check first)" if to_check else "")))
        if len(summary_rows) > MAX_TERMINAL_RUN_ROWS:
            blocks.append(Para(f"… and {len(summary_rows) - MAX_TERMINAL_RUN_ROWS} more runs in the report.",
                               terminal=True, files=False))
        blocks += options_blocks(runs)
        if len(runs) > MAX_GLANCE_RUNS:
            blocks.append(Para(f"Full headlines for the first {MAX_GLANCE_RUNS} runs; every run is in the tables."))
    return blocks + per_run


def _part_or_none(tables: dict, split: dict, name: str, label: str):
    """The run's part of an optional table (None where the caller gave no such table)."""
    if name not in tables:
        return None
    return split[name].get(label, tables[name].iloc[0:0])


def _run_row(run, best, spg, lat, facts) -> list[str]:
    gpus = _gpu_desc(run.meta, run.frame).split(" · ", 1)[-1]
    med = pct = weakest = sp = ""
    if len(best):
        med = f1(best["bw"].median())
        pct = f1(best["pct"].median()) if best["pct"].notna().any() else ""
        if len(best) > 1:
            w = best.loc[best["bw"].idxmin()]
            weakest = f"{_pair(w)} {_signed(-w.below_pct)}"
    if len(spg):
        sp = times(spg["speedup"].iloc[0])
    lat_txt = ""
    if len(lat) and (lat["method"] == "sm_pingpong").any():
        p = lat[lat["method"] == "sm_pingpong"].iloc[0]
        lat_txt = f"{us(p['median'])} ({us(p['min'])}–{us(p['max'])})" if p["pairs"] > 1 else us(p["median"])
    flags = "; ".join(facts["reds"] + facts["ambers"]) or "none"
    return [run.label, gpus, options_short(run.meta, run.frame)["mode"], med, pct, weakest, sp, lat_txt, flags]
