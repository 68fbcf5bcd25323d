"""SRv6 behaviours on a chain A - B - C, in virtual time: H.Encaps, End, End.X, End.DT6."""

from __future__ import annotations

import pytest
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting
from scapy.layers.l2 import Ether

from emu.control.model import EncapPolicy, Group, MySid, NextHop, Route, SwitchTables
from emu.dataplane.spec import EngineSpec, PortSpec, SwitchSpec
from emu.dataplane.wiring import VirtualFabric

pytestmark = pytest.mark.usefixtures("both_cores")

MAC = {("A", 0): "02:aa:00:00:00:00", ("A", 1): "02:aa:00:00:00:01", ("B", 0): "02:bb:00:00:00:00",
       ("B", 1): "02:bb:00:00:00:01", ("C", 0): "02:cc:00:00:00:00", ("C", 1): "02:cc:00:00:00:01"}
HOST_A, HOST_C = "02:00:00:00:00:0a", "02:00:00:00:00:0c"


def link(sw: str, i: int, peer: str, j: int) -> PortSpec:
    return PortSpec(index=i, ifname=f"{sw}-eth{i}", mac=MAC[(sw, i)], rate_bps=100e9, delay_s=1e-6,
                    peer_kind="switch", peer_switch=peer, peer_port=j)


def host(sw: str, i: int, mac: str, gw6: str) -> PortSpec:
    return PortSpec(index=i, ifname=f"{sw}-eth{i}", mac=MAC[(sw, i)], rate_bps=100e9, delay_s=1e-6,
                    peer_kind="host", peer_mac=mac, ipv6=(gw6,))


def route(t: SwitchTables, prefix: str, port: int, mac: str) -> int:
    gid = len(t.groups)
    t.groups.append(Group(id=gid, members=(NextHop(port, mac),)))
    t.routes.append(Route(prefix, gid))
    return gid


def chain(b_action: str = "End") -> EngineSpec:
    a, b, c = SwitchTables(), SwitchTables(), SwitchTables()
    route(a, "fc00:b::/64", 1, MAC[("B", 0)])
    route(a, "fc00:c::/64", 1, MAC[("B", 0)])
    route(a, "fd00:a::2/128", 0, HOST_A)
    a.encaps.append(EncapPolicy("fd00:c::/64", ("fc00:b::1", "fc00:c::100"), "fc00:a::1"))
    to_c = route(b, "fc00:c::/64", 1, MAC[("C", 0)])
    if b_action == "End.X":
        # No route: End.X must forward over its adjacency without a lookup.
        b.routes.clear()
        b.my_sids.append(MySid("fc00:b::1", "End.X", to_c))
    else:
        b.my_sids.append(MySid("fc00:b::1", "End"))
    route(c, "fd00:c::2/128", 1, HOST_C)
    c.my_sids.append(MySid("fc00:c::100", "End.DT6"))
    return EngineSpec(switches=(
        SwitchSpec("A", (host("A", 0, HOST_A, "fd00:a::1/64"), link("A", 1, "B", 0)), a),
        SwitchSpec("B", (link("B", 0, "A", 1), link("B", 1, "C", 0)), b),
        SwitchSpec("C", (link("C", 0, "B", 1), host("C", 1, HOST_C, "fd00:c::1/64")), c),
    ), dilation=1.0)


def data() -> bytes:
    return bytes(Ether(src=HOST_A, dst=MAC[("A", 0)]) / IPv6(src="fd00:a::2", dst="fd00:c::2", hlim=64)
                 / UDP(sport=1, dport=2) / b"payload")


@pytest.mark.parametrize("b_action", ["End", "End.X"])
def test_encapsulated_at_a_steered_through_b_decapsulated_at_c(b_action):
    vf = VirtualFabric(chain(b_action))
    seen = []
    c = vf.switches["C"]
    orig = c.ingress

    def spy(port, t, frame):
        seen.append(bytes(frame))
        orig(port, t, frame)

    vf.switches["B"].ports[1].tx.deliver = lambda t, f: spy(0, t, f)
    vf.send("A", "A-eth0", data())
    vf.run()
    (arrived,) = seen  # what B sent to C: End updated the SRH and the destination
    outer = Ether(arrived)[IPv6]
    assert outer.src == "fc00:a::1" and outer.dst == "fc00:c::100"
    assert outer[IPv6ExtHdrSegmentRouting].segleft == 0
    (out,) = vf.frames("C", "C-eth1")  # C removed the outer header and routed the inner packet
    inner = Ether(out)
    assert inner.dst == HOST_C and inner[IPv6].src == "fd00:a::2" and inner[IPv6].dst == "fd00:c::2"
    assert IPv6ExtHdrSegmentRouting not in inner and bytes(inner[UDP].payload) == b"payload"


def test_end_with_no_segments_left_is_dropped():
    vf = VirtualFabric(chain())
    b = vf.switches["B"]
    from emu import packet as pk

    srh = pk.srh([pk.ip6("fc00:b::1")], 41, segments_left=0)
    pkt = pk.ipv6_header(pk.ip6("fc00:a::1"), pk.ip6("fc00:b::1"), 43, len(srh)) + srh
    b.ingress(0, 0, bytes.fromhex(MAC[("B", 0)].replace(":", "")) + bytes(6) + b"\x86\xdd" + pkt)
    vf.run()
    assert b.ports[0].drops == {"srv6_segments_left": 1}
