"""Render the report's document (a list of blocks) as terminal text, markdown and self-contained HTML.

A document is a list of Heading, Para, Table and Figure blocks; blocks with terminal=True also go to the
terminal summary, blocks with files=False only there (a shorter terminal version of a long table). The HTML
embeds every figure as a base64 PNG and references nothing outside itself.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path


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
    job: object = None  # (figures.py function name, args, kwargs) until drawn


def _md_cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def to_markdown(doc: list) -> str:
    out = []
    for b in doc:
        if not b.files:
            continue
        if isinstance(b, Heading):
            out += ["#" * b.level + " " + b.text, ""]
        elif isinstance(b, Para):
            out += [b.text, ""]
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
            out += ["", b.text, line * len(b.text)]
        elif isinstance(b, Para):
            out.append(b.text.replace("**", "").replace("`", ""))
        elif isinstance(b, Table):
            if b.caption:
                out.append(b.caption.replace("**", ""))
            out += _text_table(b)
            out.append("")
    return "\n".join(out).strip("\n") + "\n"


def _text_table(t: Table) -> list[str]:
    cols = [str(c) for c in t.columns]
    rows = [[str(c) for c in r] for r in t.rows]
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
"""


def _inline(text: str) -> str:
    """Escape, then the little markdown the report uses: **bold** and `code`."""
    s = html.escape(text)
    parts = s.split("**")
    s = "".join(p if i % 2 == 0 else f"<b>{p}</b>" for i, p in enumerate(parts))
    parts = s.split("`")
    return "".join(p if i % 2 == 0 else f"<code>{p}</code>" for i, p in enumerate(parts))


def to_html(doc: list, fig_dir: Path, title: str = "ipcbench report") -> str:
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{html.escape(title)}</title>", f"<style>{_CSS}</style></head><body>"]
    for b in doc:
        if not b.files:
            continue
        if isinstance(b, Heading):
            out.append(f"<h{b.level}>{_inline(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            out.append(f"<p>{_inline(b.text)}</p>")
        elif isinstance(b, Table):
            if b.caption:
                out.append(f"<p>{_inline(b.caption)}</p>")
            num = b.numeric or [False] * len(b.columns)
            out.append("<table><thead><tr>" + "".join(f"<th>{html.escape(str(c))}</th>" for c in b.columns)
                       + "</tr></thead><tbody>")
            for r in b.rows:
                out.append("<tr>" + "".join(f'<td class="n">{html.escape(str(c))}</td>' if n else
                                            f"<td>{html.escape(str(c))}</td>" for c, n in zip(r, num)) + "</tr>")
            out.append("</tbody></table>")
        elif isinstance(b, Figure):
            data = base64.b64encode((fig_dir / b.file).read_bytes()).decode("ascii")
            out.append(f'<figure><img alt="{html.escape(b.title)}" src="data:image/png;base64,{data}">'
                       f"<figcaption>{html.escape(b.title)}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
