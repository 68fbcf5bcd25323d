"""Lab metaroce: a solution."""

from __future__ import annotations

from typing import Any


def transfer_ok(client: dict[str, Any], server: dict[str, Any]) -> bool:
    return bool(server["data_ok"]) and client["completions_ok"] == client["completions"] > 0


def failed_planes(client: dict[str, Any]) -> list[int]:
    return [i for i, p in enumerate(client["planes"]) if p["downs"] > 0]


def failure_time(client: dict[str, Any], plane: int) -> float:
    last, prev = client["plane_trace"][0][0], None
    for t, sent in client["plane_trace"]:
        if prev is not None and sent[plane] > prev:
            last = t
        prev = sent[plane]
    return last


def share_after(client: dict[str, Any], t: float) -> list[float]:
    trace = client["plane_trace"]
    at = next((sent for ts, sent in trace if ts >= t), trace[-1][1])
    moved = [end - start for start, end in zip(at, trace[-1][1], strict=True)]
    total = sum(moved) or 1
    return [m / total for m in moved]
