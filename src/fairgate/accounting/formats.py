"""A spend report as text: ``json``, ``csv`` or ``parsable2`` (like ``sreport --parsable2``).

Every format has the same columns: the group dimensions, then ``requests``,
``prompt_tokens``, ``completion_tokens``, ``cached_tokens``, ``gpu_hours`` and
``estimated_requests``. GPU-hours are printed with six decimals from the
integer micro-units, never through a float, so adding up a column gives the
stored total to the last digit.

``parsable2`` is Slurm's: one header line of column names, then one line per
row, fields separated by ``|`` with no ``|`` at the end, an unset value empty.
Slurm prints values as they are; a ``|`` or a line break inside a value (a tag
or a model name may hold one) is printed as ``_`` here, so every line splits
into the same number of fields. ``csv`` quotes such values instead; lines end
with ``\\n`` in both. A group value of ``csv`` that a spreadsheet would run as a
formula (it starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return: a
tag is any text its team admin chose) is written after a ``'``, which spreadsheets
show as text; the other formats print it as it is.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import orjson

from fairgate.accounting.reports import SpendReport
from fairgate.core.errors import BadRequest
from fairgate.core.money import MICRO
from fairgate.store.usage_records import SpendRow

__all__ = [
    "FORMATS",
    "MEDIA_TYPES",
    "check_format",
    "gpu_hours",
    "render",
    "to_csv",
    "to_json",
    "to_parsable2",
]

_SUMS = (
    "requests",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "gpu_hours",
    "estimated_requests",
)


def gpu_hours(micro: int) -> str:
    """Micro GPU-hours as GPU-hours with six decimals: ``960`` → ``"0.000960"``."""
    sign = "-" if micro < 0 else ""
    whole, fraction = divmod(abs(micro), MICRO)
    return f"{sign}{whole}.{fraction:06d}"


def _sums(row: SpendRow) -> list[Any]:
    return [
        row.requests,
        row.prompt_tokens,
        row.completion_tokens,
        row.cached_tokens,
        gpu_hours(row.cost_micro),
        row.estimated,
    ]


def _header(report: SpendReport) -> list[str]:
    return [*report.group_by, *_SUMS]


def _json_row(names: tuple[str, ...], row: SpendRow) -> dict[str, Any]:
    out: dict[str, Any] = dict(zip(names, row.groups, strict=True))
    out.update(zip(_SUMS, _sums(row), strict=True))
    out["cost_micro"] = row.cost_micro
    return out


def _utc(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def to_json(report: SpendReport) -> str:
    """``{"from", "to", "group_by", "data": [rows], "total"}``; ``gpu_hours`` is a string
    with six decimals and ``cost_micro`` the same amount as an exact integer."""
    body = {
        "from": _utc(report.start),
        "to": _utc(report.end),
        "group_by": list(report.group_by),
        "data": [_json_row(report.group_by, row) for row in report.rows],
        "total": _json_row((), report.total),
    }
    return orjson.dumps(body).decode()


def to_csv(report: SpendReport) -> str:
    """A header line, then one line per row (RFC 4180 quoting, ``\\n`` line ends)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(_header(report))
    for row in report.rows:
        writer.writerow([*(_cell(g) for g in row.groups), *_sums(row)])
    return out.getvalue()


_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: object) -> str:
    """A group value as a CSV cell no spreadsheet runs as a formula (the module text)."""
    if value is None:
        return ""
    text = str(value)
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def _field(value: object) -> str:
    if value is None:
        return ""
    return str(value).replace("|", "_").replace("\r", "_").replace("\n", "_")


def to_parsable2(report: SpendReport) -> str:
    """Slurm's ``--parsable2``: ``|`` between fields, none at the end, a header line first."""
    lines = ["|".join(_header(report))]
    for row in report.rows:
        lines.append("|".join(_field(v) for v in (*row.groups, *_sums(row))))
    return "\n".join(lines) + "\n"


FORMATS: Mapping[str, Callable[[SpendReport], str]] = {
    "json": to_json,
    "csv": to_csv,
    "parsable2": to_parsable2,
}
"""Each format's name → its renderer."""

MEDIA_TYPES: Mapping[str, str] = {
    "json": "application/json",
    "csv": "text/csv; charset=utf-8",
    "parsable2": "text/plain; charset=utf-8",
}


def check_format(name: str) -> str:
    """``name`` if it names a format; BadRequest otherwise (before any query runs)."""
    if name not in FORMATS:
        raise BadRequest(
            f"format: unknown {name[:40]!r}; use one of {', '.join(FORMATS)}",
            code="invalid_format",
        )
    return name


def render(report: SpendReport, fmt: str) -> str:
    """``report`` in the format named ``fmt``; BadRequest for an unknown name."""
    return FORMATS[check_format(fmt)](report)
