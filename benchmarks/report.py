"""Plain-text tables of a run's results, and the verdict against the targets.

Latencies in microseconds. ``×ref`` columns divide a proxy's figure by the reference
proxy's (the minimal proxy on the gateway's stack) from the same run; ``×floor`` by the
lean floor's (the minimal proxy on the gateway's own upstream client, same run).
"""

from __future__ import annotations

from typing import Any

from latency import LatencyResult
from throughput import ThroughputResult

__all__ = [
    "TARGETS",
    "configurations_table",
    "failures",
    "header",
    "latency_table",
    "leading_stages",
    "ranges_table",
    "throughput_table",
    "verdict",
    "verdict_table",
]

# PRODUCT.md §2 and issue #12: each gateway configuration against the minimal proxy
# measured in the same run; on Redis the throughput floor is lower and round trips count.
TARGETS = {
    "added_p50_ratio": 1.25,
    "added_p99_ratio": 1.5,
    "throughput_ratio": 0.8,
    "ttft_p99_ratio": 1.5,  # time to first token under a burst, p99
    "cpu_per_token_ratio": 1.2,  # CPU per relayed token while 1,000 streams run
    "throughput_ratio_redis": 0.7,
    "redis_round_trips_in": 1.0,
    "redis_round_trips_out": 1.0,
    "compare_added_p50_over_gateway": 50.0,
    "gateway_rps_over_compare": 60.0,
}
LEAN_FLOOR = "uvicorn+fairgate"


def header(machine: dict[str, Any]) -> str:
    libs = ", ".join(f"{k} {v}" for k, v in machine["libraries"].items())
    return "\n".join(
        [
            f"command   {machine['command']}",
            f"machine   {machine['cpu']}, {machine['cores']} cores "
            f"({machine['cores_usable']} usable), Linux {machine['kernel']}",
            f"python    {machine['python']}",
            f"layers    {libs}",
            f"commit    {machine.get('commit') or 'unknown'}",
            f"load      {machine['load_at_start']} at start",
        ]
    )


def _row(cells: list[str], widths: list[int]) -> str:
    first = cells[0].ljust(widths[0])
    rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True))
    return "  ".join([first, *rest])


def latency_table(result: LatencyResult) -> str:
    widths = [24, 8, 8, 10, 10, 7, 7, 7]
    names = ["leg", "p50", "p99", "added p50", "added p99", "×ref50", "×ref99", "errors"]
    lines = [_row(names, widths)]
    d = result.direct
    errors = str(result.errors["direct"])
    lines.append(_row(["direct", f"{d.p50:.0f}", f"{d.p99:.0f}", *"----", errors], widths))
    for name, through in result.through.items():
        added = result.added[name]
        cells = [
            name,
            f"{through.p50:.0f}",
            f"{through.p99:.0f}",
            f"{added.p50:.0f}",
            f"{added.p99:.0f}",
            f"{result.ratio(name, 'p50'):.2f}",
            f"{result.ratio(name, 'p99'):.2f}",
            str(result.errors[name]),
        ]
        lines.append(_row(cells, widths))
    return "\n".join(lines)


def throughput_table(result: ThroughputResult) -> str:
    widths = [24, 9, 7, 14, 16, 7]
    names = ["leg", "req/s", "×ref", "server µs/req", "upstream µs/req", "errors"]
    lines = [_row(names, widths)]
    for name, leg in result.legs.items():
        data = leg.to_json()
        cells = [
            name,
            f"{leg.rps:.0f}",
            f"{result.ratio(name):.2f}",
            f"{data['server_cpu_us_per_request']:.0f}" if leg.server_cpu else "-",
            f"{data['upstream_cpu_us_per_request']:.0f}",
            str(leg.errors),
        ]
        lines.append(_row(cells, widths))
    return "\n".join(lines)


def ranges_table(runs: list[dict[str, Any]]) -> str:
    """min–max over repeated runs of the figures the README quotes, per proxy."""
    figures: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        for name, leg in run.get("latency", {}).get("proxies", {}).items():
            cell = figures.setdefault(name, {})
            cell.setdefault("added p50", []).append(leg["added"]["p50"])
            cell.setdefault("added p99", []).append(leg["added"]["p99"])
            cell.setdefault("×ref p50", []).append(leg["ratio_p50"])
            cell.setdefault("×ref p99", []).append(leg["ratio_p99"])
        for name, leg in run.get("throughput", {}).get("legs", {}).items():
            cell = figures.setdefault(name, {})
            cell.setdefault("req/s", []).append(leg["rps"])
            cell.setdefault("×ref req/s", []).append(leg["ratio"])
            if leg["server_cpu_us_per_request"]:
                cell.setdefault("server µs/req", []).append(leg["server_cpu_us_per_request"])
    lines = [f"ranges over {len(runs)} runs (min–max)"]
    for name, cells in figures.items():
        parts = [f"{key} {_span(values)}" for key, values in cells.items()]
        lines.append(f"  {name:<24} " + "; ".join(parts))
    return "\n".join(lines)


def _span(values: list[float]) -> str:
    low, high = min(values), max(values)
    fmt = "{:.2f}" if high < 10 else "{:.0f}"
    return fmt.format(low) if low == high else f"{fmt.format(low)}–{fmt.format(high)}"


def _over(value: float, ref: float) -> str:
    return f"{value / ref:.2f}" if ref and value == value and ref == ref else "-"


def configurations_table(run: dict[str, Any]) -> str:
    """Per leg: added p50/p99, req/s and CPU µs per request, each also as ×ref and
    ×floor; then the Redis commands per request under load, if counted."""
    latency = run.get("latency", {}).get("proxies", {})
    legs = run.get("throughput", {}).get("legs", {})
    reference = run.get("latency", {}).get("reference") or run.get("throughput", {}).get(
        "reference", ""
    )
    names = [n for n in dict.fromkeys([*latency, *legs]) if n != "direct"]

    def figure(name: str, which: str) -> float:
        if which in ("p50", "p99"):
            leg = latency.get(name)
            return float(leg["added"][which]) if leg else float("nan")
        leg = legs.get(name)
        if not leg:
            return float("nan")
        return float(leg["rps"] if which == "rps" else leg["server_cpu_us_per_request"] or "nan")

    widths = [24] + [8, 6, 6] * 4
    head = ["per configuration"]
    for title in ("add p50", "add p99", "req/s", "CPU µs"):
        head += [title, "×ref", "×floor"]
    lines = [_row(head, widths)]
    for name in names:
        cells = [name]
        for which in ("p50", "p99", "rps", "cpu"):
            value = figure(name, which)
            shown = "-" if value != value else f"{value:.0f}"
            cells += [
                shown,
                _over(value, figure(reference, which)),
                _over(value, figure(LEAN_FLOOR, which)),
            ]
        lines.append(_row(cells, widths))
    lines.append(f"(×ref: against {reference}; ×floor: against {LEAN_FLOOR}, the lean floor)")
    under_load = run.get("redis_commands_under_load")
    if under_load:
        shown = ", ".join(f"{k} {v:.2f}" for k, v in under_load.items() if round(v, 2))
        lines.append(f"Redis commands per request under load (INFO commandstats): {shown}")
    return "\n".join(lines)


def _check(value: float, limit: float, *, at_least: bool = False) -> dict[str, Any]:
    met = value >= limit if at_least else value <= limit
    return {"value": round(value, 3), "limit": limit, "met": bool(met and value == value)}


def verdict(run: dict[str, Any]) -> dict[str, Any]:
    """Each target this run measured, per gateway configuration: value, limit, met."""
    checks: dict[str, Any] = {}
    latency = run.get("latency", {}).get("proxies", {})
    legs = run.get("throughput", {}).get("legs", {})
    gateways = [n for n in dict.fromkeys([*latency, *legs]) if n.startswith("gateway")]
    compares = [n for n in dict.fromkeys([*latency, *legs]) if n.startswith("compare")]
    counted = run.get("redis") or {}
    for name in gateways:
        mine: dict[str, Any] = {}
        leg = latency.get(name)
        if leg is not None:
            for quantile in ("p50", "p99"):
                key = f"added_{quantile}_ratio"
                mine[key] = _check(leg[f"ratio_{quantile}"], TARGETS[key])
        redis = name.endswith("/redis") or "/redis, " in name  # ", N workers" legs too
        if name in legs:
            limit = TARGETS["throughput_ratio_redis" if redis else "throughput_ratio"]
            mine["throughput_ratio"] = _check(legs[name]["ratio"], limit, at_least=True)
        if redis and counted.get("gateway") == name:
            # a mean within 0.05 of the limit is the limit (background subtracted)
            for way in ("in", "out"):
                key = f"redis_round_trips_{way}"
                value = counted[f"{way}_per_request"]
                mine[key] = {**_check(value, TARGETS[key] + 0.049), "limit": TARGETS[key]}
        for other in compares:
            if leg is not None and other in latency:
                key = "compare_added_p50_over_gateway"
                ratio = latency[other]["added"]["p50"] / max(leg["added"]["p50"], 1e-9)
                mine[f"{other}: added p50 ×gateway"] = _check(ratio, TARGETS[key], at_least=True)
            if name in legs and other in legs and legs[other]["rps"]:
                ratio = legs[name]["rps"] / legs[other]["rps"]
                limit = TARGETS["gateway_rps_over_compare"]
                mine[f"req/s ×{other}"] = _check(ratio, limit, at_least=True)
        checks[name] = mine
    for streaming in run.get("streaming", ()):
        if not streaming["proxy"].startswith("gateway"):
            continue  # the minimal proxy alone (--without-gateway): nothing to compare
        streamed: dict[str, Any] = {
            "streams_complete": {
                "met": streaming["complete"] == streaming["streams"] * streaming.get("rounds", 1)
            },
            "disconnects_freed": {"met": streaming["freed"]},
        }
        for key in ("ttft_p99_ratio", "cpu_per_token_ratio"):
            if key in streaming:
                value, limit = streaming[key], TARGETS[key]
                streamed[key] = {"value": value, "limit": limit, "met": value <= limit}
        checks[f"streaming ({streaming['path']}/{streaming['state']})"] = streamed
    return checks


def verdict_table(checks: dict[str, Any], profiles: dict[str, Any] | None = None) -> str:
    """Each check, met or MISSED; under a configuration that missed one, the stages its
    profile (``profiles``, mode all) puts first: where to look; and when any is missed,
    where its next step is written (``NEXT_STEP``)."""
    lines = ["targets (issue #12: each configuration against the minimal proxy, last run)"]
    for config, mine in checks.items():
        lines.append(f"  {config}")
        for name, check in mine.items():
            value = f" {check['value']:.2f} (limit {check['limit']:g})" if "value" in check else ""
            lines.append(f"    {name:<34}{value:<24}  {'met' if check['met'] else 'MISSED'}")
        profile = (profiles or {}).get(config)
        if profile and not all(check["met"] for check in mine.values()):
            lines.append(f"    {'its profile, first stages:':<34}{leading_stages(profile)}")
    if any(not check["met"] for mine in checks.values() for check in mine.values()):
        lines.append(NEXT_STEP)
    return "\n".join(lines)


# Where a missed target's next step is written down, with the arithmetic behind it.
NEXT_STEP = (
    "a target missed: why, and the next step, in docs/benchmarks.md, "
    '"What the targets need" (keep it in step with these figures)'
)


def leading_stages(profile: dict[str, Any], count: int = 3) -> str:
    """The ``count`` largest stages of a profile (its JSON): share and CPU µs per request."""
    shares = profile.get("by_stage", {})
    cpu = profile.get("server_cpu_us_per_request") or 0.0
    ranked = sorted(
        (share, stage) for stage, share in shares.items() if stage not in ("other", "unmapped")
    )[::-1][:count]
    return ", ".join(
        f"{stage} {100 * share:.0f}% ({share * cpu:.0f} µs)" for share, stage in ranked
    )


def failures(runs: list[dict[str, Any]]) -> list[str]:
    """Every leg that got an answer other than 200 (the run must then fail)."""
    found: list[str] = []
    for run in runs:
        latency = run.get("latency", {})
        if latency.get("direct_errors"):
            found.append(f"latency: direct: {latency['direct_errors']} failed requests")
        for name, leg in latency.get("proxies", {}).items():
            if leg["errors"]:
                found.append(
                    f"latency: {name}: {leg['errors']} non-200, first {leg['first_error']}"
                )
        for name, leg in run.get("throughput", {}).get("legs", {}).items():
            if leg["errors"]:
                found.append(
                    f"throughput: {name}: {leg['errors']} non-200, first {leg['first_error']}"
                )
        for name, leg in run.get("profile", {}).items():
            if leg.get("errors"):
                found.append(
                    f"profile: {name}: {leg['errors']} non-200, first {leg['first_error']}"
                )
    return found
