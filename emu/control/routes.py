"""Routes and next-hop groups computed from the fabric graph.

Every destination (a host address, or a switch's loopback) is attached to
one switch. For each other switch, the next hops toward it are the
neighbours one hop closer on a shortest path (equal-cost multipath), each
weighted by the capacity it can actually carry toward the destination: its
link's rate, capped by what the neighbour itself can pass on. That is the
eBGP link-bandwidth community with cumulative bandwidth: a path through a
thin long-haul link gets a thin share even where its first hop is fat.
Identical member sets share one group.

A host link's subnet (its gateway's network, `Attachment.subnet`) that holds
the addresses of one switch's attachments only is routed as one prefix by
every other switch, as a fabric's leaves announce their subnets: the same
next hops for every address in it, and tables that grow with switches and
subnets rather than with switches x hosts (FPF 512 x 8: 858 624 routes were
the controller's and workers' start). The attached switch keeps a route per
host, to its port.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import networkx as nx

from emu.control.model import EncapPolicy, Group, MySid, NextHop, Route, SwitchTables, checked_route


@dataclass(frozen=True)
class Attachment:
    """A destination prefix reachable through `port` of `switch` (port -1: the switch itself); `subnet`:
    the network of the link it is on (a host link's gateway's), which other switches may route whole."""

    prefix: str
    switch: str
    port: int = -1
    mac: str = ""
    subnet: str = ""


@dataclass
class FabricGraph:
    """Switches and the switch-to-switch links between them, with port numbers and rates."""

    graph: nx.MultiGraph = field(default_factory=nx.MultiGraph)

    def add_switch(self, name: str) -> None:
        self.graph.add_node(name)

    def add_link(self, a: str, a_port: int, a_mac: str, b: str, b_port: int, b_mac: str, rate_bps: float) -> None:
        self.graph.add_edge(a, b, ports={a: (a_port, a_mac), b: (b_port, b_mac)}, rate=rate_bps, up=True)

    def links_between(self, a: str, b: str) -> list[dict]:
        """The attributes (ports, rate, up) of every link between switches a and b; one clear error if none."""
        found = [d for _, v, d in self.graph.edges(a, data=True) if v == b] if a in self.graph else []
        if not found:
            raise ValueError(f"no switch-to-switch link between {a} and {b}")
        return found

    def live(self) -> nx.MultiGraph:
        g = nx.MultiGraph()
        g.add_nodes_from(self.graph.nodes)
        g.add_edges_from((u, v, d) for u, v, d in self.graph.edges(data=True) if d["up"])
        return g


def remote_prefixes(attachments: list[Attachment]) -> dict[str, list[str]]:
    """Per switch, the prefixes every other switch routes to it: each subnet all of whose attached addresses
    are this switch's (in the order first seen), then each attachment of its not in such a subnet."""
    nets: dict[str, ipaddress.IPv4Network | ipaddress.IPv6Network] = {}
    for a in attachments:
        if a.subnet and a.subnet not in nets:
            nets[a.subnet] = ipaddress.ip_network(a.subnet, strict=False)
    by_len: dict[tuple[int, int], dict[int, str]] = {}  # (version, length) -> network address -> subnet
    for text, net in nets.items():
        by_len.setdefault((net.version, net.prefixlen), {})[int(net.network_address)] = text
    owners: dict[str, set[str]] = {}
    for a in attachments:  # every switch that has an address in each subnet (loopbacks and SIDs included)
        net = ipaddress.ip_network(a.prefix, strict=False)
        addr = int(net.network_address)
        for (version, plen), table in by_len.items():
            if version == net.version and plen <= net.prefixlen:
                subnet = table.get(addr >> (net.max_prefixlen - plen) << (net.max_prefixlen - plen))
                if subnet is not None:
                    owners.setdefault(subnet, set()).add(a.switch)
    out: dict[str, list[str]] = {}
    for a in attachments:
        whole = a.subnet and owners.get(a.subnet) == {a.switch}
        prefix = a.subnet if whole else a.prefix
        mine = out.setdefault(a.switch, [])
        if not whole or prefix not in mine:
            mine.append(prefix)
    return out


def compute_tables(fabric: FabricGraph, attachments: list[Attachment], *, spray: bool = False,
                   aggregate: bool = True) -> dict[str, SwitchTables]:
    """Every switch's groups and routes. `aggregate` False: a route per attachment on every switch (what
    tests compare the subnets' routes with).

    One breadth-first search per destination switch, over switches numbered once, each switch's links
    gathered by neighbour once; a switch's next hops toward a destination are worked out once for each
    set of closer neighbours and their capacities (FPF 4096 x 8: 204 800 (switch, destination) pairs, a
    few dozen distinct answers a switch), and the routes of one group toward one destination are made
    once and shared by the switches that use that group (routes are immutable). networkx's search and a
    scan of every link for every pair were 10-27 s of FPF 4096 x 8's bring-up; tests/test_control.py
    holds the tables equal to that reference's on several fabrics."""
    g = fabric.live()
    names = list(g.nodes)
    number = {n: i for i, n in enumerate(names)}
    tables = [SwitchTables() for _ in names]
    group_ids: list[dict[tuple, int]] = [{} for _ in names]
    mode = "spray" if spray else "hash"
    # Each switch's neighbours in the order its links first reach them, each with its links (port, the
    # neighbour's MAC, rate) in the graph's order and their summed rate, summed as the reference sums it.
    nbrs: list[list[tuple[int, float, list[tuple[int, str, float]]]]] = []
    for n in names:
        links: dict[int, list[tuple[int, str, float]]] = {}
        for _, nbr, d in g.edges(n, data=True):
            links.setdefault(number[nbr], []).append((d["ports"][n][0], d["ports"][nbr][1], d["rate"]))
        nbrs.append([(j, sum(r for _, _, r in ls), ls) for j, ls in links.items()])
    adjacent = [[j for j, _, _ in row] for row in nbrs]
    position = [{j: k for k, (j, _, _) in enumerate(row)} for row in nbrs]
    answers: list[dict[tuple, tuple[int, float]]] = [{} for _ in names]  # (closer, caps) -> (group, capacity)

    def group_for(sw: int, hops: tuple[tuple[int, str, float], ...], gmode: str) -> int:
        """The id of `sw`'s group of these next hops (port, MAC, weight), made the first time it is asked."""
        key = (gmode, hops)
        ids = group_ids[sw]
        gid = ids.get(key)
        if gid is None:
            gid = ids[key] = len(ids)
            tables[sw].groups.append(Group(id=gid, members=tuple(NextHop(*h) for h in hops), mode=gmode))
        return gid

    def answer(sw: int, closer: list[int], cap: list[float]) -> tuple[int, float]:
        """`sw`'s group toward a destination whose closer neighbours are `closer`, and the capacity it can
        pass on: the reference's arithmetic, in its order (the neighbours as `sw`'s links first reach them)."""
        members = []
        total = 0.0
        for k in sorted(position[sw][j] for j in closer):
            j, rate, links = nbrs[sw][k]
            usable = min(rate, cap[j])
            total += usable
            members += [(port, mac, round(r * usable / rate / 1e9, 3)) for port, mac, r in links]
        members.sort(key=lambda m: m[0])
        return group_for(sw, tuple(members), mode), total

    by_switch: dict[str, list[Attachment]] = {}
    for a in attachments:
        by_switch.setdefault(a.switch, []).append(a)
    remote = remote_prefixes(attachments) if aggregate else \
        {sw: [a.prefix for a in atts] for sw, atts in by_switch.items()}
    dist = [-1] * len(names)
    cap = [0.0] * len(names)
    for target_name, atts in by_switch.items():
        target = number.get(target_name)
        if target is None:
            continue
        prefixes = [Route(prefix, 0).prefix for prefix in remote[target_name]]  # each checked once
        for a in atts:
            if a.port >= 0:
                tables[target].routes.append(Route(a.prefix, group_for(target, ((a.port, a.mac, 1.0),), "hash")))
        for i in range(len(names)):
            dist[i] = -1
        dist[target] = 0
        cap[target] = float("inf")
        order = [target]
        closer: dict[int, list[int]] = {}  # each switch's neighbours one hop nearer the target
        made: dict[int, list[Route]] = {}  # group id -> the routes toward this target of the switches using it
        for sw in order:  # breadth first: every closer neighbour's capacity is known before it is needed
            d = dist[sw]
            if sw != target:
                near = closer[sw]
                key = (tuple(near), tuple(map(cap.__getitem__, near)))
                known = answers[sw].get(key)
                if known is None:
                    known = answers[sw][key] = answer(sw, near, cap)
                gid, cap[sw] = known
                routes = made.get(gid)
                if routes is None:
                    routes = made[gid] = [checked_route(p, gid) for p in prefixes]
                tables[sw].routes.extend(routes)
            for j in adjacent[sw]:
                if dist[j] < 0:
                    dist[j] = d + 1
                    order.append(j)
                    closer[j] = [sw]
                elif dist[j] == d + 1:
                    closer[j].append(sw)
    return dict(zip(names, tables, strict=True))


@dataclass
class LocalEntries:
    """A switch's own SRv6 entries, kept across route recomputations."""

    my_sids: list[MySid] = field(default_factory=list)
    encaps: list[EncapPolicy] = field(default_factory=list)


def with_local(tables: dict[str, SwitchTables], local: dict[str, LocalEntries]) -> dict[str, SwitchTables]:
    for sw, extra in local.items():
        if sw in tables:
            tables[sw].my_sids = list(extra.my_sids)
            tables[sw].encaps = list(extra.encaps)
    return tables
