"""The spend chart: inline SVG, bars scaled to the largest day, no style, no script."""

from __future__ import annotations

import re
from datetime import date

from fairgate.web.chart import spend_chart


def _heights(svg: str) -> list[float]:
    return [float(h) for h in re.findall(r'<rect [^>]*height="([0-9.]+)"', svg)]


def test_bars_scale_to_the_largest_day() -> None:
    svg = spend_chart([(date(2026, 12, 1), 0), (date(2026, 12, 2), 500), (date(2026, 12, 3), 1000)])
    low, mid, top = _heights(svg)
    assert low == 0.0
    assert top > 0 and abs(mid - top / 2) < 0.2
    assert "2026-12-01" in svg and "2026-12-03" in svg
    assert "<title>2026-12-03: 0.001 GPU-hours</title>" in svg


def test_an_empty_month_draws_an_axis_and_no_bar_height() -> None:
    svg = spend_chart([(date(2026, 12, 1), 0)])
    assert _heights(svg) == [0.0]
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert spend_chart([]).startswith("<svg")


def test_no_style_attribute_and_no_script() -> None:
    svg = spend_chart([(date(2026, 12, d), d * 10) for d in range(1, 31)])
    assert "style=" not in svg and "<script" not in svg
    assert len(_heights(svg)) == 30
