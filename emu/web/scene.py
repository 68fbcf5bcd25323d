"""What the live view shows, computed from the engine's counters: a topology laid out by its structure,
snapshots stamped in fabric time, and the same counters as Prometheus metrics.

Nothing here touches the data plane: it reads `engine.stats()` (the workers' own counters, asked
over their control sockets) at the page's rate, and turns counters into rates by difference.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from emu.clock import ClockKind, check_clock


@dataclass(frozen=True)
class Node:
    name: str
    kind: str  # "switch" or "host"
    group: int  # the plane (FPF), region (BAG): switches of a group are drawn side by side
    layer: int  # hops from the nearest host: 0 hosts, 1 leaves, 2 spines, ...
    x: float
    y: float


@dataclass(frozen=True)
class End:
    """One end of a link: its node, and where the engine counts it (the switch and its port) or None."""

    node: str
    switch: str | None
    port: str | None


@dataclass(frozen=True)
class Link:
    id: int
    a: End
    b: End
    rate_bps: float
    delay_s: float = 0.0  # its cable's propagation delay: a long-haul link is drawn with its length


@dataclass
class Topology:
    nodes: list[Node]
    links: list[Link]
    planes: dict[str, int] = field(default_factory=dict)  # switch -> its group, for metric labels

    def to_json(self) -> dict[str, Any]:
        return {"nodes": [n.__dict__ for n in self.nodes],
                "links": [{"id": lk.id, "a": lk.a.node, "b": lk.b.node, "rate_bps": lk.rate_bps, "delay_s": lk.delay_s,
                           "a_port": lk.a.port, "b_port": lk.b.port} for lk in self.links],
                "planes": self.planes}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Topology:
        """What to_json wrote (a running fabric records it for `emu web`): an end with a port is a switch's."""
        def end(node: str, port: str | None) -> End:
            return End(node, node if port else None, port)

        return cls([Node(**n) for n in d["nodes"]],
                   [Link(lk["id"], end(lk["a"], lk["a_port"]), end(lk["b"], lk["b_port"]), float(lk["rate_bps"]),
                         float(lk.get("delay_s", 0.0)))
                    for lk in d["links"]], {k: int(v) for k, v in d.get("planes", {}).items()})


def layout(names: list[str], kinds: dict[str, str], groups: dict[str, int], edges: list[tuple[str, str]]) -> list[Node]:
    """Hosts in a row at the bottom; switches above them by their hop count from the hosts (leaves,
    spines, super-spines), each group (FPF plane, BAG region) in a column band of its own, side by
    side. Coordinates in [0, 1]."""
    nbrs: dict[str, set[str]] = {n: set() for n in names}
    for a, b in edges:
        nbrs[a].add(b)
        nbrs[b].add(a)
    layer = {n: 0 for n in names if kinds[n] == "host"}
    frontier = deque(layer)
    while frontier:
        n = frontier.popleft()
        for m in sorted(nbrs[n]):
            if m not in layer:
                layer[m] = layer[n] + 1
                frontier.append(m)
    for n in names:
        layer.setdefault(n, 1)
    top = max(layer.values(), default=1) or 1
    group_ids = sorted({groups[n] for n in names if kinds[n] == "switch"})
    band = 1.0 / max(1, len(group_ids))
    out = []
    hosts = sorted((n for n in names if kinds[n] == "host"), key=_natural)
    for i, n in enumerate(hosts):
        out.append(Node(n, "host", -1, 0, (i + 0.5) / len(hosts), 0.95))
    for gi, g in enumerate(group_ids):
        for lay in range(1, top + 1):
            row = sorted((n for n in names if kinds[n] == "switch" and groups[n] == g and layer[n] == lay), key=_natural)
            for i, n in enumerate(row):
                out.append(Node(n, "switch", g, lay, gi * band + (i + 0.5) / len(row) * band,
                                0.95 - 0.85 * lay / top))
    return out


def _natural(name: str) -> tuple[Any, ...]:
    """gpu2 before gpu10."""
    head = name.rstrip("0123456789")
    tail = name[len(head):]
    return (head, int(tail) if tail else -1)


def topology_of(net: Any) -> Topology:
    """The drawing of a running FabricNet (Mininet's nodes and links): its switches and hosts, every
    link with the switch port that counts each direction. A fabric switch is a node with a `shard`
    (its plane or region); read so, this module needs nothing of emu.net, which serves it."""
    kinds, groups = {}, {}
    for node in [*net.switches, *net.hosts]:
        is_switch = hasattr(node, "shard")
        kinds[node.name] = "switch" if is_switch else "host"
        groups[node.name] = int(node.shard or 0) if is_switch else -1
    links, edges = [], []
    for i, lk in enumerate(net.links):
        ends = []
        for intf in (lk.intf1, lk.intf2):
            sw = intf.node.name if kinds.get(intf.node.name) == "switch" else None
            ends.append(End(intf.node.name, sw, intf.name if sw else None))
        fabric = getattr(lk, "fabric", None)
        links.append(Link(i, ends[0], ends[1], float(getattr(fabric, "rate_bps", 0.0) or 0.0),
                          float(getattr(fabric, "delay_s", 0.0) or 0.0)))
        edges.append((ends[0].node, ends[1].node))
    names = sorted(kinds)
    return Topology(layout(names, kinds, groups, edges), links,
                    {n: g for n, g in groups.items() if kinds[n] == "switch"})


def topology_of_spec(spec: Any) -> Topology:
    """The drawing of an engine run without Mininet (a bench's pair, a lab's): its switches, and each
    port's link to its peer switch, or to a host named after the port ("h:" + the port)."""
    kinds: dict[str, str] = {}
    groups: dict[str, int] = {}
    links: list[Link] = []
    seen: set[tuple[str, int]] = set()
    for sw in spec.switches:
        kinds[sw.name], groups[sw.name] = "switch", int(sw.worker)
    for sw in spec.switches:
        for p in sw.ports:
            if (sw.name, p.index) in seen:
                continue
            if p.peer_kind == "switch":
                peer = next(s for s in spec.switches if s.name == p.peer_switch)
                seen.add((peer.name, p.peer_port))
                other = End(peer.name, peer.name, peer.ports[p.peer_port].ifname)
            else:
                host = f"h:{p.ifname}"
                kinds[host], groups[host] = "host", -1
                other = End(host, None, None)
            links.append(Link(len(links), End(sw.name, sw.name, p.ifname), other, float(p.rate_bps), float(p.delay_s)))
    names = sorted(kinds)
    return Topology(layout(names, kinds, groups, [(lk.a.node, lk.b.node) for lk in links]), links,
                    {n: g for n, g in groups.items() if kinds[n] == "switch"})


class Snapshots:
    """Snapshots of the fabric from successive `engine.stats()`: per link direction its utilisation
    since the last one, per switch port its queues, pauses, marks, drops and trims, stamped in fabric
    time. A direction is counted where the engine sees it: a switch port's transmitter, or for a
    host's way in, the host NIC model at the switch port."""

    def __init__(self, topo: Topology, clock: str | ClockKind = ClockKind.WALL) -> None:
        self.topo, self.clock = topo, check_clock(clock)
        self.last: dict[tuple[int, str], tuple[float, int]] = {}  # (link, direction) -> (fabric s, bytes)
        self.last_paused: dict[str, list[float]] = {}

    def take(self, stats: dict[str, Any]) -> dict[str, Any]:
        fabric_s = fabric_time(stats)
        sw = stats["switches"]
        links, ports = [], {}
        for lk in self.topo.links:
            row: dict[str, Any] = {"id": lk.id, "up": True}
            for direction, src, dst in (("ab", lk.a, lk.b), ("ba", lk.b, lk.a)):
                nbytes = _tx_bytes(sw, src, dst)
                util = None
                if nbytes is not None:
                    prev = self.last.get((lk.id, direction))
                    if prev is not None and fabric_s > prev[0] and lk.rate_bps:
                        util = max(0.0, (nbytes - prev[1]) * 8 / (fabric_s - prev[0]) / lk.rate_bps)
                    self.last[(lk.id, direction)] = (fabric_s, nbytes)
                row[direction] = util
            for end in (lk.a, lk.b):
                if end.switch is not None:
                    p = sw.get(end.switch, {}).get("ports", {}).get(end.port)
                    if p is not None:
                        row["up"] = row["up"] and bool(p.get("up", True))
                        ports[f"{end.switch}:{end.port}"] = self._port(f"{end.switch}:{end.port}", p)
            links.append(row)
        jobs: dict[int, dict[str, Any]] = {}  # a split fabric's job runs a part on every worker: once
        for w in stats.get("workers", []):
            for j in w.get("jobs", []):
                jobs.setdefault(j["job"], j)
        return {"fabric_s": fabric_s, "links": links, "ports": ports, "fidelity": fidelity_line(stats, self.clock),
                "jobs": [jobs[k] for k in sorted(jobs)]}

    def _held(self, key: str, paused: list[float]) -> list[bool]:
        """Per priority, whether this transmitter was held by a PFC pause since the last snapshot."""
        before = self.last_paused.get(key, paused)
        self.last_paused[key] = paused
        return [a > b for a, b in zip(paused, before, strict=False)]

    def _port(self, key: str, p: dict[str, Any]) -> dict[str, Any]:
        paused = list(p.get("paused_s", []))
        nic = p.get("host_nic") or {}
        # `pausing`: the port's transmitter was held by its peer's pause; `host_pausing`: the host's NIC
        # was held by this port's (its switch's) pause.
        return {"queue_bytes": p.get("queue_bytes", []), "queue_hwm": p.get("queue_hwm", []),
                "pausing": self._held(key, paused), "paused_s": paused,
                "host_pausing": self._held(key + ":host", list(nic.get("paused_s", []))),
                "pfc_tx": p.get("pfc_tx", 0), "pfc_rx": p.get("pfc_rx", 0), "ecn_marked": p.get("ecn_marked", 0),
                "drops": p.get("drops", {}), "trimmed": sum(p.get("trimmed", [])), "up": p.get("up", True),
                "degraded": p.get("degraded")}


def _tx_bytes(sw: dict[str, Any], src: End, dst: End) -> int | None:
    if src.switch is not None:  # the switch port's transmitter carries this direction
        p = sw.get(src.switch, {}).get("ports", {}).get(src.port)
        return None if p is None else int(p["tx_bytes"])
    if dst.switch is not None:  # a host's way in: the NIC model at the switch port
        p = sw.get(dst.switch, {}).get("ports", {}).get(dst.port)
        nic = None if p is None else p.get("host_nic")
        return None if nic is None else int(nic["tx_bytes"])
    return None


def fabric_time(stats: dict[str, Any]) -> float:
    """The fabric's time now: the furthest worker's, in fabric seconds on either clock (its loop's own)."""
    return max((w["fabric_now_s"] for w in stats.get("workers", [])), default=0.0)


def fidelity_line(stats: dict[str, Any], clock: str | ClockKind = ClockKind.WALL) -> str:
    """The running fabric's fidelity in one line: on the fabric clock nothing can be late."""
    if check_clock(clock) is ClockKind.FABRIC:
        return "fabric clock: exact (the engine keeps its own time; nothing can be late)"
    d = float(stats.get("dilation", 1.0))
    worst = max((w.get("fidelity", {}).get("p99_s", 0.0) or 0.0 for w in stats.get("workers", [])), default=0.0)
    return f"D={d:g}; engine lateness p99 {worst * 1e6:.1f} us (wall)"


class FabricCollector:
    """prometheus_client collector: the engine's counters at scrape time, labelled by plane (the
    switch's group), switch, port and priority."""

    def __init__(self, topo: Topology, stats: Any) -> None:
        self.topo, self.stats = topo, stats

    def collect(self) -> list[Metric]:
        st = self.stats()
        fam: dict[str, Metric] = {
            "tx": CounterMetricFamily("emu_port_tx_bytes", "bytes a switch port sent", labels=["plane", "switch", "port"]),
            "rx": CounterMetricFamily("emu_port_rx_bytes", "bytes a switch port received", labels=["plane", "switch", "port"]),
            "q": GaugeMetricFamily("emu_port_queue_bytes", "bytes queued at a port, per priority",
                                   labels=["plane", "switch", "port", "priority"]),
            "paused": CounterMetricFamily("emu_port_paused_seconds", "fabric seconds a port's priority was held by PFC",
                                          labels=["plane", "switch", "port", "priority"]),
            "pfc_tx": CounterMetricFamily("emu_port_pfc_sent", "PFC frames a port sent", labels=["plane", "switch", "port"]),
            "pfc_rx": CounterMetricFamily("emu_port_pfc_received", "PFC frames a port received",
                                          labels=["plane", "switch", "port"]),
            "ecn": CounterMetricFamily("emu_port_ecn_marked", "packets a port marked CE", labels=["plane", "switch", "port"]),
            "drops": CounterMetricFamily("emu_port_drops", "packets a port dropped, by reason",
                                         labels=["plane", "switch", "port", "reason"]),
            "trim": CounterMetricFamily("emu_port_trimmed", "packets a port trimmed, by the priority they had",
                                        labels=["plane", "switch", "port", "priority"]),
            "up": GaugeMetricFamily("emu_port_up", "1 if the port's link is up", labels=["plane", "switch", "port"]),
        }
        for name, s in sorted(st["switches"].items()):
            plane = str(self.topo.planes.get(name, 0))
            for port, p in sorted(s.get("ports", {}).items()):
                base = [plane, name, port]
                fam["tx"].add_metric(base, p.get("tx_bytes", 0))
                fam["rx"].add_metric(base, p.get("rx_bytes", 0))
                fam["pfc_tx"].add_metric(base, p.get("pfc_tx", 0))
                fam["pfc_rx"].add_metric(base, p.get("pfc_rx", 0))
                fam["ecn"].add_metric(base, p.get("ecn_marked", 0))
                fam["up"].add_metric(base, 1.0 if p.get("up", True) else 0.0)
                for prio, v in enumerate(p.get("queue_bytes", [])):
                    fam["q"].add_metric([*base, str(prio)], v)
                for prio, v in enumerate(p.get("paused_s", [])):
                    fam["paused"].add_metric([*base, str(prio)], v)
                for prio, v in enumerate(p.get("trimmed", [])):
                    fam["trim"].add_metric([*base, str(prio)], v)
                for reason, v in sorted(p.get("drops", {}).items()):
                    fam["drops"].add_metric([*base, reason], v)
        now = GaugeMetricFamily("emu_fabric_seconds", "the fabric's time now (fabric seconds)")
        now.add_metric([], fabric_time(st))
        return [*fam.values(), now]
