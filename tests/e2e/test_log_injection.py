"""A client cannot forge a log line: the plain format escapes what the client sent.

A real gateway process logs in the plain format to a file; requests carry a forged
record after a line break in every spelling a reader may split on (CR LF, NEL,
U+2028, U+2029), in the path, the model and a header. Every line of the file as
Python's ``str.splitlines`` reads it (the strictest reader: it splits on all of
them) must still start with the gateway's own timestamp, and the forged text must
be there, escaped, in the line of the request that carried it.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import httpx

from e2e.conftest import AUTH, StartSim, model, write_config
from fairgate.server.process import GatewayProcess

FORGED = "2026-01-01 00:00:00 ERROR forged"
BREAKS = {"\r\n": "\\r\\n", "\x85": "\\x85", "\u2028": "\\u2028", "\u2029": "\\u2029"}
RECORD = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def test_a_forged_record_in_path_model_or_header_stays_inside_its_own_line(
    start_sim: StartSim, tmp_path: Path
) -> None:
    sim = start_sim("--speed", "0")
    config = write_config(tmp_path, [model("m", sim)], logging={"level": "debug"})
    log = tmp_path / "gateway.log"
    with GatewayProcess(config, stderr=log) as gateway, httpx.Client(base_url=gateway.url) as c:
        for n, brk in enumerate(BREAKS):
            path = urllib.parse.quote(f"/v1/forged-{n}{brk}{FORGED}")
            assert c.get(path, headers=AUTH).status_code == 404
            body = {"model": f"m{brk}{FORGED}", "messages": [{"role": "user", "content": "x"}]}
            assert c.post("/v1/chat/completions", headers=AUTH, json=body).status_code == 404
        header = f"a\x85{FORGED}".encode("latin-1")  # obs-text: the only break a header can carry
        tagged: dict[str, str | bytes] = {**AUTH, "x-fairgate-tags": header}
        answer = c.post(
            "/v1/chat/completions",
            headers=tagged,
            json={"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1},
        )
        assert answer.status_code == 400
    text = log.read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines, "the gateway logged nothing"
    forged = [line for line in lines if line.lstrip().startswith(FORGED)]
    assert forged == []
    strays = [line for line in lines if not RECORD.match(line) and not line.startswith("    ")]
    assert strays == []
    for n, escaped in enumerate(BREAKS.values()):
        assert f"/v1/forged-{n}{escaped}{FORGED}" in text  # the path reached the log, escaped
