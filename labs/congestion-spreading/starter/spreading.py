"""Lab congestion-spreading: fill in each function (see README.md), then
`sudo .venv/bin/emu lab check congestion-spreading`."""

from __future__ import annotations

from typing import Any


def paused_by(tree: list[dict[str, Any]], node: str) -> list[str]:
    """Step 1: the nodes `node` sent pause frames to, sorted."""
    raise NotImplementedError("step 1: the edges whose pauser is `node`")


def spread_beyond(tree: list[dict[str, Any]], hot: set[str]) -> list[str]:
    """Step 2: the switches paused that carry none of the incast's traffic, sorted."""
    raise NotImplementedError("step 2: paused switches (their names start with p), less the hot ones")


def held_for(tree: list[dict[str, Any]], node: str) -> float:
    """Step 3: fabric seconds `node` was held by pauses, over every link that paused it."""
    raise NotImplementedError("step 3: add up the edges that paused `node`")
