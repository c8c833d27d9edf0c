"""The node's own evidence judged (pure: evidence/model.Evidence and the [[evidence]] expectations in, check
findings out): NVLink state, speed and error counters, PCIe training, ECC and row remaps, other jobs'
processes, thermal and hardware slowdown, each per GPU (and per link where it is one link's), before and
after the run (ipcbench/evidence/ reads them; docs/check.md says why each state is exit 1 or exit 2).

- FAIL (exit 1): the node is seen to be unhealthy: a link down or slow, a counter that grew past its
  allowance, a PCIe link narrower than it should be, new uncorrectable ECC errors, a pending or failed row
  remap, another job's process on a GPU, a thermal or hardware slowdown during the run.
- UNJUDGED (exit 2): an item a rule needs is "not available" (the driver, the binding or the VM did not give
  it, no NVML at all, no snapshot on one side of the run) and the expectations `require` it: what was not
  read never passes as healthy. An item not required that is missing is left out, said by no finding. An
  expectation that asks for more than the hardware has (more NVLinks than a GPU of its NVLink generation has, a
  link speed above its signalling rate, a PCIe width or generation above the GPU's maximum) is wrong, not the
  node: UNJUDGED, as a floor above a link's ceiling is (judging/judge.py).
- PASS: read and as expected; a power cap reached during the run is a pass whose note explains slower rows.

A run recorded before ipcbench recorded node evidence has none: each required item cannot be judged where
the expectations require "recorded", else the run is judged by its rows alone and a note says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ipcbench.catalogue.links import NVLINK
from ipcbench.judging.expect import ITEM_WORDS, POWER_CAP, EvidenceExpectation, Setting, resolve
from ipcbench.judging.finding import Finding
from ipcbench.evidence import delta
from ipcbench.evidence.model import Evidence
from ipcbench.status import Status

SOURCE = "evidence"
NO_EVIDENCE = "no node evidence recorded (run made before ipcbench recorded it, or by a version that did not)"


@dataclass
class Judged:
    """What the evidence rules found: findings for the verdict, notes for the summary (no status of their own)."""

    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def judge(evidence: Evidence, tables: list[EvidenceExpectation], models: dict[str, dict[int, str]],
          used: dict[str, set[str]] | None = None) -> Judged:
    """Every rule on every GPU of every host. `evidence`: the run's Evidence, as record/meta.Meta read it (no
    snapshot: none was recorded); `models`: {host: {GPU index: model}} as the run's meta.json names them, for
    hosts and GPUs the evidence cannot name itself (no NVML, or no evidence at all); `used`: {host: UUIDs of the
    GPUs the run measured}: another job's process is judged on those only (on a node shared by jobs, the other
    GPUs are theirs), every other rule on every GPU of the node (a link down is the node's fault whoever uses
    it). A host without UUIDs recorded has every GPU judged."""
    out = Judged()
    snaps = list(evidence.snapshots)
    hosts = list(dict.fromkeys([*(s.host for s in snaps), *models]))
    if not snaps:
        for host in hosts or [""]:
            _unrecorded(out, host, models.get(host, {}), tables, NO_EVIDENCE)
        if not any(f.source == SOURCE for f in out.findings):
            out.notes.append(f"{NO_EVIDENCE}: judged by its rows alone")
        return out
    for host in hosts:
        before = _snap(snaps, host, "before")
        after = _snap(snaps, host, "after")
        if before is None and after is None:
            _unrecorded(out, host, models.get(host, {}), tables, f"no node evidence recorded for {host}",
                        force=True)
            continue
        _host(out, host, before, after, models.get(host, {}), tables, (used or {}).get(host, set()))
    return out


def _snap(snaps, host: str, when: str):
    return next((s for s in snaps if s.host == host and s.when == when), None)


@dataclass
class Gpu:
    """One GPU of one host as every rule reads it (the rules' one context): its readings before and after the run
    (either may be None), what changed on it during the run (evidence/delta.py), the rules its model resolves to
    (judging/expect.resolve), and the findings it adds to. `side_missing` says why a side is missing ("" when both
    were read); `window_s` is the time between the snapshots; `alone`: the only GPU of its host's snapshots."""

    out: Judged
    host: str
    index: int
    rules: dict[str, Setting]
    before: Any = None  # evidence/model.GpuReading
    after: Any = None
    side_missing: str = ""
    changed: list = field(default_factory=list)
    window_s: float = 0.0
    alone: bool = False

    @property
    def readings(self) -> list:
        return [g for g in (self.before, self.after) if g is not None]

    @property
    def name(self) -> str:
        return f"GPU {self.index}"

    def required(self, item: str) -> bool:
        return _required(self.rules, item)

    def add(self, rule: str, status: Status, reason: str, brief: str = "", value=None, unit: str = "",
            expected=None, link: str = "", against: str = "") -> None:
        """A finding of this GPU under `rule` (the finding's method: nvlinks, pcie, ...)."""
        gpu = self.index
        self.out.findings.append(Finding(source=SOURCE, host=self.host, pair=f"GPU {gpu}" if gpu >= 0 else "node",
                                         src_gpu=gpu, dst_gpu=gpu, link=link, method=rule, value=value, unit=unit,
                                         expected=expected, status=status, reason=reason, brief=brief or reason,
                                         against=against))

    def missing(self, item: str, why: str, what: str = "") -> None:
        """A finding for an item the rule needs that was not read: UNJUDGED where required, nothing where not."""
        if not self.required(item):
            return
        name = self.name if self.index >= 0 else self.host or "the node"
        words = what or ITEM_WORDS[item]
        self.add(item, Status.UNJUDGED, f"{name}: {words} not available ({why}): required, so it cannot be judged",
                 f"{name}: {words} not available ({why})", against=self.rules["require"].against("require"))


def _beyond_hardware(gpu: Gpu, rule: str, key: str, asked, most, words: str, unit: str, link: str = "") -> bool:
    """An expectation (`key` = `asked`) above what the hardware has (`most`, said in `words`): no healthy GPU can meet
    it, so it judges nothing (UNJUDGED: the expectation is wrong, as a floor above a link's ceiling is); True when
    so. None for either: nothing to hold it against."""
    if asked is None or most is None or asked <= most:
        return False
    brief = f"GPU {gpu.index}: {key} = {asked:g} asks for more than {words}: the expectation is wrong"
    gpu.add(rule, Status.UNJUDGED, f"{brief} (no healthy GPU can meet it)", brief, value=most, unit=unit,
            expected=asked, link=link, against=gpu.rules[key].against(key))
    return True


def _generations(gpu: Gpu) -> list:
    """The NVLink generations (catalogue/links.NvlinkGen) the GPU's links were read at; [] where none was read."""
    names = {str(ln.version.value) for g in gpu.readings if readable(g.links) for ln in g.links.value
             if readable(ln.version)}
    return [NVLINK[n] for n in sorted(names) if n in NVLINK]


def _most(values) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _required(rules: dict[str, Setting], item: str) -> bool:
    req = rules.get("require")
    return req is not None and item in tuple(req.value)


def _require_all(gpu: Gpu, why: str) -> None:
    """Every item the GPU's rules require (but "recorded") cannot be judged, for `why`."""
    for item in tuple(gpu.rules["require"].value) if "require" in gpu.rules else ():
        if item != "recorded":
            gpu.missing(item, why)


def _unrecorded(out: Judged, host: str, models: dict[int, str], tables: list[EvidenceExpectation], why: str,
                force: bool = False) -> None:
    """No snapshot of this host: each GPU's required items cannot be judged where "recorded" is required too
    (or `force`: the run recorded evidence, but none of this host)."""
    for gpu, model in sorted(models.items()) or [(-1, "")]:
        rules = resolve(tables, model)
        if force or _required(rules, "recorded"):
            _require_all(Gpu(out, host, gpu, rules), why)


def readable(item) -> bool:
    return item is not None and not getattr(item, "missing", "") and getattr(item, "value", None) is not None


def _why(*items) -> str:
    """Why the first of these items is missing (a snapshot's own reason where the whole snapshot failed)."""
    for it in items:
        if it is None:
            return "no reading"
        if getattr(it, "missing", ""):
            return str(it.missing)
    return "no value" if items else "no reading"


def _host(out: Judged, host: str, before, after, models: dict[int, str], tables, used: set[str]) -> None:
    """The rules on each GPU of one host, from its snapshot before and after the run (either may be None)."""
    sides = [s for s in (before, after) if s is not None]
    if any(s.missing for s in sides):
        why = next(s.missing for s in sides if s.missing)
        gpus = {g.index: g.model for s in sides for g in s.gpus} or dict(models)
        for gpu, model in sorted(gpus.items()) or [(-1, "")]:
            _require_all(Gpu(out, host, gpu, resolve(tables, model or models.get(gpu, ""))), why)
        return
    b = {g.index: g for g in before.gpus} if before is not None else {}
    a = {g.index: g for g in after.gpus} if after is not None else {}
    changed = delta.changes(before, after) if before is not None and after is not None else []
    window = max(after.time - before.time, 0.0) if before is not None and after is not None else 0.0
    foreign = [f for snap in sides for f in delta.foreign(snap)]  # (GPU, process) of other jobs, each reading
    own = {int(p) for s in sides for p in (s.own_pids or [])}
    for index in sorted(set(b) | set(a) | set(models)):
        g_b, g_a = b.get(index), a.get(index)
        model = next((g.model for g in (g_a, g_b) if g is not None and g.model), models.get(index, ""))
        side = "" if g_b is not None and g_a is not None else "before" if g_b is None else "after"
        gpu = Gpu(out, host, index, resolve(tables, model), g_b, g_a,
                  f"GPU {index} not in the snapshot {side} the run" if side else "",
                  [c for c in changed if c.gpu == index], window, alone=len(set(b) | set(a)) == 1)
        _links(gpu)
        _pcie(gpu)
        _ecc(gpu)
        _remap(gpu)
        # the run's GPUs by UUID; a GPU NVML gave no UUID for cannot be told from them: judged too, never fewer
        if not used or any(g.uuid in used or not g.uuid for g in gpu.readings):
            _processes(gpu, [p for i, p in foreign if i == index and p.pid not in own])
        _clocks(gpu)


# ---- NVLink: state, speed, error counters ----------------------------------------------------------------

def _links(gpu: Gpu) -> None:
    """The NVLink rules. A GPU `alone` on its host (one GPU in the snapshot: a one-GPU VM, whose links to the
    NVSwitch fabric are not given to it) has no peer to link to: its link count is not judged, and links NVML
    does not answer for are no finding; a link that went down, a slow or retrying active link still fail."""
    bad = [g.links for g in gpu.readings if not readable(g.links)]
    if bad and gpu.alone:
        return
    if bad or not gpu.readings:  # no link table: one finding names every NVLink item required
        why = _why(*bad) if bad else gpu.side_missing
        items = [i for i in ("nvlinks", "nvlink_speed", "nvlink_errors") if gpu.required(i)]
        if items:
            gpu.missing(items[0], why, " and ".join(ITEM_WORDS[i] for i in items).replace("NVLink error", "error"))
        return
    _link_state(gpu)
    _link_speed(gpu)
    _link_errors(gpu)


def _active(g) -> tuple[dict[int, bool], list[int]]:
    """({link: active} of the links whose state was read, [links whose state was not])."""
    state, unread = {}, []
    for ln in g.links.value:
        if readable(ln.active):
            state[int(ln.link)] = bool(ln.active.value)
        else:
            unread.append(int(ln.link))
    return state, unread


def _link_state(gpu: Gpu) -> None:
    """One finding per GPU: how many links are active against the model's count, which are down, which went
    down during the run (active before, not after)."""
    want = None if gpu.alone else gpu.rules.get("nvlinks")
    states = {when: _active(g) for when, g in (("before", gpu.before), ("after", gpu.after)) if g is not None}
    unread = sorted({ln for _, u in states.values() for ln in u})
    if unread and not gpu.alone:
        g = gpu.after if gpu.after is not None else gpu.before
        why = _why(*(ln.active for ln in g.links.value if int(ln.link) in unread))
        gpu.missing("nvlinks", why, f"the state of NVLink {delta.links_text(unread)}")
        if gpu.required("nvlinks"):
            return
    went_down = sorted(int(c.link) for c in gpu.changed if c.kind == "link_down")
    counts = {when: sum(s.values()) for when, (s, _) in states.items()}
    fewest = min(counts, key=lambda w: (counts[w], w != "after"))  # the after reading where they tie
    n = counts[fewest]
    down = sorted(ln for ln, up in states[fewest][0].items() if not up)
    against = want.against("nvlinks") if want is not None else ""
    expected = int(want.value) if want is not None else None
    gens = _generations(gpu)
    most = _most(g.links for g in gens)
    wrong = _beyond_hardware(gpu, "nvlinks", "nvlinks", expected, most,
                             f"the {most} NVLinks a GPU of NVLink {' or '.join(g.name for g in gens)} has", "links",
                             "nvlink")
    expected = None if wrong else expected  # the count is not judged; a link down still is
    short = expected is not None and n < expected
    if wrong and not went_down:  # no pass beside the expectation that could not judge
        return
    if not short and not went_down:
        total = f"{n} of {expected}" if expected is not None else f"{n}"
        why = " (the only GPU of its host: no peer to link to, the count is not judged)" if gpu.alone else ""
        gpu.add("nvlinks", Status.PASS, f"GPU {gpu.index}: {total} NVLinks active {' and '.join(states)} the run{why}",
                value=n, unit="links", expected=expected, link="nvlink", against=against)
        return
    parts = []
    if went_down:
        parts.append(f"{delta.links_text(went_down)} went down during the run")
    rest = [ln for ln in down if ln not in went_down]
    if rest:
        parts.append(f"{delta.links_text(rest)} down")
    head = f"GPU {gpu.index}: {n} of {expected} NVLinks active" if expected is not None else \
        f"GPU {gpu.index}: {n} NVLinks active"
    brief = f"{head} ({'; '.join(parts)})" if parts else head
    gpu.add("nvlinks", Status.FAIL, f"{brief} [{fewest} the run]", brief, value=n, unit="links", expected=expected,
            link="nvlink", against=against)


def _link_speed(gpu: Gpu) -> None:
    """Each active link's speed against the per-link floor: a FAIL per slow link (its slowest reading)."""
    floor = gpu.rules.get("nvlink_gbps")
    if floor is None:
        return
    bound = float(floor.value)
    gens = _generations(gpu)
    most = _most(g.ceiling_gbps for g in gens)
    if _beyond_hardware(gpu, "nvlink_speed", "nvlink_gbps", bound, most, f"the {most:g} GB/s signalling rate of an "
                        f"NVLink {' or '.join(g.name for g in gens)} link" if most else "", "GB/s", "nvlink"):
        return
    slow: dict[int, float] = {}
    unread: list = []
    n = 0
    for g in gpu.readings:
        for ln in g.links.value:
            if not (readable(ln.active) and ln.active.value):
                continue
            n += 1
            if not readable(ln.speed_gbps):
                unread.append(ln)
            elif float(ln.speed_gbps.value) < bound:
                slow[int(ln.link)] = min(float(ln.speed_gbps.value), slow.get(int(ln.link), float("inf")))
    if unread:
        gpu.missing("nvlink_speed", _why(*(ln.speed_gbps for ln in unread)),
                    f"the speed of NVLink {delta.links_text({int(ln.link) for ln in unread})}")
    against = floor.against("nvlink_gbps")
    for ln, v in sorted(slow.items()):
        brief = f"GPU {gpu.index} link {ln} at {v:.4g} GB/s, expected at least {bound:g} GB/s"
        gpu.add("nvlink_speed", Status.FAIL, brief, brief, value=v, unit="GB/s", expected=bound, link="nvlink",
                against=against)
    if not slow and not (unread and gpu.required("nvlink_speed")) and n:
        gpu.add("nvlink_speed", Status.PASS, f"GPU {gpu.index}: every active NVLink at {bound:g} GB/s or more",
                value=None, unit="GB/s", expected=bound, link="nvlink", against=against)


def _link_errors(gpu: Gpu) -> None:
    """Each counter of each link that grew during the run (evidence/delta.py), against its allowance: a FAIL per
    (link, counter) past it ("12 replays on GPU 1 link 4 during the run"); a counter that went back cannot be
    judged (its growth is unknown). CRC counters with a rate allowance (link_error_rate_allowed) are judged by their
    rate over the run's window (snapshot to snapshot), as DCGM's NVLink health watch does: a link moving data counts
    some CRC errors that its replays absorb (on the quiet H100 pair 13-146 CRC data errors a link in a 22 s run, 0
    replays, 0 recoveries); at or above the rate they fail, below it they are recorded in a passing finding."""
    allowed = gpu.rules.get("link_errors_allowed")
    if allowed is None:
        return
    if gpu.before is None or gpu.after is None:
        gpu.missing("nvlink_errors", gpu.side_missing)
        return
    n, unread = _counters_read(gpu)
    bad, below_rate = _counters_grown(gpu, allowed)
    if not bad and n and not (unread and gpu.required("nvlink_errors")):
        rates = _rates(gpu)
        crc = (f"; CRC errors below the rate that matters ({', '.join(f'{k} {v:g}/s' for k, v in rates.items())}): "
               + ", ".join(below_rate)) if below_rate else ""
        gpu.add("nvlink_errors", Status.PASS,
                f"GPU {gpu.index}: no NVLink error counter grew past its allowance on {n} links{crc}", link="nvlink",
                against=allowed.against("link_errors_allowed"))


def _rates(gpu: Gpu) -> dict:
    """{CRC counter: errors a second that fail} (link_error_rate_allowed), {} where no table sets it."""
    return dict(gpu.rules["link_error_rate_allowed"].value) if "link_error_rate_allowed" in gpu.rules else {}


def _counters_read(gpu: Gpu) -> tuple[int, list]:
    """(links whose counters were read on both sides, [(after, before) of active links whose were not]); the
    latter said as not available where required."""
    before = {int(ln.link): ln for ln in gpu.before.links.value}
    unread, n = [], 0
    for ln in gpu.after.links.value:
        lb = before.get(int(ln.link))
        if lb is not None and readable(lb.errors) and readable(ln.errors):
            n += 1
        elif lb is not None and (readable(lb.active) and lb.active.value or readable(ln.active) and ln.active.value):
            unread.append((ln, lb))
    if unread:
        why = _why(*(x.errors for pair in unread for x in pair if not readable(x.errors)))
        gpu.missing("nvlink_errors", why,
                    f"the error counters of NVLink {delta.links_text({int(ln.link) for ln, _ in unread})}")
    return n, unread


def _counters_grown(gpu: Gpu, allowed: Setting) -> tuple[int, list[str]]:
    """A finding per counter that grew past its allowance (or its rate) or went back; (how many, the CRC counters
    that grew below their rate, as words)."""
    limits: dict = dict(allowed.value)
    rates = _rates(gpu)
    against = allowed.against("link_errors_allowed")
    bad = 0
    below_rate: list[str] = []
    for c in gpu.changed:
        if c.kind == "link_error":
            (counter, was), now = next(iter(c.before.items())), next(iter(c.after.values()))
            allow = int(limits.get(counter, 0))
            if counter in rates and gpu.window_s > 0:
                rate = (now - was) / gpu.window_s
                if rate >= rates[counter]:
                    bad += 1
                    gpu.add("nvlink_errors", Status.FAIL,
                            f"{c.text}: {rate:.3g} a second ({rates[counter]:g} a second fail)",
                            f"{c.text} ({rate:.3g}/s, {rates[counter]:g}/s fail)", value=rate, unit=f"{counter}/s",
                            expected=rates[counter], link="nvlink",
                            against=gpu.rules["link_error_rate_allowed"].against("link_error_rate_allowed"))
                else:
                    below_rate.append(f"link {c.link} {now - was} ({rate:.1f}/s)")
                continue
            if now - was > allow:
                bad += 1
                gpu.add("nvlink_errors", Status.FAIL, f"{c.text} ({allow} allowed)", c.text, value=now - was,
                        unit=counter, expected=allow, link="nvlink", against=against)
        elif c.kind == "counter_reset" and c.link is not None:
            bad += 1
            gpu.add("nvlink_errors", Status.UNJUDGED, c.text, c.text, link="nvlink", against=against)
    return bad, below_rate


# ---- PCIe ----------------------------------------------------------------------------------------------

def _pcie(gpu: Gpu) -> None:
    """The link's width against `pcie_width` (else the GPU's maximum), at every reading; its generation only
    against `pcie_gen` where the thresholds set it: NVML's current generation drops while a GPU idles, and the
    readings are taken at rest, so a lower generation than the maximum is said, never failed, unless asked."""
    want_w, want_g = gpu.rules.get("pcie_width"), gpu.rules.get("pcie_gen")
    for key, want, most, words in (("pcie_width", want_w, "pcie_max_width", "the GPU's widest PCIe link, x{}"),
                                   ("pcie_gen", want_g, "pcie_max_gen", "the GPU's highest PCIe generation, gen{}")):
        top = _most(int(getattr(g, most).value) for g in gpu.readings if readable(getattr(g, most)))
        if want is not None and _beyond_hardware(gpu, "pcie", key, int(want.value), top, f"{words.format(top)} "
                                                 "(NVML)", "lanes" if key == "pcie_width" else "gen", "pcie"):
            return
    seen = []
    for g in gpu.readings:
        need = [g.pcie_gen, g.pcie_width] + ([] if want_w is not None else [g.pcie_max_width])
        if not all(readable(x) for x in need):
            gpu.missing("pcie", _why(*(x for x in need if not readable(x))))
            return
        exp_w = int(want_w.value) if want_w is not None else int(g.pcie_max_width.value)
        gen, width = int(g.pcie_gen.value), int(g.pcie_width.value)
        low = width < exp_w or (want_g is not None and gen < int(want_g.value))
        seen.append((not low, width, gen, exp_w, g))
    if not seen:
        return
    _, width, gen, exp_w, g = min(seen, key=lambda x: x[:3])  # a low reading first, then the narrowest, slowest
    exp_g = int(want_g.value) if want_g is not None else None
    max_g = int(g.pcie_max_gen.value) if readable(g.pcie_max_gen) else None
    against = "; ".join(s.against(k) for k, s in (("pcie_width", want_w), ("pcie_gen", want_g)) if s is not None) \
        or "the GPU's maximum width (NVML)"
    if width < exp_w or (exp_g is not None and gen < exp_g):
        expected = f"gen{exp_g} x{exp_w}" if exp_g is not None else f"x{exp_w}"
        brief = f"GPU {gpu.index} PCIe gen{gen} x{width}, expected {expected}"
        gpu.add("pcie", Status.FAIL, brief, brief, value=width, unit="lanes", expected=exp_w, link="pcie",
                against=against)
        return
    note = ""
    if exp_g is None and max_g is not None and gen < max_g:
        note = (f" (gen{gen} of gen{max_g} at rest: a GPU may idle at a lower generation; not judged without "
                f"pcie_gen)")
    gpu.add("pcie", Status.PASS, f"GPU {gpu.index} PCIe gen{gen} x{width}{note}", value=width, unit="lanes",
            expected=exp_w, link="pcie", against=against)


# ---- ECC and row remaps --------------------------------------------------------------------------------

def _ecc(gpu: Gpu) -> None:
    """New uncorrectable volatile ECC errors during the run (evidence/delta.py) fail; a count that went back
    cannot be judged."""
    g_b, g_a = gpu.before, gpu.after
    if g_b is None or g_a is None:
        gpu.missing("ecc", gpu.side_missing)
        return
    if not (readable(g_b.ecc_uncorrected_volatile) and readable(g_a.ecc_uncorrected_volatile)):
        gpu.missing("ecc", _why(g_b.ecc_uncorrected_volatile, g_a.ecc_uncorrected_volatile))
        return
    for c in gpu.changed:
        if c.kind == "ecc_uncorrected":
            gpu.add("ecc", Status.FAIL, c.text, c.text, value=c.after - c.before, unit="errors", expected=0)
            return
        if c.kind == "counter_reset" and c.link is None and "ECC" in c.text:
            gpu.add("ecc", Status.UNJUDGED, c.text, c.text)
            return
    gpu.add("ecc", Status.PASS, f"GPU {gpu.index}: no new uncorrectable ECC error during the run", value=0,
            unit="errors", expected=0)


def _remap(gpu: Gpu) -> None:
    """A pending row remap (the GPU needs a reset) or a failed one (it needs service), at any reading, fails."""
    readings = gpu.readings
    need = [x for g in readings for x in (g.remap_pending, g.remap_failure)]
    if not readings or not all(readable(x) for x in need):
        gpu.missing("remap", _why(*(x for x in need if not readable(x))))
        return
    pending = any(bool(g.remap_pending.value) for g in readings)
    failed = any(bool(g.remap_failure.value) for g in readings)
    parts = (["a row remap is pending (the GPU needs a reset)"] if pending else []) + \
        (["a row remap failed (the GPU needs service)"] if failed else [])
    if parts:
        brief = f"GPU {gpu.index}: {'; '.join(parts)}"
        gpu.add("remap", Status.FAIL, brief, brief)
    else:
        gpu.add("remap", Status.PASS, f"GPU {gpu.index}: no row remap pending or failed")


# ---- other jobs' processes -----------------------------------------------------------------------------

def gib(n: int | None) -> str:
    return "an unreported amount of memory" if n is None else f"{n / (1 << 30):.1f} GiB"


def _processes(gpu: Gpu, foreign: list) -> None:
    """Every compute process on the GPU, before or after the run, that is none of the run's own ranks nor the
    MPS server that runs them (evidence/delta.foreign), nor named like a `processes_ignored` pattern, fails when
    more than `foreign_processes_allowed` are seen: each named once, with its pid, name and memory (its largest
    reading)."""
    import fnmatch

    allowed = gpu.rules.get("foreign_processes_allowed")
    if allowed is None:
        return
    readings = gpu.readings
    if not readings or not all(readable(g.processes) for g in readings):
        gpu.missing("processes", _why(*(g.processes for g in readings if not readable(g.processes))))
        return
    ignored = tuple(gpu.rules["processes_ignored"].value) if "processes_ignored" in gpu.rules else ()
    largest: dict = {}
    for p in foreign:
        if not any(fnmatch.fnmatchcase(p.name.rsplit("/", 1)[-1], pat) for pat in ignored):
            if p.pid not in largest or (p.used_bytes or 0) > (largest[p.pid].used_bytes or 0):
                largest[p.pid] = p
    limit = int(allowed.value)
    against = allowed.against("foreign_processes_allowed")
    if len(largest) > limit:
        for pid, p in sorted(largest.items()):
            brief = f"pid {pid} ({p.name or 'name unknown'}) holds {gib(p.used_bytes)} on GPU {gpu.index}"
            gpu.add("processes", Status.FAIL, f"{brief}: not one of the run's ranks ({len(largest)} such on the GPU, "
                    f"{limit} allowed)", brief, value=len(largest), unit="processes", expected=limit, against=against)
    else:
        gpu.add("processes", Status.PASS, f"GPU {gpu.index}: {len(largest)} process{'es' if len(largest) != 1 else ''} "
                f"of another job ({limit} allowed)", value=len(largest), unit="processes", expected=limit,
                against=against)


# ---- clock events: slowdown fails, a power cap explains ------------------------------------------------

def _clocks(gpu: Gpu) -> None:
    """A slowdown reason (`slowdowns`: thermal, hardware, power brake) during the run fails (evidence/delta.py:
    for how long where NVML gives the reasons' cumulative time, else seen active at the end). The power cap
    (sw_power_cap) is a pass with a note: it explains slower rows, and is no fault by itself."""
    slow = gpu.rules.get("slowdowns")
    if slow is None:
        return
    g_b, g_a, readings = gpu.before, gpu.after, gpu.readings
    if not readings or not all(readable(g.clock_events) for g in readings):
        gpu.missing("clock_events", _why(*(g.clock_events for g in readings if not readable(g.clock_events))))
        return
    if not (g_b is not None and g_a is not None and readable(g_b.clock_event_ns) and readable(g_a.clock_event_ns)):
        gpu.missing("clock_event_ns", _why(*(g.clock_event_ns for g in readings if not readable(g.clock_event_ns)))
                    if g_b and g_a else gpu.side_missing)
    fails = tuple(slow.value)
    against = slow.against("slowdowns")
    events = [(next(iter(c.after)) if isinstance(c.after, dict) else str(c.after), c) for c in gpu.changed
              if c.kind == "clock_event"]
    hit = [(r, c) for r, c in events if r in fails]
    for r, c in hit:
        secs = (c.after[r] - c.before[r]) / 1e9 if isinstance(c.after, dict) else None
        gpu.add("clock_events", Status.FAIL, f"{c.text} ({r})", c.text, value=secs, unit="s", expected=0,
                against=against)
    for c in gpu.changed:
        if c.kind == "counter_reset" and c.link is None and "ECC" not in c.text:
            gpu.add("clock_events", Status.UNJUDGED, c.text, c.text, against=against)
            hit.append(("", c))
    capped = [c for r, c in events if r == POWER_CAP and r not in fails]
    for c in capped:
        note = f"{c.text}: explains slower rows, not a failure by itself"
        gpu.out.notes.append(note)
        if not hit:
            secs = (c.after[POWER_CAP] - c.before[POWER_CAP]) / 1e9 if isinstance(c.after, dict) else None
            gpu.add("clock_events", Status.PASS, note, note, value=secs, unit="s", against=against)
    if not hit and not capped:
        gpu.add("clock_events", Status.PASS, f"GPU {gpu.index}: no {', '.join(fails)} during the run", value=0.0,
                unit="s", expected=0, against=against)
