"""Log formatters: a client-controlled value cannot start a line of its own."""

from __future__ import annotations

import logging
import sys

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairgate.observability.logging import JsonFormatter, PlainFormatter, escape_controls

FORGED = "2026-01-01 00:00:00 ERROR forged"


def _record(msg: str, *args: object, exc_info: object = None) -> logging.LogRecord:
    return logging.LogRecord("fairgate.request", logging.INFO, __file__, 1, msg, args, exc_info)  # type: ignore[arg-type]


def test_every_kind_of_control_character_is_escaped_readably() -> None:
    text = "a\nb\rc\td\x00e\x1bf\x7fg\x85h\x9fi\u2028j\u2029k"
    assert escape_controls(text) == ("a\\nb\\rc\\td\\x00e\\x1bf\\x7fg\\x85h\\x9fi\\u2028j\\u2029k")


def test_a_line_without_control_characters_is_left_as_it_is() -> None:
    text = "request 3f9a POST /v1/chat/completions ended refused (é, ü, 模型) status=404"
    assert escape_controls(text) is text


@pytest.mark.fuzz
@given(st.text())
def test_a_plain_record_is_always_one_line_whatever_its_arguments(value: str) -> None:
    line = PlainFormatter().format(_record("path %s model %s", value, value))
    assert len(line.splitlines()) == 1


def test_the_message_text_itself_is_escaped_not_only_its_arguments() -> None:
    """Call sites that format before logging (f-strings, exception texts) are covered too."""
    line = PlainFormatter().format(_record(f"unknown model {'m' + chr(13) + chr(10) + FORGED}"))
    assert line.splitlines() == [line]
    assert line.endswith("unknown model m\\r\\n" + FORGED)


def test_a_traceback_keeps_its_lines_but_none_can_pass_for_a_record() -> None:
    try:
        raise ValueError(f"bad model\n{FORGED}\u2028{FORGED}")
    except ValueError:
        info = sys.exc_info()
    text = PlainFormatter().format(_record("request failed", exc_info=info))
    first, *rest = text.splitlines()
    assert first.endswith("request failed")
    assert rest and all(line.startswith("    ") for line in rest)
    assert any(FORGED in line for line in rest)


def test_json_lines_escape_line_breaks_and_unicode_separators() -> None:
    value = f"m\r\n{FORGED}\x85{FORGED}\u2028{FORGED}\u2029{FORGED}"
    line = JsonFormatter().format(_record("model %s", value))
    assert line.splitlines() == [line]
    assert orjson.loads(line)["message"] == f"model {value}"
