"""The gate's verdict in the forms fleets consume: a human summary, one JSON object, JUnit XML (one testcase per
check, through junitparser), Prometheus text for node_exporter's textfile collector (gauges, through
prometheus_client's write_to_textfile: an atomic rename, so the collector never reads half a file), and one
`REASON:` line a Slurm health check can drain a node with."""

from __future__ import annotations

import json
import time

from ipcbench.evidence.delta import counter_growth, foreign, time_growth
from ipcbench.judging.evidence_rules import readable
from ipcbench.judging.finding import Finding
from ipcbench.judging.judge import REASON_CHARS, VERDICTS, Verdict
from ipcbench.sizes import fmt_size
from ipcbench.status import Status

MARK = {Status.PASS: "ok  ", Status.FAIL: "FAIL", Status.UNJUDGED: "??  "}
PROM_PASS = {Status.PASS: 1, Status.FAIL: 0, Status.UNJUDGED: -1}  # ipcbench_check_pass


def text(v: Verdict, header: list[str], verbose: bool = False) -> str:
    """The summary a person reads: what was expected, each pair's worst status, every failure and every
    check that could not be judged (all checks with `verbose`), the verdict."""
    lines = list(header)
    lines.append("expectations: " + "; ".join(v.sources))
    nodes = v.nodes()
    if len(nodes) > 1:
        lines.append("nodes: " + ", ".join(f"{h} {MARK[s].strip()}" for h, s in nodes.items()))
    pairs = v.pairs()
    if pairs:
        lines.append("pairs: " + ", ".join(f"{p} {MARK[s].strip()}" for (_, p), s in pairs.items()))
    shown = v.checks if verbose else [c for c in v.checks if c.status is not Status.PASS]
    for c in shown:  # verbose: every check in full, with what judged it (an expectation's FILE:LINE, baseline, peers)
        said = (c.reason + (f" (judged by {c.by})" if c.by else "")) if verbose else c.brief or c.reason
        lines.append(f"  {MARK[c.status]} [{c.source}] {said}")
    lines += [f"  note {n}" for n in v.notes]
    used = list(dict.fromkeys(c.against for c in shown if c.against))
    if used and not verbose:
        lines.append("  against: " + "\n           ".join(used))
    n = {s: sum(c.status is s for c in v.checks) for s in Status}
    lines.append(f"{len(v.checks)} checks: {n[Status.PASS]} passed, {n[Status.FAIL]} failed, "
                 f"{n[Status.UNJUDGED]} not judged")
    lines.append(f"verdict: {v.word.upper()} (exit {v.exit_code})")
    lines.append(reason_line(v))
    return "\n".join(lines)


def reason_line(v: Verdict) -> str:
    """`REASON: ...`, one line (judge.REASON_CHARS at most after the prefix), the drain reason."""
    return "REASON: " + " ".join(v.reason().split())


def refusal(msg: str, as_json: bool = False) -> str:
    """What check says on stdout when it cannot judge at all (bad input, a run it cannot read, a setup that cannot
    measure: exit 2), as its verdict would: a last `REASON: cannot judge: ...` line (judge.REASON_CHARS at most after
    the prefix), or with --json one object with the verdict, its exit code and that reason."""
    reason = "cannot judge: " + " ".join(msg.split())
    if len(reason) > REASON_CHARS:
        reason = reason[:REASON_CHARS - 1] + "…"
    if as_json:
        return json.dumps({"verdict": VERDICTS[Status.UNJUDGED], "exit_code": Status.UNJUDGED.exit_code,
                           "reason": reason})
    return "REASON: " + reason


def as_json(v: Verdict, extra: dict) -> str:
    return json.dumps({**extra, **v.as_dict()}, default=str)


def _case_name(c: Finding) -> str:
    if c.source == "evidence":  # a rule on one GPU: its name and the finding's few words
        return f"{c.method} [{c.source}]: {c.brief}" if c.status is not Status.PASS else f"{c.method} [{c.source}]"
    return f"{c.method} {c.direction} {fmt_size(c.bytes)} [{c.source}]" if c.method else f"[{c.source}]"


def write_junit(path: str, v: Verdict, host: str, evidence=None) -> None:
    """One testsuite per node, one testcase per check (classname: the pair, or the GPU of an evidence rule): a
    failure for a failed check, an error for one that could not be judged (CI shows both red: the gate fails
    closed); the verdict's notes as the suite's `note` properties."""
    from junitparser import Error, Failure, JUnitXml, TestCase, TestSuite

    suite = TestSuite(f"ipcbench check {host}")
    for n in v.notes:  # what explains the rows without judging (a power cap, no evidence recorded)
        suite.add_property("note", n)
    for c in v.checks:
        case = TestCase(_case_name(c), classname=f"{c.host}.{c.pair}")
        said = f"{c.reason} (judged by {c.by})" if c.by else c.reason
        if c.status is Status.FAIL:
            case.result = [Failure(said)]
        elif c.status is Status.UNJUDGED:
            case.result = [Error(said)]
        suite.add_testcase(case)
    xml = JUnitXml()
    xml.add_testsuite(suite)
    xml.write(path, pretty=True)


def write_prometheus(path: str, v: Verdict, host: str, evidence=None) -> None:
    """Gauges for node_exporter's textfile collector: the measured value and its bound per check (labels host,
    pair, engine method, direction, bytes, source), whether it passed (1 pass, 0 fail, -1 not judged), the
    node's verdict (0 healthy, 1 unhealthy, 2 cannot judge) and when it was judged; and the node's evidence
    (evidence_gauges) where the run recorded it."""
    from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

    reg = CollectorRegistry()
    labels = ["host", "pair", "method", "direction", "bytes", "source", "unit"]
    value = Gauge("ipcbench_check_value", "the measured value of a check (GB/s or us per transfer)", labels,
                  registry=reg)
    bound = Gauge("ipcbench_check_expected", "the bound a check held the value against", labels, registry=reg)
    passed = Gauge("ipcbench_check_pass", "1 passed, 0 failed, -1 not judged", labels, registry=reg)
    verdict = Gauge("ipcbench_check_verdict", "0 healthy, 1 unhealthy, 2 cannot judge", ["host"], registry=reg)
    stamp = Gauge("ipcbench_check_timestamp_seconds", "when the node was judged (Unix time)", ["host"], registry=reg)
    for c in v.checks:
        lab = dict(host=c.host or host, pair=c.pair, method=c.method, direction=c.direction, bytes=str(c.bytes),
                   source=c.source, unit="us" if c.unit == "µs" else c.unit)
        if c.value is not None and c.value == c.value:
            value.labels(**lab).set(c.value)
        if c.expected is not None:
            bound.labels(**lab).set(c.expected)
        passed.labels(**lab).set(PROM_PASS[c.status])
    if evidence is not None:
        evidence_gauges(reg, evidence)
    verdict.labels(host=host).set(v.exit_code)
    stamp.labels(host=host).set(time.time())
    write_to_textfile(path, reg)


def evidence_gauges(reg, evidence) -> None:
    """The node's evidence as gauges (labels host, gpu, and link, counter or reason): each NVLink error counter
    as read after the run and how much it grew during it, active links, PCIe generation and width (current and
    maximum), volatile ECC counts and their growth, pending and failed row remaps, processes of other jobs,
    seconds of each clock event during the run, and which items were not available (1). An item not read is
    no sample: Prometheus never sees "not available" as 0; nor is a growth without both snapshots. What grew is
    evidence/delta's (the GPUs paired by delta.paired, counters by delta.counter_growth, clock time by
    delta.time_growth, other jobs' processes by delta.foreign), as check judges it."""
    from ipcbench.evidence.delta import paired

    gauges = _EvidenceGauges(reg)
    for host in evidence.hosts():
        before, after = evidence.before(host), evidence.after(host)
        last = after if after is not None else before
        if last is None or last.missing:
            continue
        both = before is not None and not before.missing and after is not None
        earlier = {id(a): b for b, a in paired(before, after)} if both else {}
        own = {int(p) for s in (before, after) if s is not None for p in s.own_pids or []}
        for g in last.gpus:
            lab = dict(host=host, gpu=str(g.index))
            gb = earlier.get(id(g))
            gauges.missing_items(lab, g)
            gauges.links(lab, g, gb)
            gauges.pcie_ecc_remap(lab, g, gb)
            if readable(g.processes) and (gb is None or readable(gb.processes)):
                pids = {p.pid for s in (before, after) if s is not None and not s.missing
                        for i, p in foreign(s) if i == g.index and p.pid not in own}
                gauges.procs.labels(**lab).set(len(pids))
            if gb is not None:
                for reason, nb, na in time_growth(gb, g):
                    gauges.clock.labels(**lab, reason=reason).set(max(0, na - nb) / 1e9)


class _EvidenceGauges:
    """The evidence's gauge families (evidence_gauges), each GPU's samples set by the methods below."""

    def __init__(self, reg):
        from prometheus_client import Gauge

        def gauge(name: str, doc: str, labels: list[str]) -> Gauge:
            return Gauge(name, doc, ["host", "gpu", *labels], registry=reg)

        self.errors = gauge("ipcbench_nvlink_errors", "an NVLink error counter as read after the run",
                            ["link", "counter"])
        self.errors_d = gauge("ipcbench_nvlink_errors_delta", "how much an NVLink error counter grew during the run",
                              ["link", "counter"])
        self.active = gauge("ipcbench_nvlinks_active", "NVLinks active after the run", [])
        self.speed = gauge("ipcbench_nvlink_speed_gbps", "an active NVLink's speed, GB/s per direction", ["link"])
        self.pcie = {k: gauge(f"ipcbench_pcie_{k}", f"the PCIe link's {k.replace('_', ' ')} after the run", [])
                     for k in ("gen", "width", "max_gen", "max_width")}
        self.ecc = gauge("ipcbench_ecc_uncorrected_volatile", "volatile uncorrectable ECC errors after the run", [])
        self.ecc_d = gauge("ipcbench_ecc_uncorrected_volatile_delta", "new uncorrectable ECC errors during the run",
                           [])
        self.ecc_c = gauge("ipcbench_ecc_corrected_volatile", "volatile corrected ECC errors after the run", [])
        self.remap = gauge("ipcbench_remap", "1 where a row remap is pending / has failed after the run", ["state"])
        self.procs = gauge("ipcbench_foreign_processes", "compute processes of other jobs seen before or after the "
                                                         "run (not the run's ranks, nor the MPS server)", [])
        self.clock = gauge("ipcbench_clock_event_seconds", "seconds a clock event reason was active during the run",
                           ["reason"])
        self.missing = gauge("ipcbench_evidence_missing", "1 where an item was not available (the driver, the "
                                                          "binding or the VM did not give it)", ["item"])

    def missing_items(self, lab: dict, g) -> None:
        for item, readings in (("nvlinks", [g.links]), ("pcie", [g.pcie_gen, g.pcie_width]),
                               ("clock_events", [g.clock_events]), ("clock_event_ns", [g.clock_event_ns]),
                               ("ecc", [g.ecc_uncorrected_volatile]), ("remap", [g.remap_pending]),
                               ("processes", [g.processes])):
            if any(not readable(r) for r in readings):
                self.missing.labels(**lab, item=item).set(1)

    def links(self, lab: dict, g, gb) -> None:
        """Active links, each active link's speed, each counter as read after and its growth (delta.counter_growth)."""
        if not readable(g.links):
            return
        old = {ln.link: ln for ln in gb.links.value} if gb is not None and readable(gb.links) else {}
        self.active.labels(**lab).set(sum(1 for ln in g.links.value if readable(ln.active) and ln.active.value))
        for ln in g.links.value:
            if readable(ln.active) and ln.active.value and readable(ln.speed_gbps):
                self.speed.labels(**lab, link=str(ln.link)).set(float(ln.speed_gbps.value))
            if not readable(ln.errors):
                continue
            for counter, n in ln.errors.value.items():
                self.errors.labels(**lab, link=str(ln.link), counter=counter).set(n)
            if ln.link in old:
                for counter, nb, na in counter_growth(old[ln.link], ln):
                    self.errors_d.labels(**lab, link=str(ln.link), counter=counter).set(na - nb)

    def pcie_ecc_remap(self, lab: dict, g, gb) -> None:
        for k, item in (("gen", g.pcie_gen), ("width", g.pcie_width), ("max_gen", g.pcie_max_gen),
                        ("max_width", g.pcie_max_width)):
            if readable(item):
                self.pcie[k].labels(**lab).set(item.value)
        if readable(g.ecc_uncorrected_volatile):
            self.ecc.labels(**lab).set(g.ecc_uncorrected_volatile.value)
            if gb is not None and readable(gb.ecc_uncorrected_volatile):
                self.ecc_d.labels(**lab).set(g.ecc_uncorrected_volatile.value - gb.ecc_uncorrected_volatile.value)
        if readable(g.ecc_corrected_volatile):
            self.ecc_c.labels(**lab).set(g.ecc_corrected_volatile.value)
        for state, item in (("pending", g.remap_pending), ("failure", g.remap_failure)):
            if readable(item):
                self.remap.labels(**lab, state=state).set(int(bool(item.value)))
