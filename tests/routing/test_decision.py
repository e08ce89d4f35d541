"""The decision's rationale in its two output forms."""

from __future__ import annotations

import json

from fairgate.routing import Decision, FilterDrop

DECISION = Decision(
    strategy="chat",
    model="llama",
    replica="a",
    drops=(FilterDrop("healthy", ("sick",)), FilterDrop("kv-ceiling", ())),
    scores={"queue-depth": {"a": 1.0, "b": 0.5}, "kv-usage": {"a": 0.1, "b": 0.9}},
    totals={"a": 0.7, "b": 0.6333},
    cursor=0,
)


def test_the_log_line_names_the_choice_the_drops_and_every_score() -> None:
    assert DECISION.log_line() == (
        "route strategy=chat model=llama replica=a dropped=[healthy:sick] "
        "a=0.700(queue-depth=1.000 kv-usage=0.100) b=0.633(queue-depth=0.500 kv-usage=0.900)"
    )


def test_the_dict_form_is_json_ready() -> None:
    data = json.loads(json.dumps(DECISION.as_dict()))
    assert data["drops"] == {"healthy": ["sick"], "kv-ceiling": []}
    assert data["scores"]["kv-usage"]["b"] == 0.9
    assert data["replica"] == "a"


def test_dropped_by() -> None:
    assert DECISION.dropped_by("healthy") == ("sick",)
    assert DECISION.dropped_by("kv-ceiling") == ()
    assert DECISION.dropped_by("never-ran") == ()
