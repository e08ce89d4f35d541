"""Spend reports over real records: sums per group, every dimension, scoped to the reader."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import orjson
import pytest

from accounting.samples import DAY0, random_records, record
from fairgate.accounting import (
    GROUPS,
    StoreUsageWriter,
    UsageRecord,
    key_spend,
    render,
    spend,
)
from fairgate.core.errors import BadRequest
from fairgate.store import Store
from fairgate.tenancy import Actor
from tenancy.world import World

FROM, TO = "2025-10-01", "2025-10-04"
SUMS = ("requests", "prompt_tokens", "completion_tokens", "cached_tokens", "cost", "estimated")

# What each user of the world may read, as labels of world.keys.
VISIBLE = {
    "alice": {"a1", "a2", "b1", "mia", "mo", "jwt"},
    "pat": {"a1", "a2", "b1", "mia", "mo", "jwt"},
    "olga": {"a1", "a2", "mia", "mo"},
    "vic": {"a1", "a2", "mia", "mo"},
    "bob": {"b1"},
    "tom": {"a1", "mia", "mo"},
    "val": {"a1", "mia", "mo"},
    "mia": {"mia"},
    "mo": {"mo"},
    "ua": set(),
}


def place(world: World) -> dict[str, tuple[str, str, str | None]]:
    """Key id → (org, team, project) for the world's keys, plus a key the store never held."""
    teams = {"a1": ("A", "a1", "p"), "a2": ("A", "a2", None), "b1": ("B", "b1", None)}
    places = {world.keys[label]: teams[label] for label in teams}
    places |= {world.keys["mia"]: ("A", "a1", None), world.keys["mo"]: ("A", "a1", "p")}
    places["jwt-0123456789"] = ("A", "a1", None)  # e.g. a caller known only by its token
    return places


async def store_records(store: Store, records: Sequence[UsageRecord]) -> None:
    writer = StoreUsageWriter(store)
    for start in range(0, len(records), 200):
        await writer.write(records[start : start + 200])


def sums(records: Iterable[UsageRecord]) -> tuple[int, ...]:
    """The report's sums of ``records``; a line without a request id (``lines``) counts
    no request."""
    total = [0] * len(SUMS)
    for r in records:
        values = (
            1 if r.request_id else 0,
            r.prompt_tokens,
            r.completion_tokens,
            r.cached_tokens,
            r.cost_micro,
            int(r.estimated),
        )
        total = [a + b for a, b in zip(total, values, strict=True)]
    return tuple(total)


def values(r: UsageRecord, dim: str) -> list[str | None]:
    """The group values a record falls under for one dimension (several for tags)."""
    if dim == "tag":
        return list(r.tags) or [None]
    return [{"key": r.key_id}.get(dim, getattr(r, dim, None))]


Groups = tuple[str | None, ...]


def lines(r: UsageRecord) -> list[UsageRecord]:
    """What a record counts as by model or pool: itself, less the parts of its cost charged
    to other models, and each part under its own model and pool (no request id: no request;
    no tokens, not estimated)."""
    moved = sum(micro for _, _, micro in r.other_costs)
    parts = [
        replace(
            r,
            request_id="",
            model=model,
            pool=pool,
            prompt_tokens=0,
            completion_tokens=0,
            cached_tokens=0,
            cost_micro=micro,
            estimated=False,
        )
        for model, pool, micro in r.other_costs
    ]
    return [replace(r, cost_micro=r.cost_micro - moved), *parts]


def expected_groups(
    records: Sequence[UsageRecord], dims: Sequence[str]
) -> dict[Groups, tuple[int, ...]]:
    if {"model", "pool"}.intersection(dims):
        records = [line for r in records for line in lines(r)]
    groups: dict[Groups, list[UsageRecord]] = defaultdict(list)
    for r in records:
        keys: list[tuple[str | None, ...]] = [()]
        for dim in dims:
            keys = [(*k, v) for k in keys for v in values(r, dim)]
        for k in keys:
            groups[k].append(r)
    return {k: sums(v) for k, v in groups.items()}


def row_sums(row: object) -> tuple[int, ...]:
    return tuple(getattr(row, name if name != "cost" else "cost_micro") for name in SUMS)


@pytest.fixture
async def records(store: Store, world: World) -> list[UsageRecord]:
    made = list(random_records(300, place(world), days=3))
    # Just outside the period on both sides: never counted.
    made += [record(at=DAY0 - timedelta(microseconds=1)), record(at=DAY0 + timedelta(days=3))]
    await store_records(store, made)
    return made[:300]


def parse(text: str, fmt: str) -> list[dict[str, str]]:
    if fmt == "json":
        data: list[dict[str, str]] = orjson.loads(text)["data"]
        return data
    if fmt == "csv":
        return list(csv.DictReader(io.StringIO(text)))
    header, *lines = text.splitlines()
    names = header.split("|")
    return [dict(zip(names, line.split("|"), strict=True)) for line in lines]


@pytest.mark.parametrize("fmt", ["json", "csv", "parsable2"])
async def test_report_totals_equal_the_sum_of_records_in_every_format(
    store: Store, records: list[UsageRecord], fmt: str
) -> None:
    report = await spend(store, Actor.operator("t"), FROM, TO, ("org", "team"))
    rows = parse(render(report, fmt), fmt)
    requests, prompt, completion, cached, cost, estimated = sums(records)
    assert sum(int(r["requests"]) for r in rows) == requests == len(records)
    assert sum(int(r["prompt_tokens"]) for r in rows) == prompt
    assert sum(int(r["completion_tokens"]) for r in rows) == completion
    assert sum(int(r["cached_tokens"]) for r in rows) == cached
    assert sum(int(r["estimated_requests"]) for r in rows) == estimated
    assert sum(Decimal(r["gpu_hours"]) for r in rows) == Decimal(cost) / 1_000_000
    assert all(len(r["gpu_hours"].split(".")[1]) == 6 for r in rows)
    assert row_sums(report.total) == sums(records)


@pytest.mark.parametrize(
    "dims", [(d,) for d in GROUPS] + [("org", "team", "project"), ("model", "tag"), ()]
)
async def test_every_dimension_groups_as_the_records_say(
    store: Store, records: list[UsageRecord], dims: tuple[str, ...]
) -> None:
    report = await spend(store, Actor.operator("t"), FROM, TO, dims)
    got = {row.groups: row_sums(row) for row in report.rows}
    assert got == expected_groups(records, dims)
    assert row_sums(report.total) == sums(records)
    if dims == ("tag",):
        # A record counts once per tag (once untagged): the rows add up past the total.
        per_record = sum(max(1, len(r.tags)) for r in records)
        assert sum(row.requests for row in report.rows) == per_record > report.total.requests


async def test_each_reader_sees_the_records_of_the_keys_it_may_read(
    store: Store, world: World, records: list[UsageRecord]
) -> None:
    label = {v: k for k, v in world.keys.items()} | {"jwt-0123456789": "jwt"}
    for user, visible in VISIBLE.items():
        report = await spend(store, await world.actor(user), FROM, TO, ("key",))
        seen = {label[row.groups[0] or ""] for row in report.rows}
        assert seen == visible, user
        mine = [r for r in records if label[r.key_id] in visible]
        assert row_sums(report.total) == sums(mine), user


async def test_a_report_read_day_by_day_is_the_report_read_at_once(
    store: Store, records: list[UsageRecord]
) -> None:
    steps: list[tuple[int, int]] = []
    operator = Actor.operator("t")
    whole = await spend(store, operator, FROM, TO, ("team", "tag"))
    chunked = await spend(
        store,
        operator,
        FROM,
        TO,
        ("team", "tag"),
        chunk=timedelta(hours=7),
        progress=lambda done, count: steps.append((done, count)),
    )
    assert chunked == whole
    assert steps == [(i, 11) for i in range(1, 12)]  # 72 hours in 7-hour steps


async def test_filters_keep_the_records_that_match(
    store: Store, records: list[UsageRecord]
) -> None:
    filters = {"team": "a1", "tag": "eval", "model": None}
    report = await spend(store, Actor.operator("t"), FROM, TO, (), filters=filters)
    kept = [r for r in records if r.team == "a1" and "eval" in r.tags]
    assert row_sums(report.total) == sums(kept) and kept


async def test_key_spend_is_what_one_key_spent(
    store: Store, world: World, records: list[UsageRecord]
) -> None:
    key_id = world.keys["mia"]
    row = await key_spend(store, key_id, DAY0, DAY0 + timedelta(days=3))
    assert row_sums(row) == sums(r for r in records if r.key_id == key_id)


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("2025-10-01", "2025-10-01", "org"), "invalid_range"),
        (("2025-10-02", "2025-10-01", "org"), "invalid_range"),
        (("2025-13-01", "2025-10-01", "org"), "invalid_date"),
        (("yesterday", "2025-10-01", "org"), "invalid_date"),
        (("2025-10-01", "2025-10-02", "org,colour"), "invalid_group_by"),
    ],
)
async def test_bad_questions_are_refused_before_any_query(
    store: Store, args: tuple[str, str, str], code: str
) -> None:
    with pytest.raises(BadRequest) as refused:
        await spend(store, Actor.operator("t"), *args)
    assert refused.value.code == code


async def test_an_unknown_filter_is_refused(store: Store) -> None:
    with pytest.raises(BadRequest) as refused:
        await spend(store, Actor.operator("t"), FROM, TO, filters={"colour": "red"})
    assert refused.value.code == "invalid_filter"


def test_the_dimensions_are_the_documented_ones() -> None:
    assert GROUPS == ("org", "team", "project", "key", "model", "pool", "tag")
