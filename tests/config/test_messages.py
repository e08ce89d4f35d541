"""Human phrasing of schema errors: suggestions, choices, values shown briefly."""

from __future__ import annotations

from fairgate.config.messages import suggestion

from .conftest import MINIMAL, Problems


def test_suggestion_names_the_closest_choice_only_when_close() -> None:
    assert suggestion("retires", ["retries", "shutdown_grace"]) == " (did you mean 'retries'?)"
    assert suggestion("zzz", ["retries"]) == ""


def test_unknown_keys_suggest_the_closest_key_of_their_own_section(problems: Problems) -> None:
    found = problems(
        "listn: {port: 1}\nlimits: {idle_timout: 5s}\n"
        "models:\n  - name: m\n    upstreams: [{name: u, url: 'http://h', wieght: 2}]\n"
    )
    assert found == [
        "1:1: unknown key 'listn' (did you mean 'listen'?)",
        "2:10: unknown key 'idle_timout' in 'limits' (did you mean 'idle_timeout'?)",
        "5:44: unknown key 'wieght' in 'models[0].upstreams[0]' (did you mean 'weight'?)",
    ]


def test_long_values_are_cut_in_messages(problems: Problems) -> None:
    [found] = problems(f"listen: {{port: {'x' * 200}}}\n" + MINIMAL)
    assert found.endswith("got '" + "x" * 39 + "…'")


def test_unknown_key_under_a_wrong_typed_section_still_reads_well(problems: Problems) -> None:
    assert problems("limits: 5\n" + MINIMAL) == ["1:9: limits: expected a mapping, got 5"]
