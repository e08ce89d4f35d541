"""Charts drawn on the server as inline SVG: no script, no external asset.

    share_chart(points, now=t, window=3600.0)   # Markup: <svg …> running (line) vs share (dashed)

x runs over the last ``window`` seconds ending at ``now``; y from 0 to the
larger of 1.0 and the highest value, so a borrower above its whole pool's
capacity stays on the chart. Only numbers the server computed go into the
SVG, every label is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

from fairgate.admin.dashboard.history import Point

__all__ = ["share_chart"]

WIDTH, HEIGHT, PAD = 320, 80, 2


def share_chart(points: Sequence[Point], *, now: float, window: float, label: str = "") -> Markup:
    """An SVG of ``points``' running fraction (solid) against their share (dashed).

    With fewer than two points it says so in the picture instead of drawing lines.
    """
    top = max([1.0, *(max(p.running, p.share) for p in points)])
    title = escape(label)
    head = (
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
        f'height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg"><title>{title}</title>'
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#f6f6f6"/>'
    )
    if len(points) < 2:
        body = (
            f'<text x="8" y="{HEIGHT // 2}" font-size="12" fill="#666">collecting samples…</text>'
        )
        return Markup(head + body + "</svg>")  # noqa: S704 (numbers and the escaped title)

    def xy(at: float, value: float) -> str:
        x = PAD + (WIDTH - 2 * PAD) * max(0.0, 1 - (now - at) / window)
        y = HEIGHT - PAD - (HEIGHT - 2 * PAD) * (value / top)
        return f"{x:.1f},{y:.1f}"

    running = " ".join(xy(p.at, p.running) for p in points)
    share = " ".join(xy(p.at, p.share) for p in points)
    full = HEIGHT - PAD - (HEIGHT - 2 * PAD) * (1.0 / top)
    body = (
        f'<line x1="0" y1="{full:.1f}" x2="{WIDTH}" y2="{full:.1f}" stroke="#ccc"/>'
        f'<polyline class="share" points="{share}" fill="none" stroke="#888" '
        'stroke-dasharray="4 3" stroke-width="1.5"/>'
        f'<polyline class="running" points="{running}" fill="none" stroke="#1f6feb" '
        'stroke-width="2"/>'
    )
    return Markup(head + body + "</svg>")  # noqa: S704 (numbers and the escaped title)
