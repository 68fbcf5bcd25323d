"""Small spec builders for data-plane tests: one helper per table write."""

from __future__ import annotations

from emu.control.model import Group, NextHop, Route, SwitchTables
from emu.dataplane.spec import EngineSpec, PortSpec, QosSpec, SwitchSpec


def host_mac(i: int) -> str:
    return f"02:00:00:00:01:{i:02x}"


def port_mac(sw: int, i: int) -> str:
    return f"02:00:00:{sw:02x}:00:{i:02x}"


def host_port(i: int, *, sw: int = 0, rate: float = 100e9, delay: float = 1e-6, name: str = "") -> PortSpec:
    return PortSpec(
        index=i,
        ifname=name or f"s{sw}-eth{i}",
        mac=port_mac(sw, i),
        rate_bps=rate,
        delay_s=delay,
        peer_kind="host",
        peer_mac=host_mac(i),
        ipv4=(f"10.0.{i}.1/24",),
        ipv6=(f"fd00:0:{i}::1/64",),
    )


def add_route(tables: SwitchTables, prefix: str, port: int, mac: str) -> None:
    gid = len(tables.groups)
    tables.groups.append(Group(id=gid, members=(NextHop(port, mac),)))
    tables.routes.append(Route(prefix, gid))


def star(nhosts: int, *, rate: float = 100e9, delay: float = 1e-6, qos: QosSpec | None = None,
         dilation: float = 1.0) -> EngineSpec:
    """One switch, host i on port i at 10.0.i.2 / fd00:0:i::2."""
    tables = SwitchTables()
    for i in range(nhosts):
        add_route(tables, f"10.0.{i}.2/32", i, host_mac(i))
        add_route(tables, f"fd00:0:{i}::2/128", i, host_mac(i))
    sw = SwitchSpec(
        name="s0",
        ports=tuple(host_port(i, rate=rate, delay=delay) for i in range(nhosts)),
        tables=tables,
        qos=qos or QosSpec(),
        loopback4="10.255.0.1",
        loopback6="fd00:ff::1",
    )
    return EngineSpec(switches=(sw,), dilation=dilation)
