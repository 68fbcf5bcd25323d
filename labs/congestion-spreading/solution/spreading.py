"""Lab congestion-spreading: a solution."""

from __future__ import annotations

from typing import Any


def paused_by(tree: list[dict[str, Any]], node: str) -> list[str]:
    return sorted({e["paused"] for e in tree if e["pauser"] == node})


def spread_beyond(tree: list[dict[str, Any]], hot: set[str]) -> list[str]:
    return sorted({e["paused"] for e in tree if e["paused"].startswith("p") and e["paused"] not in hot})


def held_for(tree: list[dict[str, Any]], node: str) -> float:
    return sum(e["paused_fabric_s"] for e in tree if e["paused"] == node)
