"""A saved result, for the replay page (`emu view results/NAME.json`): its time series and its counters.

Scenarios write their series in a few shapes, and this reads all of them rather than asking each
scenario for a schema: a list of [t, value] pairs (a queue's depth over time); two equal lists,
times then values (what a receiver got, per time bin); a list or a dict of such series (one per
flow, per sender). Every other number, flag or word is a counter, named by its path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_POINTS = 4000  # per series drawn; a longer one is thinned evenly (its first and last points kept)


@dataclass(frozen=True)
class Series:
    name: str  # its path in the result: "dcqcn.queue_series", "received_series.10.0.0.3"
    t: list[float]
    v: list[float]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "t": self.t, "v": self.v}


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _pairs(x: Any) -> bool:
    return (isinstance(x, list) and len(x) >= 3  # two pairs are as likely a 2 x 2 table as a series
            and all(isinstance(p, list) and len(p) == 2 and _number(p[0]) and _number(p[1]) for p in x))


def _columns(x: Any) -> bool:
    return (isinstance(x, list) and len(x) == 2 and all(isinstance(c, list) for c in x)
            and len(x[0]) == len(x[1]) >= 3 and all(_number(a) for c in x for a in c))


def _thin(t: list[float], v: list[float]) -> tuple[list[float], list[float]]:
    if len(t) <= MAX_POINTS:
        return t, v
    step = (len(t) - 1) / (MAX_POINTS - 1)
    idx = [round(i * step) for i in range(MAX_POINTS)]
    return [t[i] for i in idx], [v[i] for i in idx]


def series_of(result: Any, path: str = "") -> list[Series]:
    """Every time series in a result, in the order the result has them."""
    if _pairs(result):
        return [Series(path, *_thin([float(p[0]) for p in result], [float(p[1]) for p in result]))]
    if _columns(result):
        return [Series(path, *_thin([float(a) for a in result[0]], [float(b) for b in result[1]]))]
    items = (result.items() if isinstance(result, dict)
             else enumerate(result) if isinstance(result, list) else ())
    out: list[Series] = []
    for key, value in items:
        out += series_of(value, f"{path}.{key}" if path else str(key))
    return out


def counters_of(result: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every scalar of a result outside its series, as (path, value): its counters and settings."""
    if _pairs(result) or _columns(result):
        return []
    if isinstance(result, dict | list):
        items = result.items() if isinstance(result, dict) else enumerate(result)
        out: list[tuple[str, Any]] = []
        for key, value in items:
            out += counters_of(value, f"{path}.{key}" if path else str(key))
        return out
    return [(path, result)]
