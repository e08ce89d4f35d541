"""A bar chart of spend per day as inline SVG, drawn on the server (no script, no asset).

    svg = spend_chart([(date(2026, 12, 1), 1_500_000), (date(2026, 12, 2), 0)])

Bars are micro GPU-hours per day, scaled to the largest day (an empty month
draws a flat axis); each bar carries a ``<title>`` with its day and amount, so
the figure reads without colour or hovering. Only presentation attributes are
used: the pages' Content-Security-Policy allows no inline style. Every text in
it is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from html import escape

from fairgate.core.money import Money

__all__ = ["spend_chart"]

_W, _H, _PAD, _AXIS = 640, 200, 8, 24


def spend_chart(days: Sequence[tuple[date, int]]) -> str:
    """The SVG markup for ``days`` (each a day and its spend in micro GPU-hours)."""
    top = max((micro for _, micro in days), default=0)
    width = (_W - 2 * _PAD) / max(1, len(days))
    plot = _H - _AXIS - _PAD
    bars = []
    for i, (day, micro) in enumerate(days):
        height = 0.0 if top == 0 else plot * micro / top
        x = _PAD + i * width
        y = _PAD + plot - height
        label = escape(f"{day.isoformat()}: {Money(micro)} GPU-hours")
        bars.append(
            f'<rect x="{x + 1:.1f}" y="{y:.1f}" width="{max(1.0, width - 2):.1f}" '
            f'height="{height:.1f}" fill="#2454a6"><title>{label}</title></rect>'
        )
    first = escape(days[0][0].isoformat()) if days else ""
    last = escape(days[-1][0].isoformat()) if days else ""
    peak = escape(f"peak {Money(top)} GPU-hours/day")
    return (
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" '
        f'role="img" aria-label="Spend per day, {first} to {last}">'
        f'<line x1="{_PAD}" y1="{_H - _AXIS}" x2="{_W - _PAD}" y2="{_H - _AXIS}" '
        f'stroke="#5b6576" stroke-width="1"/>'
        + "".join(bars)
        + f'<text x="{_PAD}" y="{_H - 6}" font-size="12" fill="#5b6576">{first}</text>'
        f'<text x="{_W - _PAD}" y="{_H - 6}" font-size="12" fill="#5b6576" '
        f'text-anchor="end">{last}</text>'
        f'<text x="{_W / 2}" y="{_H - 6}" font-size="12" fill="#5b6576" '
        f'text-anchor="middle">{peak}</text></svg>'
    )
