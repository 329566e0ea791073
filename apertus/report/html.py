"""Self-contained HTML pages of tables for the Snakemake report (shown there in a frame).

No scripts and no external files: a page is one HTML document with its own small stylesheet,
so it renders the same in the report, opened alone, or in a release folder.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

STYLE = """
body { font-family: system-ui, sans-serif; font-size: 14px; margin: 1em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; }
th { background: #f0f0f0; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
p.note { color: #555; max-width: 60em; }
"""


@dataclass
class Table:
    """One table: a heading, column names, rows of cells (numbers are right-aligned)."""

    title: str
    columns: Sequence[str]
    rows: list[Sequence[Any]] = field(default_factory=list)
    note: str | None = None


def format_cell(value: Any) -> str:
    """Integers with thousands separators, floats to 4 significant digits, None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def render_table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in table.columns)
    body = []
    for row in table.rows:
        if len(row) != len(table.columns):
            raise ValueError(
                f"table {table.title!r}: a row of {len(row)} cells, {len(table.columns)} columns"
            )
        cells = "".join(
            f'<td class="num">{format_cell(v)}</td>'
            if isinstance(v, int | float) and not isinstance(v, bool)
            else f"<td>{html.escape(format_cell(v))}</td>"
            for v in row
        )
        body.append(f"<tr>{cells}</tr>")
    parts = [f"<h2>{html.escape(table.title)}</h2>"]
    if table.note:
        parts.append(f'<p class="note">{html.escape(table.note)}</p>')
    if table.rows:
        parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")
    else:
        parts.append('<p class="note">(nothing recorded)</p>')
    return "\n".join(parts)


def render_page(title: str, tables: Iterable[Table], intro: str | None = None) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    if intro:
        parts.append(f'<p class="note">{html.escape(intro)}</p>')
    parts += [render_table(t) for t in tables]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
