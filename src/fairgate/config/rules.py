"""Rules that relate entries to each other: unique names, references that resolve, sums.

They run on the raw tree, next to schema validation rather than after it, so
a file with a type error in one model still gets its duplicate names and
fallback cycles reported in the same run. Entries of the wrong shape are
skipped here: the schema reports them. Each finding is a location (whose value
position the diagnostic takes) and a message.

- model names, aliases, pools, orgs, bands: unique; an alias never equals a model name;
- within a model: upstream names and URLs unique;
- a model's ``pool`` names a declared pool (and is required once pools exist);
- ``fallbacks`` name known models, never the model itself, and form no cycle;
- org shares sum to at most 1; a team belongs to one org; the sub-shares of one
  org's teams sum to at most 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fairgate.config.document import Loc
from fairgate.config.fields import normalise_upstream_url
from fairgate.config.messages import suggestion

__all__ = ["Finding", "check_rules"]

Finding = tuple[Loc, str]
_SUM_TOLERANCE = 1e-9


def check_rules(tree: dict[str, Any]) -> list[Finding]:
    """Every cross-entry problem in ``tree`` (the top-level mapping of a configuration)."""
    pools = list(_names(tree, ("pools",)))
    findings = _unique(pools, "pool")
    findings += _models(tree, {name for _, name in pools})
    findings += _orgs(tree)
    findings += _unique(list(_names(tree, ("admission", "bands"))), "band")
    return findings


def _entries(node: Any, loc: Loc) -> Iterator[tuple[Loc, dict[str, Any]]]:
    """The mapping items of the list found at ``loc`` under ``node``."""
    for step in loc:
        node = node.get(step) if isinstance(node, dict) else None
    if isinstance(node, list):
        for index, item in enumerate(node):
            if isinstance(item, dict):
                yield (*loc, index), item


def _strings(item: dict[str, Any], loc: Loc, key: str) -> Iterator[tuple[Loc, str]]:
    values = item.get(key)
    if isinstance(values, list):
        for index, value in enumerate(values):
            if isinstance(value, str):
                yield (*loc, key, index), value


def _names(tree: dict[str, Any], loc: Loc) -> Iterator[tuple[Loc, str]]:
    for item_loc, item in _entries(tree, loc):
        if isinstance(item.get("name"), str):
            yield (*item_loc, "name"), item["name"]


def _unique(named: list[tuple[Loc, str]], what: str) -> list[Finding]:
    seen: set[str] = set()
    findings: list[Finding] = []
    for loc, name in named:
        if name in seen:
            findings.append((loc, f"duplicate {what} name '{name}'"))
        seen.add(name)
    return findings


def _models(tree: dict[str, Any], pools: set[str]) -> list[Finding]:
    models: dict[str, tuple[Loc, dict[str, Any]]] = {}
    findings: list[Finding] = []
    for loc, item in _entries(tree, ("models",)):
        name = item.get("name")
        if not isinstance(name, str):
            continue
        if name in models:
            findings.append(((*loc, "name"), f"duplicate model name '{name}'"))
        else:
            models[name] = (loc, item)
    resolve = {name: name for name in models}
    for name, (loc, item) in models.items():
        for alias_loc, alias in _strings(item, loc, "aliases"):
            findings += _alias(alias_loc, alias, name, resolve)
        findings += _pool(loc, item, name, pools)
        findings += _upstreams(loc, item)
    graph: dict[str, list[tuple[str, Loc]]] = {}
    for name, (loc, item) in models.items():
        edges, problems = _fallbacks(loc, item, name, resolve)
        graph[name] = edges
        findings += problems
    return findings + _cycles(graph)


def _alias(loc: Loc, alias: str, model: str, resolve: dict[str, str]) -> list[Finding]:
    owner = resolve.get(alias)
    if owner is None:
        resolve[alias] = model
        return []
    if alias == model:
        return [(loc, f"alias '{alias}' repeats the name of its own model")]
    if alias == owner:
        return [(loc, f"alias '{alias}' of model '{model}' shadows model '{alias}'")]
    if owner == model:
        return [(loc, f"alias '{alias}' is listed twice")]
    return [(loc, f"alias '{alias}' of model '{model}' is already an alias of model '{owner}'")]


def _pool(loc: Loc, item: dict[str, Any], model: str, pools: set[str]) -> list[Finding]:
    pool = item.get("pool")
    declared = ", ".join(sorted(pools))
    if pool is None and pools:
        return [((*loc, "name"), f"model '{model}' has no pool: set pool to one of {declared}")]
    if not isinstance(pool, str) or pool in pools:
        return []
    if not pools:
        return [((*loc, "pool"), f"unknown pool '{pool}': no pools are declared")]
    hint = suggestion(pool, sorted(pools))
    return [((*loc, "pool"), f"unknown pool '{pool}'{hint} (declared: {declared})")]


def _upstreams(loc: Loc, item: dict[str, Any]) -> list[Finding]:
    entries = [((*loc, *sub), upstream) for sub, upstream in _entries(item, ("upstreams",))]
    names = [((*u, "name"), e["name"]) for u, e in entries if isinstance(e.get("name"), str)]
    findings = _unique(names, "upstream")
    urls: dict[str, str] = {}
    for upstream_loc, upstream in entries:
        url = upstream.get("url")
        try:
            normal = normalise_upstream_url(url) if isinstance(url, str) else None
        except ValueError:
            normal = None  # the schema reports the URL itself
        if normal is None:
            continue
        if normal in urls:
            message = f"duplicate upstream URL '{normal}' (also upstream '{urls[normal]}')"
            findings.append(((*upstream_loc, "url"), message))
        else:
            urls[normal] = str(upstream.get("name"))
    return findings


def _fallbacks(
    loc: Loc, item: dict[str, Any], model: str, resolve: dict[str, str]
) -> tuple[list[tuple[str, Loc]], list[Finding]]:
    edges: list[tuple[str, Loc]] = []
    findings: list[Finding] = []
    for fallback_loc, fallback in _strings(item, loc, "fallbacks"):
        target = resolve.get(fallback)
        if target is None:
            hint = suggestion(fallback, sorted(resolve))
            findings.append((fallback_loc, f"unknown fallback model '{fallback}'{hint}"))
        elif target == model:
            findings.append((fallback_loc, f"model '{model}' falls back to itself"))
        elif any(target == seen for seen, _ in edges):
            findings.append((fallback_loc, f"fallback '{fallback}' is listed twice"))
        else:
            edges.append((target, fallback_loc))
    return edges, findings


def _cycles(graph: dict[str, list[tuple[str, Loc]]]) -> list[Finding]:
    """One finding per fallback cycle, at the fallback entry that closes it."""
    state: dict[str, str] = {}
    findings: list[Finding] = []
    for start in graph:
        if start in state:
            continue
        state[start] = "open"
        path = [start]
        stack = [iter(graph[start])]
        while stack:
            edge = next(stack[-1], None)
            if edge is None:
                state[path.pop()] = "done"
                stack.pop()
                continue
            target, edge_loc = edge
            if state.get(target) == "open":
                cycle = [*path[path.index(target) :], target]
                findings.append((edge_loc, "fallback cycle: " + " -> ".join(cycle)))
            elif target not in state:
                state[target] = "open"
                path.append(target)
                stack.append(iter(graph.get(target, [])))
    return findings


def _orgs(tree: dict[str, Any]) -> list[Finding]:
    findings = _unique(list(_names(tree, ("orgs",))), "org")
    shares: list[tuple[Loc, float]] = []
    owners: dict[str, str] = {}
    for loc, org in _entries(tree, ("orgs",)):
        share = org.get("share")
        if isinstance(share, int | float) and not isinstance(share, bool) and 0 < share <= 1:
            shares.append(((*loc, "share"), float(share)))
        name = str(org.get("name"))
        listed: set[str] = set()
        team_shares: list[tuple[Loc, float]] = []
        for team_loc, team, team_share in _teams(org, loc):
            owner = owners.setdefault(team, name)
            if team in listed:
                findings.append((team_loc, f"team '{team}' is listed twice in org '{name}'"))
            elif owner != name:
                findings.append((team_loc, f"team '{team}' is already in org '{owner}'"))
            listed.add(team)
            if team_share is not None:
                team_shares.append(team_share)
        findings += _share_sum(team_shares, f"team shares of org '{name}'")
    return findings + _share_sum(shares)


def _teams(org: dict[str, Any], loc: Loc) -> Iterator[tuple[Loc, str, tuple[Loc, float] | None]]:
    """Each team of ``org``: where its name is, the name, and its valid share if any."""
    values = org.get("teams")
    if not isinstance(values, list):
        return
    for index, value in enumerate(values):
        if isinstance(value, str):
            yield (*loc, "teams", index), value, None
        elif isinstance(value, dict) and isinstance(value.get("name"), str):
            at = (*loc, "teams", index)
            share = value.get("share")
            name: str = value["name"]
            if isinstance(share, float) and 0 < share <= 1:
                yield (*at, "name"), name, ((*at, "share"), share)
            else:
                yield (*at, "name"), name, None


def _share_sum(shares: list[tuple[Loc, float]], what: str = "org shares") -> list[Finding]:
    """At the share where the running sum passes 1, if it does."""
    total = sum(share for _, share in shares)
    running = 0.0
    for loc, share in shares:
        running += share
        if running > 1 + _SUM_TOLERANCE:
            return [(loc, f"{what} sum to {total:g}, more than 1")]
    return []
