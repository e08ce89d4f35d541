"""``fairgate keys create --claim``: a link printed instead of the secret, real SQLite file."""

from __future__ import annotations

import asyncio
import re
import textwrap
from pathlib import Path

import orjson
import pytest
from sqlalchemy import select

from cli.test_tenancy_cli import fairgate
from fairgate.auth.secrets import looks_like_key, sha256
from fairgate.config import load_config
from fairgate.store.tables import claim_links, keys
from fairgate.tenancy import open_tenancy

PUBLIC = "https://llm.example.org/gw"
_LINK = re.compile(r"claim link: (https://llm\.example\.org/gw/claim/([A-Za-z0-9_-]{43}))\n")


def _config(tmp_path: Path, public_url: str | None) -> Path:
    path = tmp_path / "gateway.yaml"
    line = f"public_url: {public_url!r}\n" if public_url else ""
    path.write_text(
        line
        + textwrap.dedent(
            """
            store: {url: "sqlite:///fairgate.db"}
            orgs:
              - {name: etabA, share: 1.0, teams: [lab-nlp]}
            models:
              - name: llama-8b
                upstreams: [{name: u, url: "http://127.0.0.1:9"}]
            """
        )
    )
    return path


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return _config(tmp_path, PUBLIC + "/")


def _redeem(config: Path, token: str) -> str | None:
    async def go() -> str | None:
        async with open_tenancy(load_config(config, env={})) as tenancy:
            return await tenancy.claims.redeem(token)

    return asyncio.run(go())


def _stored(config: Path) -> tuple[list[bytes], list[dict[str, object]]]:
    async def go() -> tuple[list[bytes], list[dict[str, object]]]:
        async with open_tenancy(load_config(config, env={})) as tenancy, tenancy.store.read() as c:
            digests = [bytes(r[0]) for r in await c.execute(select(keys.c.secret_sha256))]
            links = [dict(r) for r in (await c.execute(select(claim_links))).mappings()]
            return digests, links

    return asyncio.run(go())


def test_claim_prints_a_link_and_no_secret_and_the_link_opens_once(config: Path) -> None:
    made = fairgate(config, "keys", "create", "--team", "lab-nlp", "--name", "ann", "--claim")
    assert made.returncode == 0, made.stderr
    found = _LINK.search(made.stdout)
    assert found is not None, made.stdout
    assert "opens once" in made.stdout and "secret:" not in made.stdout
    assert not any(looks_like_key(word) for word in re.split(r"[\s│|]+", made.stdout))
    secret = _redeem(config, found.group(2))
    assert secret is not None and looks_like_key(secret)
    digests, links = _stored(config)
    assert digests == [sha256(secret)]
    assert links[0]["claimed_at"] is not None and links[0]["sealed"] is None
    assert _redeem(config, found.group(2)) is None


def test_claim_with_json_gives_the_link_its_expiry_and_the_key_lifetime(config: Path) -> None:
    made = fairgate(
        config,
        "keys",
        "create",
        "--team",
        "lab-nlp",
        "--claim",
        "--expires",
        "2h",
        "--key-expires",
        "30d",
        "--json",
    )
    assert made.returncode == 0, made.stderr
    (key,) = orjson.loads(made.stdout)
    assert "secret" not in key and "token" not in key
    assert key["claim_url"].startswith(PUBLIC + "/claim/")
    assert key["claim_expires_at"] < key["expires_at"]  # the link 2h, the key 30 days
    _, links = _stored(config)
    assert len(links) == 1 and links[0]["key_id"] == key["id"]


def test_claim_without_public_url_is_refused_and_creates_no_key(tmp_path: Path) -> None:
    config = _config(tmp_path, None)
    refused = fairgate(config, "keys", "create", "--team", "lab-nlp", "--claim")
    assert refused.returncode == 1
    assert refused.stderr.startswith("fairgate: claim links need public_url in the configuration")
    assert refused.stderr.count("\n") == 1
    digests, links = _stored(config)
    assert digests == [] and links == []


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("--claim", "--expires", "31d"), "a claim link's lifetime must be in the future"),
        (("--claim", "--expires", "soon"), "--expires: not a duration"),
        (("--key-expires", "30d"), "--key-expires goes with --claim"),
    ],
)
def test_bad_claim_options_are_one_line_and_exit_status_1(
    config: Path, args: tuple[str, ...], reason: str
) -> None:
    result = fairgate(config, "keys", "create", "--team", "lab-nlp", *args)
    assert result.returncode == 1
    assert result.stderr.startswith(f"fairgate: {reason}"), result.stderr
    assert _stored(config)[0] == []
