"""The record of received requests: a bounded ring, raw bodies, the priority decided."""

from __future__ import annotations

import base64

import httpx
import pytest

from fairgate.sim.process import SimProcess
from fairgate.sim.record import RecordedRequest, Recorder


def _entry(path: str, body: bytes = b"") -> RecordedRequest:
    return RecordedRequest("POST", path, b"a=1", [(b"x-k", b"v")], body, 1.5)


def test_the_ring_keeps_the_newest_n() -> None:
    ring = Recorder(3)
    for i in range(5):
        ring.add(_entry(f"/p{i}"))
    assert [e["path"] for e in ring.entries()] == ["/p2", "/p3", "/p4"]
    assert [e["path"] for e in ring.entries(limit=1)] == ["/p4"]
    assert ring.entries(limit=0) == []
    assert [e["path"] for e in ring.entries(path="/p3")] == ["/p3"]
    ring.clear()
    assert ring.entries() == []


def test_size_zero_records_nothing() -> None:
    ring = Recorder(0)
    ring.add(_entry("/p"))
    assert ring.entries() == []


def test_bodies_are_text_when_utf8_and_base64_otherwise() -> None:
    text = _entry("/t", "héllo".encode()).to_json()
    assert (text["body"], text["body_encoding"]) == ("héllo", "text")
    raw = _entry("/b", b"\xff\x00").to_json()
    assert raw["body_encoding"] == "base64" and base64.b64decode(raw["body"]) == b"\xff\x00"
    assert text["headers"] == [["x-k", "v"]] and text["query"] == "a=1"


@pytest.mark.slow
def test_the_simulator_records_what_it_received() -> None:
    with SimProcess("--record", "3", "--speed", "0") as sim, httpx.Client(base_url=sim.url) as http:
        http.get("/metrics")
        http.get("/health")
        http.post(
            "/v1/chat/completions?trace=1",
            json={"model": "sim-model", "messages": [{"role": "user", "content": "hi"}]},
            headers={"X-Vllm-Priority": "4", "X-Custom": "yes"},
        )
        http.get("/slots")  # not served by the vLLM personality, still recorded
        got = sim.requests()
        assert [(e["method"], e["path"]) for e in got] == [
            ("POST", "/v1/chat/completions"),
            ("GET", "/slots"),
        ]
        chat = got[0]
        assert chat["query"] == "trace=1"
        assert ["x-custom", "yes"] in chat["headers"]
        assert '"content":"hi"' in chat["body"] and chat["priority"] == 4
        assert got[1]["priority"] is None
        for _ in range(4):
            http.get("/v1/models")
        assert [e["path"] for e in sim.requests()] == ["/v1/models"] * 3
        assert sim.requests(path="/v1/chat/completions") == []
        sim.reset()
        assert sim.requests() == []
