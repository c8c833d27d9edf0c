"""What `ipcbench check` expects of a row: floors and ceilings from a thresholds file (TOML), read and
validated here (pure: no GPU, no MPI).

A thresholds file is a list of `[[expect]]` tables. Each names what it applies to -- a GPU model (`gpu`, shell
wildcards), a link kind (`link`: nvswitch, nvlink, pcie, or same_gpu for two ranks on one GPU), a method and
direction, and a size range (`sizes`, as for --sizes: "64M:1G" is every row from 64 MiB to 1 GiB) -- and one
bound: `floor_gbps` (GB/s), `floor_peak` (a fraction of the link's peak, core/link_rates.py) or `max_us` (µs
per transfer). `why` says where the number comes from and what margin it keeps: every verdict quotes it.
ipcbench ships defaults for the GPUs it has measured (defaults.toml beside this file); `--thresholds FILE`
adds a user's, whose entries win over a default for the same (gpu, link, method, direction, sizes).

A file with an unknown key, a wrong unit or a bad value is refused with one line naming the file, the line and
the key (UsageError): a gate must never run on a threshold it misread.
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ipcbench.errors import UsageError
from ipcbench.sizes import SizeError, fmt_size, parse_size

LINKS = ("nvswitch", "nvlink", "pcie", "same_gpu")
DIRECTIONS = ("push", "pull", "bidir", "oneway")
BOUNDS = ("floor_gbps", "floor_peak", "max_us")
KEYS = ("gpu", "link", "method", "direction", "sizes", *BOUNDS, "why")
DEFAULTS = "defaults.toml"


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


def _line_of(text: str, index: int, key: str | None) -> int:
    """The line of the index-th [[expect]] table (or of `key` inside it) in the file's text."""
    starts = [m.start() for m in re.finditer(r"^[ \t]*\[\[[ \t]*expect[ \t]*\]\]", text, flags=re.M)]
    if index >= len(starts):
        return 1
    begin = starts[index]
    end = starts[index + 1] if index + 1 < len(starts) else len(text)
    at = begin
    if key is not None:
        m = re.search(rf"^[ \t]*{re.escape(key)}[ \t]*=", text[begin:end], flags=re.M)
        at = begin + m.start() if m else begin
    return text.count("\n", 0, at) + 1


def parse(text: str, where: str) -> list[Expectation]:
    """Every [[expect]] of a thresholds file's text; UsageError "FILE:LINE: key: why" on the first problem."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10 reads TOML with tomli (a dependency there)
        import tomli as tomllib

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{where}: not TOML: {e}") from None
    extra = [k for k in doc if k != "expect"]
    if extra:
        line = text.count("\n", 0, max(0, text.find(extra[0]))) + 1
        raise UsageError(f"{where}:{line}: {extra[0]}: unknown key (a thresholds file holds [[expect]] tables)")
    tables = doc.get("expect", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        line = text.count("\n", 0, max(0, text.find("expect"))) + 1
        raise UsageError(f"{where}:{line}: expect: must be [[expect]] tables")
    if not tables:
        raise UsageError(f"{where}: no [[expect]] table: a thresholds file that sets nothing is a mistake")
    out = []
    for i, t in enumerate(tables):
        def bad(key: str | None, why: str, i=i):
            raise UsageError(f"{where}:{_line_of(text, i, key)}: {key or '[[expect]]'}: {why}")

        out.append(_expectation(t, bad, f"{where}:{_line_of(text, i, None)}"))
    seen: dict[tuple, str] = {}
    for x in out:
        if x.key() in seen:
            raise UsageError(f"{x.where}: [[expect]]: the same gpu, link, method, direction and sizes as "
                             f"{seen[x.key()]}")
        seen[x.key()] = x.where
    return out


def _expectation(t: dict, bad, where: str) -> Expectation:
    for k in t:
        if k not in KEYS:
            bad(k, f"unknown key (known: {', '.join(KEYS)})")
    for k in ("gpu", "link", "method", "direction", "sizes", "why"):
        if k not in t:
            bad(None, f"{k} is missing")
        if not isinstance(t[k], str) or not t[k].strip():
            bad(k, f"must be a non-empty string (got {t[k]!r})")
    if t["link"] not in LINKS:
        bad("link", f"{t['link']!r} is not one of {', '.join(LINKS)}")
    if t["direction"] not in DIRECTIONS:
        bad("direction", f"{t['direction']!r} is not one of {', '.join(DIRECTIONS)}")
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


def load(path: str | Path) -> list[Expectation]:
    """A user's thresholds file; UsageError when it cannot be read or is wrong."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"--thresholds {p}: cannot read ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        line = p.read_bytes()[:e.start].count(b"\n") + 1
        raise UsageError(f"--thresholds {p}:{line}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset "
                         f"{e.start}): a thresholds file is TOML") from None
    return parse(text, str(p))


def defaults() -> list[Expectation]:
    """The expectations ipcbench ships (defaults.toml: the GPUs it has measured)."""
    text = (resources.files("ipcbench.check") / DEFAULTS).read_text(encoding="utf-8")
    return parse(text, f"ipcbench/check/{DEFAULTS}")


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
