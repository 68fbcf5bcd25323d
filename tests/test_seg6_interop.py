"""The engine's SRv6 against Linux's: a kernel seg6local End router in an engine-built policy.

    hA -- A (engine: H.Encaps [L End, B End.DT6]) -- L (Linux namespace: seg6local End) -- B (engine: End.DT6) -- hB

L has no plain route to hB's prefix, so anything that reaches hB crossed L as SRv6.
"""

from __future__ import annotations

import os

import pytest

from emu.cli.doctor import kernel_has_seg6local
from emu.control.model import EncapPolicy, Group, MySid, NextHop, Route, SwitchTables
from emu.dataplane.engine import Engine, new_run_dir
from emu.dataplane.spec import EngineSpec, PortSpec, SwitchSpec
from emu.net.netns import Lab

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() == 0 and not kernel_has_seg6local(),
                                 reason="this kernel has no seg6local routes (CONFIG_IPV6_SEG6_LWTUNNEL unset)")]

MAC = {"hA": "02:5a:00:00:00:01", "hB": "02:5a:00:00:00:02", "L0": "02:5a:00:00:00:10", "L1": "02:5a:00:00:00:11",
       "A0": "02:5a:00:00:0a:00", "A1": "02:5a:00:00:0a:01", "B0": "02:5a:00:00:0b:00", "B1": "02:5a:00:00:0b:01"}


def route(t: SwitchTables, prefix: str, port: int, mac: str) -> None:
    gid = len(t.groups)
    t.groups.append(Group(gid, (NextHop(port, mac),)))
    t.routes.append(Route(prefix, gid))


def port(i: int, ifname: str, mac: str, peer: str, gw6: str) -> PortSpec:
    return PortSpec(index=i, ifname=ifname, mac=mac, rate_bps=100e9, delay_s=1e-6, peer_kind="host",
                    peer_mac=peer, ipv6=(gw6,))


def test_linux_seg6local_end_in_an_engine_policy(no_leftovers):
    with Lab(f"s{os.getpid() % 1000}") as lab:
        lab.add_host(0, mac=MAC["hA"], ip4="10.77.0.2/24", ip6="fd00:a::2/64", gw6="fd00:a::1")
        lab.add_host(1, mac=MAC["hB"], ip4="10.77.1.2/24", ip6="fd00:b::2/64", gw6="fd00:b::1")
        lab.add_host(2, mac=MAC["L0"], ip4="10.77.2.2/24", ip6="fc00:a1::2/64")  # L's eth0, towards A
        l_to_b = lab.add_port(2, "eth1", mac=MAC["L1"], addrs=("fc00:b1::2/64",))
        lab.exec(2, ["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1", "net.ipv6.conf.all.seg6_enabled=1",
                     "net.ipv6.conf.eth0.seg6_enabled=1", "net.ipv6.conf.eth1.seg6_enabled=1"])
        lab.exec(2, ["ip", "-6", "route", "add", "fc00:99::e/128", "encap", "seg6local", "action", "End",
                     "dev", "eth0"])
        lab.exec(2, ["ip", "-6", "route", "add", "fc00:b::/64", "via", "fc00:b1::1", "dev", "eth1"])
        lab.exec(2, ["ip", "-6", "route", "add", "fd00:a::/64", "via", "fc00:a1::1", "dev", "eth0"])
        lab.exec(2, ["ip", "-6", "neigh", "replace", "fc00:b1::1", "lladdr", MAC["B0"], "dev", "eth1"])
        lab.exec(2, ["ip", "-6", "neigh", "replace", "fc00:a1::1", "lladdr", MAC["A1"], "dev", "eth0"])

        a, b = SwitchTables(), SwitchTables()
        route(a, "fd00:a::2/128", 0, MAC["hA"])
        route(a, "fc00:99::/64", 1, MAC["L0"])
        route(a, "fc00:b::/64", 1, MAC["L0"])
        a.encaps.append(EncapPolicy("fd00:b::/64", ("fc00:99::e", "fc00:b::d6"), "fc00:a::1"))
        route(b, "fd00:b::2/128", 1, MAC["hB"])
        route(b, "fd00:a::/64", 0, MAC["L1"])
        b.my_sids.append(MySid("fc00:b::d6", "End.DT6"))
        spec = EngineSpec(switches=(
            SwitchSpec("A", (port(0, lab.root_if(0), MAC["A0"], MAC["hA"], "fd00:a::1/64"),
                             port(1, lab.root_if(2), MAC["A1"], MAC["L0"], "fc00:a1::1/64")), a),
            SwitchSpec("B", (port(0, l_to_b, MAC["B0"], MAC["L1"], "fc00:b1::1/64"),
                             port(1, lab.root_if(1), MAC["B1"], MAC["hB"], "fd00:b::1/64")), b),
        ), dilation=100.0, run_dir=new_run_dir())
        engine = Engine(spec)
        engine.start()
        try:
            r = lab.exec(0, ["ping", "-6", "-c", "3", "-i", "0.1", "-W", "2", "fd00:b::2"], check=False)
            assert r.returncode == 0, r.stdout + r.stderr
            stats = engine.stats()["switches"]
            assert stats["B"]["ports"][l_to_b]["rx_packets"] >= 3  # it came through L
            assert lab.exec(2, ["ip", "-6", "route", "get", "fd00:b::2"], check=False).returncode != 0
        finally:
            engine.stop()
