"""Two hosts joined by one engine switch: the smallest fabric a benchmark can measure."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

from emu.control.model import Group, NextHop, Route, SwitchTables
from emu.dataplane.core import default_core
from emu.dataplane.engine import Engine, new_run_dir
from emu.dataplane.spec import EngineSpec, PortSpec, QosSpec, SwitchSpec
from emu.net.netns import Lab


def host_mac(i: int) -> str:
    return f"02:e0:00:00:01:{i:02x}"


def switch_mac(i: int) -> str:
    return f"02:e0:00:00:02:{i:02x}"


def pair_spec(lab: Lab, *, rate_bps: float, delay_s: float, dilation: float, qos: QosSpec | None = None,
              engine: bool = True) -> EngineSpec:
    """`engine` False: the tables and ports only, for a data plane that is not the engine (no run folder)."""
    tables = SwitchTables()
    ports = []
    for i in range(2):
        tables.groups.append(Group(id=i, members=(NextHop(i, host_mac(i)),)))
        tables.routes.append(Route(f"10.9.{i}.2/32", i))
        ports.append(PortSpec(index=i, ifname=lab.root_if(i), mac=switch_mac(i), rate_bps=rate_bps,
                              delay_s=delay_s, peer_kind="host", peer_mac=host_mac(i),
                              ipv4=(f"10.9.{i}.1/24",)))
    sw = SwitchSpec(name="bench", ports=tuple(ports), tables=tables, qos=qos or QosSpec())
    return EngineSpec(switches=(sw,), dilation=dilation, run_dir=new_run_dir() if engine else "", workers=1,
                      core=default_core())


@contextmanager
def engine_pair(tag: str, *, rate_bps: float, delay_s: float, dilation: float) -> Iterator[tuple[Lab, Engine]]:
    """h0 (10.9.0.2) -- engine switch -- h1 (10.9.1.2); everything removed on exit."""
    with Lab(f"{tag}{os.getpid() % 10000}") as lab:
        for i in range(2):
            lab.add_host(i, mac=host_mac(i), ip4=f"10.9.{i}.2/24", gw4=f"10.9.{i}.1", route4="10.9.0.0/16")
        engine = Engine(pair_spec(lab, rate_bps=rate_bps, delay_s=delay_s, dilation=dilation))
        engine.start()
        try:
            yield lab, engine
        finally:
            engine.stop()


@contextmanager
def bridge_pair(tag: str, *, mtu: int = 1500) -> Iterator[Lab]:
    """The same two hosts on one Linux bridge (10.9.0.2 and 10.9.0.3, fd09::2 and fd09::3, one subnet)."""
    from emu.net.netlink import Netlink

    with Lab(f"{tag}{os.getpid() % 10000}") as lab:
        br = lab.add_bridge(mtu=max(mtu, 1500))
        for i in range(2):
            lab.add_host(i, mac=host_mac(i), ip4=f"10.9.0.{2 + i}/24", ip6=f"fd09::{2 + i}/64")
            with Netlink.here() as root:
                root.set_link(lab.root_if(i), master=br)
            with lab.netlink(i) as nl:
                nl.set_link("eth0", mtu=mtu)
        yield lab



@contextmanager
def wired_pair(tag: str, *, rate_bps: float, delay_s: float, dilation: float) -> Iterator[tuple[Lab, Engine]]:
    """h0 (10.9.0.2) and h1 (10.9.0.3) on a Linux bridge whose two links the engine carries as wires:
    how `--links engine` carries a P4 switch's links, with the bridge standing where simple_switch would."""
    from emu.backends.bmv2.links import EngineLinks
    from emu.net.netlink import Netlink

    with Lab(f"{tag}{os.getpid() % 10000}") as lab:
        for i in range(2):
            lab.add_host(i, mac=host_mac(i), ip4=f"10.9.0.{2 + i}/24")
        spec = pair_spec(lab, rate_bps=rate_bps, delay_s=delay_s, dilation=dilation)
        links = EngineLinks(spec)  # its engine leaves the run folder to its owner: here, this pair
        handover = links.start()
        try:
            br = lab.add_bridge()
            with Netlink.here() as root:
                for name in handover.values():
                    root.set_link(name, master=br)
            assert links.engine is not None
            yield lab, links.engine
        finally:
            links.stop()
            shutil.rmtree(spec.run_dir, ignore_errors=True)


@contextmanager
def bmv2_pair(tag: str, thrift_port: int = 9190) -> Iterator[Lab]:
    """h0 (10.9.0.2) -- simple_switch running p4/fabric.p4 -- h1 (10.9.1.2), the same routes as
    engine_pair from the same table model; static neighbours, as fabric.p4 answers no ARP."""
    from emu.backends.bmv2.cli import table_commands
    from emu.backends.bmv2.switch import Bmv2Process

    with Lab(f"{tag}{os.getpid() % 10000}") as lab:
        for i in range(2):
            lab.add_host(i, mac=host_mac(i), ip4=f"10.9.{i}.2/24", gw4=f"10.9.{i}.1", route4="10.9.0.0/16")
            with lab.netlink(i) as nl:
                nl.add_neighbour("eth0", f"10.9.{i}.1", switch_mac(i))
        sw = pair_spec(lab, rate_bps=1e15, delay_s=0.0, dilation=1.0, engine=False).switches[0]
        proc = Bmv2Process(f"bench-{lab.tag}", [(1, lab.root_if(0)), (2, lab.root_if(1))], thrift_port)
        proc.start()
        try:
            proc.load(table_commands(sw.tables, port_macs=[p.mac for p in sw.ports]))
            yield lab
        finally:
            proc.stop()
