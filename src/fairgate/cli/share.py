"""``fairgate share``: the running gateway's fair-share tree, like Slurm's ``sshare -l``.

The live counts (requests in flight, this gateway's borrowers) exist only in the
running gateway, so the command reads ``GET /admin/fairshare`` from its admin
listener rather than the state back end. ``-c FILE`` gives the listener's
address (``admin_listen``) and the master key (``master_key_file``); ``--url``
and ``--token-file`` override them (an admin token ``fga-…`` sees what its
roles allow: an organisation admin only its organisations).

    $ fairgate share -c gateway.yaml --pool p
    fair share at 2026-12-01T16:43:06Z, usage half-life 3600 s
    └── pool p  capacity 4
        ├── B  share 0.5  reserved 2  in flight 2  here: 2 within, 1 borrowing  usage 0  level inf  rank 0
        └── A  share 0.5  reserved 2  in flight 2  here: 2 within, 4 borrowing  usage 0.004998  level 0.5  rank 1
"""  # noqa: E501

from __future__ import annotations

import http.client
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fairgate.cli.options import ConfigOption, fail, load_or_exit

if TYPE_CHECKING:
    from rich.tree import Tree

__all__ = ["HELP", "render_tree", "share"]

HELP = (
    "Show the running gateway's fair-share tree: shares, reservations, in flight, "
    "decayed usage, level and rank per pool and organisation (like sshare -l)."
)

TIMEOUT = 10.0
"""Seconds to wait for the admin listener's answer."""


def share(
    pool: Annotated[
        str | None, typer.Option("--pool", help="Only this pool (default: every pool).")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the admin API's JSON body as it is.")
    ] = False,
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            help="The admin listener, e.g. http://127.0.0.1:8081 "
            "(default: admin_listen of the configuration).",
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            help="A file holding an admin token or the master key "
            "(default: master_key_file of the configuration).",
            dir_okay=False,
        ),
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Read GET /admin/fairshare from the running gateway and print it as a tree.

    `in flight` counts the organisation's within-share requests of every gateway
    sharing the state back end; `here` is this gateway's own requests, within share
    and borrowing (borrowers hold nothing in the back end). `level` is
    LF = share / usage (inf without usage); rank 0 borrows first.
    """
    base, token = _target(url, token_file, config)
    if urllib.parse.urlsplit(base).scheme not in ("http", "https"):
        raise fail(f"--url must be an http:// or https:// address, got {base}")
    query = "" if pool is None else "?" + urllib.parse.urlencode({"pool": pool})
    body = _get(base, "/admin/fairshare" + query, token)
    if as_json:
        sys.stdout.write(json.dumps(body, indent=2) + "\n")
        return
    from rich.console import Console

    width = None if sys.stdout.isatty() else 200  # a pipe gets whole lines
    Console(width=width, highlight=False).print(render_tree(body))


def _target(url: str | None, token_file: Path | None, config: Path | None) -> tuple[str, str]:
    """The admin listener's base URL and the bearer token, from the flags or the config."""
    from fairgate.config import ConfigError

    loaded = load_or_exit(config) if url is None or token_file is None else None
    if url is None:
        assert loaded is not None
        host, port = loaded.admin_listen.host, loaded.admin_listen.port
        if port == 0:
            raise fail("admin_listen.port is 0 (any free port): pass the address with --url")
        tls = loaded.admin_listen.tls
        if tls is not None and tls.client_ca_file is not None:
            raise fail(
                "the admin listener requires client certificates (admin_listen.tls."
                "client_ca_file), which fairgate share does not present"
            )
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)  # noqa: S104
        # A private CA is trusted through SSL_CERT_FILE, as for any OpenSSL client.
        scheme = "http" if tls is None else "https"
        url = f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise fail(f"cannot read the token file {token_file}: {exc}") from None
        if not token:
            raise fail(f"the token file {token_file} is empty")
        if not (token.isascii() and token.isprintable()):
            raise fail(f"the token file {token_file} does not hold a token (one line of ASCII)")
        return url, token
    assert loaded is not None
    if loaded.master_key_file is None:
        raise fail("no admin token: pass --token-file or set master_key_file in the configuration")
    try:
        return url, loaded.master_key_file.read()
    except ConfigError as error:
        raise fail(error.diagnostics[0].message) from None


def _get(base: str, path: str, token: str) -> dict[str, Any]:
    request = urllib.request.Request(  # noqa: S310 - the caller checked the scheme
        base.rstrip("/") + path,
        headers={"authorization": f"Bearer {token}", "accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:  # noqa: S310
            raw = answer.read()
    except urllib.error.HTTPError as error:
        raise fail(f"the gateway answered {error.code}: {_message(error.read())}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
        reason = getattr(error, "reason", error)
        raise fail(f"cannot reach the admin listener at {base}: {reason}") from None
    try:
        body = json.loads(raw)
    except ValueError:
        raise fail("the gateway's answer is not JSON") from None
    if not isinstance(body, dict) or body.get("object") != "fairshare":
        raise fail("the gateway's answer is not a fair-share report")
    return body


def _message(raw: bytes) -> str:
    """The error envelope's message, or the start of the body."""
    try:
        message = json.loads(raw)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return raw[:200].decode("utf-8", "replace").strip() or "no message"
    return str(message)


def render_tree(body: dict[str, Any]) -> Tree:
    """The report of ``GET /admin/fairshare`` as a Rich tree: pools, organisations, teams.

    >>> from rich.console import Console
    >>> console = Console(width=200, color_system=None)
    >>> report = {"at": 0, "half_life_seconds": 60, "pools": [{"pool": "p", "capacity": 4,
    ...     "orgs": [{"org": "A", "share": 0.5, "reservation": 2, "within_share_in_flight": 1,
    ...               "usage": 0.0, "level": None, "rank": 0,
    ...               "this_gateway": {"within_share_in_flight": 1, "borrowing_in_flight": 0}}]}]}
    >>> console.print(render_tree(report))
    fair share at 1970-01-01T00:00:00Z, usage half-life 60 s
    └── pool p  capacity 4
        └── A  share 0.5  reserved 2  in flight 1  here: 1 within, 0 borrowing  usage 0  level inf  rank 0
    """  # noqa: E501
    from rich.markup import escape
    from rich.tree import Tree

    at = datetime.fromtimestamp(float(body.get("at", 0)), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    root = Tree(f"fair share at {at}, usage half-life {_num(body.get('half_life_seconds'))} s")
    for pool in body.get("pools", []):
        capacity = f"capacity {_num(pool.get('capacity'))}"
        source = pool.get("capacity_source")
        if source is not None:
            capacity += f" (source: {escape(str(source))}"
            learned = pool.get("capacity_learned")
            if isinstance(learned, dict):
                capacity += f", {_learned(learned)})"
            else:
                capacity += f", learned: {_num(learned)})" if learned is not None else ")"
        branch = root.add(f"pool {escape(str(pool.get('pool')))}  {capacity}")
        for org in pool.get("orgs", []):
            node = branch.add(_row(org, "org"))
            for team in org.get("teams") or []:
                node.add(_row(team, "team"))
    return root


def _row(row: dict[str, Any], name: str) -> str:
    from rich.markup import escape

    parts = [
        escape(str(row.get(name))),
        f"share {_num(row.get('share'))}",
        f"reserved {_num(row.get('reservation'))}",
        f"in flight {_num(row.get('within_share_in_flight'))}",
    ]
    here = row.get("this_gateway")
    if isinstance(here, dict):
        parts.append(
            f"here: {_num(here.get('within_share_in_flight'))} within, "
            f"{_num(here.get('borrowing_in_flight'))} borrowing"
        )
    level = row.get("level")
    parts += [
        f"usage {_num(row.get('usage'))}",
        f"level {'inf' if level is None else _num(level)}",
        f"rank {_num(row.get('rank'))}",
    ]
    return "  ".join(parts)


def _learned(learned: dict[str, Any]) -> str:
    """``floor 8, ceiling 200, m/r0 28, m/r1 30``: a learned capacity's bounds and values."""
    replicas = learned.get("replicas") or {}
    parts = [f"floor {_num(learned.get('floor'))}", f"ceiling {_num(learned.get('ceiling'))}"]
    return ", ".join(parts + [f"{_num(name)} {_num(v)}" for name, v in replicas.items()])


def _num(value: Any) -> str:
    """A count as it is, a float to four significant digits, a missing value as '-'."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    from rich.markup import escape

    return escape(str(value))
