"""Render the report's document (a list of blocks) as terminal text, markdown and self-contained HTML.

A document is a list of Heading, Para, Callout, Table and Figure blocks; blocks with terminal=True also go
to the terminal summary, blocks with files=False only there (a shorter terminal version of a long table). The
HTML embeds every figure as a base64 PNG, references nothing outside itself and says so to the browser (a
Content-Security-Policy that allows only inline styles and data: images). Control characters in any text (a
NUL once ended the MPI version string in meta.json) are dropped in all three renderings.
"""

from __future__ import annotations

import base64
import html
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
TEXT_WIDTH = 110  # terminal lines of a Callout are wrapped to this width


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


def to_text(doc: list, terminal_only: bool = True) -> str:
    out = []
    for b in doc:
        if terminal_only and not b.terminal:
            continue
        if isinstance(b, Heading):
            line = "=" if b.level <= 2 else "-"
            out += ["", clean(b.text), line * len(clean(b.text))]
        elif isinstance(b, Para):
            out.append(_plain(b.text))
        elif isinstance(b, Callout):
            if b.title:
                out.append(_plain(b.title))
            for level, text in b.items:
                out += textwrap.wrap(_plain(text), TEXT_WIDTH, initial_indent=f"  {MARK.get(level, '·')} ",
                                     subsequent_indent="    ", break_on_hyphens=False)
            out.append("")
        elif isinstance(b, Table):
            if b.caption:
                out.append(b.caption.replace("**", ""))
            out += _text_table(b)
            out.append("")
    return "\n".join(out).strip("\n") + "\n"


def _plain(text: str) -> str:
    return clean(text).replace("**", "").replace("`", "")


def _text_table(t: Table) -> list[str]:
    cols = [clean(c) for c in t.columns]
    rows = [[clean(c) for c in r] for r in t.rows]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    num = t.numeric or [False] * len(cols)

    def fmt(cells):
        return "  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(cells, widths, num)).rstrip()

    return [fmt(cols), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows]


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
