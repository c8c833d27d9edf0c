"""Render the report's document (a list of blocks) as terminal text, markdown and self-contained HTML.

A document is a list of Heading, Para, Callout, Table and Figure blocks; blocks with terminal=True also go
to the terminal summary, blocks with files=False only there (a shorter terminal version of a long table). The
HTML embeds every figure as a base64 PNG, references nothing outside itself and says so to the browser (a
Content-Security-Policy that allows only inline styles and data: images). Control characters in any text (a
NUL once ended the MPI version string in meta.json) are dropped in all three renderings. Given a width (the
terminal's: terminal_width), the terminal text fits it: paragraphs and captions wrapped, a table's text columns
narrowed with their cells wrapped inside them, and a table that still does not fit split into parts of its columns.
"""

from __future__ import annotations

import base64
import html
import re
import shutil
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
TEXT_WIDTH = 110  # terminal lines of a Callout are wrapped to this width (or the terminal's, when narrower)
NOT_A_TERMINAL_WIDTH = 120  # the width of the terminal text written to a file or a pipe
MIN_WIDTH = 40  # a narrower terminal is taken as this wide
MIN_CELL = 8  # a text column of a table narrowed to fit is never narrower (its cells wrap inside it)
MAX_WORD = 16  # nor narrower than its longest word up to this long (longer words are cut)


def terminal_width(stream=None) -> int:
    """The width the terminal summary must fit: the terminal's (shutil.get_terminal_size: $COLUMNS, else the
    terminal's own) where `stream` (stdout) is one, NOT_A_TERMINAL_WIDTH where it is not (a file, a pipe)."""
    stream = stream if stream is not None else sys.stdout
    try:
        tty = bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        tty = False
    if not tty:
        return NOT_A_TERMINAL_WIDTH
    return max(shutil.get_terminal_size((NOT_A_TERMINAL_WIDTH, 24)).columns, MIN_WIDTH)


def clean(text) -> str:
    """Text without control characters (newlines and tabs kept)."""
    return _CONTROL.sub("", str(text))


@dataclass
class Heading:
    level: int
    text: str
    terminal: bool = False
    files: bool = True


@dataclass
class Para:
    text: str
    terminal: bool = False
    files: bool = True


@dataclass
class Callout:
    """The headline: a short list of statements, each with a level: "ok", "warn", "bad" or "info"."""

    items: list[tuple[str, str]]
    title: str = ""
    terminal: bool = False
    files: bool = True


MARK = {"ok": "✓", "warn": "!", "bad": "✗", "info": "·"}


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]
    terminal: bool = False
    files: bool = True
    numeric: list[bool] = field(default_factory=list)  # right-align these columns
    caption: str = ""


@dataclass
class Figure:
    title: str
    file: str | None
    terminal: bool = False
    files: bool = True
    job: tuple | None = None  # (figures.py function name, args, kwargs) until drawn


Block = Heading | Para | Callout | Table | Figure  # what a document (a list) holds


def _md_cell(s: str) -> str:
    return clean(s).replace("|", "\\|").replace("\n", " ")


def to_markdown(doc: list) -> str:
    out = []
    for b in doc:
        if not b.files:
            continue
        if isinstance(b, Heading):
            out += ["#" * b.level + " " + clean(b.text), ""]
        elif isinstance(b, Para):
            out += [clean(b.text), ""]
        elif isinstance(b, Callout):
            if b.title:
                out += [f"**{clean(b.title)}**", ""]
            out += [f"- {clean(text)}" if level == "info" else f"- {MARK.get(level, '·')} {clean(text)}"
                    for level, text in b.items]
            out.append("")
        elif isinstance(b, Table):
            if b.caption:
                out += [b.caption, ""]
            num = b.numeric or [False] * len(b.columns)
            out.append("| " + " | ".join(_md_cell(c) for c in b.columns) + " |")
            out.append("|" + "|".join("---:" if n else "---" for n in num) + "|")
            out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in b.rows]
            out.append("")
        elif isinstance(b, Figure):
            out += [f"![{_md_cell(b.title)}]({b.file})", ""]
    return "\n".join(out).rstrip() + "\n"


def to_text(doc: list, terminal_only: bool = True, width: int | None = None) -> str:
    """The terminal text; with `width`, no line wider than it (terminal_width)."""
    out = []
    for b in doc:
        if terminal_only and not b.terminal:
            continue
        if isinstance(b, Heading):
            line = "=" if b.level <= 2 else "-"
            head = _lines(clean(b.text), width)
            out += ["", *head, line * max(len(h) for h in head)]
        elif isinstance(b, Para):
            out += _lines(_plain(b.text), width)
        elif isinstance(b, Callout):
            if b.title:
                out += _lines(_plain(b.title), width)
            for level, text in b.items:
                out += textwrap.wrap(_plain(text), min(TEXT_WIDTH, width or TEXT_WIDTH),
                                     initial_indent=f"  {MARK.get(level, '·')} ", subsequent_indent="    ",
                                     break_on_hyphens=False)
            out.append("")
        elif isinstance(b, Table):
            if b.caption:
                out += _lines(b.caption.replace("**", ""), width)
            out += _text_table(b, width)
            out.append("")
    return "\n".join(out).strip("\n") + "\n"


def _lines(text: str, width: int | None) -> list[str]:
    """A paragraph's lines: as it is without a width, else wrapped to it (a word longer than the width cut)."""
    if width is None or len(text) <= width:
        return [text]
    return textwrap.wrap(text, width, break_on_hyphens=False) or [""]


def _plain(text: str) -> str:
    return clean(text).replace("**", "").replace("`", "")


def _text_table(t: Table, width: int | None = None) -> list[str]:
    cols = [clean(c) for c in t.columns]
    rows = [[clean(c) for c in r] for r in t.rows]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    num = t.numeric or [False] * len(cols)
    if width is not None and _span(widths) > width:
        return _fitted_table(cols, rows, widths, num, width)

    def fmt(cells):
        return "  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(cells, widths, num)).rstrip()

    return [fmt(cols), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows]


def _span(widths: list[int]) -> int:
    return sum(widths) + 2 * (len(widths) - 1)


def _fitted_table(cols: list[str], rows: list[list[str]], widths: list[int], num: list[bool], width: int) -> list[str]:
    """A table wider than `width`, fitted: first the headers wider than their values wrap (a column no narrower than
    its values nor its longest header word), then text columns are narrowed (_narrowed; never below MIN_CELL nor
    their longest word up to MAX_WORD; the first, the row's name, kept whole where it takes at most a third of the
    width; a numeric one never below its widest value), every cell wrapped inside its column; where that is not
    enough, the table in parts of its columns, each with the first again."""
    values = [max([len(r[i]) for r in rows] or [0]) for i in range(len(cols))]
    words = [max((len(w) for w in c.split()), default=1) for c in cols]
    cells = [[r[i] for r in rows] for i in range(len(cols))]
    widths = _narrowed(list(widths), [max(v, w, 1) for v, w in zip(values, words)], width, [[c] for c in cols])
    longest = [max((len(w) for c in col for w in c.split()), default=0) for col in cells]  # no word cut
    floor = [max(values[i], words[i]) if num[i] or (i == 0 and values[i] <= width // 3) else
             max(min(values[i], MIN_CELL), min(longest[i], MAX_WORD), min(words[i], MAX_WORD))
             for i in range(len(cols))]
    widths = _narrowed(widths, [max(f, 1) for f in floor], width, cells)
    parts = [list(range(len(cols)))]
    if _span(widths) > width and len(cols) > 1:
        parts, part = [], [0]
        for i in range(1, len(cols)):
            if len(part) > 1 and _span([widths[j] for j in part + [i]]) > width:
                parts.append(part)
                part = [0]
            part.append(i)
        parts.append(part)
    out: list[str] = []
    for k, part in enumerate(parts):
        if k:
            out.append("")
        out += _wrapped_rows([[cols[i] for i in part]], [widths[i] for i in part], [False] * len(part), width)
        out.append("  ".join("-" * widths[i] for i in part)[:width])
        out += _wrapped_rows([[r[i] for i in part] for r in rows], [widths[i] for i in part],
                             [num[i] for i in part], width)
    return out


def _narrowed(widths: list[int], floor: list[int], width: int, cells: list[list[str]]) -> list[int]:
    """The widths narrowed a character at a time until the table fits `width` or every column is at its floor: each
    time the column above its floor that the fewest of its cells (`cells`: per column) overflow at one less, the
    widest of those: a column of long words wraps few rows, one of equal cells every row."""
    lengths = [sorted((len(c) for c in col), reverse=True) for col in cells]
    while _span(widths) > width:
        narrowable = [i for i in range(len(widths)) if widths[i] > floor[i]]
        if not narrowable:
            break
        i = min(narrowable, key=lambda i: (sum(n >= widths[i] for n in lengths[i]), -widths[i]))
        widths[i] -= 1
    return widths


def _wrapped_rows(rows: list[list[str]], widths: list[int], num: list[bool], width: int) -> list[str]:
    """Each row as one line or more: every cell wrapped inside its column (a number right-aligned)."""
    out = []
    for r in rows:
        cells = [textwrap.wrap(c, w, break_on_hyphens=False) or [""] for c, w in zip(r, widths)]
        for k in range(max(len(c) for c in cells)):
            line = "  ".join((c[k] if k < len(c) else "").rjust(w) if n else (c[k] if k < len(c) else "").ljust(w)
                             for c, w, n in zip(cells, widths, num))
            out.append(line.rstrip()[:width])
    return out


_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1280px;
 color:#222;padding:0 16px;line-height:1.4}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:2em}h3{margin-top:1.5em}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 8px}th{background:#f2f2f2}td.n{text-align:right;
 font-variant-numeric:tabular-nums}tr:nth-child(even) td{background:#fafafa}
figure{margin:12px 0 24px}figcaption{font-size:13px;color:#555}img{max-width:100%;height:auto}
code{background:#f2f2f2;padding:1px 4px}
.glance{border:1px solid #c9d3de;border-radius:6px;background:#f7f9fb;padding:10px 16px;margin:10px 0 18px}
.glance .gt{font-weight:600;margin-bottom:4px}
.glance ul{list-style:none;padding:0;margin:0}.glance li{padding:3px 0 3px 1.9em;text-indent:-1.9em}
.glance .m{display:inline-block;width:1.3em;margin-right:.6em;text-align:center;border-radius:3px;
 font-weight:700;text-indent:0;color:#fff}
.glance .ok .m{background:#2e7d32}.glance .warn .m{background:#e08a00}.glance .bad .m{background:#c62828}
.glance .info .m{background:#90a4ae}
.glance table{margin:8px 0 6px}
"""


def _inline(text: str) -> str:
    """Escape, then the little markdown the report uses: **bold** and `code`."""
    s = html.escape(clean(text))
    parts = s.split("**")
    s = "".join(p if i % 2 == 0 else f"<b>{p}</b>" for i, p in enumerate(parts))
    parts = s.split("`")
    return "".join(p if i % 2 == 0 else f"<code>{p}</code>" for i, p in enumerate(parts))


def to_html(doc: list, fig_dir: Path, title: str = "ipcbench report") -> str:
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{html.escape(title)}</title>", f"<style>{_CSS}</style></head><body>"]
    for b in doc:
        if not b.files:
            continue
        if isinstance(b, Heading):
            out.append(f"<h{b.level}>{_inline(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            out.append(f"<p>{_inline(b.text)}</p>")
        elif isinstance(b, Callout):
            out.append('<div class="glance">' + (f'<div class="gt">{_inline(b.title)}</div>' if b.title else "")
                       + "<ul>" + "".join(f'<li class="{html.escape(level)}"><span class="m">'
                                          f'{MARK.get(level, "·")}</span>{_inline(text)}</li>'
                                          for level, text in b.items) + "</ul></div>")
        elif isinstance(b, Table):
            if b.caption:
                out.append(f"<p>{_inline(b.caption)}</p>")
            num = b.numeric or [False] * len(b.columns)
            out.append("<table><thead><tr>" + "".join(f"<th>{html.escape(clean(c))}</th>" for c in b.columns)
                       + "</tr></thead><tbody>")
            for r in b.rows:
                out.append("<tr>" + "".join(f'<td class="n">{html.escape(clean(c))}</td>' if n else
                                            f"<td>{html.escape(clean(c))}</td>" for c, n in zip(r, num)) + "</tr>")
            out.append("</tbody></table>")
        elif isinstance(b, Figure) and b.file:
            data = base64.b64encode((fig_dir / b.file).read_bytes()).decode("ascii")
            out.append(f'<figure><img alt="{html.escape(clean(b.title))}" src="data:image/png;base64,{data}">'
                       f"<figcaption>{_inline(b.title)}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
