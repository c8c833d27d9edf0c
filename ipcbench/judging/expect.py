"""What `ipcbench check` expects of a row: floors and ceilings from a thresholds file (TOML), read and
validated here (pure: no GPU, no MPI).

A thresholds file is a list of `[[expect]]` tables. Each names what it applies to -- a GPU model (`gpu`, shell
wildcards), a link kind (`link`: nvswitch, nvlink, pcie, or same_gpu for two ranks on one GPU), a method and
direction, and a size range (`sizes`, as for --sizes: "64M:1G" is every row from 64 MiB to 1 GiB) -- and one
bound: `floor_gbps` (GB/s), `floor_peak` (a fraction of the link's peak, core/link_rates.py) or `max_us` (µs
per transfer). `why` says where the number comes from and what margin it keeps: every verdict quotes it.
ipcbench ships defaults for the GPUs it has measured (defaults.toml beside this file); `--thresholds FILE`
adds a user's, whose entries win over a default for the same (gpu, link, method, direction, sizes).

It may also hold `[[evidence]]` tables: what the node's own evidence (NVLink state and error counters, PCIe
training, clock events, ECC, row remaps, other processes; ipcbench/evidence/) must show for a GPU model
(`gpu`, shell wildcards), judged by judging/evidence_rules.py. Their keys (EVIDENCE_KEYS) are resolved one by
one: for each key, the first table that matches the GPU and sets it wins, a user's before the shipped ones,
so a site overrides one number without restating the rest.

A file with an unknown key, a wrong unit or a bad value is refused with one line naming the file, the line and
the key (UsageError): a gate must never run on a threshold it misread. The names are checked against what the
rows can be: a method of the catalogue (catalogue/methods.METHOD_FACTS; an engine named where a method belongs is
refused with its methods), a direction that method's rows have (its own, and "oneway" where the latency suite
times it: catalogue/suites.ROWS), a link kind (catalogue/links.LINK_KINDS, and same_gpu), an evidence item or
counter the rules know. A GPU pattern that cannot match any name (spaces at its ends, an unclosed "[") is
refused; one that matches no GPU model ipcbench has measured (the models its shipped tables name) is kept, since
it may be a site's new GPU, with a warning naming its line (Thresholds.warnings; check prints it).

Each table's line comes from a small scanner of the text for its `[[expect]]` / `[[evidence]]` header (_line_of):
tomllib, the standard library's reader, returns plain dicts without positions, and no maintained TOML reader
exposes the line of a table (tomlkit keeps a document's formatting for rewriting it, not positions).
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
import math
import re
from dataclasses import dataclass
from typing import Any
from importlib import resources
from pathlib import Path

from ipcbench.catalogue.links import LINK_KINDS
from ipcbench.catalogue.methods import ENGINES, METHOD_FACTS
from ipcbench.catalogue.suites import ROWS
from ipcbench.errors import UsageError
from ipcbench.sizes import SizeError, fmt_size, parse_size

# the link kinds a pair of two GPUs has (catalogue/links.py; an "unknown" link has no expectation), and same_gpu:
# two ranks on one GPU
LINKS = (*(k for k in LINK_KINDS if k != "unknown"), "same_gpu")
WILDCARDS = "*?["  # what makes a `gpu` value a pattern (fnmatch) rather than one model's name
BOUNDS = ("floor_gbps", "floor_peak", "max_us")
KEYS = ("gpu", "link", "method", "direction", "sizes", *BOUNDS, "why")
DEFAULTS = "defaults.toml"
SHIPPED = f"ipcbench/judging/{DEFAULTS}"  # how a verdict names the shipped file
TABLES = ("expect", "evidence")  # the tables a thresholds file may hold


@dataclass(frozen=True)
class Expectation:
    """One bound on the rows of (GPU model, link kind, method, direction) whose size is in [lo, hi]."""

    gpu: str  # a GPU model pattern (fnmatch, case-sensitive), e.g. "NVIDIA H200"
    link: str
    method: str
    direction: str
    lo: int
    hi: int
    floor_gbps: float | None = None
    floor_peak: float | None = None
    max_us: float | None = None
    why: str = ""
    where: str = ""  # file:line of its [[expect]]

    @property
    def sizes(self) -> str:
        return fmt_size(self.lo) if self.lo == self.hi else f"{fmt_size(self.lo)}:{fmt_size(self.hi)}"

    def key(self) -> tuple:
        return (self.gpu, self.link, self.method, self.direction, self.lo, self.hi)

    def for_gpu(self, gpu_model: str) -> bool:
        return fnmatch.fnmatchcase(gpu_model, self.gpu)

    def matches(self, gpu_model: str, link: str, method: str, direction: str, nbytes: int) -> bool:
        return (self.for_gpu(gpu_model) and link == self.link and method == self.method
                and direction == self.direction and self.lo <= nbytes <= self.hi)

    def describe(self, peak_gbps: float | None = None) -> str:
        """"floor 340 GB/s" / "floor 75% of the 450 GB/s peak = 338 GB/s" / "at most 5 µs", with its why."""
        if self.max_us is not None:
            bound = f"at most {self.max_us:g} µs per transfer"
        elif self.floor_gbps is not None:
            bound = f"floor {self.floor_gbps:g} GB/s"
        else:
            share = self.floor_peak or 0.0
            bound = (f"floor {share:.0%} of the {peak_gbps:.0f} GB/s peak = {share * peak_gbps:.0f} GB/s" if peak_gbps
                     else f"floor {share:.0%} of the link's peak")
        return f"{bound} ({self.gpu}, {self.link}, {self.method} {self.direction} {self.sizes}: {self.why})"


def _line_of(text: str, index: int, key: str | None, table: str = "expect") -> int:
    """The line of the index-th [[table]] (or of `key` inside it) in the file's text."""
    starts = [m.start() for m in re.finditer(rf"^[ \t]*\[\[[ \t]*{table}[ \t]*\]\]", text, flags=re.M)]
    if index >= len(starts):
        return 1
    begin = starts[index]
    end = starts[index + 1] if index + 1 < len(starts) else len(text)
    at = begin
    if key is not None:
        m = re.search(rf"^[ \t]*{re.escape(key)}[ \t]*=", text[begin:end], flags=re.M)
        at = begin + m.start() if m else begin
    return text.count("\n", 0, at) + 1


def _document(text: str, where: str) -> dict:
    """The thresholds file as TOML, its top level checked: [[expect]] and [[evidence]] tables, at least one."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10 reads TOML with tomli (a dependency there)
        import tomli as tomllib

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{where}: not TOML: {e}") from None
    extra = [k for k in doc if k not in TABLES]
    if extra:
        line = text.count("\n", 0, max(0, text.find(extra[0]))) + 1
        raise UsageError(f"{where}:{line}: {extra[0]}: unknown key (a thresholds file holds [[expect]] and "
                         f"[[evidence]] tables)")
    for name in TABLES:
        tables = doc.get(name, [])
        if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
            line = text.count("\n", 0, max(0, text.find(name))) + 1
            raise UsageError(f"{where}:{line}: {name}: must be [[{name}]] tables")
    if not any(doc.get(name) for name in TABLES):
        raise UsageError(f"{where}: no [[expect]] or [[evidence]] table: a thresholds file that sets nothing is "
                         f"a mistake")
    return doc


@dataclass(frozen=True)
class Thresholds:
    """A thresholds file read whole: its [[expect]] and [[evidence]] tables, and its warnings ("FILE:LINE: key:
    why" lines: what is kept although ipcbench cannot confirm it, a GPU pattern no measured model matches)."""

    expect: tuple[Expectation, ...] = ()
    evidence: tuple[EvidenceExpectation, ...] = ()
    warnings: tuple[str, ...] = ()


def read(text: str, where: str, known: tuple[str, ...] | None = None) -> Thresholds:
    """A thresholds file's text, read whole or refused whole (UsageError "FILE:LINE: key: why" on the first
    problem). `known`: the GPU models a pattern is held against (None: those the shipped tables name)."""
    doc = _document(text, where)
    known = known_models() if known is None else known
    warnings: list[str] = []
    tables: dict[str, list] = {}
    for name, make in (("expect", _expectation), ("evidence", _evidence)):
        tables[name] = []
        for i, t in enumerate(doc.get(name, [])):
            def bad(key: str | None, why: str, i=i, name=name):
                raise UsageError(f"{where}:{_line_of(text, i, key, name)}: {key or f'[[{name}]]'}: {why}")

            tables[name].append(make(t, bad, f"{where}:{_line_of(text, i, None, name)}"))
            unknown = _unknown_model(t["gpu"], known)
            if unknown:
                warnings.append(f"{where}:{_line_of(text, i, 'gpu', name)}: gpu: {unknown}")
    seen: dict[tuple, str] = {}
    for x in tables["expect"]:
        if x.key() in seen:
            raise UsageError(f"{x.where}: [[expect]]: the same gpu, link, method, direction and sizes as "
                             f"{seen[x.key()]}")
        seen[x.key()] = x.where
    return Thresholds(tuple(tables["expect"]), tuple(tables["evidence"]), tuple(warnings))


def parse(text: str, where: str) -> list[Expectation]:
    """Every [[expect]] of a thresholds file's text (the file is read whole: read)."""
    return list(read(text, where).expect)


def _expectation(t: dict, bad, where: str) -> Expectation:
    for k in t:
        if k not in KEYS:
            bad(k, f"unknown key (known: {', '.join(KEYS)})")
    for k in ("gpu", "link", "method", "direction", "sizes", "why"):
        if k not in t:
            bad(None, f"{k} is missing")
        if not isinstance(t[k], str) or not t[k].strip():
            bad(k, f"must be a non-empty string (got {t[k]!r})")
    _check_names(t, bad)
    lo, hi = _sizes(t["sizes"], lambda why: bad("sizes", why))
    bounds = [k for k in BOUNDS if k in t]
    if len(bounds) != 1:
        bad(bounds[1] if bounds else None, f"give exactly one of {', '.join(BOUNDS)}")
    b = bounds[0]
    v = t[b]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        bad(b, f"must be a number ({'GB/s' if b == 'floor_gbps' else 'µs' if b == 'max_us' else 'a fraction'}, "
               f"no unit in the value; got {v!r})")
    if not math.isfinite(v) or not v > 0 or (b == "floor_peak" and v > 1):
        bad(b, f"{v!r} is out of range ({'0 < value <= 1' if b == 'floor_peak' else 'must be > 0'})")
    return Expectation(t["gpu"], t["link"], t["method"], t["direction"], lo, hi, why=t["why"], where=where,
                       **{b: float(v)})


def _check_names(t: dict, bad) -> None:
    """An [[expect]]'s names against the catalogue: the GPU pattern well formed, the link a kind a pair has, the
    method one ipcbench measures, the direction one its rows have."""
    malformed = _malformed_pattern(t["gpu"])
    if malformed:
        bad("gpu", malformed)
    if t["link"] not in LINKS:
        bad("link", f"{t['link']!r} is not one of {', '.join(LINKS)}")
    method = t["method"]
    if method not in METHOD_FACTS:
        bad("method", _not_a_method(method))
    if t["direction"] not in directions_of(method):
        bad("direction", f"{t['direction']!r} is not a direction of {method}'s rows (its rows: "
                         f"{', '.join(directions_of(method))})")


def directions_of(method: str) -> tuple[str, ...]:
    """The directions a method's rows are written in: its own (catalogue/methods.py), and "oneway" where the
    latency suite times it (catalogue/suites.ROWS)."""
    own = METHOD_FACTS[method].directions
    return (*own, "oneway") if method in ROWS["latency"] else own


def _not_a_method(name: str) -> str:
    """Why `name` is not a method, with what it may have meant."""
    if name in ENGINES:
        theirs = [m for m, f in METHOD_FACTS.items() if f.engine == name]
        return f"{name!r} is an engine, not a method: its methods are {', '.join(theirs)}"
    near = difflib.get_close_matches(name, list(METHOD_FACTS), n=1)
    hint = f" (did you mean {near[0]}?)" if near else ""
    return f"{name!r} is not a method ipcbench measures{hint}; methods: {', '.join(METHOD_FACTS)}"


def _malformed_pattern(pattern: str) -> str | None:
    """Why a GPU pattern can match no name at all (NVML's model names have no spaces at their ends; a "[" opens a
    set of characters that "]" must close), or None."""
    if pattern != pattern.strip():
        return f"{pattern!r} has spaces at its ends: no GPU's name (NVML's) has, so it would match none"
    if re.search(r"\[[^\]]*$", pattern):
        return f"{pattern!r} opens a '[' it never closes: a typo, or write [[] for a literal '['"
    return None


def _unknown_model(pattern: str, known: tuple[str, ...]) -> str | None:
    """The warning of a GPU pattern that matches none of the `known` models (None where one matches): kept, since
    it may name a GPU ipcbench has not measured, but said, since it may be a typo that judges nothing."""
    if not known or any(fnmatch.fnmatchcase(k, pattern) for k in known):
        return None
    near = [k for k in known if fnmatch.fnmatchcase(k.casefold(), pattern.casefold())]
    hint = (f"it matches {near[0]} only ignoring case, and patterns are case-sensitive" if near else
            "check the spelling against NVML's name: nvidia-smi --query-gpu=name --format=csv")
    return (f"{pattern!r} matches no GPU model ipcbench has measured ({', '.join(known)}): kept for a GPU it has "
            f"not measured, but {hint}")


def known_models() -> tuple[str, ...]:
    """The GPU models ipcbench has measured: those its shipped tables name exactly (no wildcard)."""
    return _models_named(_shipped_doc())


def _models_named(doc: dict) -> tuple[str, ...]:
    names = {t.get("gpu") for name in TABLES for t in doc.get(name, [])}
    return tuple(sorted(n for n in names if isinstance(n, str) and not any(c in n for c in WILDCARDS)))


def _sizes(text: str, bad) -> tuple[int, int]:
    """"64M:1G" -> (64 MiB, 1 GiB); "4K" -> (4K, 4K)."""
    parts = text.split(":")
    try:
        if len(parts) == 1:
            n = parse_size(parts[0])
            return n, n
        if len(parts) == 2:
            lo, hi = parse_size(parts[0]), parse_size(parts[1])
            if lo <= hi:
                return lo, hi
            bad(f"{text!r}: the first size must not exceed the second")
    except SizeError as e:
        bad(str(e))
    bad(f"{text!r} is not SIZE or LO:HI (e.g. 4K, 64M:1G)")
    raise AssertionError("unreachable")


def _text(path: str | Path) -> str:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"--thresholds {p}: cannot read ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        line = p.read_bytes()[:e.start].count(b"\n") + 1
        raise UsageError(f"--thresholds {p}:{line}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset "
                         f"{e.start}): a thresholds file is TOML") from None
    return text


def load(path: str | Path) -> list[Expectation]:
    """A user's thresholds file's [[expect]] tables; UsageError when it cannot be read or is wrong."""
    return list(load_thresholds(path).expect)


def load_evidence(path: str | Path) -> list[EvidenceExpectation]:
    """A user's thresholds file's [[evidence]] tables; UsageError when it cannot be read or is wrong."""
    return list(load_thresholds(path).evidence)


def load_thresholds(path: str | Path) -> Thresholds:
    """A user's thresholds file, read whole (its tables and warnings); UsageError when it cannot be read or is
    wrong."""
    return read(_text(path), str(Path(path)))


def _shipped_text() -> str:
    return (resources.files("ipcbench.judging") / DEFAULTS).read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def _shipped_doc() -> dict:
    return _document(_shipped_text(), SHIPPED)


@functools.lru_cache(maxsize=1)
def shipped() -> Thresholds:
    """What ipcbench ships (defaults.toml: the GPUs it has measured), its patterns held against its own models;
    read once per process (a report judges every run with it), immutable."""
    return read(_shipped_text(), SHIPPED, known=_models_named(_shipped_doc()))


def defaults() -> list[Expectation]:
    """The expectations ipcbench ships (defaults.toml: the GPUs it has measured)."""
    return list(shipped().expect)


def evidence_defaults() -> list[EvidenceExpectation]:
    """The node-evidence expectations ipcbench ships (defaults.toml's [[evidence]] tables)."""
    return list(shipped().evidence)


def combine(shipped: list[Expectation], users: list[Expectation]) -> list[Expectation]:
    """The user's expectations, then every shipped one the user did not restate (same key)."""
    mine = {e.key() for e in users}
    return list(users) + [e for e in shipped if e.key() not in mine]


def find(expectations: list[Expectation], gpu_model: str, link: str, method: str, direction: str,
         nbytes: int) -> list[Expectation]:
    """Every expectation of a row (the first of a key wins: combine puts the user's first)."""
    out, keys = [], set()
    for e in expectations:
        if e.key() not in keys and e.matches(gpu_model, link, method, direction, nbytes):
            out.append(e)
            keys.add(e.key())
    return out


# ---- [[evidence]]: what the node's own evidence must show (judging/evidence_rules.py judges it) --------------

# evidence/model.LinkReading.errors' names ("crc": the one CRC field a driver gives where the error-counter call does
# not: evidence/read.ERROR_FIELDS)
NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data", "crc")
CRC_COUNTERS = ("crc_flit", "crc_data", "crc")  # judged by their rate over the run (link_error_rate_allowed), as DCGM
SLOWDOWNS = ("hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake")
POWER_CAP = "sw_power_cap"  # recorded and explained, never a failure by itself (judging/evidence_rules.py)
# every reason evidence/read.py names (the older PERF_POLICY field's "thermal" included)
CLOCK_EVENTS = (*SLOWDOWNS, "thermal", POWER_CAP, "sync_boost", "idle", "applications_clocks", "display_clock",
                "board_limit", "reliability")
# The items the evidence rules read (judging/evidence_rules.py), each a reading of evidence/model.GpuReading, in
# the words a finding says it with; a table can require them (`require`), and "recorded": the run recorded node
# evidence at all (runs made before ipcbench recorded it have none).
ITEM_WORDS = {"nvlinks": "NVLink state", "nvlink_speed": "NVLink speed", "nvlink_errors": "NVLink error counters",
              "pcie": "PCIe link generation and width", "clock_events": "clock event reasons",
              "clock_event_ns": "clock event durations", "ecc": "volatile ECC counts",
              "remap": "row remap state", "processes": "compute processes"}
ITEMS = (*ITEM_WORDS, "recorded")
EVIDENCE_KEYS = ("gpu", "nvlinks", "nvlink_gbps", "pcie_gen", "pcie_width", "link_errors_allowed",
                 "link_error_rate_allowed", "slowdowns",
                 "foreign_processes_allowed", "processes_ignored", "require", "why")
RULE_KEYS = EVIDENCE_KEYS[1:-1]  # what a table sets (resolved key by key)


@dataclass(frozen=True)
class EvidenceExpectation:
    """One [[evidence]] table: the keys it sets for the GPU models its pattern matches."""

    gpu: str
    values: tuple[tuple[str, object], ...]  # (key, value) of every RULE_KEYS key the table sets, normalised
    why: str
    where: str  # file:line of its [[evidence]]

    def for_gpu(self, gpu_model: str) -> bool:
        return fnmatch.fnmatchcase(gpu_model, self.gpu)

    def get(self, key: str):
        return dict(self.values).get(key)


@dataclass(frozen=True)
class Setting:
    """One resolved key of the evidence expectations of a GPU model: its value and the table it came from."""

    value: Any
    table: EvidenceExpectation

    def against(self, key: str) -> str:
        """"nvlinks = 18 (NVIDIA H100 80GB HBM3: why; defaults.toml:NN)", what a verdict quotes."""
        return f"{key} = {_toml_value(self.value)} ({self.table.gpu}: {self.table.why}; {self.table.where})"


def _toml_value(v) -> str:
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {x}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return f"{v:g}" if isinstance(v, float) else str(v)


def resolve(tables: list[EvidenceExpectation], gpu_model: str) -> dict[str, Setting]:
    """{key: Setting} for a GPU model: for each key, the first table that matches the model and sets it (a
    user's tables come first: combine_evidence). A key no table sets is absent: its rule is not applied."""
    out: dict[str, Setting] = {}
    for t in tables:
        if t.for_gpu(gpu_model):
            for k, v in t.values:
                out.setdefault(k, Setting(v, t))
    return out


def combine_evidence(shipped: list[EvidenceExpectation],
                     users: list[EvidenceExpectation]) -> list[EvidenceExpectation]:
    """The user's tables first (each of their keys wins over a shipped one), then the shipped ones."""
    return list(users) + list(shipped)


def parse_evidence(text: str, where: str) -> list[EvidenceExpectation]:
    """Every [[evidence]] of a thresholds file's text (the file is read whole: read)."""
    return list(read(text, where).evidence)


def _count(v, key: str, bad, lo: int = 0, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        bad(key, f"must be a whole number (got {v!r})")
    if v < lo or (hi is not None and v > hi):
        bad(key, f"{v!r} is out of range ({lo}..{hi})" if hi is not None else f"{v!r} is out of range (>= {lo})")
    return int(v)


def _names(v, key: str, bad, known: tuple[str, ...] | None) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        bad(key, f"must be a list of names (got {v!r})")
    for x in v:
        if known is not None and x not in known:
            bad(key, f"{x!r} is not one of {', '.join(known)}")
    return tuple(v)


def _evidence(t: dict, bad, where: str) -> EvidenceExpectation:
    for k in t:
        if k not in EVIDENCE_KEYS:
            bad(k, f"unknown key (known: {', '.join(EVIDENCE_KEYS)})")
    for k in ("gpu", "why"):
        if k not in t:
            bad(None, f"{k} is missing")
        if not isinstance(t[k], str) or not t[k].strip():
            bad(k, f"must be a non-empty string (got {t[k]!r})")
    malformed = _malformed_pattern(t["gpu"])
    if malformed:
        bad("gpu", malformed)
    values = {k: _RULE_VALUES[k](t[k], k, bad) for k in RULE_KEYS if k in t}
    if not values:
        bad(None, f"sets nothing (give one or more of {', '.join(RULE_KEYS)})")
    return EvidenceExpectation(t["gpu"], tuple(values.items()), t["why"], where)


def _gbps(v, key: str, bad) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        bad(key, f"must be a number (GB/s per link per direction, no unit in the value; got {v!r})")
    if not math.isfinite(v) or not v > 0:
        bad(key, f"{v!r} is out of range (must be > 0)")
    return float(v)


def _allowed(v, key: str, bad) -> dict[str, int]:
    """link_errors_allowed: one number for every counter, or {counter = number} (counters not named: 0)."""
    if not isinstance(v, dict):
        n = _count(v, key, bad)
        return {c: n for c in NVLINK_COUNTERS}
    for c in v:
        if c not in NVLINK_COUNTERS:
            bad(key, f"{c!r} is not one of {', '.join(NVLINK_COUNTERS)}")
    return {c: _count(v.get(c, 0), key, bad) for c in NVLINK_COUNTERS}


def _rates_allowed(v, key: str, bad) -> dict[str, float]:
    """link_error_rate_allowed: per second of the run, per link: one number for every CRC counter, or each's."""
    rates = v if isinstance(v, dict) else {c: v for c in CRC_COUNTERS}
    for c in rates:
        if c not in CRC_COUNTERS:
            bad(key, f"{c!r} is not one of {', '.join(CRC_COUNTERS)} (replays and recoveries are counted)")
    per_s: dict[str, float] = {}
    for c in CRC_COUNTERS:
        r = rates.get(c, 0)
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r < 0:
            bad(key, f"{r!r} is out of range (errors per second, >= 0)")
        per_s[c] = float(r)
    return per_s


# how each key of an [[evidence]] table is read (its value checked and normalised; `bad` refuses it)
_RULE_VALUES = {
    "nvlinks": lambda v, k, bad: _count(v, k, bad, 0, 64),
    "nvlink_gbps": _gbps,
    "pcie_gen": lambda v, k, bad: _count(v, k, bad, 1, 7),
    "pcie_width": lambda v, k, bad: _count(v, k, bad, 1, 32),
    "link_errors_allowed": _allowed,
    "link_error_rate_allowed": _rates_allowed,
    "foreign_processes_allowed": _count,
    "slowdowns": lambda v, k, bad: _names(v, k, bad, CLOCK_EVENTS),
    "processes_ignored": lambda v, k, bad: _names(v, k, bad, None),
    "require": lambda v, k, bad: _names(v, k, bad, ITEMS),
}
