"""Backend-independent table entries: what the control plane decides for a switch.

One list of these drives every backend: the native engine loads them from
JSON, and the BMv2 backend turns the same entries into simple_switch_CLI
commands. Names follow the P4 program's tables (ipv4_lpm, ipv6_lpm,
nexthop groups, my_sid, srv6_encap).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

GROUP_MODES = ("hash", "spray")
SID_ACTIONS = ("End", "End.X", "End.DT6")


class TableError(ValueError):
    """A table entry is inconsistent; the message names the entry."""


def _prefix_error(prefix: Any) -> str:
    """Why `prefix` is not a network ("" if it is)."""
    try:
        ipaddress.ip_network(prefix)
    except ValueError as exc:
        return str(exc)
    return ""


# Remembered for text: a fabric's routes name each prefix once a switch (FPF 512 x 8: 858 624 routes of
# 16 384 prefixes; parsing each was 13 s of its bring-up).
_text_prefix_error = lru_cache(maxsize=1 << 16)(_prefix_error)


@dataclass(frozen=True)
class NextHop:
    port: int
    mac: str
    weight: float = 1.0

    def __post_init__(self) -> None:
        if self.port < 0:
            raise TableError(f"next hop port must be >= 0, got {self.port}")
        if not self.weight > 0:
            raise TableError(f"next hop weight must be > 0, got {self.weight}")


@dataclass(frozen=True)
class Group:
    """A next-hop group: ECMP by flow hash, or per-packet spraying; weighted either way."""

    id: int
    members: tuple[NextHop, ...]
    mode: str = "hash"

    def __post_init__(self) -> None:
        if self.mode not in GROUP_MODES:
            raise TableError(f"group {self.id}: mode must be one of {GROUP_MODES}, got {self.mode!r}")
        if not self.members:
            raise TableError(f"group {self.id} has no members")


@dataclass(frozen=True)
class Route:
    prefix: str
    group: int

    def __post_init__(self) -> None:
        why = _text_prefix_error(self.prefix) if isinstance(self.prefix, str) else _prefix_error(self.prefix)
        if why:
            raise TableError(f"route prefix {self.prefix!r}: {why}")


@dataclass(frozen=True)
class MySid:
    """A local SRv6 segment: End, End.X (to group) or End.DT6 (decapsulate, look up)."""

    sid: str
    action: str
    group: int | None = None

    def __post_init__(self) -> None:
        if self.action not in SID_ACTIONS:
            raise TableError(f"SID {self.sid}: action must be one of {SID_ACTIONS}")
        if self.action == "End.X" and self.group is None:
            raise TableError(f"SID {self.sid}: End.X needs an adjacency group")
        ipaddress.IPv6Address(self.sid)


@dataclass(frozen=True)
class EncapPolicy:
    """H.Encaps: IPv6 packets to `prefix` get an outer header and SRH with `segments`."""

    prefix: str
    segments: tuple[str, ...]
    source: str

    def __post_init__(self) -> None:
        if not self.segments:
            raise TableError(f"policy for {self.prefix}: empty segment list")
        ipaddress.IPv6Network(self.prefix)
        for s in (*self.segments, self.source):
            ipaddress.IPv6Address(s)


@dataclass
class SwitchTables:
    groups: list[Group] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)
    my_sids: list[MySid] = field(default_factory=list)
    encaps: list[EncapPolicy] = field(default_factory=list)

    def validate(self) -> None:
        ids = {g.id for g in self.groups}
        if len(ids) != len(self.groups):
            raise TableError("duplicate group ids")
        for r in self.routes:
            if r.group not in ids:
                raise TableError(f"route {r.prefix} points at unknown group {r.group}")
        for s in self.my_sids:
            if s.group is not None and s.group not in ids:
                raise TableError(f"SID {s.sid} points at unknown group {s.group}")

    def to_dict(self, *, compact: bool = False) -> dict[str, Any]:
        """As dataclasses.asdict would give it, written out: asdict's deep copies of every field were 10 s
        of an FPF 512 x 8 bring-up (tests/test_control.py holds the two equal). `compact`: the routes as
        two lists, their prefixes and their groups (what the engine's spec carries: FPF 4096 x 8 has
        798 208 routes, and a JSON object each was most of its spec to write and to read)."""
        routes: Any = ({"prefixes": [r.prefix for r in self.routes], "groups": [r.group for r in self.routes]}
                       if compact else [{"prefix": r.prefix, "group": r.group} for r in self.routes])
        return {
            "groups": [{"id": g.id, "members": tuple({"port": m.port, "mac": m.mac, "weight": m.weight}
                                                     for m in g.members), "mode": g.mode} for g in self.groups],
            "routes": routes,
            "my_sids": [{"sid": m.sid, "action": m.action, "group": m.group} for m in self.my_sids],
            "encaps": [{"prefix": e.prefix, "segments": tuple(e.segments), "source": e.source} for e in self.encaps],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SwitchTables:
        t = cls(
            groups=[
                Group(id=g["id"], mode=g["mode"], members=tuple(NextHop(**m) for m in g["members"]))
                for g in d.get("groups", [])
            ],
            routes=_routes(d.get("routes", [])),
            my_sids=[MySid(**s) for s in d.get("my_sids", [])],
            encaps=[
                EncapPolicy(prefix=e["prefix"], segments=tuple(e["segments"]), source=e["source"])
                for e in d.get("encaps", [])
            ],
        )
        t.validate()
        return t


def _routes(given: Any) -> list[Route]:
    """Routes as SwitchTables.to_dict gives them, compact (two lists) or not (an object each)."""
    if isinstance(given, dict):
        if len(given["prefixes"]) != len(given["groups"]):
            raise TableError(f"{len(given['prefixes'])} route prefixes for {len(given['groups'])} groups")
        for prefix in set(given["prefixes"]):  # each prefix checked once, then its routes made as they are
            Route(prefix, 0)
        return [checked_route(p, g) for p, g in zip(given["prefixes"], given["groups"], strict=True)]
    return [Route(**r) for r in given]


def checked_route(prefix: str, group: int) -> Route:
    """A route of a prefix already checked, made without checking it again: Route's own check, remembered,
    still cost a microsecond a route, and FPF 4096 x 8 has 798 208 (controller and worker each)."""
    r = object.__new__(Route)
    object.__setattr__(r, "prefix", prefix)
    object.__setattr__(r, "group", group)
    return r
