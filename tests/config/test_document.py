"""YAML parsing: positions, refused YAML features, and the core-schema scalars."""

from __future__ import annotations

import textwrap

import pytest

from fairgate.config.document import Document, dotted, parse_document, plain_scalar


def parse(text: str) -> Document:
    return parse_document(textwrap.dedent(text).lstrip("\n"), "f.yaml")


def messages(doc: Document) -> list[str]:
    return [str(d) for d in doc.diagnostics]


def test_positions_of_keys_and_values_are_one_based() -> None:
    doc = parse(
        """
        listen:
          port: 8080
        models:
          - name: m
            aliases: [a, b]
        """
    )
    assert doc.tree == {"listen": {"port": 8080}, "models": [{"name": "m", "aliases": ["a", "b"]}]}
    assert doc.key_mark(("listen", "port"))[1:] == (2, 3)
    assert doc.value_mark(("listen", "port"))[1:] == (2, 9)
    assert doc.value_mark(("models", 0))[1:] == (4, 5)
    assert doc.value_mark(("models", 0, "aliases", 1))[1:] == (5, 18)


def test_an_unknown_location_falls_back_to_the_nearest_enclosing_value() -> None:
    doc = parse("limits:\n  max_n: 3\n")
    assert doc.value_mark(("limits", "idle_timeout"))[1:] == (2, 3)
    assert doc.value_mark(("nowhere", 3))[1:] == (1, 1)


def test_duplicate_key_is_refused_with_both_positions_and_the_first_value_kept() -> None:
    doc = parse(
        """
        proxy:
          retries: 1
          retries: 5
        """
    )
    assert messages(doc) == ["f.yaml:3:3: duplicate key 'retries' (first defined at 2:3)"]
    assert doc.tree == {"proxy": {"retries": 1}}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: !!python/object:os.system {}\n", "f.yaml:1:4: YAML tag '!!python/object:os.system'"),
        ("a: !!str 5\n", "f.yaml:1:4: YAML tag '!!str' is not allowed"),
        ("a: !secret x\n", "f.yaml:1:4: YAML tag '!secret' is not allowed"),
        ("a:\n  - !!binary aGk=\n", "f.yaml:2:5: YAML tag '!!binary' is not allowed"),
    ],
)
def test_tags_are_refused_at_their_position(text: str, expected: str) -> None:
    found = messages(parse(text))
    assert len(found) == 1
    assert found[0].startswith(expected)


def test_anchors_aliases_and_merge_keys_are_refused() -> None:
    doc = parse(
        """
        base: &common {retries: 1}
        proxy: *common
        health:
          <<: {interval: 5s}
        """
    )
    assert messages(doc) == [
        "f.yaml:1:7: YAML anchor '&common' is not supported: write the value out",
        "f.yaml:2:8: YAML alias '*common' is not supported: write the value out",
        "f.yaml:4:3: YAML merge keys ('<<') are not supported: write the keys out",
    ]


def test_a_quoted_double_angle_key_is_an_ordinary_key() -> None:
    doc = parse("'<<': 1\n")
    assert doc.diagnostics == []
    assert doc.tree == {"<<": 1}


def test_complex_keys_and_a_second_document_are_refused() -> None:
    doc = parse("? [a, b]\n: 1\nc: 2\n---\nd: 3\n")
    assert messages(doc) == [
        "f.yaml:1:3: a mapping key must be a plain name, not a list or a mapping",
        "f.yaml:4:1: only one YAML document is allowed in the file",
    ]
    assert doc.tree == {"c": 2}


def test_syntax_error_is_reported_with_its_position() -> None:
    doc = parse("listen: {port: 1\nproxy: {}\n")
    [diagnostic] = doc.diagnostics
    assert str(diagnostic).startswith("f.yaml:2:6: invalid YAML:")


def test_deep_nesting_is_refused_without_recursing() -> None:
    doc = parse("a: " + "[" * 200 + "]" * 200 + "\n")
    assert any("nested deeper than" in m for m in messages(doc))


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("~", None),
        ("", None),
        ("null", None),
        ("true", True),
        ("FALSE", False),
        ("yes", "yes"),  # YAML 1.1 booleans are strings under the 1.2 core schema
        ("off", "off"),
        ("8080", 8080),
        ("-3", -3),
        ("0o17", 15),
        ("0x1F", 31),
        ("1.5", 1.5),
        ("1e3", 1000.0),
        ("2024-01-01", "2024-01-01"),  # no timestamps
        ("1_000", "1_000"),
        ("30s", "30s"),
        ("${HOME}", "${HOME}"),  # no interpolation
    ],
)
def test_plain_scalars_follow_the_yaml_1_2_core_schema(text: str, value: object) -> None:
    assert plain_scalar(text) == value
    assert type(plain_scalar(text)) is type(value)


def test_infinities_and_nan_are_floats_for_the_schema_to_refuse() -> None:
    assert plain_scalar("-.inf") == float("-inf")
    assert plain_scalar(".nan") != plain_scalar(".nan")


def test_quoted_and_block_scalars_stay_strings() -> None:
    doc = parse("a: '8080'\nb: \"true\"\nc: |\n  line\n")
    assert doc.tree == {"a": "8080", "b": "true", "c": "line\n"}


def test_dotted_renders_locations_as_written_in_messages() -> None:
    assert dotted(("models", 0, "upstreams", 1, "url")) == "models[0].upstreams[1].url"
    assert dotted(()) == ""
