"""``fairgate accounts``: real processes against a temporary SQLite store, sign-ups in between."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import orjson
import pytest

from cli.test_tenancy_cli import fairgate
from fairgate.accounts import SignInRefused, build_accounts
from fairgate.config.web_accounts import WebAccounts
from fairgate.core.clock import SystemClock
from fairgate.state import MemoryCounterStore
from fairgate.store import Store, upgrade
from fairgate.tenancy import Actor, Tenancy

PASSWORD = "correct horse battery"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        textwrap.dedent(
            """
            store: {url: "sqlite:///state/fairgate.db"}
            orgs:
              - {name: etabA, share: 1.0, teams: [lab-nlp]}
            models:
              - name: llama-8b
                upstreams: [{name: u, url: "http://127.0.0.1:9"}]
            """
        )
    )
    (tmp_path / "state").mkdir()
    return path


def _in_process(tmp_path: Path, work: str, email: str) -> None:
    """Sign up (``work`` = "sign_up") or sign in as the web pages would, on the same file."""

    async def main() -> None:
        store = Store(f"sqlite:///{tmp_path / 'state' / 'fairgate.db'}")
        await store.connect()
        try:
            await upgrade(store)
            tenancy = Tenancy(store)
            parts = build_accounts(
                WebAccounts(), store, tenancy, SystemClock(), state=MemoryCounterStore()
            )
            try:
                if work == "sign_up":
                    await parts.accounts.sign_up(email, PASSWORD)
                else:
                    await parts.accounts.sign_in(email, PASSWORD, network="192.0.2.1")
            finally:
                await parts.aclose()
        finally:
            await store.close()

    asyncio.run(main())


def _roles(tmp_path: Path, user: str) -> list[tuple[str, str | None]]:
    async def main() -> list[tuple[str, str | None]]:
        store = Store(f"sqlite:///{tmp_path / 'state' / 'fairgate.db'}")
        await store.connect()
        try:
            found = await Tenancy(store).roles.list(Actor.operator("t"), user=user)
            return [(b.role, b.scope) for b in found]
        finally:
            await store.close()

    return asyncio.run(main())


@pytest.mark.slow
def test_an_operator_approves_lists_suspends_and_deletes_accounts(
    config: Path, tmp_path: Path
) -> None:
    assert fairgate(config, "db", "upgrade").returncode == 0
    _in_process(tmp_path, "sign_up", "alice@example.org")
    _in_process(tmp_path, "sign_up", "bob@example.org")

    pending = fairgate(config, "accounts", "list", "--pending", "--json")
    assert pending.returncode == 0, pending.stderr
    listed = orjson.loads(pending.stdout)
    assert [(a["email"], a["state"]) for a in listed] == [
        ("alice@example.org", "pending"),
        ("bob@example.org", "pending"),
    ]
    assert "password" not in pending.stdout and "argon2" not in pending.stdout

    wrong_team = fairgate(config, "accounts", "approve", "alice@example.org", "--team", "nope")
    assert wrong_team.returncode == 1
    assert wrong_team.stderr.strip() == "fairgate: no team 'nope'"
    unknown = fairgate(config, "accounts", "approve", "carol@example.org", "--team", "lab-nlp")
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == "fairgate: no account for carol@example.org"
    bad_role = fairgate(
        config, "accounts", "approve", "alice@example.org", "--team", "lab-nlp", "--role", "x"
    )
    assert bad_role.returncode == 1 and len(bad_role.stderr.strip().splitlines()) == 1

    approved = fairgate(config, "accounts", "approve", "alice@example.org", "--team", "lab-nlp")
    assert approved.returncode == 0, approved.stderr
    assert "account approved" in approved.stdout and "active" in approved.stdout
    assert _roles(tmp_path, "alice@example.org") == [("member", "lab-nlp")]
    _in_process(tmp_path, "sign_in", "alice@example.org")

    table = fairgate(config, "accounts", "list")
    assert table.returncode == 0
    assert "alice@example.org" in table.stdout and "bob@example.org" in table.stdout
    only_pending = fairgate(config, "accounts", "list", "--pending")
    assert "alice@example.org" not in only_pending.stdout

    suspended = fairgate(config, "accounts", "suspend", "alice@example.org")
    assert suspended.returncode == 0 and "suspended" in suspended.stdout
    with pytest.raises(SignInRefused):
        _in_process(tmp_path, "sign_in", "alice@example.org")

    deleted = fairgate(config, "accounts", "delete", "bob@example.org")
    assert deleted.returncode == 0 and "bob@example.org" in deleted.stdout
    remaining = orjson.loads(fairgate(config, "accounts", "list", "--json").stdout)
    assert [a["email"] for a in remaining] == ["alice@example.org"]


def test_the_help_names_every_command() -> None:
    from typer.testing import CliRunner

    from fairgate.cli import app

    result = CliRunner().invoke(app, ["accounts", "--help"])
    assert result.exit_code == 0
    for command in ("approve", "list", "suspend", "delete"):
        assert command in result.output
