"""The report's HTML: one self-contained page (inline CSS and SVG, no external URL)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from fedrank import __version__

_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:70rem;margin:2rem auto;
padding:0 1rem;color:#222;line-height:1.45}
h1{font-size:1.6rem}h2{font-size:1.25rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.6rem 0}td,th{border:1px solid #ccc;padding:.25rem .6rem;
text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
.meta{color:#555;font-size:.9rem}.finding{background:#eef6ee;border-left:4px solid #2ca02c;
padding:.5rem .8rem}.caution{background:#fdf3e7;border-left:4px solid #ff7f0e;padding:.5rem .8rem}
svg{max-width:100%;height:auto}
"""


def fmt(value: Any, digits: int = 4) -> str:
    """A cell: ``-`` for missing, p-values and small numbers in ``g`` form, others fixed."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        if value != 0 and (abs(value) < 10 ** -(digits - 1) or abs(value) >= 1e6):
            return f"{value:.3g}"
        return f"{value:.{digits}f}"
    return escape(str(value))


def pvalue(p: float | None) -> str:
    """A p-value for people (below 1e-300 the normal approximations underflow)."""
    if p is None:
        return "-"
    return f"{p:.3g}" if p > 0 else "&lt; 1e-300"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """An HTML table; cells already strings are kept as written (escape them first)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{c if isinstance(c, str) else fmt(c)}</td>" for c in row) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def para(text: str, cls: str | None = None) -> str:
    """A paragraph of escaped ``text`` (with a CSS class: ``finding``, ``caution``, ``meta``)."""
    klass = f' class="{cls}"' if cls else ""
    return f"<p{klass}>{escape(text)}</p>"


def render_page(title: str, kind: str, source: str, blocks: Sequence[tuple[str, str]]) -> str:
    """The whole page: ``blocks`` are ``(heading, HTML)`` sections in order (an empty
    heading puts the HTML under the title)."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="meta">Report of <code>{escape(source)}</code> (kind: {escape(kind)}), '
        f"made by <code>fedrank report</code> (fedrank {escape(__version__)}).</p>",
    ]
    for heading, html in blocks:
        if heading:
            parts.append(f"<h2>{escape(heading)}</h2>")
        parts.append(html)
    parts.append("</body></html>")
    return "\n".join(parts)
