"""The test provider's interactive part: authorization code with PKCE, token, end session.

    POST /_test/clients     {"client_id", "client_secret"?, "redirect_uris": [...]}: register
    POST /_test/login-as    {"sub", "preferred_username"?, "email"?, "groups"?, ...,
                             "id_token": {"claims": {...}, "omit": [...], "attack": ...}}
                            the person the next /authorize signs in without a form
    GET  /authorize         checks the request (a registered client, its exact redirect_uri,
                            response_type=code, scope with openid, code_challenge_method=S256
                            and a challenge, a state), then answers a sign-in form
                            (Playwright fills it) or, after login-as, redirects at once
    POST /authorize         the form: username and groups (comma separated) -> a code
    POST /token             grant_type=authorization_code: the code once, within a minute,
                            for the same client and redirect_uri, with the verifier whose
                            S256 is the challenge; the client's secret (HTTP Basic) when it
                            has one -> {access_token, id_token, token_type, expires_in}
    GET  /logout            end session: records its parameters, redirects to a registered
                            post_logout_redirect_uri or answers a "signed out" page
    GET  /_test/logins      what the provider saw: authorize requests, token calls, logouts

The ID token is signed like any minted token (``Provider.sign``, ``typ: JWT``) with
``iss``, ``aud`` the client id, ``sub``, ``iat``, ``exp``, the request's ``nonce``
and the person's claims; ``id_token`` in login-as overrides or drops claims or
forges the token (``attack`` as for ``/_test/mint``), for the client's refusals.
Every refusal is an OAuth error (``invalid_request``, ``invalid_grant``,
``invalid_client``), so a client under test sees what a real provider answers.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import orjson
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

if TYPE_CHECKING:
    from tests.oidc_provider.server import Provider

__all__ = ["login_routes"]

CODE_TTL = 60.0


@dataclass
class _Client:
    client_id: str
    secret: str | None
    redirect_uris: tuple[str, ...]
    post_logout_redirect_uris: tuple[str, ...] = ()


@dataclass
class _Grant:
    client_id: str
    redirect_uri: str
    challenge: str
    nonce: str | None
    person: dict[str, Any]
    id_token: dict[str, Any]
    issued: float


@dataclass
class _Logins:
    clients: dict[str, _Client] = field(default_factory=dict)
    next_person: dict[str, Any] | None = None
    codes: dict[str, _Grant] = field(default_factory=dict)
    seen: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {"authorize": [], "token": [], "logout": []}
    )


def _oauth_error(error: str, description: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": error, "error_description": description}, status_code=status)


def _s256(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def login_routes(provider: Provider) -> Sequence[BaseRoute]:
    """The interactive routes over ``provider``'s keys and issuer."""
    logins = _Logins()

    async def register(request: Request) -> Response:
        body: dict[str, Any] = orjson.loads(await request.body())
        client = _Client(
            client_id=body["client_id"],
            secret=body.get("client_secret"),
            redirect_uris=tuple(body["redirect_uris"]),
            post_logout_redirect_uris=tuple(body.get("post_logout_redirect_uris", ())),
        )
        logins.clients[client.client_id] = client
        return JSONResponse({"client_id": client.client_id})

    async def login_as(request: Request) -> Response:
        logins.next_person = orjson.loads(await request.body())
        return JSONResponse({"ok": True})

    def checked(params: dict[str, str]) -> tuple[_Client, str] | Response:
        """The client and redirect_uri of a valid authorization request, or the error."""
        client = logins.clients.get(params.get("client_id", ""))
        redirect_uri = params.get("redirect_uri", "")
        if client is None or redirect_uri not in client.redirect_uris:
            # never redirect to an unregistered address (RFC 6749 §4.1.2.1)
            return _oauth_error("invalid_request", "unknown client or redirect_uri")
        problems = [
            params.get("response_type") != "code" and "response_type must be code",
            "openid" not in params.get("scope", "").split() and "scope lacks openid",
            params.get("code_challenge_method") != "S256" and "PKCE S256 required",
            not params.get("code_challenge") and "no code_challenge",
            not params.get("state") and "no state",
        ]
        problem = next((p for p in problems if p), None)
        if problem:
            query = urlencode({"error": "invalid_request", "error_description": problem})
            return RedirectResponse(f"{redirect_uri}?{query}", status_code=303)
        return client, redirect_uri

    def issue(params: dict[str, str], redirect_uri: str, person: dict[str, Any]) -> Response:
        code = secrets.token_urlsafe(24)
        id_token = person.pop("id_token", {}) if isinstance(person.get("id_token"), dict) else {}
        logins.codes[code] = _Grant(
            client_id=params["client_id"],
            redirect_uri=redirect_uri,
            challenge=params["code_challenge"],
            nonce=params.get("nonce"),
            person=person,
            id_token=id_token,
            issued=time.monotonic(),
        )
        query = urlencode({"code": code, "state": params["state"], "iss": provider.issuer})
        return RedirectResponse(f"{redirect_uri}?{query}", status_code=303)

    async def authorize(request: Request) -> Response:
        params = dict(request.query_params)
        logins.seen["authorize"].append(params)
        verdict = checked(params)
        if isinstance(verdict, Response):
            return verdict
        _, redirect_uri = verdict
        if logins.next_person is not None:
            person, logins.next_person = logins.next_person, None
            return issue(params, redirect_uri, person)
        hidden = "".join(
            f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
            for k, v in params.items()
        )
        page = (
            "<!doctype html><title>Test provider sign-in</title><h1>Test provider</h1>"
            '<form method="post" action="authorize">'
            f"{hidden}"
            '<label>Username <input id="username" name="username" required></label>'
            '<label>Groups <input id="groups" name="groups"></label>'
            '<button id="approve" type="submit">Sign in</button></form>'
        )
        return HTMLResponse(page)

    async def approve(request: Request) -> Response:
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        username, groups = form.pop("username", ""), form.pop("groups", "")
        verdict = checked(form)
        if isinstance(verdict, Response):
            return verdict
        person = {
            "sub": "sub-" + hashlib.sha256(username.encode()).hexdigest()[:16],
            "preferred_username": username,
            "groups": [g.strip() for g in groups.split(",") if g.strip()],
        }
        return issue(form, verdict[1], person)

    def authenticated(request: Request, form: dict[str, str]) -> _Client | None:
        header = request.headers.get("authorization", "")
        if header.lower().startswith("basic "):
            try:
                pair = base64.b64decode(header[6:]).decode()
            except ValueError:
                return None
            client_id, _, secret = pair.partition(":")
            client = logins.clients.get(client_id)
            if client is None or client.secret is None:
                return None
            return client if hmac.compare_digest(client.secret, secret) else None
        client = logins.clients.get(form.get("client_id", ""))
        if client is None or client.secret is not None:  # a confidential client must authenticate
            return None
        return client

    async def token(request: Request) -> Response:
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        logins.seen["token"].append({k: v for k, v in form.items() if k != "code_verifier"})
        client = authenticated(request, form)
        if client is None:
            return _oauth_error("invalid_client", "client authentication failed", 401)
        if form.get("grant_type") != "authorization_code":
            return _oauth_error("unsupported_grant_type", "authorization_code only")
        grant = logins.codes.pop(form.get("code", ""), None)  # once, whatever happens next
        if (
            grant is None
            or time.monotonic() - grant.issued > CODE_TTL
            or grant.client_id != client.client_id
            or grant.redirect_uri != form.get("redirect_uri")
        ):
            return _oauth_error("invalid_grant", "unknown, used or expired code")
        verifier = form.get("code_verifier", "")
        if not verifier or not hmac.compare_digest(_s256(verifier), grant.challenge):
            return _oauth_error("invalid_grant", "the code_verifier does not match")
        return JSONResponse(
            {
                "access_token": secrets.token_urlsafe(24),
                "token_type": "Bearer",
                "expires_in": 300,
                "id_token": id_token_for(grant),
            },
            headers={"cache-control": "no-store"},
        )

    def id_token_for(grant: _Grant) -> str:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": provider.issuer,
            "aud": grant.client_id,
            "iat": now,
            "exp": now + 300,
            **({"nonce": grant.nonce} if grant.nonce is not None else {}),
            **grant.person,
            **grant.id_token.get("claims", {}),
        }
        for name in grant.id_token.get("omit", ()):
            claims.pop(name, None)
        header = {"typ": "JWT"}
        if attack := grant.id_token.get("attack"):
            return provider.forge(attack, claims, header)
        return provider.sign(claims, header=header)

    async def logout(request: Request) -> Response:
        params = dict(request.query_params)
        logins.seen["logout"].append(params)
        target = params.get("post_logout_redirect_uri")
        client = logins.clients.get(params.get("client_id", ""))
        if target and client is not None and target in client.post_logout_redirect_uris:
            return RedirectResponse(target, status_code=303)
        return HTMLResponse('<!doctype html><title>Signed out</title><h1 id="out">Signed out</h1>')

    async def seen(request: Request) -> Response:
        return JSONResponse(logins.seen)

    return [
        Route("/_test/clients", register, methods=["POST"]),
        Route("/_test/login-as", login_as, methods=["POST"]),
        Route("/_test/logins", seen),
        Route("/authorize", authorize, methods=["GET"]),
        Route("/authorize", approve, methods=["POST"]),
        Route("/token", token, methods=["POST"]),
        Route("/logout", logout),
    ]
