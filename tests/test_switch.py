"""The switch pipeline in virtual time: exact expected packets, no root needed."""

from __future__ import annotations

import pytest
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import ICMPv6EchoReply, ICMPv6EchoRequest, ICMPv6ND_NA, ICMPv6ND_NS, IPv6
from scapy.layers.l2 import ARP, Ether

from emu import packet as pk
from emu.dataplane.spec import EcnSpec, QosSpec
from emu.dataplane.wiring import VirtualFabric
from emu.simtime import PS_PER_US, rate_of, ser_ps, to_ps
from emu.units import WIRE_OVERHEAD_BYTES
from tests.helpers import host_mac, port_mac, star

pytestmark = pytest.mark.usefixtures("both_cores")


def udp4(src: int, dst: int, size: int = 100, tos: int = 0, ttl: int = 64, sport: int = 1000) -> bytes:
    pkt = (
        Ether(src=host_mac(src), dst=port_mac(0, src))
        / IP(src=f"10.0.{src}.2", dst=f"10.0.{dst}.2", tos=tos, ttl=ttl)
        / UDP(sport=sport, dport=4791)
        / (b"x" * size)
    )
    return bytes(pkt)


def test_ipv4_forwarding_rewrites_macs_ttl_and_checksum():
    tb = VirtualFabric(star(2))
    tb.send("s0", "s0-eth0", udp4(0, 1))
    tb.run()
    (out,) = tb.frames("s0", "s0-eth1")
    e = Ether(out)
    assert e.dst == host_mac(1) and e.src == port_mac(0, 1)
    assert e[IP].ttl == 63
    chk = e[IP].chksum
    del e[IP].chksum
    assert IP(bytes(e[IP]))[IP].chksum == chk
    assert bytes(e[UDP].payload) == b"x" * 100


def test_link_rate_and_delay_are_applied_on_both_hops():
    rate, delay = 100e9, 1e-6
    tb = VirtualFabric(star(2, rate=rate, delay=delay))
    frame = udp4(0, 1, size=1000)
    for _ in range(10):
        tb.send("s0", "s0-eth0", frame, t=0)
    tb.run()
    times = [t for t, _ in tb.received[("s0", "s0-eth1")]]
    ser = ser_ps(len(frame) + WIRE_OVERHEAD_BYTES, rate_of(rate))
    # First frame: serialised and propagated on the host link, then on the switch's egress: exact, in ps.
    assert times[0] == 2 * ser + 2 * to_ps(delay)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert gaps == [ser] * 9


@pytest.mark.parametrize("dilation", [1.0, 1000.0])
def test_a_switch_keeps_fabric_time_whatever_the_dilation(dilation):
    """D paces the loop against the wall (emu.dataplane.loop.EngineLoop); the switches' rates and delays are
    the fabric's, so a frame's time through them is the same at every D, to the bit."""
    tb = VirtualFabric(star(2, dilation=dilation))
    tb.send("s0", "s0-eth0", udp4(0, 1, size=1000), t=0)
    tb.run()
    (t, _), = tb.received[("s0", "s0-eth1")]
    ser = (1042 + WIRE_OVERHEAD_BYTES) * 80  # frame is 1042 bytes; 80 ps a byte at 100 Gb/s
    assert t == 2 * ser + 2 * PS_PER_US


def test_arp_request_for_gateway_is_answered():
    tb = VirtualFabric(star(1))
    req = Ether(src=host_mac(0), dst="ff:ff:ff:ff:ff:ff") / ARP(
        op=1, hwsrc=host_mac(0), psrc="10.0.0.2", pdst="10.0.0.1")
    tb.send("s0", "s0-eth0", bytes(req))
    tb.run()
    (out,) = tb.frames("s0", "s0-eth0")
    a = Ether(out)[ARP]
    assert a.op == 2 and a.hwsrc == port_mac(0, 0) and a.psrc == "10.0.0.1" and a.pdst == "10.0.0.2"


def test_arp_for_other_address_is_ignored():
    tb = VirtualFabric(star(1))
    req = Ether(src=host_mac(0), dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, psrc="10.0.0.2", pdst="10.0.0.9")
    tb.send("s0", "s0-eth0", bytes(req))
    tb.run()
    assert tb.frames("s0", "s0-eth0") == []


def test_ping_to_switch_address_gets_echo_reply():
    tb = VirtualFabric(star(1))
    ping = Ether(src=host_mac(0), dst=port_mac(0, 0)) / IP(src="10.0.0.2", dst="10.0.0.1") / ICMP(id=7, seq=3) / b"hi"
    tb.send("s0", "s0-eth0", bytes(ping))
    tb.run()
    (out,) = tb.frames("s0", "s0-eth0")
    r = Ether(out)
    assert r[IP].src == "10.0.0.1" and r[IP].dst == "10.0.0.2"
    assert r[ICMP].type == 0 and r[ICMP].id == 7 and r[ICMP].seq == 3 and bytes(r[ICMP].payload) == b"hi"


def test_ttl_one_gets_time_exceeded_from_the_switch():
    tb = VirtualFabric(star(2))
    tb.send("s0", "s0-eth0", udp4(0, 1, ttl=1))
    tb.run()
    assert tb.frames("s0", "s0-eth1") == []
    (out,) = tb.frames("s0", "s0-eth0")
    r = Ether(out)
    assert r[ICMP].type == 11 and r[IP].src == "10.0.0.1" and r[IP].dst == "10.0.0.2"


def test_ipv6_neighbour_solicitation_and_forwarding():
    tb = VirtualFabric(star(2))
    ns = (Ether(src=host_mac(0), dst="33:33:ff:00:00:01")
          / IPv6(src="fd00:0:0::2", dst="ff02::1:ff00:1", hlim=255)
          / ICMPv6ND_NS(tgt="fd00:0:0::1"))
    tb.send("s0", "s0-eth0", bytes(ns))
    data = (Ether(src=host_mac(0), dst=port_mac(0, 0)) / IPv6(src="fd00:0:0::2", dst="fd00:0:1::2", hlim=9)
            / UDP(sport=5, dport=6) / b"abc")
    tb.send("s0", "s0-eth0", bytes(data))
    tb.run()
    (na,) = tb.frames("s0", "s0-eth0")
    assert Ether(na)[ICMPv6ND_NA].tgt == "fd00::1"
    (fwd,) = tb.frames("s0", "s0-eth1")
    assert Ether(fwd)[IPv6].hlim == 8 and Ether(fwd).dst == host_mac(1)


def test_ipv6_echo_to_switch():
    tb = VirtualFabric(star(1))
    ping = Ether(src=host_mac(0), dst=port_mac(0, 0)) / IPv6(src="fd00:0:0::2", dst="fd00:0:0::1") / ICMPv6EchoRequest(id=1, seq=2)
    tb.send("s0", "s0-eth0", bytes(ping))
    tb.run()
    (out,) = tb.frames("s0", "s0-eth0")
    assert Ether(out)[ICMPv6EchoReply].seq == 2


@pytest.mark.parametrize("frame", [
    b"",
    b"\x00" * 13,
    bytes.fromhex("020000000000" "020000000100" "0800") + b"\x45\x00",
    bytes.fromhex("020000000000" "020000000100" "0800") + b"\x4f" + b"\x00" * 30,
    bytes.fromhex("020000000000" "020000000100" "86dd") + b"\x60" + b"\x00" * 10,
    bytes.fromhex("0180c2000001" "020000000100" "8808") + b"\x01",
    bytes.fromhex("020000000000" "020000000100" "8100") + b"\x00",
])
def test_malformed_frames_are_dropped_and_counted(frame):
    tb = VirtualFabric(star(2))
    sw = tb.switches["s0"]
    sw.ingress(0, 0, frame)
    tb.run()
    assert sum(sw.ports[0].drops.values()) == 1
    assert tb.frames("s0", "s0-eth1") == []


def test_pfc_frame_pauses_the_priority_it_names():
    tb = VirtualFabric(star(2))
    sw = tb.switches["s0"]
    sw.ingress(1, 0, pk.pfc_frame(pk.mac_bytes(host_mac(1)), {3: 0xFFFF}))
    tb.send("s0", "s0-eth0", udp4(0, 1, tos=26 << 2), t=0)  # class 3: paused
    tb.send("s0", "s0-eth0", udp4(0, 1, tos=0), t=0)  # class 0: not paused
    tb.run(until=100 * PS_PER_US)
    (first,) = tb.frames("s0", "s0-eth1")
    assert Ether(first)[IP].tos == 0
    sw.ingress(1, tb.loop.now, pk.pfc_frame(pk.mac_bytes(host_mac(1)), {3: 0}))  # XON
    tb.run()
    assert len(tb.frames("s0", "s0-eth1")) == 2
    assert sw.ports[1].pfc_rx == 2
    assert sw.stats(tb.loop.now)["ports"]["s0-eth1"]["paused_s"][3] == 1e-4  # paused 0 to 100 us, exactly


def incast(pfc: bool, senders: int = 4, packets: int = 400):
    qos = QosSpec(pfc=pfc, buffer_per_port=128 * 1024)
    tb = VirtualFabric(star(senders + 1, qos=qos))
    for s in range(1, senders + 1):
        for i in range(packets):
            tb.send("s0", f"s0-eth{s}", udp4(s, 0, size=1000, tos=26 << 2, sport=1000 + i), t=0)
    tb.run()
    return tb, tb.switches["s0"]


def test_incast_with_pfc_is_lossless_and_sends_pause_frames():
    tb, sw = incast(pfc=True)
    assert len(tb.frames("s0", "s0-eth0")) == 4 * 400
    assert sum(p.drops_tc[3] for p in sw.ports) == 0
    assert sum(p.pfc_tx for p in sw.ports) > 0
    # The hosts saw real 802.1Qbb frames on their links.
    pauses = [f for f in tb.frames("s0", "s0-eth1") if f[12:14] == b"\x88\x08"]
    assert pauses and pk.parse_pfc(pauses[0]) == {3: 0xFFFF}
    assert sw.mmu.used == 0 and sw.mmu.shared_used == 0


def test_incast_without_pfc_drops_in_the_same_class():
    tb, sw = incast(pfc=False)
    assert sum(p.drops_tc[3] for p in sw.ports) > 0
    assert sum(p.pfc_tx for p in sw.ports) == 0
    assert len(tb.frames("s0", "s0-eth0")) < 4 * 400


def test_ecn_marks_ect_packets_above_kmax_only():
    qos = QosSpec(ecn={0: EcnSpec(kmin=2000, kmax=4000, pmax=0.0)}, pfc=False)
    tb = VirtualFabric(star(3, qos=qos))
    for s in (1, 2):
        for i in range(20):
            tb.send("s0", f"s0-eth{s}", udp4(s, 0, size=1000, tos=0x02, sport=i), t=0)
    for _ in range(5):
        tb.send("s0", "s0-eth1", udp4(1, 0, size=1000, tos=0x00, sport=99), t=0)
    tb.run()
    frames = [Ether(f) for f in tb.frames("s0", "s0-eth0")]
    marked = [f for f in frames if f[IP].tos & 3 == 3]
    assert marked and all(f[IP].tos == 3 for f in marked)
    assert not any(f[IP].tos & 3 == 3 for f in frames if f[UDP].sport == 99)
    # The queue only grows here, so in departure order the ECT frames are first unmarked (they found
    # it below Kmax; pmax 0 marks nothing between Kmin and Kmax), then all marked.
    ect = [f[IP].tos & 3 == 3 for f in frames if f[UDP].sport != 99]
    unmarked = ect.index(True)
    assert ect == [False] * unmarked + [True] * (len(ect) - unmarked), ect
    # Two inputs into one output at the same rate: the queue grows a frame per two arrivals, so
    # about 2 x Kmax / 1 KB frames find it below Kmax. A switch marking from Kmin would mark from ~4.
    assert 7 <= unmarked <= 10, ect
    assert tb.switches["s0"].ports[0].ecn_marked == len(marked)
    for f in marked:  # checksum still right after the rewrite
        c = f[IP].chksum
        del f[IP].chksum
        assert IP(bytes(f[IP])).chksum == c


def test_dwrr_shares_by_weight_and_strict_goes_first():
    from emu.dataplane.loop import Loop
    from emu.dataplane.pipe import Transmitter

    loop = Loop()
    out = []
    tx = Transmitter(loop, name="t", rate_bps=1e9, delay_ps=0, deliver=lambda t, f: out.append(f[0]),
                     strict=(7,), weights=(3, 1, 1, 1, 1, 1, 1, 1))
    for _ in range(40):
        tx.enqueue(0, 0, bytes([0]) * 1000)
        tx.enqueue(0, 1, bytes([1]) * 1000)
    tx.enqueue(0, 7, bytes([7]) * 1000)
    loop.run()
    first = out[1:41]  # the frame already on the wire went first; then strict, then 3:1
    assert out[1] == 7
    assert first.count(0) == pytest.approx(3 * first.count(1), abs=3)


def test_frames_in_flight_land_where_the_link_delivered_when_they_left(both_cores):
    """A frame in flight goes where its link delivered when it left, as the reference binds it
    (loop.at(arrive, deliver, frame)), even when deliver is set again meanwhile and nothing else holds the
    old target: the compiled link's flights hold it borrowed, and the link keeps it for them."""
    import gc
    import weakref

    from emu.dataplane.loop import Loop
    from emu.dataplane.pipe import Transmitter

    if both_cores == "native":
        from emu.dataplane._core import Transmitter  # noqa: F811
    loop = Loop(core=both_cores)
    old, new = [], []

    class Target:  # a target only the link refers to
        def __init__(self, into):
            self.into = into

        def __call__(self, t, frame):
            self.into.append((t, frame[0]))

    tx = Transmitter(loop, name="t", rate_bps=1e9, delay_ps=10 * PS_PER_US, deliver=Target(old))
    for i in range(3):
        tx.enqueue(0, 0, bytes([i]) * 100)
    loop.run(until=5 * PS_PER_US // 2)  # all three have left (0.99 us each at 1 Gb/s), none landed
    gone = weakref.ref(tx.deliver)
    tx.deliver = Target(new)
    gc.collect()
    assert gone() is not None, "the target of frames in flight was let go of"
    tx.enqueue(loop.clock(), 0, bytes([9]) * 100)
    loop.run()
    assert [f for _, f in old] == [0, 1, 2] and [f for _, f in new] == [9]
    assert all(t >= 10 * PS_PER_US for t, _ in old)


def test_frames_in_flight_to_a_switch_port_enter_by_it_after_the_link_is_pointed_elsewhere(both_cores):
    """A frame in flight to a switch's port enters by that port even when the link's deliver is set to
    another port meanwhile and nothing else holds the old target. On the compiled core that is its fast
    path: the flight holds the switch (borrowed) and the port's index, not the Target."""
    import gc

    from emu.dataplane.pipe import Transmitter

    if both_cores == "native":
        from emu.dataplane._core import Transmitter  # noqa: F811
    tb = VirtualFabric(star(3))
    sw = tb.switches["s0"]
    tx = Transmitter(tb.loop, name="t", rate_bps=1e9, delay_ps=10 * PS_PER_US, deliver=sw.wire_target(1))
    for i in range(3):
        tx.enqueue(0, 0, udp4(1, 0, sport=i))
    tb.run(until=5 * PS_PER_US)  # all three have left (1.3 us each at 1 Gb/s), none landed
    assert sw.ports[1].rx_packets == 0
    tx.deliver = sw.wire_target(2)
    gc.collect()
    tx.enqueue(tb.loop.clock(), 0, udp4(2, 0, sport=9))
    tb.run()
    assert (sw.ports[1].rx_packets, sw.ports[2].rx_packets) == (3, 1)
    got = [(t, Ether(f)) for t, f in tb.received[("s0", "s0-eth0")]]
    assert [(f[IP].src, f[UDP].sport) for _, f in got] == [("10.0.1.2", i) for i in range(3)] + [("10.0.2.2", 9)]
    assert all(t >= 10 * PS_PER_US for t, _ in got)


def test_a_degrade_that_cannot_be_leaves_the_link_as_it_was(both_cores):
    """A seed random.Random refuses fails the whole degrade on either core's link: not a rate changed, nor
    a loss without its stream (the compiled link's stream is made before anything changes)."""
    from emu.dataplane.loop import Loop
    from emu.dataplane.pipe import Transmitter

    if both_cores == "native":
        from emu.dataplane._core import Transmitter  # noqa: F811
    loop = Loop(core=both_cores)
    out = []
    tx = Transmitter(loop, name="t", rate_bps=1e9, delay_ps=1000, deliver=lambda t, f: out.append(t))
    with pytest.raises(TypeError):
        tx.degrade(loss=0.5, rate_bps=5e8, extra_delay_ps=7, seed=[1])
    assert (tx.rate_bps, tx.delay_ps, tx.loss, tx.rng) == (rate_of(1e9), 1000, 0.0, None)
    tx.degrade(loss=0.5, rate_bps=0, extra_delay_ps=0, seed=3)
    tx.degrade(loss=0.0, rate_bps=0, extra_delay_ps=0, seed=3)  # and back: the stream let go of
    for _ in range(10):
        tx.enqueue(0, 0, bytes(100))
    loop.run()
    assert len(out) == 10 and tx.rng is None
