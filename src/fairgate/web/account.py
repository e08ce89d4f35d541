"""``/account``: a signed-in person's keys, limits, budgets, spend and models; create and revoke.

    GET  /account                       the page (303 to /signin when not signed in)
    POST /account/keys                  a new key; its secret shown once, on a no-store page
    POST /account/keys/{id}/revoke      revoke one of the person's keys (303 back)

Everything goes through the tenancy services as the account's user
(``Accounts.actor``), so the admin API's rules apply: a member creates keys in
their team with the team's limits. Revoking is narrower than the admin API:
whatever the role (a team admin's account too), the pages revoke only keys the
person owns (``Keys.revoke(own_only=True)``) — the owner is in the UPDATE's
WHERE clause, so another account's key id changes nothing
and answers the same 404 page as an id that does not exist. The listing shows
the keys the person owns; the form to create one is offered only while the
tenancy rules would let the person create it (a revoked role, a disabled team:
no form, a line saying why).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from fairgate.core.clock import Clock
from fairgate.core.money import Money
from fairgate.store import Store
from fairgate.store.keys import Key
from fairgate.store.teams import Team
from fairgate.store.usage_records import SpendRow
from fairgate.tenancy import Tenancy
from fairgate.tenancy.errors import BadRequest, Conflict, Forbidden, NotFound
from fairgate.web.chart import spend_chart
from fairgate.web.cookies import utc_now
from fairgate.web.errors import PageError
from fairgate.web.forms import Form, FormRefused, read_form
from fairgate.web.render import Pages
from fairgate.web.site import Site
from fairgate.web.spending import month_spend
from fairgate.web.visitor import Visitor, Visitors

__all__ = ["AccountPages"]

_MAX_KEY_NAME = 64


class AccountPages:
    """The account page and its two actions."""

    def __init__(
        self,
        site: Site,
        pages: Pages,
        visitors: Visitors,
        tenancy: Tenancy,
        store: Store,
        clock: Clock,
    ) -> None:
        self._site = site
        self._pages = pages
        self._visitors = visitors
        self._tenancy = tenancy
        self._store = store
        self._clock = clock

    async def get(self, request: Request) -> Response:
        visitor = await self._visitors.current(request)
        if visitor is None:
            return RedirectResponse("/signin", status_code=303)
        return await self._page(visitor)

    async def create_key(self, request: Request) -> Response:
        visitor = await self._signed_in(request)
        form = await self._form(request, visitor)
        name = (form.get("name") or "").strip() or None
        if name is not None and len(name) > _MAX_KEY_NAME:
            return await self._page(
                visitor, 400, f"A key name has at most {_MAX_KEY_NAME} characters"
            )
        team = visitor.account.team
        if team is None:
            raise PageError(403, "account without a team")
        try:
            created = await self._tenancy.keys.create(visitor.actor, team=team, name=name)
        except (BadRequest, Conflict, Forbidden, NotFound) as refused:
            # NotFound: a team the person no longer sees (their role revoked since)
            return await self._page(visitor, refused.status, refused.message)
        return self._pages.html(
            "key_created.html",
            signed_in=True,
            csrf=visitor.csrf,
            key=created.key,
            secret=created.secret,
        )

    async def revoke_key(self, request: Request) -> Response:
        visitor = await self._signed_in(request)
        await self._form(request, visitor)
        key_id = request.path_params["key_id"]
        try:
            await self._tenancy.keys.revoke(visitor.actor, key_id, own_only=True)
        except (NotFound, Forbidden):
            raise PageError(
                404,
                f"revoke of a key {visitor.actor.name} does not own",
                title="No such key",
                message="You have no key with that id.",
            ) from None
        return RedirectResponse("/account", status_code=303)

    async def _signed_in(self, request: Request) -> Visitor:
        visitor = await self._visitors.current(request)
        if visitor is None:
            self._visitors.same_site(request)
            raise PageError(
                403,
                "account form without a live session",
                title="Signed out",
                message="You are not signed in (or the session has ended). Sign in again.",
            )
        return visitor

    async def _form(self, request: Request, visitor: Visitor) -> Form:
        self._visitors.same_site(request)
        try:
            form = await read_form(request, max_bytes=self._site.max_form_bytes)
        except FormRefused as refused:
            raise PageError(refused.status, refused.reason) from None
        self._visitors.check_form(request, visitor, form)
        return form

    async def _page(
        self, visitor: Visitor, status: int = 200, error: str | None = None
    ) -> Response:
        actor = visitor.actor
        mine = [
            k
            for k in await self._tenancy.keys.list(actor, team=visitor.account.team)
            if k.owner == visitor.account.email
        ]
        team = await self._team(visitor)
        budgets = await self._tenancy.budgets.list(actor)
        now = utc_now(self._clock.wall())
        month = await month_spend(self._store, actor, now, [k.id for k in mine])
        team_name = visitor.account.team
        may_create = team_name is not None and await self._tenancy.keys.may_create(actor, team_name)
        return self._pages.html(
            "account.html",
            status=status,
            signed_in=True,
            csrf=visitor.csrf,
            error=error,
            account=visitor.account,
            keys=mine,
            may_create=may_create,
            limits={k.id: _limits(k, team) for k in mine},
            spend={k.id: _spent(month.by_key.get(k.id)) for k in mine},
            month=month,
            month_total=str(Money(month.cost_micro)),
            chart=spend_chart(month.days),
            budgets=budgets,
            models=self._models(team),
        )

    async def _team(self, visitor: Visitor) -> Team | None:
        if visitor.account.team is None:
            return None
        try:
            return await self._tenancy.teams.get(visitor.actor, visitor.account.team)
        except (NotFound, Forbidden):
            return None

    def _models(self, team: Team | None) -> list[str]:
        every = [m.name for m in self._site.models]
        if team is None or team.models is None:
            return every
        return [m for m in every if m in team.models] + [m for m in team.models if m not in every]


def _spent(row: SpendRow | None) -> tuple[int, str]:
    """A key's requests and GPU-hours this month."""
    return (0, "0") if row is None else (row.requests, str(Money(row.cost_micro)))


def _limits(key: Key, team: Team | None) -> list[tuple[str, str]]:
    """Each limit of the key as the person reads it (a key without one has the team's)."""
    rows = []
    for field, label in (
        ("rpm", "requests per minute"),
        ("tpm", "tokens per minute"),
        ("rpd", "requests per day"),
        ("max_in_flight", "requests at once"),
    ):
        own = getattr(key, field)
        inherited = getattr(team, field) if team is not None else None
        value = own if own is not None else inherited
        rows.append((label, "no limit" if value is None else str(value)))
    return rows
