"""The gate's verdict (pure: a recorded run in, checks out): every row the expectations name, held against
its floor or ceiling, its baseline and its peers; what cannot be judged said as such.

A finding's status is a Status (ipcbench/status.py: PASS, FAIL, UNJUDGED, written "pass", "fail", "unknown").
It FAILS when a row is below its floor (or above its latency ceiling), significantly slower than its baseline
(judging/compare.py's statistics: a row's RowVerdict read as a Status by RowVerdict.status), far below the node's
other pairs of the same link kind, or failed verification. It is UNKNOWN when the run did not complete, when a
row the expectations name is missing, when a pair's link kind is unknown, when a pair has no expectation at all
(peers alone never pass a pair), when a number is above a physical ceiling (the instrument, not the node, is
then in doubt), when a floor is above the pair's link ceiling (the expectation is then wrong), or when the run
is not a check input (a selftest's). The node's own evidence adds its findings (judging/evidence_rules.py: a
link down, a counter that grew, another job's process fail; a required item not available is UNKNOWN). The node
is unhealthy (exit 1) when anything failed, cannot be judged (exit 2) when nothing failed but something could
not be judged or nothing was judged, healthy (0) only when every check passed: never 0 for what was not judged.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, replace

from ipcbench.judging import evidence_rules
from ipcbench.judging.expect import EvidenceExpectation, Expectation, defaults, evidence_defaults
from ipcbench.judging.finding import Finding
from ipcbench.judging.row_key import RowKey, pair_name
from ipcbench.judging.row_verdict import RowVerdict
from ipcbench.judging.validity import invalid
from ipcbench.sizes import fmt_size
from ipcbench.status import Status

VERDICTS = {Status.PASS: "healthy", Status.FAIL: "unhealthy", Status.UNJUDGED: "cannot judge"}
# the methods check measures and judges unless told otherwise (check/plan.py), those defaults.toml names
METHODS_JUDGED = ("ce", "sm_read", "sm_write")
PEER_DROP = 0.20  # a pair this far below the typical pair of its kind fails
PEER_MIN_BYTES = 64 << 20  # peers are compared where transfers are bandwidth-bound
PEER_TIMINGS = ("gated",)  # rows whose time is the pair's own (not a window over a time-sliced GPU, a hand-off)
REASON_CHARS = 160  # the REASON line, short enough for `scontrol update ... reason=`


@dataclass
class Verdict:
    checks: list[Finding] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # the expectations used, said in every output
    notes: list[str] = field(default_factory=list)  # what explains the rows without judging (a power cap)

    @property
    def status(self) -> Status:
        """The node's: FAIL if anything failed, else UNJUDGED if anything (or everything: nothing) was not
        judged, else PASS."""
        return Status.of(c.status for c in self.checks)

    @property
    def exit_code(self) -> int:
        return self.status.exit_code

    @property
    def word(self) -> str:
        return VERDICTS[self.status]

    def by(self, key) -> dict:
        """{key(check): worst status}, for the per-pair and per-GPU summaries."""
        out: dict = {}
        for c in self.checks:
            for k in key(c):
                out[k] = Status.of([out.get(k, Status.PASS), c.status])
        return dict(sorted(out.items(), key=lambda kv: str(kv[0])))

    def pairs(self) -> dict:
        return self.by(lambda c: [(c.host, c.pair)] if c.src_gpu >= 0 and c.source != "evidence" else [])

    def gpus(self) -> dict:
        return self.by(lambda c: sorted({(c.host, c.src_gpu), (c.host, c.dst_gpu)}) if c.src_gpu >= 0 else [])

    def nodes(self) -> dict:
        """{host: worst status} (a check of the whole run counts for every node of it)."""
        hosts = sorted({c.host for c in self.checks if c.host})
        return self.by(lambda c: [c.host] if c.src_gpu >= 0 or not hosts else hosts)

    def reason(self) -> str:
        """One line: the worst failure (or the first thing not judged), and how many more; the node's own
        evidence first (a link down, a counter that grew: the cause of slow rows, judging/evidence_rules.py)."""
        if self.exit_code == 0:
            return f"ok: {len(self.checks)} checks passed"
        bad = [c for c in self.checks if c.status is self.status]
        if not bad:
            return "cannot judge: nothing was judged"
        worst = max(bad, key=lambda c: (c.source == "evidence", c.shortfall))
        head = f"{'FAIL' if self.status is Status.FAIL else 'cannot judge'}: {worst.brief or worst.reason}"
        more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
        if len(head) + len(more) > REASON_CHARS:
            head = head[:REASON_CHARS - len(more) - 1] + "…"
        return head + more

    def as_dict(self) -> dict:
        return {"verdict": self.word, "exit_code": self.exit_code, "reason": self.reason(),
                "expectations": self.sources, "notes": self.notes,
                "pairs": [{"host": h, "pair": p, "status": s} for (h, p), s in self.pairs().items()],
                "gpus": [{"host": h, "gpu": g, "status": s} for (h, g), s in self.gpus().items()],
                "nodes": [{"host": h, "status": s} for h, s in self.nodes().items()],
                "checks": [asdict(c) for c in self.checks]}


def _passed(ok: bool) -> Status:
    return Status.PASS if ok else Status.FAIL


def _num(v, unit: str) -> str:
    return f"{v:.3g} µs" if unit == "µs" else f"{v:.0f} GB/s" if v >= 10 else f"{v:.3g} GB/s"


def judge(run, expectations: list[Expectation], methods: list[str], baseline=None, peers: bool = True,
          peer_drop: float = PEER_DROP, evidence: list[EvidenceExpectation] | None = None) -> Verdict:
    """The checks of a run (record/run.Run) against its expectations (judging/expect.py), a baseline comparison
    (judging/compare.Comparison of this run against known-good runs, or None) and its peers, and the node's own
    evidence against `evidence` (the [[evidence]] tables; None: the shipped ones; judging/evidence_rules.py).
    `methods`: the methods judged (rows of others are left alone). A row whose value cannot be true
    (invalid_rows) is a finding of its own, UNJUDGED, and is judged by nothing else nor used to judge another
    pair (nor compared with the baseline: its RowKey is left out)."""
    v = Verdict()
    why_not = not_a_check_input(run)
    if why_not:
        v.checks.append(_whole(run, "run", why_not, why_not))
        return v
    v.checks, v.notes = _evidence(run, evidence_defaults() if evidence is None else evidence)
    frame = run.frame
    invalid = invalid_rows(run)
    rows = frame[frame["method"].isin(methods) & frame["kind"].isin(["bandwidth", "latency"])]
    good = rows.drop(index=[i for i in invalid if i in rows.index])
    if run.incomplete:
        v.checks.append(_whole(run, "run", f"the run did not complete ({run.incomplete})",
                               f"the run did not complete ({run.incomplete})"))
    v.checks += _guard(run)
    v.checks += [_row_check(run, r, "run", None, "", None, Status.UNJUDGED,
                            f"{_what(run, r)}: {invalid[r.Index]}: not judged, nor used to judge another pair",
                            f"{_what(run, r)}: {invalid[r.Index]}") for r in frame.loc[list(invalid)].itertuples()]
    v.checks += _coverage_and_floors(run, rows, expectations, methods, set(invalid))
    if baseline is not None:
        v.checks += _baseline(run, baseline, methods, {RowKey.of(r) for r in frame.loc[list(invalid)].itertuples()})
    if peers:
        v.checks += _peers(run, good, peer_drop)
    v.checks += [_row_check(run, r, "verification", None, "", None, Status.FAIL,
                            f"{_what(run, r)}: failed verification ({r.note})", f"{_what(run, r)} failed verification")
                 for r in rows.itertuples() if not r.verified]
    return v


def shipped_verdict(run) -> Verdict:
    """check's judgement of a run with what ipcbench ships: the expectations of defaults.toml, the methods check
    judges by default, its peer rule and the shipped evidence tables; what `ipcbench check --from RUN` says, so that
    the report's headline (report/headline.py) and the gate cannot disagree."""
    return judge(run, defaults(), list(METHODS_JUDGED))


def not_a_check_input(run) -> str | None:
    """Why a recorded run is not what check judges (None where it is): a run of `ipcbench selftest` holds the
    instrument against its own anchors, at its own sizes and pairs, and its verdict is the selftest's."""
    if run.meta.command[1:2] != ["selftest"]:
        return None
    return ("a run of `ipcbench selftest` (the instrument against its own anchors, at the selftest's sizes and "
            "pairs) is not a check input: `ipcbench check --from RUN` judges a run of `ipcbench check` or "
            "`ipcbench all` (measure one with `mpirun -np N ipcbench check`)")


def _evidence(run, tables: list[EvidenceExpectation]) -> tuple[list[Finding], list[str]]:
    """The evidence rules' findings and notes (recorded in meta.json's "evidence", record/meta.Meta)."""
    models = {h: {g.index: g.name for g in gs} for h, gs in run.meta.gpus.items()}
    for h in run.meta.hosts:
        models.setdefault(h, {})
    # the GPUs whose other processes are judged: the run's, by UUID; a host with a GPU recorded without one cannot
    # tell its GPUs from the others, so every GPU of it is judged (an empty set), never fewer
    used = {h: set() if any(not g.uuid for g in gs) else {g.uuid for g in gs} for h, gs in run.meta.gpus.items()}
    got = evidence_rules.judge(run.meta.evidence, tables, models, used)
    return got.findings, got.notes


def _guard(run) -> list[Finding]:
    """A round the run's own concurrency guard failed (meta.json's pair_mode.check, run/walk.check_rounds): the
    pairs it measured at once read further from the same pairs alone than their noise, so every row measured in
    such rounds is in doubt, the instrument's schedule rather than the node: the run cannot be judged (UNJUDGED)."""
    out = []
    for g in run.meta.pair_mode.get("check", []):
        if g.get("ok", True):
            continue
        worst: dict = max(g.get("pairs", []), key=lambda d: abs(d.get("diff", 0.0)) - d.get("tolerance", 0.0),
                          default={})
        pair = f" (worst: ranks {worst['src_rank']} -> {worst['dst_rank']}, allowed ±{worst.get('tolerance', 0):.1%})" \
            if worst else ""
        what = (f"{g.get('round', 'concurrent')} round of {g['step']} at {fmt_size(g.get('bytes', 0))} on "
                f"{g.get('host', '?')}")
        moved = f"{g.get('worst_diff', 0):.1%} from the same pairs one at a time{pair}"
        advice = "measure the pairs one at a time (`mpirun -np N ipcbench all --pairs sequential`)"
        finding = _whole(run, "run", f"the run's concurrency guard failed: the {what} read up to {moved}: the rows "
                                     f"measured in rounds are in doubt (the instrument's schedule, not the node); "
                                     f"{advice}", f"concurrency guard failed: {what}: {moved}; {advice}")
        out.append(replace(finding, host=g.get("host", finding.host)))
    return out


def invalid_rows(run) -> dict:
    """{frame index: "results.csv:LINE: why"} of the rows whose value cannot be true, as the record named them
    when the run was read (record/validate.py, through judging/validity.invalid: the one validator of check,
    compare and the report). Such a value says the instrument, not the node, is in doubt."""
    return dict(sorted(invalid(run).items()))


def _whole(run, source: str, reason: str, brief: str) -> Finding:
    return Finding(source=source, host=run.meta.hosts[0] if run.meta.hosts else "", pair="node", src_gpu=-1,
                   dst_gpu=-1, status=Status.UNJUDGED, reason=reason, brief=brief)


def link_of(run, host: str, src_gpu: int, dst_gpu: int) -> str:
    """The pair's link kind: same_gpu, or the run's NVML table's (read with today's convention), or unknown."""
    if src_gpu == dst_gpu:
        return "same_gpu"
    for ln in run.meta.links:
        if ln.host == host and {ln.src_gpu, ln.dst_gpu} == {src_gpu, dst_gpu}:
            return ln.kind or "unknown"
    return "unknown"


def peak_of(run, host: str, src_gpu: int, dst_gpu: int) -> float | None:
    return run.meta.link_peaks().get((host, src_gpu, dst_gpu))


def gpu_model(run, host: str, index: int) -> str:
    g = run.meta.gpu(host, index)
    return g.name if g is not None and g.name else "unknown GPU"


def _what(run, r) -> str:
    return f"{pair_name(r.src_gpu, r.dst_gpu, r.src_rank, r.dst_rank)} {r.method} {r.direction} {fmt_size(r.bytes)}"


def _row_check(run, r, source, value, unit, expected, status, reason, brief="", against="", by="") -> Finding:
    """A finding of one row (a frame's itertuples row) of the run; `by`: what judged it (Finding.by)."""
    key = RowKey.of(r)
    return Finding(source=source, host=key.host, pair=pair_name(key.src_gpu, key.dst_gpu, r.src_rank, r.dst_rank),
                   src_gpu=key.src_gpu, dst_gpu=key.dst_gpu, link=link_of(run, key.host, key.src_gpu, key.dst_gpu),
                   method=key.method, direction=key.direction, bytes=key.bytes, value=value, unit=unit,
                   expected=expected, status=status, reason=reason, brief=brief, against=against, by=by)


@dataclass(frozen=True)
class RankPair:
    """An ordered pair of ranks of one node and their GPUs: what the expectations ask rows of."""

    host: str
    src_rank: int
    dst_rank: int
    src_gpu: int
    dst_gpu: int

    @property
    def name(self) -> str:
        """The pair as check's summary counts it (row_key.pair_name: the GPU pair, ranks where they share a GPU)."""
        return pair_name(self.src_gpu, self.dst_gpu, self.src_rank, self.dst_rank)

    @property
    def words(self) -> str:
        """The GPU pair and the rank pair: "GPU 0 -> GPU 1 ranks 0 -> 3", "GPU 0 ranks 0 -> 2"."""
        ranks = f" ranks {self.src_rank} -> {self.dst_rank}" if self.src_gpu != self.dst_gpu else ""
        return self.name + ranks


def _pairs(run, rows) -> list[RankPair]:
    """Every ordered pair of ranks of each node the run measured or should have: from meta.json's ranks (so that a
    pair with no row at all is missed, not skipped), else the pairs the rows name. A run that measured one rank
    pair per GPU pair (--quick with ranks sharing GPUs: meta.json's pair_mode says so) is asked for those alone."""
    ranks = run.meta.ranks
    if not ranks:
        keys = rows[["host", "src_rank", "dst_rank", "src_gpu", "dst_gpu"]].drop_duplicates()
        return [RankPair(str(h), int(sr), int(dr), int(sg), int(dg)) for h, sr, dr, sg, dg in
                keys.itertuples(index=False)]
    pairs = [RankPair(a.host, a.rank, b.rank, a.gpu, b.gpu) for a in ranks for b in ranks
             if a.host == b.host and a.rank != b.rank]
    pairing = run.meta.pairing
    return _one_per_gpu_pair(pairs, rows) if pairing is not None and pairing.one_per_gpu_pair else pairs


def _one_per_gpu_pair(pairs: list[RankPair], rows) -> list[RankPair]:
    """Of each GPU pair's rank pairs, those the rows name (the ones measured); where none is named, the first in
    rank order, the one the measuring side picks (core/schedule.one_per_gpu_pair), so its missing rows are named."""
    measured = set(zip(rows["host"].astype(str), rows["src_rank"].astype(int), rows["dst_rank"].astype(int)))
    groups: dict[tuple[str, int, int], list[RankPair]] = {}
    for p in pairs:
        groups.setdefault((p.host, p.src_gpu, p.dst_gpu), []).append(p)
    keep = set()
    for group in groups.values():
        keep.update([p for p in group if (p.host, p.src_rank, p.dst_rank) in measured] or group[:1])
    return [p for p in pairs if p in keep]


def _coverage_and_floors(run, rows, expectations: list[Expectation], methods: list[str],
                         invalid: set) -> list[Finding]:
    """Per pair: its expectations (by GPU model and link kind), every row they name held against them, and
    what could not be judged: an unknown link, no expectation at all, a named row that is missing. An invalid
    row (its own finding says why) is not held against anything."""
    out: list[Finding] = []
    for p in _pairs(run, rows):
        link, model = link_of(run, p.host, p.src_gpu, p.dst_gpu), gpu_model(run, p.host, p.src_gpu)
        base = Finding(source="coverage", host=p.host, pair=p.name, src_gpu=p.src_gpu, dst_gpu=p.dst_gpu, link=link,
                       status=Status.UNJUDGED, reason="")
        if link == "unknown":  # a run without meta.json has no link table at all: said so, not "unknown" alone
            why = ("no meta.json beside its results.csv, which holds the run's NVML link table" if not run.meta.found
                   else "no NVML table, or NVML could not name it")
            out.append(replace(base, reason=f"{p.name}: the link between the GPUs is unknown ({why}): no expectation "
                                            f"can be chosen",
                               brief=f"{p.name}: link unknown" + ("" if run.meta.found else " (no meta.json)")))
            continue
        mine = [e for e in expectations if e.link == link and e.method in methods and e.for_gpu(model)]
        if not mine:
            out.append(replace(base, reason=f"{p.name}: no expectation for {model} on {link} (give --thresholds "
                                            f"FILE or --baseline RUN)",
                               brief=f"{p.name}: no expectation for {model} on {link}"))
            continue
        pr = rows[(rows["host"] == p.host) & (rows["src_rank"] == p.src_rank) & (rows["dst_rank"] == p.dst_rank)]
        for e in mine:
            if e.direction == "bidir" and p.src_rank > p.dst_rank:
                continue  # both ways is measured once per unordered pair, from its lower rank
            hit = pr[(pr["method"] == e.method) & (pr["direction"] == e.direction) & (pr["bytes"] >= e.lo)
                     & (pr["bytes"] <= e.hi)]
            if hit.empty:
                out.append(_no_row(run, base, p, e))
            out += [_against(run, r, e) for r in hit.itertuples() if r.Index not in invalid]
    return out


def _no_row(run, base: Finding, p: RankPair, e: Expectation) -> Finding:
    """The finding of a row an expectation names that the run lacks: the GPU pair, the rank pair, and the sizes
    expected (the run's own in the expectation's range; none of them: the run's sizes said)."""
    sizes = [n for n in run.meta.sizes if e.lo <= n <= e.hi]
    why = f" (the run measured {_sizes_words(run.meta.sizes)}, none in {e.sizes})" if run.meta.sizes and not sizes \
        else ""
    what = f"{p.words} {e.method} {e.direction} {_sizes_words(sizes) or e.sizes}"
    return replace(base, method=e.method, direction=e.direction, by=e.where,
                   reason=f"{what}: no row{why} to judge against {e.describe()}",
                   brief=f"{what}: no row{why}")


def _sizes_words(sizes: list[int]) -> str:
    """"4K", "4K, 256M", or "64M-1G (7 sizes)" where there are more than three."""
    if len(sizes) > 3:
        return f"{fmt_size(sizes[0])}-{fmt_size(sizes[-1])} ({len(sizes)} sizes)"
    return ", ".join(fmt_size(n) for n in sizes)


def _against(run, r, e: Expectation) -> Finding:
    """One row held against one expectation; a floor above the link's physical ceiling judges nothing (the
    expectation is wrong: no healthy link can reach it), so the row cannot be judged by it."""
    peak = peak_of(run, str(r.host), int(r.src_gpu), int(r.dst_gpu))
    against = f"{e.describe(peak)}; {e.where}"
    bound: float | None
    if e.max_us is not None:
        value, unit, bound = float(r.time_us_median), "µs", e.max_us
        ok = value <= bound
        rel = "<=" if ok else ">"
    else:
        value, unit = (float(r.bw_gbps_median) if r.bw_gbps_median == r.bw_gbps_median else float("nan")), "GB/s"
        bound = e.floor_gbps
        if bound is None and e.floor_peak is not None and peak:
            bound = e.floor_peak * peak
        if bound is None:
            return _row_check(run, r, "thresholds", value, unit, None, Status.UNJUDGED,
                              f"{_what(run, r)}: {e.describe()}: the link's peak is unknown",
                              f"{_what(run, r)}: link peak unknown", against, e.where)
        ceiling = ceiling_of(run, str(r.host), int(r.src_gpu), int(r.dst_gpu), str(r.direction))
        if ceiling is not None and bound > ceiling[0]:
            return _row_check(run, r, "thresholds", value, unit, bound, Status.UNJUDGED,
                              f"{_what(run, r)}: {e.describe(peak)} is above {ceiling[1]}: the pair's link cannot "
                              f"reach it, so the expectation is wrong",
                              f"{_what(run, r)}: floor {_num(bound, unit)} above the link's ceiling "
                              f"{_num(ceiling[0], unit)} (its signalling rate)", against, e.where)
        ok = value >= bound
        rel = ">=" if ok else "<"
    brief = f"{_what(run, r)} {_num(value, unit)} {rel} {_num(bound, unit)}"
    return _row_check(run, r, "thresholds", value, unit, bound, _passed(ok), f"{brief} ({e.describe(peak)})", brief,
                      against, e.where)


def ceiling_of(run, host: str, src_gpu: int, dst_gpu: int, direction: str) -> tuple[float, str] | None:
    """(GB/s, in words) the most a row of this GPU pair can move: its link's one-way ceiling (catalogue/links.py,
    as record/meta.Meta.link_ceilings reads it), twice that for bidir, which counts both ways; None where the
    pair has no link of known ceiling (the same GPU, an unknown link)."""
    one_way = run.meta.link_ceilings().get((host, src_gpu, dst_gpu))
    if not one_way:
        return None
    ln = next((ln for ln in run.meta.links if ln.host == host and {ln.src_gpu, ln.dst_gpu} == {src_gpu, dst_gpu}),
              None)
    how = (f"{ln.nvlink_count} x {ln.per_link_ceiling_gbps:g} GB/s, NVLink {ln.nvlink_version}"
           if ln is not None and ln.nvlink_count and ln.per_link_ceiling_gbps else "the link's signalling rate")
    both = direction == "bidir"
    ceiling = one_way * (2 if both else 1)
    peak = peak_of(run, host, src_gpu, dst_gpu)
    quoted = f", above the {_num(peak * (2 if both else 1), 'GB/s')} peak quoted as its data rate" if peak else ""
    return ceiling, (f"the link's physical ceiling {_num(ceiling, 'GB/s')} ({how} per direction"
                     f"{', both ways' if both else ''}: its signalling rate{quoted}; catalogue/links.py)")


def _baseline(run, comparison, methods: list[str], invalid: set) -> list[Finding]:
    """Each judged row of this run against the known-good runs (judging/compare.py: Welch's t on the log samples
    and --threshold), as its RowVerdict's status says: a regression fails, a row as good or better passes, a row
    the baseline has and this run lacks cannot be judged; a row of this run whose value is invalid (its RowKey in
    `invalid`) is not compared."""
    out: list[Finding] = []
    t = comparison.table
    t = t[t["method"].isin(methods)]
    labels = ", ".join(comparison.info.get("base_labels", []))
    for r in t.itertuples():
        key = RowKey.of(r)
        status = RowVerdict(r.verdict).status
        if key in invalid or status is None:
            continue
        name = key.pair
        what = f"{name} {key.method} {key.direction} {fmt_size(key.bytes)}"
        base = Finding(source="baseline", host=key.host, pair=name, src_gpu=key.src_gpu, dst_gpu=key.dst_gpu,
                       link=link_of(run, key.host, key.src_gpu, key.dst_gpu), method=key.method,
                       direction=key.direction, bytes=key.bytes, unit=str(r.unit), expected=float(r.base),
                       status=status, reason="", by="baseline")
        if status is Status.FAIL:
            how = f"{abs(float(r.change)):.0%} {'below' if r.unit == 'GB/s' else 'above'} the baseline"
            out.append(replace(base, value=float(r.new),
                               reason=f"{what} {_num(float(r.new), str(r.unit))}, {how}'s "
                                      f"{_num(float(r.base), str(r.unit))} (p={float(r.p):.2g}; baseline {labels})",
                               brief=f"{what} {how}"))
        elif status is Status.PASS:
            out.append(replace(base, value=float(r.new), reason=f"{what}: as the baseline ({labels})"))
        else:
            out.append(replace(base, reason=f"{what}: in the baseline ({labels}), not in this run",
                               brief=f"{what}: not measured"))
    return out


def _peers(run, rows, drop: float) -> list[Finding]:
    """A pair far below the node's other pairs of the same link kind (same method, direction and size): below
    (1 - drop) x the typical pair (the median of three or more; of two, the other one)."""
    out: list[Finding] = []
    big = rows[(rows["bytes"] >= PEER_MIN_BYTES) & rows["timing"].isin(PEER_TIMINGS) & (rows["kind"] == "bandwidth")]
    big = big.assign(link=[link_of(run, str(h), int(s), int(d)) for h, s, d in
                           zip(big["host"], big["src_gpu"], big["dst_gpu"])])
    for _, g in big.groupby(["host", "link", "method", "direction", "bytes"]):
        if len(g) < 2 or g["link"].iat[0] == "unknown":
            continue
        vals = g["bw_gbps_median"].astype(float).tolist()
        for i, r in enumerate(g.itertuples()):
            others = vals[:i] + vals[i + 1:]
            typical = others[0] if len(others) == 1 else statistics.median(vals)
            bound = (1 - drop) * typical
            ok = float(r.bw_gbps_median) >= bound
            who = "the other pair" if len(others) == 1 else f"the typical {r.link} pair"
            below = f"{1 - float(r.bw_gbps_median) / typical:.0%} below {who}"
            text = (f"{_what(run, r)} {_num(float(r.bw_gbps_median), 'GB/s')} is {below} ({_num(typical, 'GB/s')}; "
                    f"peers fail past {drop:.0%})" if not ok else f"{_what(run, r)}: within {drop:.0%} of {who}")
            out.append(_row_check(run, r, "peers", float(r.bw_gbps_median), "GB/s", bound, _passed(ok), text,
                                  f"{_what(run, r)} {below}", by="peers"))
    return out
