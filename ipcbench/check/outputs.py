"""The gate's verdict in the forms fleets consume: a human summary, one JSON object, JUnit XML (one testcase per
check, through junitparser), Prometheus text for node_exporter's textfile collector (gauges, through
prometheus_client's write_to_textfile: an atomic rename, so the collector never reads half a file), and one
`REASON:` line a Slurm health check can drain a node with."""

from __future__ import annotations

import json
import time

from ipcbench.check.judge import Finding, Verdict
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
    for c in shown:
        lines.append(f"  {MARK[c.status]} [{c.source}] {c.reason if verbose else c.brief or c.reason}")
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


def as_json(v: Verdict, extra: dict) -> str:
    return json.dumps({**extra, **v.as_dict()}, default=str)


def _case_name(c: Finding) -> str:
    return f"{c.method} {c.direction} {fmt_size(c.bytes)} [{c.source}]" if c.method else f"[{c.source}]"


def write_junit(path: str, v: Verdict, host: str) -> None:
    """One testsuite per node, one testcase per check (classname: the pair): a failure for a failed check, an
    error for one that could not be judged (CI shows both red: the gate fails closed)."""
    from junitparser import Error, Failure, JUnitXml, TestCase, TestSuite

    suite = TestSuite(f"ipcbench check {host}")
    for c in v.checks:
        case = TestCase(_case_name(c), classname=f"{c.host}.{c.pair}")
        if c.status is Status.FAIL:
            case.result = [Failure(c.reason)]
        elif c.status is Status.UNJUDGED:
            case.result = [Error(c.reason)]
        suite.add_testcase(case)
    xml = JUnitXml()
    xml.add_testsuite(suite)
    xml.write(path, pretty=True)


def write_prometheus(path: str, v: Verdict, host: str) -> None:
    """Gauges for node_exporter's textfile collector: the measured value and its bound per check (labels host,
    pair, engine method, direction, bytes, source), whether it passed (1 pass, 0 fail, -1 not judged), the
    node's verdict (0 healthy, 1 unhealthy, 2 cannot judge) and when it was judged."""
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
    verdict.labels(host=host).set(v.exit_code)
    stamp.labels(host=host).set(time.time())
    write_to_textfile(path, reg)
