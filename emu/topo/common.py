"""FabricTopo: what every fabric topology shares, in Mininet's style.

A topology only describes: hosts, fabric switches, and the links between
them with their rate and cable length. Nothing exists until FabricNet
builds it, so every parameter is checked before anything is created. The
built-in fabrics are dataclasses, so their parameters are typed keyword
arguments (`FPFTopo(gpus=8, planes=8, rate="100G")`) validated by `check()`;
a new fabric can be one small `build()`, with parameters as in Mininet.
"""

from __future__ import annotations

import os
import resource
from typing import Any

from mininet.topo import Topo

from emu.dataplane.ring import FABRIC_PORT_RING, HOST_PORT_RING, RING_BUDGET
from emu.net.link import FabricLink
from emu.net.switch import FabricSwitch
from emu.units import UnitError, parse_distance, parse_rate


class TopologyError(ValueError):
    """A topology parameter is impossible; raised before anything is created."""


def check_positive(topo: str, **values: int) -> None:
    for name, v in values.items():
        if v < 1:
            raise TopologyError(f"{topo}: {name} must be at least 1, got {v}")


def check_units(topo: str, *, rates: tuple[str, ...] = (), distances: tuple[str, ...] = ()) -> None:
    try:
        for r in rates:
            if parse_rate(r) <= 0:
                raise TopologyError(f"{topo}: rate must be > 0, got {r!r}")
        for d in distances:
            parse_distance(d)
    except UnitError as exc:
        raise TopologyError(f"{topo}: {exc}") from None


# Beyond the engine's packet rings, what one veth end and one node (its shell, namespace) cost, rounded up.
VETH_END_BYTES = 256 << 10
NODE_BYTES = 8 << 20


def mem_available() -> int:
    """Bytes this machine can still give (MemAvailable), 0 if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


ENGINE_PORT_BYTES = 64 << 10  # a port of the compiled engine with nothing in its kernel: queues, counters
ENGINE_NODE_BYTES = 256 << 10  # a node that is only the engine's (Python objects, tables)


def check_fits(name: str, *, fabric_links: int, host_links: int, nodes: int, kernel: bool = True) -> None:
    """TopologyError if this machine cannot hold the fabric as it will be built: with the hosts' kernels,
    its rings, veths and nodes (shells, namespaces) in half the memory available (the rest is the
    endpoints' and the machine's), and two packet sockets per switch port within the open-file limit a
    worker can raise itself to; without (`kernel` False: fabric-clock jobs only), the engine's ports and
    nodes alone, which have neither rings nor sockets."""
    if not kernel:
        need = (2 * fabric_links + host_links) * ENGINE_PORT_BYTES + nodes * ENGINE_NODE_BYTES
        avail = mem_available()
        if avail and need > avail // 2:
            raise TopologyError(f"{name}: {fabric_links} switch links and {host_links} host links need about "
                                f"{need / 2**30:.1f} GiB even without the hosts' kernels; this machine has "
                                f"{avail / 2**30:.1f} GiB available and a run may take half: make it smaller")
        return
    # Rings shrink when a worker's pass its budget (emu.dataplane.ring.ring_sizes), and there are at most as
    # many workers as cores: what the rings can take is the smaller of the two.
    rings = min(2 * fabric_links * FABRIC_PORT_RING + host_links * HOST_PORT_RING, (os.cpu_count() or 1) * RING_BUDGET)
    need = rings + (2 * fabric_links + host_links) * 2 * VETH_END_BYTES + nodes * NODE_BYTES
    avail = mem_available()
    if avail and need > avail // 2:
        raise TopologyError(f"{name}: {fabric_links} switch links and {host_links} host links need about "
                            f"{need / 2**30:.1f} GiB (packet rings of up to {RING_BUDGET >> 20} MiB per engine "
                            f"worker, {rings / 2**30:.1f} GiB, plus interfaces and nodes); this machine has "
                            f"{avail / 2**30:.1f} GiB available and a run may take half: make it smaller")
    ports = 2 * fabric_links + host_links
    sockets = 2 * ports  # a port's receiving socket and the one it sends on (emu.dataplane.worker)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and sockets + 256 > hard:
        raise TopologyError(f"{name}: {ports} switch ports need {sockets} packet sockets, more than the open-file "
                            f"limit ({hard}, `ulimit -Hn`) allows one engine worker: make it smaller or raise it")


class FabricTopo(Topo):
    """Subclass it and write `build()` with the verbs below. Rates are strings with units ("100G",
    "400Gb/s") or b/s; cable lengths are strings with units ("2m", "20km") or metres, and set the
    link's propagation delay (5 ns/m)."""

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        clash = sorted(set(cls.__dict__.get("__annotations__", {})) & set(dir(Topo)))
        if clash:  # a field named `hosts` would hide Topo.hosts(), which Mininet calls
            raise TypeError(f"{cls.__name__}: parameter names {', '.join(clash)} are taken by Mininet's Topo")

    # What a description may hold (FPF 4096 x 8 has 65 536 links). Whether a run fits this machine (veths
    # and rings with the hosts' kernels, the engine's ports alone without) is check_fits's, asked by FabricNet.
    MAX_LINKS = 150_000

    def __post_init__(self) -> None:
        """After a dataclass subclass's generated __init__: check the parameters, then describe."""
        self.check()
        links = self.links_needed()
        if links > self.MAX_LINKS:  # said before even the description is built
            raise TopologyError(f"{type(self).__name__}: {links} links is more than one machine can emulate "
                                f"(at most {self.MAX_LINKS}); make it smaller")
        Topo.__init__(self)
        self._check_built_size()

    def __init__(self, *args: Any, **params: Any) -> None:
        """A fabric written as Mininet's Topo (parameters as build()'s keywords): described, then its
        size checked, before anything is created."""
        Topo.__init__(self, *args, **params)
        self._check_built_size()

    def _check_built_size(self) -> None:
        links = self.links()
        if len(links) > self.MAX_LINKS:
            raise TopologyError(f"{type(self).__name__}: {len(links)} links is more than one machine "
                                f"can emulate (at most {self.MAX_LINKS})")

    def check_fits(self, *, kernel: bool = True) -> None:
        """TopologyError if this machine cannot hold the fabric built with the hosts' kernels or without
        (check_fits): what FabricNet asks before it makes anything."""
        links = self.links()
        switches = set(self.switches())
        fabric = sum(1 for a, b in links if a in switches and b in switches)
        check_fits(type(self).__name__, fabric_links=fabric, host_links=len(links) - fabric, nodes=len(self.nodes()),
                   kernel=kernel)

    def check(self) -> None:
        """Raise TopologyError for an impossible parameter (nothing exists yet)."""

    def links_needed(self) -> int:
        """How many links the parameters make, reckoned before building (0: not known until built)."""
        return 0

    def host_group(self, host: str) -> int:
        """Which group of near hosts `host` is in: a hierarchical collective (algo "hier") keeps its
        first and last phases inside a group and crosses between groups only in the middle. One group
        unless a topology has far parts (BAG's regions)."""
        return 0

    def switch_group(self, switch: str) -> int | None:
        """The group of hosts (host_group) a switch belongs to, where the topology has several: the links
        between switches of two groups are all that joins them (what a cost model must know of their
        capacity). None: not in one group (one group, or a switch shared by all)."""
        return None

    def addFabricSwitch(self, name: str, *, shard: int = 0, loopback4: str = "", loopback6: str = "",
                        **opts: Any) -> str:
        """A fabric switch. `shard`: switches with the same shard share an engine worker where they
        can (give each plane or region its own); `loopback4`/`loopback6`: its router addresses;
        `sids`: SRv6 SIDs it answers ({"fc00:1::e": "End"})."""
        return self.addSwitch(name, cls=FabricSwitch, shard=shard, loopback4=loopback4, loopback6=loopback6,
                              **opts)

    def addFabricLink(self, a: str, b: str, *, rate: str | float = "400G", cable: str | float = "100m") -> None:
        """A link between two fabric switches; the control plane routes over it."""
        self.addLink(a, b, cls=FabricLink, rate=rate, distance=cable)

    def addHostLink(self, host: str, switch: str, *, rate: str | float = "100G", cable: str | float = "2m",
                    port: int | None = None, net4: str | None = None, net6: str | None = None, slot: int = 0,
                    routes4: tuple[str, ...] | None = None, routes6: tuple[str, ...] | None = None) -> None:
        """A host port on `switch`, in `net4`.0/24 and `net6`::/64: the switch is .1 / ::1, the host
        slot + 2 (hosts on one switch share its subnet, each in its own slot). Without `net4` the
        link gets a subnet of its own from 10.200.0.0/14 and fdee::/16; a host's first link then
        routes those prefixes (10.0.0.0/8, fdee::/16) unless `routes4`/`routes6` say otherwise."""
        first = False
        if net4 is None:
            first = not any(host in (a, b) for a, b in self.links())  # only the automatic plan asks
            n = self.__dict__.get("_auto_nets", 0)
            if n >= 1024:
                raise TopologyError("at most 1024 host links get a subnet of their own: give net4 and net6")
            self._auto_nets = n + 1
            net4, net6, slot = f"10.{200 + n // 256}.{n % 256}", f"fdee:0:{n:x}", 0
            if routes4 is None and first:
                routes4, routes6 = ("10.0.0.0/8",), ("fdee::/16",)
        if net6 is None:
            raise TopologyError(f"{host}-{switch}: give net6 with net4")
        if first and "ip" not in self.nodeInfo(host):  # first link of an automatically addressed host
            self.nodeInfo(host)["ip"] = f"{net4}.{slot + 2}/24"  # not Mininet's 10.0.0.N/8 from its ipBase
        self.addLink(host, switch, port1=port, cls=FabricLink, rate=rate, distance=cable,
                     gw4=f"{net4}.1/24", gw6=f"{net6}::1/64",
                     host_ip4=f"{net4}.{slot + 2}/24", host_ip6=f"{net6}::{slot + 2:x}/64",
                     host_routes4=routes4 or (), host_routes6=routes6 or ())


def host_ports(topo: Topo) -> dict[str, list[tuple[str, float]]]:
    """Per host, (IPv6 address, rate in b/s) of each of its fabric ports in port order: the host's part of
    the topology's own address plan, which MetaRoCE endpoints use as their planes. One pass over the links
    for every host (FPF 4096 x 8 has 32 768 host links; a pass per host was 62 s of a 512 x 8 bring-up)."""
    ports: dict[str, list[tuple[int, str, float]]] = {}
    for a, b, info in topo.links(sort=True, withInfo=True):
        if not info.get("host_ip6"):
            continue
        for host in (a, b):
            if topo.isSwitch(host):
                continue
            got = ports.setdefault(host, [])
            port = info.get("port1") if info.get("node1", a) == host else info.get("port2")
            got.append((port if port is not None else len(got), info["host_ip6"].split("/")[0],
                        parse_rate(info["rate"])))
    return {h: [(addr, rate) for _, addr, rate in sorted(p)] for h, p in ports.items()}
