"""HTML for the web view: escaping, the page frame, tables and inline SVG charts.

Every value that reaches a page goes through ``e`` (thread ids, event text, SQL results:
all of it may be hostile); only ``Html`` (built here from escaped parts) is inserted as is.
Charts are drawn on the server as SVG with presentation attributes, so the pages need no
inline style or script and run under a strict Content-Security-Policy.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any
from urllib.parse import urlencode

NAV = (("/", "Threads"), ("/ui/search", "Search"), ("/ui/analytics", "Analytics"), ("/ui/memory", "Memory"))
PALETTE = ("#3b6fd4", "#d4763b", "#3ba55c", "#b53bd4", "#d43b5a", "#7a8a99", "#c9a227", "#2aa1a1")
CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")  # fmt: skip
"""No inline script or style, nothing from elsewhere: an escaping slip cannot run code."""


class Html(str):
    """Markup already escaped (made by the functions of this module); ``e`` passes it as is."""


def e(value: Any) -> str:
    """``value`` as text safe inside an element or a quoted attribute."""
    if isinstance(value, Html):
        return value
    return escape("" if value is None else str(value), quote=True)


def href(path: str, **params: Any) -> str:
    """A link to ``path`` with its query (empty parameters left out), escaped for an attribute."""
    query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
    return e(f"{path}{'&' if '?' in path else '?'}{query}" if query else path)


LOGOUT = '<form method="post" action="/ui/logout" class="logout"><button>log out</button></form>'
"""Every page's way to end its browser's session (a POST: a link could be followed by any page)."""


def page(title: str, body: str, active: str = "", script: bool = False) -> str:
    nav = "".join(f'<a href="{p}"{" class=on" if p == active else ""}>{name}</a>' for p, name in NAV)
    js = '<script src="/ui/static/app.js" defer></script>' if script else ""
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{e(title)} · agentlog</title>'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<link rel="icon" href="data:,"><link rel="stylesheet" href="/ui/static/style.css">{js}</head>'
            f'<body><header><b>agentlog</b><nav>{nav}</nav>{"" if title == "login" else LOGOUT}</header><main>{body}</main></body></html>')  # fmt: skip


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], cls: str = "", row_ids: Sequence[str] | None = None) -> Html:
    head = "".join(f"<th>{e(c)}</th>" for c in columns)
    body = []
    for i, row in enumerate(rows):
        rid = f' id="{e(row_ids[i])}"' if row_ids else ""
        body.append(f"<tr{rid}>" + "".join(f"<td>{e(v)}</td>" for v in row) + "</tr>")
    return Html(f'<table class="{e(cls)}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>')


def number(value: Any) -> float | None:
    """A finite number, or None (SQL results: ``bool`` and text are not plotted)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def _clock(v: float) -> str:
    """Epoch seconds as a UTC date and minute (a time axis's labels)."""
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(v))


W, H, PAD_L, PAD_B, PAD_T, PAD_R = 640, 240, 56, 28, 12, 12


def _axes(x0: float, x1: float, y0: float, y1: float, x_label: str, y_label: str, x_time: bool) -> str:
    bottom, right = H - PAD_B, W - PAD_R
    fx = _clock if x_time else _fmt
    return (f'<line x1="{PAD_L}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#889"/>'
            f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{bottom}" stroke="#889"/>'
            f'<text x="{PAD_L - 4}" y="{bottom}" text-anchor="end" font-size="10">{e(_fmt(y0))}</text>'
            f'<text x="{PAD_L - 4}" y="{PAD_T + 8}" text-anchor="end" font-size="10">{e(_fmt(y1))}</text>'
            f'<text x="{PAD_L}" y="{H - 8}" font-size="10">{e(fx(x0))}</text>'
            f'<text x="{right}" y="{H - 8}" text-anchor="end" font-size="10">{e(fx(x1))}</text>'
            f'<text x="{(PAD_L + right) / 2}" y="{H - 4}" text-anchor="middle" font-size="11">{e(x_label)}</text>'
            f'<text x="12" y="{(PAD_T + bottom) / 2}" font-size="11" transform="rotate(-90 12 {(PAD_T + bottom) / 2})" '
            f'text-anchor="middle">{e(y_label)}</text>')  # fmt: skip


def xy_chart(series: dict[str, list[tuple[float, float]]], x_label: str, y_label: str, cls: str = "xy",
             x_time: bool = False) -> Html:  # fmt: skip
    """Lines through points (one line a series), each point a ``circle`` carrying its
    values in ``data-x``/``data-y`` (what the browser test compares with the query's rows);
    ``x_time``: x is epoch seconds, labelled as UTC times."""
    points = [p for pts in series.values() for p in pts]
    if not points:
        return Html('<p class="empty">nothing to draw</p>')
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(0.0, min(ys)), max(ys)
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1)

    def at(x: float, y: float) -> tuple[float, float]:
        return (PAD_L + (x - x0) / (x1 - x0) * (W - PAD_L - PAD_R), H - PAD_B - (y - y0) / (y1 - y0) * (H - PAD_B - PAD_T))

    parts = [_axes(x0, x1, y0, y1, x_label, y_label, x_time)]
    legend = []
    for i, (name, pts) in enumerate(series.items()):
        color = PALETTE[i % len(PALETTE)]
        coords = [at(x, y) for x, y in sorted(pts)]
        if len(coords) > 1:
            path = " ".join(f"{cx:.1f},{cy:.1f}" for cx, cy in coords)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        for (x, y), (cx, cy) in zip(sorted(pts), coords):
            parts.append(f'<circle class="pt" cx="{cx:.1f}" cy="{cy:.1f}" r="3" fill="{color}" '
                         f'data-series="{e(name)}" data-x="{x!r}" data-y="{y!r}"><title>{e(name)}: '
                         f'{e(_clock(x) if x_time else _fmt(x))}, {e(_fmt(y))}</title></circle>')  # fmt: skip
        legend.append(f'<span class="key"><svg width="10" height="10"><rect width="10" height="10" fill="{color}"/>'
                      f'</svg>{e(name)}</span>')  # fmt: skip
    svg = f'<svg class="{e(cls)}" viewBox="0 0 {W} {H}" role="img">{"".join(parts)}</svg>'
    keys = f'<div class="legend">{"".join(legend)}</div>' if len(series) > 1 else ""
    return Html(f'<figure class="chart">{svg}{keys}</figure>')


def bar_chart(labels: Sequence[str], series: dict[str, Sequence[float | None]], unit: str = "") -> Html:
    """Horizontal bars, one group a label, one bar a series (a missing value draws none)."""
    if not labels:
        return Html('<p class="empty">nothing to draw</p>')
    top = max([v for vs in series.values() for v in vs if v is not None] + [0.0]) or 1.0
    row_h = 14 * len(series) + 8
    height = row_h * len(labels) + 8
    label_w, right = 160, W - 70
    parts = []
    for li, label in enumerate(labels):
        y = 4 + li * row_h
        parts.append(f'<text x="{label_w - 6}" y="{y + row_h / 2 + 2}" text-anchor="end" font-size="11">{e(label)}</text>')
        for si, (name, values) in enumerate(series.items()):
            v = values[li]
            if v is None:
                continue
            width = max(1.0, v / top * (right - label_w))
            by = y + si * 14
            parts.append(f'<rect class="bar" x="{label_w}" y="{by}" width="{width:.1f}" height="12" '
                         f'fill="{PALETTE[si % len(PALETTE)]}" data-label="{e(label)}" data-series="{e(name)}" '
                         f'data-value="{v!r}"><title>{e(label)} {e(name)}: {e(_fmt(v))}{e(unit)}</title></rect>'
                         f'<text x="{label_w + width + 4:.1f}" y="{by + 10}" font-size="10">{e(_fmt(v))}{e(unit)}</text>')  # fmt: skip
    legend = "".join(f'<span class="key"><svg width="10" height="10"><rect width="10" height="10" '
                     f'fill="{PALETTE[i % len(PALETTE)]}"/></svg>{e(n)}</span>' for i, n in enumerate(series))  # fmt: skip
    svg = f'<svg class="bars" viewBox="0 0 {W} {height}" role="img">{"".join(parts)}</svg>'
    return Html(f'<figure class="chart">{svg}<div class="legend">{legend}</div></figure>')


__all__ = ["CSP", "Html", "bar_chart", "e", "href", "number", "page", "table", "xy_chart"]
