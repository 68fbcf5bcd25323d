"""What every fabric topology shares: validation errors, host links, switches."""

from __future__ import annotations

from typing import Any

from mininet.topo import Topo

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


def add_switch(topo: Topo, name: str, *, shard: int = 0, loopback4: str = "", loopback6: str = "",
               **extra: Any) -> str:
    return topo.addSwitch(name, cls=FabricSwitch, shard=shard, loopback4=loopback4, loopback6=loopback6, **extra)


def host_link(topo: Topo, host: str, switch: str, *, port: int, net4: str, net6: str, slot: int,
              rate: str, distance: str, routes4: tuple[str, ...] = (), routes6: tuple[str, ...] = ()) -> None:
    """A host port in `net4`.0/24 and `net6`::/64; the switch is .1 / ::1, the host slot + 2."""
    topo.addLink(
        host, switch, port1=port, cls=FabricLink, rate=rate, distance=distance,
        gw4=f"{net4}.1/24", gw6=f"{net6}::1/64",
        host_ip4=f"{net4}.{slot + 2}/24", host_ip6=f"{net6}::{slot + 2:x}/64",
        host_routes4=routes4, host_routes6=routes6,
    )


def host_ports(topo: Topo, host: str) -> list[tuple[str, float]]:
    """(IPv6 address, rate in b/s) of each of `host`'s fabric ports in port order: the host's part of
    the topology's own address plan, which MetaRoCE endpoints use as their planes."""
    ports = []
    for a, b, info in topo.links(sort=True, withInfo=True):
        if host in (a, b) and info.get("host_ip6"):
            port = info.get("port1") if info.get("node1", a) == host else info.get("port2")
            ports.append((port if port is not None else len(ports), info["host_ip6"].split("/")[0],
                          parse_rate(info["rate"])))
    return [(addr, rate) for _, addr, rate in sorted(ports)]


def fabric_link(topo: Topo, a: str, b: str, *, rate: str, distance: str) -> None:
    topo.addLink(a, b, cls=FabricLink, rate=rate, distance=distance)
