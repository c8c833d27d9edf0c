"""The report's headline ("At a glance") and the run options shown for every run.

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
from ipcbench.report.render import Callout, Heading, Para, Table, clean

MAX_GLANCE_RUNS = 4  # runs that get a full "at a glance" block; every run gets a row in the runs table
MAX_PAIR_ROWS = 12  # pairs listed in the best-path table; beyond that, the weakest ones
WEAKEST_SHOWN = 6
MAX_TERMINAL_RUN_ROWS = 20


# ------------------------------------------------------------------------------------------ options

def _ranks_per_gpu(meta: dict) -> int | None:
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
    rpg = _ranks_per_gpu(meta)
    out["ranks per GPU"] = "not recorded" if rpg is None else str(rpg)
    pm = meta.get("pair_mode")
    if isinstance(pm, dict) and pm.get("mode"):
        mode = {"sequential": "one pair at a time", "concurrent": "disjoint pairs at once"}.get(pm["mode"], pm["mode"])
        why = f" (--pairs {pm['requested']}" + (f": {pm['reason']}" if pm.get("reason") else "") + ")" \
            if pm.get("requested") else ""
        out["pairs"] = mode + why
    else:
        out["pairs"] = "not recorded"
    if o.get("verify") is False:
        out["verify"] = "off (--no-verify): no row is checked"
    cmd = meta.get("command")
    if isinstance(cmd, list) and cmd:
        out["command"] = " ".join(map(str, cmd))
    return {k: clean(v) for k, v in out.items()}


def options_line(opts: dict[str, str]) -> str:
    """One line of markdown-ish text: "**quick (--quick)** sampling: …; sizes …; ranks per GPU …"."""
    mode = opts.get("mode", "not recorded")
    head = f"**{mode} run**" if mode != "not recorded" else "**options not recorded** (an older run)"
    parts = [f"{head}: {opts['sampling']}" if opts.get("sampling") != "not recorded" else head,
             opts.get("sizes", ""), f"{opts.get('ranks per GPU')} rank(s) per GPU",
             f"pairs: {opts.get('pairs')}"]
    if opts.get("verify"):
        parts.append(f"verify {opts['verify']}")
    if opts.get("command"):
        parts.append(f"`{opts['command']}`")
    return "; ".join(p for p in parts if p)


COMPARED = ("mode", "sampling", "sizes", "ranks per GPU", "pairs")


def options_warning(runs) -> str | None:
    """A warning when the runs reported side by side were measured with different options, naming each
    field that differs and each run's value; None when they agree (or there is one run)."""
    if len(runs) < 2:
        return None
    opts = {r.label: run_options(r.meta, r.frame) for r in runs}
    diffs = []
    for k in COMPARED:
        values = {label: o.get(k, "not recorded") for label, o in opts.items()}
        if len(set(values.values())) > 1:
            groups: dict[str, list[str]] = {}
            for label, v in values.items():
                groups.setdefault(v, []).append(label)
            diffs.append(f"{k} ({'; '.join(f'{v}: ' + ', '.join(ls) for v, ls in groups.items())})")
    if not diffs:
        return None
    return ("These runs were measured with different options, so their numbers are not equally careful or "
            "not measured the same way; compare like with like. They differ in " + " · ".join(diffs) + ".")


# ------------------------------------------------------------------------------------------ glance

def _pair(r) -> str:
    return f"{int(r.src_gpu)}→{int(r.dst_gpu)}"


def _link_desc(meta: dict | None) -> str:
    """"NVSwitch, 18 × NVLink 4.0 links, 478 GB/s per direction" from meta.json's link table."""
    topo = (meta or {}).get("topology")
    descs = Counter()
    if isinstance(topo, dict):
        for t in topo.values():
            for link in (t or {}).get("links") or [] if isinstance(t, dict) else []:
                if not isinstance(link, dict) or not link.get("peak_gbps"):
                    continue
                kind = {"nvswitch": "NVSwitch", "nvlink": "NVLink", "pcie": "PCIe"}.get(
                    str(link.get("kind")), str(link.get("kind") or "link"))
                n, ver = link.get("nvlink_count"), link.get("nvlink_version")
                how = f"{n} × NVLink{' ' + str(ver) if ver else ''}" if n else ""
                descs[(kind, how, float(link["peak_gbps"]))] += 1
    if not descs:
        return ""
    parts = [f"{kind}{', ' + how if how else ''}: {peak:.0f} GB/s per direction" for (kind, how, peak), _ in
             descs.most_common(2)]
    return "; ".join(parts) + (" (and other links)" if len(descs) > 2 else "")


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
    return clean(f"{h}: {g}")


def _noisy_text(noisy_run, cv_threshold: float) -> str:
    by_suite = Counter(map(str, noisy_run["suite"]))
    parts = ", ".join(f"{s} {n}" for s, n in by_suite.most_common())
    return f"{len(noisy_run)} noisy rows (CV above {cv_threshold:g}): {parts}"


def _methods_text(rows, limit: int = 3) -> str:
    c = Counter(method_label(s, m, d) for s, m, d in zip(rows["suite"], rows["method"], rows["direction"]))
    out = ", ".join(f"{k} ({n})" for k, n in c.most_common(limit))
    return out + (f" and {len(c) - limit} more methods" if len(c) > limit else "")


def glance_facts(run, best, staged, spg, lat, weak, noisy, unver, impossible, cv_threshold: float) -> dict:
    """Everything the headline says about one run, as words and small tables (the frames already restricted
    to the run)."""
    meta = run.meta or {}
    reds, ambers, lines = [], [], []
    # --- health: best path per pair
    n_pairs = len(best)
    if n_pairs:
        top = Counter(method_label(s, m, d) for s, m, d in zip(best["suite"], best["method"], best["direction"]))
        common = top.most_common(1)[0][0]
        med = float(best["bw"].median())
        pct = best["pct"].dropna()
        peak_txt = (f" ({pct.median():.1f}% of link peak)" if len(pct) else " (no link table: % of peak unknown)")
        rng = f", {best['bw'].min():.1f}–{best['bw'].max():.1f} over the pairs" if n_pairs > 1 else ""
        lines.append(("info", f"**Best path per pair**: {med:.1f} GB/s median over {n_pairs} GPU pair(s) at "
                              f"{size_text(best['bytes'].max())}{peak_txt}{rng}; fastest method: "
                              f"{common}" + (f" on {top[common]} of {n_pairs} pairs" if len(top) > 1 else "") + "."))
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
        if level == "bad":
            reds.append(f"pair {_pair(w)}{host} is {w.below_pct:.1f}% below the median pair")
    else:
        lines.append(("warn", "**No cross-GPU one-way bandwidth rows**: node health (best path per pair) "
                              "cannot be judged from this run."))
    # --- what IPC buys
    if len(spg):
        b = spg.iloc[0]
        base = staged.iloc[0] if len(staged) else None
        base_txt = (f"{base.method} {base.direction}, {base.bw:.1f} GB/s at {size_text(base.bytes)}"
                    if base is not None else "per size")
        small = spg.dropna(subset=["small_speedup"])
        small_txt = ""
        if len(small):
            sb = size_text(small["small_bytes"].min())
            lo, hi = small["small_speedup"].min(), small["small_speedup"].max()
            small_txt = (f"; at the smallest size ({sb}) {lo:.1f}–{hi:.1f}×" if abs(hi - lo) >= 0.05 else
                         f"; at the smallest size ({sb}) {lo:.1f}×")
        lines.append(("info", f"**What IPC buys**: {b.speedup:.1f}× the best host-staged path ({base_txt}) with "
                              f"{method_label(b.suite, b.method, b.direction)} ({b.bw:.1f} GB/s at "
                              f"{size_text(b.bytes)}){small_txt}; every method in the table below."))
    elif len(staged) == 0:
        lines.append(("info", "**What IPC buys**: no host-staged rows (staged suite) to compare with."))
    # --- latency
    if len(lat):
        lat = lat.set_index("method")
        parts = []
        if "sm_pingpong" in lat.index:
            p = lat.loc["sm_pingpong"]
            spread = (f"median {us(p['median'])} µs, {us(p['min'])}–{us(p['max'])} µs over {int(p['pairs'])} pairs"
                      if p["pairs"] > 1 else f"{us(p['median'])} µs (1 pair)")
            parts.append(f"**P2P latency, one way** (sm_pingpong): {spread}: half a store-and-poll round trip "
                         "between kernels spinning on flags in each other's memory, not nvbandwidth's load latency "
                         "(a dependent read of peer memory)")
        rest = lat.drop(index=["sm_pingpong"], errors="ignore").sort_values("median")
        if len(rest):
            parts.append("smallest message, one way, median over pairs: " + ", ".join(
                f"{m} {us(r['median'])} µs ({size_text(r['bytes']) if r['bytes'] else '0 B'})"
                for m, r in rest.iterrows()))
        if parts:
            lines.append(("info", "; ".join(parts) + "."))
    # --- flags
    if len(unver):
        reds.append(f"{len(unver)} unverified rows")
        lines.append(("bad", f"**{len(unver)} unverified rows** (the destination did not hold what was sent, or "
                             f"the check did not run): {_methods_text(unver)}. Never quote these numbers."))
    if len(impossible):
        reds.append(f"{len(impossible)} impossible numbers")
        lines.append(("bad", f"**{len(impossible)} impossible numbers** (above a physical ceiling): "
                             f"{_methods_text(impossible)}. A timing bug or flows counted twice."))
    if len(weak):
        pairs = Counter(f"{int(s)}→{int(d)}" for s, d in zip(weak["src_gpu"], weak["dst_gpu"]))
        reds.append(f"{len(weak)} weak-pair rows")
        lines.append(("bad", f"**{len(weak)} weak-pair rows** (a pair more than 10% below its method's median): "
                             + ", ".join(f"{p} ({n} methods)" for p, n in pairs.most_common(4))
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
    verdict_ok = not reds
    checks = "every row verified, no impossible numbers, no pair more than 10% below the median"
    verdict = (("ok", f"**Healthy**: {checks}" + (", run complete." if status == "complete" else "."))
               if verdict_ok else ("bad", "**Check**: " + "; ".join(reds) + "."))
    lines.insert(0, verdict)
    return dict(lines=lines, options=opts, reds=reds, ambers=ambers, ok=verdict_ok)


def _pair_table(best, terminal: bool) -> list:
    if best.empty:
        return []
    multi_host = best["host"].nunique() > 1
    shown, caption = best, "Best one-way path per GPU pair at the largest size (median over ranks of the pair)"
    if len(best) > MAX_PAIR_ROWS:
        shown = best.sort_values("below_pct", ascending=False).head(WEAKEST_SHOWN)
        caption = (f"The {len(shown)} weakest of {len(best)} GPU pairs (best one-way path at the largest size); "
                   "every pair is in the pair heatmap")
    has_pct = best["pct"].notna().any()
    cols = (["host"] if multi_host else []) + ["pair", "best one-way path", "GB/s"] + \
        (["link", "% of link peak"] if has_pct else []) + ["vs median pair"]
    rows = []
    for r in shown.itertuples():
        row = ([str(r.host)] if multi_host else []) + [_pair(r), method_label(r.suite, r.method, r.direction),
                                                          f1(r.bw)]
        if has_pct:
            row += [f"{r.link_kind} {r.peak_gbps:.0f}" if r.peak_gbps == r.peak_gbps else "", f1(r.pct)]
        row.append(f"{-r.below_pct:+.1f}%")
        rows.append(row)
    numeric = [c in ("GB/s", "% of link peak", "vs median pair") for c in cols]
    return [Table(cols, rows, numeric=numeric, caption=caption, terminal=terminal)]


def _speedup_table(spg, terminal: bool) -> list:
    if spg.empty:
        return []
    rows = []
    for r in spg.itertuples():
        rng = f"{r.speedup_min:.2f}–{r.speedup_max:.2f}x" if r.pairs > 1 else ""
        rows.append([method_label(r.suite, r.method, r.direction), size_text(r.bytes), f1(r.bw), times(r.speedup),
                     rng, f"{times(r.small_speedup)} at {size_text(r.small_bytes)}"
                     if r.small_speedup == r.small_speedup else ""])
    return [Table(["IPC method (best direction)", "size", "GB/s", "× best staged", "over pairs",
                   "at the smallest size"], rows, numeric=[False, True, True, True, True, True], terminal=terminal,
                  caption="What IPC buys: speedup over the best host-staged path, same pair and size "
                          "(median over pairs)")]


def glance_blocks(runs, tables: dict, cv_threshold: float) -> list:
    """The "At a glance" section: per run (the first MAX_GLANCE_RUNS) a callout, its options and two small
    tables; with several runs, a one-row-per-run table; with runs of different options, a warning."""
    blocks = [Heading(2, "At a glance", terminal=True)]
    warn = options_warning(runs)
    if warn:
        blocks.append(Callout([("warn", warn)], terminal=True))
    split = {name: dict(tuple(t.groupby("run", observed=True, sort=False))) if len(t) else {}
             for name, t in tables.items()}

    def part(name, label):
        t = tables[name]
        return split[name].get(label, t.iloc[0:0])

    summary_rows = []
    for i, run in enumerate(runs):
        facts = glance_facts(run, part("best", run.label), part("staged", run.label), part("spg", run.label),
                             part("lat", run.label), part("weak", run.label), part("noisy", run.label),
                             part("unver", run.label), part("impossible", run.label), cv_threshold)
        summary_rows.append(_run_row(run, part("best", run.label), part("spg", run.label), part("lat", run.label),
                                     facts))
        if i >= MAX_GLANCE_RUNS:
            continue
        link = _link_desc(run.meta)
        title = f"{run.label}: {_gpu_desc(run.meta, run.frame)}" + (f"; {link}" if link else "")
        if len(runs) > 1:
            blocks.append(Heading(3, f"{run.label}", terminal=True))
        items = facts["lines"][:]
        items.insert(1, ("info", "**Options**: " + options_line(facts["options"])))
        blocks.append(Callout(items, title=title, terminal=True))
        blocks += _pair_table(part("best", run.label), terminal=True)
        blocks += _speedup_table(part("spg", run.label), terminal=True)
    if len(runs) > 1:
        cols = ["run", "GPUs", "mode", "best path GB/s", "% of peak", "weakest pair", "IPC × staged",
                "P2P latency µs", "flags"]
        blocks.append(Table(cols, summary_rows, numeric=[False, False, False, True, True, False, True, False, False],
                            caption="Runs side by side (best path: median over pairs of each pair's fastest "
                                    "one-way method at the largest size)"))
        blocks.append(Table(cols, summary_rows[:MAX_TERMINAL_RUN_ROWS], terminal=True, files=False,
                            numeric=[False, False, False, True, True, False, True, False, False],
                            caption="Runs side by side"))
        if len(summary_rows) > MAX_TERMINAL_RUN_ROWS:
            blocks.append(Para(f"… and {len(summary_rows) - MAX_TERMINAL_RUN_ROWS} more runs in the report.",
                               terminal=True, files=False))
        if len(runs) > MAX_GLANCE_RUNS:
            blocks.append(Para(f"Full headlines for the first {MAX_GLANCE_RUNS} runs; every run is in the table."))
    return blocks


def _run_row(run, best, spg, lat, facts) -> list[str]:
    gpus = _gpu_desc(run.meta, run.frame).split(": ", 1)[-1]
    med = pct = weakest = sp = ""
    if len(best):
        med = f1(best["bw"].median())
        pct = f1(best["pct"].median()) if best["pct"].notna().any() else ""
        if len(best) > 1:
            w = best.loc[best["bw"].idxmin()]
            weakest = f"{_pair(w)} {-w.below_pct:+.1f}%"
    if len(spg):
        sp = times(spg["speedup"].iloc[0])
    lat_txt = ""
    if len(lat) and (lat["method"] == "sm_pingpong").any():
        p = lat[lat["method"] == "sm_pingpong"].iloc[0]
        lat_txt = f"{us(p['median'])} ({us(p['min'])}–{us(p['max'])})" if p["pairs"] > 1 else us(p["median"])
    flags = "; ".join(facts["reds"] + facts["ambers"]) or "none"
    return [run.label, gpus, facts["options"].get("mode", ""), med, pct, weakest, sp, lat_txt, flags]
