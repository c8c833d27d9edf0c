"""The look every figure of the report shares: a colour per engine with legacy drawn solid and pool dashed
(`method_style`), figure and title sizes that fit their text, the size axis and log ticks, and saving a
PNG without metadata. figures.py draws with these. matplotlib only inside the functions that need it.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

from ipcbench.sizes import fmt_size

DPI = 90
_PNG_META = {"Software": None}
_CHAR_IN = 0.0085  # approximate width of one character, inches per point of font size (DejaVu Sans)

# colour per engine (Okabe-Ito where possible: distinct for colour-blind readers)
ENGINE_COLOURS = {
    "ce": "#0072B2",
    "sm_read": "#009E73",
    "sm_write": "#E69F00",
    "sm_bulk_read": "#00664A",  # the bulk-copy kernels: sm_read's and sm_write's hues, darker
    "sm_bulk_write": "#9C6B00",
    "mpi_staged": "#555555",
    "shm_staged": "#CC79A7",
    "sm_pingpong": "#D55E00",
    "event_pingpong": "#56B4E9",
    "nccl": "#000000",  # the NCCL baseline (suites/nccl.py)
    "nccl_pingpong": "#882255",
}
RING_COLOURS = ["#C5B3E6", "#9A7FD1", "#6A4BB5", "#3F2785"]  # pipeline rings, light (shallow) to dark (deep)
OTHER_COLOURS = ["#8C564B", "#17BECF", "#BCBD22", "#E377C2", "#7F7F7F", "#1F77B4", "#FF7F0E", "#2CA02C"]


# How the peer's memory was shared, by method-name prefix (core/methods.py): legacy IPC has none.
MECHANISM_PREFIXES = {"pool_": "pool", "vmm_": "vmm", "core_": "cuda.core"}
MECHANISM_LINES = {  # legacy is solid and thick (method_style); the others thin, each its own dash and marker
    "pool": dict(linestyle=(0, (4, 2)), marker="x"),
    "vmm": dict(linestyle=(0, (6, 2, 1, 2)), marker="+"),
    "cuda.core": dict(linestyle=(0, (1, 1.5)), marker="d"),
}


def mechanism_of(suite: str, method: str) -> str:
    """How a method's peer memory was shared: pool_ce -> pool, vmm_sm_read -> vmm, ce -> legacy; a pool-suite
    method without a prefix is a pool method."""
    for prefix, mech in MECHANISM_PREFIXES.items():
        if str(method).startswith(prefix):
            return mech
    return "pool" if str(suite) == "pool" else "legacy"


def engine_of(method: str) -> str:
    """The engine a method uses: pool_ce -> ce, vmm_sm_read -> sm_read, ce_alltoall -> ce,
    ring_d4_latency -> ring_d4."""
    m = str(method)
    for prefix in MECHANISM_PREFIXES:
        if m.startswith(prefix):
            m = m[len(prefix):]
            break
    for suffix in ("_alltoall", "_latency"):
        if m.endswith(suffix):
            m = m[: -len(suffix)]
    return m


def method_style(suite: str, method: str, others: list[str] | None = None) -> dict:
    """Line style of a method: colour per engine, legacy solid and thick, other sharing mechanisms (pool, vmm,
    cuda.core) thin with their own dashes and markers, all-to-all dotted. `others` (the sorted list of every
    unknown engine in the figure) keeps fallback colours stable."""
    eng = engine_of(method)
    mech = mechanism_of(suite, method)
    if eng in ENGINE_COLOURS:
        colour = ENGINE_COLOURS[eng]
    elif eng.startswith("ring"):
        digits = "".join(c for c in eng if c.isdigit())
        depth = int(digits) if digits else 4
        colour = RING_COLOURS[min(len(RING_COLOURS) - 1, max(0, int(round(math.log2(max(depth, 1)))) - 1))]
    else:
        others = others or [eng]
        colour = OTHER_COLOURS[others.index(eng) % len(OTHER_COLOURS)] if eng in others else OTHER_COLOURS[0]
    if mech != "legacy":
        return dict(color=colour, linewidth=1.6, alpha=1.0, markersize=4, zorder=4, **MECHANISM_LINES[mech])
    if str(method).endswith("_alltoall"):
        return dict(color=colour, linestyle=":", linewidth=2.0, alpha=0.9, marker="^", markersize=4, zorder=3)
    return dict(color=colour, linestyle="-", linewidth=3.2, alpha=0.55, marker="o", markersize=4, zorder=2)


def _known(eng: str) -> bool:
    return eng in ENGINE_COLOURS or eng.startswith("ring")


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


def _nice_log_ticks(lo: float, hi: float, unit: str) -> tuple[list[float], list[str]]:
    """Ticks for a log axis between lo and hi labelled as plain numbers with a unit suffix ('4×', '20 µs'),
    never 3×10⁰."""
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

    def fmt(v):
        s = f"{v:.3g}"
        return s + unit

    return ticks, [fmt(v) for v in ticks]
