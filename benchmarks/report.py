"""Plain-text tables of a run's results, and the verdict against PRODUCT.md §2's targets.

Latencies in microseconds. ``×ref`` columns divide a proxy's figure by the reference
proxy's (the minimal proxy on the gateway's stack) from the same run.
"""

from __future__ import annotations

from typing import Any

from latency import LatencyResult
from throughput import ThroughputResult

__all__ = ["TARGETS", "header", "latency_table", "ranges_table", "throughput_table", "verdict"]

# PRODUCT.md §2: the gateway against the minimal proxy measured in the same run.
TARGETS = {
    "added_p50_ratio": 1.25,
    "added_p99_ratio": 1.5,
    "throughput_ratio": 0.8,
    "ttft_p99_ratio": 1.5,  # time to first token under a burst, p99
    "cpu_per_token_ratio": 1.2,  # CPU per relayed token while 1,000 streams run
}


def header(machine: dict[str, Any]) -> str:
    libs = ", ".join(f"{k} {v}" for k, v in machine["libraries"].items())
    return "\n".join(
        [
            f"command   {machine['command']}",
            f"machine   {machine['cpu']}, {machine['cores']} cores "
            f"({machine['cores_usable']} usable), Linux {machine['kernel']}",
            f"python    {machine['python']}",
            f"layers    {libs}",
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


def verdict(run: dict[str, Any], gateway: str = "gateway") -> dict[str, Any]:
    """Each target of PRODUCT.md §2 that this run measured: value, limit, met."""
    checks: dict[str, Any] = {}
    leg = run.get("latency", {}).get("proxies", {}).get(gateway)
    if leg is not None:
        for quantile in ("p50", "p99"):
            key = f"added_{quantile}_ratio"
            value = leg[f"ratio_{quantile}"]
            checks[key] = {"value": value, "limit": TARGETS[key], "met": value <= TARGETS[key]}
    legs = run.get("throughput", {}).get("legs", {})
    if gateway in legs:
        value = legs[gateway]["ratio"]
        limit = TARGETS["throughput_ratio"]
        checks["throughput_ratio"] = {"value": value, "limit": limit, "met": value >= limit}
    streaming = run.get("streaming")
    if streaming is not None and streaming["proxy"] == gateway:
        checks["streams_complete"] = {"met": streaming["complete"] == streaming["streams"]}
        checks["disconnects_freed"] = {"met": streaming["freed"]}
        for key in ("ttft_p99_ratio", "cpu_per_token_ratio"):
            if key in streaming:
                value, limit = streaming[key], TARGETS[key]
                checks[key] = {"value": value, "limit": limit, "met": value <= limit}
    return checks
