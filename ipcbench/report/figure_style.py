"""The look every figure of the report shares: a colour per engine with legacy drawn solid and the other
sharing mechanisms dashed (`method_style`, from the rows' facts), figure and title sizes that fit their
text, the size axis and log ticks, and saving a PNG without metadata. figures.py draws with these.
matplotlib only inside the functions that need it.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

from ipcbench.sizes import fmt_size

DPI = 90
_PNG_META = {"Software": None}
_CHAR_IN = 0.0085  # approximate width of one character, inches per point of font size (DejaVu Sans)

# colour per family (`family`: an engine, SM kernels by their access; Okabe-Ito where possible: distinct for
# colour-blind readers)
COLOURS = {
    "ce": "#0072B2",
    "sm read": "#009E73",
    "sm write": "#E69F00",
    "sm_bulk read": "#00664A",  # the bulk-copy kernels: the SM kernels' hues, darker
    "sm_bulk write": "#9C6B00",
    "mpi": "#555555",
    "shm": "#CC79A7",
    "sm pingpong": "#D55E00",
    "event pingpong": "#56B4E9",
    "nccl": "#000000",  # the NCCL baseline (suites/nccl.py)
    "nccl pingpong": "#882255",
}
RING_COLOURS = ["#C5B3E6", "#9A7FD1", "#6A4BB5", "#3F2785"]  # pipeline rings, light (shallow) to dark (deep)
OTHER_COLOURS = ["#8C564B", "#17BECF", "#BCBD22", "#E377C2", "#7F7F7F", "#1F77B4", "#FF7F0E", "#2CA02C"]
# How the peer's memory was shared (the rows' `mechanism`): legacy IPC is solid and thick (method_style), the
# others thin, each its own dash and marker; their names as a reader knows them
MECHANISM_LINES: dict[str, dict] = {
    "pool": dict(linestyle=(0, (4, 2)), marker="x"),
    "vmm": dict(linestyle=(0, (6, 2, 1, 2)), marker="+"),
    "core": dict(linestyle=(0, (1, 1.5)), marker="d"),
}
MECHANISM_NAMES = {"pool": "pool", "vmm": "vmm", "core": "cuda.core"}


@dataclass(frozen=True)
class Series:
    """What one method's line is drawn by: the facts its rows state (results.RowFacts)."""

    method: str
    engine: str = ""
    access: str = ""
    mechanism: str = ""
    pattern: str = ""

    @property
    def family(self) -> str:
        """Its colour: the engine (SM kernels by access), a ping-pong by its engine, a pipeline ring."""
        if self.pattern == "ring":
            return "ring"
        if self.pattern == "pingpong":
            return f"{self.engine} pingpong"
        return f"{self.engine} {self.access}" if self.engine in ("sm", "sm_bulk") else self.engine


def series_of(frame) -> dict[tuple[str, str], Series]:
    """The Series of every (suite, method) of a frame with the fact columns (its first row's facts)."""
    first = frame.drop_duplicates(["suite", "method"])
    return {(s, m): Series(m, e, a, mech, p) for s, m, e, a, mech, p in
            zip(first["suite"], first["method"], first["engine"], first["access"], first["mechanism"],
                first["pattern"])}


def method_style(series: Series, others: list[str] | None = None) -> dict:
    """Line style of a method: colour per family, legacy solid and thick, the other sharing mechanisms (pool,
    vmm, cuda.core) thin with their own dashes and markers, all-to-all dotted. `others` (the sorted list of
    every family without a colour in the figure) keeps fallback colours stable."""
    fam = series.family
    if fam in COLOURS:
        colour = COLOURS[fam]
    elif fam == "ring":
        digits = "".join(c for c in series.method if c.isdigit())  # the ring's depth D of ring_dD
        depth = int(digits) if digits else 4
        colour = RING_COLOURS[min(len(RING_COLOURS) - 1, max(0, int(round(math.log2(max(depth, 1)))) - 1))]
    else:
        others = others or [fam]
        colour = OTHER_COLOURS[others.index(fam) % len(OTHER_COLOURS)] if fam in others else OTHER_COLOURS[0]
    if series.mechanism in MECHANISM_LINES:
        return dict(color=colour, linewidth=1.6, alpha=1.0, markersize=4, zorder=4, **MECHANISM_LINES[series.mechanism])
    if series.pattern == "alltoall":
        return dict(color=colour, linestyle=":", linewidth=2.0, alpha=0.9, marker="^", markersize=4, zorder=3)
    return dict(color=colour, linestyle="-", linewidth=3.2, alpha=0.55, marker="o", markersize=4, zorder=2)


LINE_WORDS = {"pool": "thin dashed ×", "vmm": "thin dash-dot +", "core": "thin dotted ◆"}  # MECHANISM_LINES
SOLID_WORDS = {"legacy": "legacy IPC", "shm": "host-staged", "mpi": "host-staged", "nccl": "NCCL",
               "event": "IPC events", "": "other paths"}


def legend_title(series) -> str:
    """What the line styles of these series mean, one line each, only for the styles drawn: legacy IPC solid,
    each other sharing mechanism its own dash, all-to-all dotted."""
    series = list(series)
    mechanisms = {x.mechanism for x in series}
    solid = dict.fromkeys(SOLID_WORDS.get(x.mechanism, "other paths") for x in series
                          if x.mechanism not in MECHANISM_LINES and x.pattern != "alltoall")
    lines = [f"thick solid: {', '.join(sorted(solid, key=list(SOLID_WORDS.values()).index))}"] if solid else []
    lines += [f"{LINE_WORDS[m]}: {MECHANISM_NAMES[m]}" for m in MECHANISM_LINES if m in mechanisms]
    if any(x.pattern == "alltoall" for x in series):
        lines.append("thick dotted ▲: all-to-all, one flow (every pair at once)")
    return "\n".join(lines)


def coloured(fam: str) -> bool:
    return fam in COLOURS or fam == "ring"


def _figure(w: float, h: float, left: float = 0.8, right: float = 0.2, bottom: float = 0.6, top: float = 0.45,
            wspace: float = 0.3, hspace: float = 0.4):
    """A figure with fixed margins in inches (a layout engine would draw every figure twice)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=DPI)
    fig.subplots_adjust(left=left / w, right=1 - right / w, bottom=bottom / h, top=1 - top / h,
                        wspace=wspace, hspace=hspace)
    return fig


def _save(fig, out_dir: Path, name: str) -> str:
    fig.savefig(out_dir / name, format="png", dpi=DPI, metadata=_PNG_META)
    return name


def _wrap(text: str, width_in: float, fontsize: float) -> str:
    """Wrap a title so that it fits `width_in` inches at `fontsize` points."""
    chars = max(12, int(width_in / (_CHAR_IN * fontsize)))
    return "\n".join(textwrap.wrap(text, chars)) or text


def _titles(fig, title: str, subtitle: str, w: float) -> None:
    """Figure title (bold) and a smaller line under it, both wrapped to the figure's width."""
    t = _wrap(title, w - 0.3, 11)
    fig.text(0.5, 1 - 0.08 / fig.get_figheight(), t, ha="center", va="top", fontsize=11, fontweight="bold")
    if subtitle:
        lines = t.count("\n") + 1
        fig.text(0.5, 1 - (0.12 + 0.2 * lines) / fig.get_figheight(), _wrap(subtitle, w - 0.3, 8.5), ha="center",
                 va="top", fontsize=8.5, color="#444444")


def _title_height(title: str, subtitle: str, w: float) -> float:
    """Inches the two title lines need at the top of a figure `w` inches wide."""
    n = _wrap(title, w - 0.3, 11).count("\n") + 1
    m = (_wrap(subtitle, w - 0.3, 8.5).count("\n") + 1) if subtitle else 0
    return 0.15 + 0.2 * n + 0.16 * m


def _size_axis(ax, sizes) -> None:
    sizes = sorted({int(s) for s in sizes if s > 0})
    ax.set_xscale("log", base=2)
    if not sizes:
        return
    step = max(1, math.ceil(len(sizes) / 7))
    ticks = sizes[::step]
    ax.set_xticks(ticks)
    ax.set_xticklabels([size_label(s) for s in ticks], fontsize=8)
    ax.minorticks_off()


def size_label(n: int) -> str:
    """4 B, 64 B, 4K, 256M: a message size for an axis."""
    return f"{n} B" if n < 1024 else fmt_size(n)


def plain(v: float) -> str:
    """A number as a reader writes it, 3 significant digits, never in scientific notation: 2190, 0.676, 12.5."""
    if not math.isfinite(v) or v == 0:
        return f"{v:g}"
    decimals = max(0, 2 - math.floor(math.log10(abs(v))))
    text = f"{round(v, decimals):.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def with_unit(v: float, unit: str) -> str:
    """A value and its unit ('5×', '20 µs'); times of 1000 µs and more in ms ('2.19 ms'), as a reader says them."""
    if unit.strip() == "µs" and abs(v) >= 1000:
        return f"{plain(v / 1000)} ms"
    return plain(v) + unit


def _nice_log_ticks(lo: float, hi: float, unit: str) -> tuple[list[float], list[str]]:
    """Ticks for a log axis between lo and hi labelled as plain numbers with a unit suffix ('4×', '20 µs',
    '2 ms'), never 3×10⁰ or 2e+03."""
    if not (lo > 0 and hi > 0):
        return [], []
    ticks = []
    for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5) if hi / lo > 30 else (1, 1.5, 2, 3, 5, 7):
            v = m * 10.0 ** e
            if lo <= v <= hi:
                ticks.append(v)
    if len(ticks) < 2:
        ticks = [lo, hi]
    return ticks, [with_unit(v, unit) for v in ticks]


def text_width_in(text: str, fontsize: float) -> float:
    """Inches the longest line of `text` takes at `fontsize` points (an estimate that errs wide)."""
    return max((len(line) for line in text.splitlines()), default=0) * _CHAR_IN * fontsize
