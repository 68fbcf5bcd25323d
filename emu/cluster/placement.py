"""Which machine each node of a fabric runs on.

A fabric split over machines is split at its links: every frame on a link between two machines
crosses the LAN, and on the fabric clock each machine may run ahead of the others by at most the
least propagation delay of those links (the lookahead). So the split is made at the links with the
most latency:

1. the longest links first: cut every link at least as long as some length, from the longest length
   down, until the fabric falls apart into at least as many pieces with hosts as machines (BAG's
   50 km long-haul links part its regions, its 2 km links its buildings; an FPF of two leaves a
   plane parts at its 100 m leaf-spine cables, GPUs under leaf 0 from those under leaf 1, a
   lookahead fifty times its 2 m host cables');
2. where lengths do not part it (an FPF of one leaf a plane, Tahan: only host cables to cut),
   by the switches' shards, the groups the topology itself names (an FPF plane, a Tahan switch):
   whole shards to machines, then each host to the machine of its neighbours that has the fewest
   nodes so far.

Pieces go to machines largest first, each to the machine with the fewest nodes so far. A placement
the user gives (node -> machine) is taken as it is, checked for names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emu.dataplane.partition import components
from emu.net.link import LinkParams


class PlacementError(ValueError):
    """A placement that cannot be made or used; the message says why."""


@dataclass(frozen=True)
class Placement:
    machine: dict[str, str]  # node -> machine
    cut: list[tuple[str, str, float]]  # the links between machines: (a, b, propagation delay s)
    by: str  # "length", "shard" or "given"

    @property
    def lookahead_s(self) -> float:
        """How far (fabric s) a machine may run ahead of the others: the shortest cut link's delay."""
        return min((d for _, _, d in self.cut), default=float("inf"))

    def nodes_on(self, machine: str) -> list[str]:
        return sorted(n for n, m in self.machine.items() if m == machine)


def _delay_s(info: dict[str, Any]) -> float:
    """A link's propagation delay as the fabric will build it (its cable, or its delay)."""
    return LinkParams.parse(**{k: v for k, v in info.items() if k in ("rate", "delay", "distance")}).delay_s


def _bin(pieces: list[list[str]], machines: list[str]) -> dict[str, str]:
    load = dict.fromkeys(machines, 0)
    out = {}
    for piece in pieces:  # largest first
        m = min(machines, key=lambda x: (load[x], machines.index(x)))
        load[m] += len(piece)
        out.update(dict.fromkeys(piece, m))
    return out


def place(topo: Any, machines: list[str], given: dict[str, str] | None = None) -> Placement:
    """`topo`: a Mininet Topo (FabricTopo: switches carry `shard`, links `distance`/`delay`)."""
    if len(set(machines)) != len(machines) or not machines:
        raise PlacementError(f"machines must be distinct names, at least one; got {machines}")
    nodes = list(topo.nodes())
    links = [(a, b, _delay_s(info)) for a, b, info in topo.links(withInfo=True)]
    if given is not None:
        unknown = sorted(set(given) - set(nodes))
        missing = sorted(set(nodes) - set(given))
        strange = sorted(set(given.values()) - set(machines))
        if unknown or missing or strange:
            raise PlacementError(f"placement: unknown nodes {unknown[:5]}, unplaced nodes {missing[:5]}, "
                                 f"unknown machines {strange[:5]}")
        machine, by = dict(given), "given"
    else:
        machine, by = _by_length(nodes, [n for n in nodes if topo.isSwitch(n)], links, machines), "length"
        if machine is None:
            machine, by = _by_shard(topo, nodes, links, machines), "shard"
    cut = [(a, b, d) for a, b, d in links if machine[a] != machine[b]]
    return Placement(machine, cut, by)


def _by_length(nodes: list[str], switches: list[str], links: list[tuple[str, str, float]],
               machines: list[str]) -> dict[str, str] | None:
    switch = set(switches)
    for length in sorted({d for _, _, d in links}, reverse=True):
        pieces = components(nodes, [lk for lk in links if lk[2] < length])
        # A piece without a switch (a host cut off by its own long cable) is no part of a fabric; and the
        # cut must part hosts (buildings, regions), not only peel switches off (an FPF's spines).
        with_hosts = [p for p in pieces if set(p) - switch]
        if len(with_hosts) >= len(machines) and all(switch.intersection(p) for p in pieces):
            return _bin(pieces, machines)
    return None


def _by_shard(topo: Any, nodes: list[str], links: list[tuple[str, str, float]], machines: list[str]) -> dict[str, str]:
    switches = [n for n in nodes if topo.isSwitch(n)]
    shards: dict[int, list[str]] = {}
    for s in switches:
        shards.setdefault(int(topo.nodeInfo(s).get("shard", 0) or 0), []).append(s)
    if len(shards) < len(machines):
        raise PlacementError(f"cannot split this fabric over {len(machines)} machines: no cable length parts it into "
                             f"as many pieces, and it has {len(shards)} switch group(s) (shards); give a placement")
    # Whole shards, in order, in contiguous blocks (planes 0-3 on one machine, 4-7 on the next).
    ordered = [shards[k] for k in sorted(shards)]
    machine: dict[str, str] = {}
    per = len(ordered) / len(machines)
    for i, group in enumerate(ordered):
        machine.update(dict.fromkeys(group, machines[min(len(machines) - 1, int(i / per))]))
    load = {m: sum(1 for v in machine.values() if v == m) for m in machines}
    neighbours: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b, _ in links:
        neighbours[a].append(b)
        neighbours[b].append(a)
    for h in sorted(n for n in nodes if not topo.isSwitch(n)):
        near = [machine[s] for s in neighbours[h] if s in machine] or machines
        m = min(dict.fromkeys(near), key=lambda x: (load[x], machines.index(x)))
        machine[h] = m
        load[m] += 1
    return machine
