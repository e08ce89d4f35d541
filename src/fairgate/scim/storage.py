"""scim2-server's storage over the gateway's store: each write reconciled in its transaction.

scim2-server does the protocol (parsing, PATCH, filters, sorting, paging, ETags,
errors); this class only keeps resources. A resource is a row of
``scim_resources``: its attributes as JSON (never ``password``: the gateway
authenticates nobody with it), ``meta.version`` the row's counter as a weak
ETag. A write runs in one exclusive store transaction with the reconciliation
(``fairgate.scim.reconcile``), so what the provider was told succeeded is also
what the gateway enforces, and two writes never interleave. A User written without
``active`` (a ``PUT`` leaving it out, a ``PATCH`` removing it) keeps the state it had;
only a create without it is active.

A search is answered by scim2-server's in-memory storage over the rows it may
match, so its filter, sort and paging semantics are the library's exactly. Two
shapes are narrowed in SQL first: a filter that is one ``eq`` on ``userName``
(Users) or ``displayName`` (Groups), what provisioning clients send before each
create, reads at most one row by the unique name index; a list with neither
filter nor sort nor cursor reads only its page (``startIndex``/``count`` as
OFFSET/LIMIT in id order, the order the library uses unsorted) and a COUNT (a
``startIndex`` past the count reads no row: an empty page, whatever its size).
Any other filter, a sort or a cursor reads every resource of its types: exact,
at a cost linear in the directory.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, cast

from scim2_models import (
    Group,
    InvalidValueException,
    Meta,
    NotFoundException,
    PreconditionFailedException,
    Resource,
    ResourceType,
    ResponseParameters,
    ScimProvider,
    SearchRequest,
    UniquenessException,
    User,
)
from scim2_models.path import CompareOperator, Comparison
from scim2_server.memory import InMemoryStorage
from scim2_server.storage import AsyncScimStorage, SearchPage

from fairgate.core.clock import Clock
from fairgate.scim.reconcile import Reconciler
from fairgate.store import Store, StoreConflict, from_unix, scim
from fairgate.store.scim import ResourceRow
from fairgate.tenancy.errors import BadRequest, ConfigConflict
from fairgate.tenancy.names import check_name

__all__ = ["StoreScimStorage"]

_NOT_KEPT = ("id", "meta", "password")


class StoreScimStorage(AsyncScimStorage):
    """Users and Groups in ``scim_resources`` (see the module docstring)."""

    def __init__(
        self, store: Store, provider: ScimProvider, reconciler: Reconciler, clock: Clock
    ) -> None:
        self._store = store
        self._reconciler = reconciler
        self._clock = clock
        self._models = {
            rt.name: cast(type[Resource[Any]], provider.model_for(rt))
            for rt in provider.resource_types
        }
        self._types = {rt.name: rt for rt in provider.resource_types}

    async def get(
        self,
        resource_type: ResourceType,
        resource_id: str,
        *,
        response_parameters: ResponseParameters[Any] | None = None,
    ) -> Resource[Any]:
        async with self._store.read() as conn:
            row = await scim.get_resource(conn, _kind(resource_type), resource_id)
        if row is None:
            raise NotFoundException(detail=f"{resource_type.name} {resource_id!r} not found")
        return self._resource(row)

    async def search(
        self,
        resource_types: list[ResourceType],
        search_request: SearchRequest[Any],
        *,
        position: Any = None,
    ) -> SearchPage:
        kinds = list(dict.fromkeys(_kind(rt) for rt in resource_types))
        if _unordered_page(search_request, position):
            start = search_request.start_index_0 or 0
            async with self._store.read() as conn:
                total = await scim.count_resources(conn, kinds)
                if start >= total:  # also an index no SQL OFFSET can hold: nothing to read
                    return SearchPage(total, [])
                rows = await scim.list_resources(
                    conn, kinds, offset=start, limit=search_request.count
                )
            return SearchPage(total, [self._resource(row) for row in rows])
        name_key = _name_key(kinds, search_request)
        async with self._store.read() as conn:
            rows = await scim.list_resources(conn, kinds, name_key=name_key)
        if name_key is not None and kinds == ["Group"]:
            # The index decides a group's name exactly as its uniqueness does (trimmed,
            # case-folded): the library's filter compares untrimmed and only lower-cased,
            # and would miss the one group a create of that name is refused for.
            search_request = search_request.model_copy(update={"filter": None})
        found = InMemoryStorage()
        found.resources = [self._resource(row) for row in rows]
        return found.search(resource_types, search_request, position=position)

    async def create(self, resource_type: ResourceType, resource: Resource[Any]) -> Resource[Any]:
        kind = _kind(resource_type)
        name, active = _identity(kind, resource)
        active = active is not False  # a User created without ``active`` is active
        resource_id = uuid.uuid4().hex
        now = from_unix(self._clock.wall())
        try:
            async with self._store.write(exclusive=True) as conn:
                await scim.insert_resource(
                    conn,
                    resource_id=resource_id,
                    kind=kind,
                    name=name,
                    active=active,
                    body=_body(resource),
                    now=now,
                )
                await self._reconciler.reconcile(conn, now)
                row = await scim.get_resource(conn, kind, resource_id)
        except StoreConflict:
            raise UniquenessException(detail=f"{_label(kind)} {name!r} exists") from None
        assert row is not None
        return self._resource(row)

    async def update(
        self,
        resource_type: ResourceType,
        resource: Resource[Any],
        *,
        expected_version: str | None = None,
    ) -> Resource[Any]:
        kind = _kind(resource_type)
        name, active = _identity(kind, resource)
        resource_id = cast(str, resource.id)
        now = from_unix(self._clock.wall())
        try:
            async with self._store.write(exclusive=True) as conn:
                stored = await self._stored(conn, kind, resource_id, expected_version)
                if active is None:
                    # A PUT without ``active``, or a PATCH removing it, leaves the user as
                    # they are: absent must not re-enable a deactivated user. The body
                    # keeps the state in force, so a GET says what the gateway enforces.
                    active = stored.active
                    cast(User[Any], resource).active = active
                await scim.update_resource(
                    conn,
                    resource_id=resource_id,
                    kind=kind,
                    name=name,
                    active=active,
                    body=_body(resource),
                    version=stored.version,
                    now=now,
                )
                await self._reconciler.reconcile(conn, now)
                row = await scim.get_resource(conn, kind, resource_id)
        except StoreConflict:
            raise UniquenessException(detail=f"{_label(kind)} {name!r} exists") from None
        assert row is not None
        return self._resource(row)

    async def delete(
        self, resource_type: ResourceType, resource_id: str, *, expected_version: str | None = None
    ) -> None:
        kind = _kind(resource_type)
        now = from_unix(self._clock.wall())
        async with self._store.write(exclusive=True) as conn:
            stored = await self._stored(conn, kind, resource_id, expected_version)
            await scim.delete_resource(conn, kind, resource_id, stored.version)
            await self._reconciler.reconcile(conn, now)

    async def reconcile(self) -> None:
        """Reconcile with nothing written (start-up). ConfigConflict when a mapped group
        names a team the store lacks: the start-up stops rather than grant nothing."""
        now = from_unix(self._clock.wall())
        async with self._store.write(exclusive=True) as conn:
            missing = await self._reconciler.missing_teams(conn)
            if missing:
                group, team = missing[0]
                raise ConfigConflict(
                    f"scim.groups {group!r} names team {team!r}, which is not in the store "
                    "(declare it under orgs or create it first)"
                )
            await self._reconciler.reconcile(conn, now)

    @staticmethod
    async def _stored(
        conn: Any, kind: str, resource_id: str, expected_version: str | None
    ) -> ResourceRow:
        row = await scim.get_resource(conn, kind, resource_id)
        if row is None:
            raise NotFoundException(detail=f"{kind} {resource_id!r} not found")
        if expected_version is not None and expected_version != _etag(row.version):
            raise PreconditionFailedException
        return row

    def _resource(self, row: ResourceRow) -> Resource[Any]:
        meta = Meta(
            resource_type=row.kind,
            created=row.created_at,
            last_modified=row.modified_at,
            version=_etag(row.version),
        )
        resource = self._models[row.kind].model_validate({**row.body, "id": row.id})
        resource.meta = meta
        return resource


_NAMES = {
    "User": ("username", "urn:ietf:params:scim:schemas:core:2.0:User"),
    "Group": ("displayname", "urn:ietf:params:scim:schemas:core:2.0:Group"),
}
"""The attribute each kind's ``name_key`` column holds (case-folded), and its schema."""


def _name_key(kinds: list[str], search_request: SearchRequest[Any]) -> str | None:
    """The ``name_key`` every resource the filter can match has, when the filter is one
    ``eq`` of a string on the name attribute of the one kind searched; else None.

    The attribute is not case-exact (RFC 7643 §4.1.1, §4.2), so the in-memory filter
    matches case-insensitively; rows are stored under the case-folded (Groups: trimmed)
    name, a key every such match shares. The library's filter still decides."""
    scim_filter = search_request.filter
    if scim_filter is None or len(kinds) != 1:
        return None
    node = scim_filter.ast
    if (
        not isinstance(node, Comparison)
        or node.op != CompareOperator.eq
        or not isinstance(node.value, str)
    ):
        return None
    path = node.attr_path
    attribute, schema = _NAMES[kinds[0]]
    if path.sub_attr is not None or path.attr.casefold() != attribute:
        return None
    if path.uri is not None and path.uri.casefold() != schema.casefold():
        return None
    value = node.value.strip() if kinds[0] == "Group" else node.value
    return value.casefold()


def _unordered_page(search_request: SearchRequest[Any], position: Any) -> bool:
    """Whether the search is a plain page of the whole list: no filter, sort or cursor."""
    return (
        search_request.filter is None
        and search_request.sort_by is None
        and search_request.cursor is None
        and position is None
    )


def _kind(resource_type: ResourceType) -> str:
    if resource_type.name not in ("User", "Group"):
        raise NotFoundException(detail=f"no resource type {resource_type.name!r}")
    return resource_type.name


def _label(kind: str) -> str:
    return "userName" if kind == "User" else "displayName"


def _identity(kind: str, resource: Resource[Any]) -> tuple[str, bool | None]:
    """The name a resource is known by and whether it is active (None: a User that does
    not say), checked."""
    if kind == "User":
        user = cast(User[Any], resource)
        name = user.user_name or ""
        try:
            check_name("user", name)
        except BadRequest as exc:
            raise InvalidValueException(detail=f"userName: {exc.message}") from None
        return name, user.active
    group = cast(Group, resource)
    name = (group.display_name or "").strip()
    if not 1 <= len(name) <= 256:
        raise InvalidValueException(detail="displayName: 1 to 256 characters")
    # kept as checked: a lookup by the trimmed name must find the group the
    # uniqueness check (on the trimmed name) says exists
    group.display_name = name
    return name, True


def _body(resource: Resource[Any]) -> Mapping[str, Any]:
    data = resource.model_dump(mode="json")
    return {k: v for k, v in data.items() if k not in _NOT_KEPT}


def _etag(version: int) -> str:
    return f'W/"{version}"'
