"""The engine carrying another data plane's links: wire boxes, and BMv2's link modes."""

from __future__ import annotations

import pytest

from emu import packet as pk
from emu.backends.bmv2.links import LinkModeError, choose_links, wire_name, wire_spec
from emu.dataplane.spec import EngineSpec, SpecError, SwitchSpec
from emu.dataplane.wiring import VirtualFabric
from emu.simtime import PS_PER_S, PS_PER_US, rate_of, ser_ps, to_ps
from emu.units import WIRE_OVERHEAD_BYTES
from tests.helpers import host_port, star
from tests.test_switch import udp4

pytestmark = pytest.mark.usefixtures("both_cores")

RATE, DELAY = 10e9, 3e-6
US = PS_PER_US


def box() -> VirtualFabric:
    """One BMv2 switch's wire box: port 0 the host link, port 1 the handover to simple_switch."""
    return VirtualFabric(wire_spec(star(1, rate=RATE, delay=DELAY)))


def ser(frame: bytes) -> int:
    return ser_ps(len(frame) + WIRE_OVERHEAD_BYTES, rate_of(RATE))


def test_host_to_p4_crosses_the_host_link_once_unchanged():
    vf = box()
    frame = udp4(0, 1, size=1000)
    vf.send("s0", "s0-eth0", frame, t=0)
    vf.run()
    ((t, out),) = vf.received[("s0", wire_name("s0", 0, "w"))]
    assert out == frame  # no MAC rewrite, no TTL: the P4 switch does the switching
    assert t == ser(frame) + to_ps(DELAY)  # the host NIC and link; the handover adds nothing


def test_p4_to_host_is_paced_at_the_link_rate_and_delayed():
    vf = box()
    sw = vf.switches["s0"]
    frame = udp4(1, 0, size=1000)
    for _ in range(5):
        vf.loop.at(0, lambda t, f: sw.ingress(1, t, f), frame)
    vf.run()
    times = [t for t, _ in vf.received[("s0", "s0-eth0")]]
    assert times[0] == ser(frame) + to_ps(DELAY)
    assert all(b - a == ser(frame) for a, b in zip(times, times[1:], strict=False))


def test_wire_queue_overflow_is_counted_not_raised():
    vf = box()
    sw = vf.switches["s0"]
    frame = udp4(1, 0, size=8000)
    n = 2 * (1 << 20) // len(frame)  # twice the box's per-port queue, all at once
    for _ in range(n):
        vf.loop.at(0, lambda t, f: sw.ingress(1, t, f), frame)
    vf.run()
    got = len(vf.received[("s0", "s0-eth0")])
    assert 0 < got < n and sw.ports[0].drops["wire_overflow"] == n - got


def test_wire_spec_keeps_links_and_peers_and_drops_switching():
    native = star(2, rate=RATE, delay=DELAY)
    (w,) = wire_spec(native).switches
    assert [p.ifname for p in w.ports] == ["s0-eth0", "s0-eth1", wire_name("s0", 0, "w"), wire_name("s0", 1, "w")]
    assert w.wires == (2, 3, 0, 1)
    assert [p.peer_kind for p in w.ports] == ["host", "host", "p4", "p4"]
    assert [(p.rate_bps, p.delay_s) for p in w.ports[:2]] == [(RATE, DELAY)] * 2
    assert not w.tables.routes and not w.ports[0].ipv4 and not w.qos.pfc and not w.qos.ecn


def test_wire_names_fit_linux_and_say_emu():
    assert wire_name("p0l0", 3, "b") == "emubp0l0-3"
    long = wire_name("bag-region-east-ss12", 40, "w")
    assert len(long) <= 15 and long.startswith("emuw") and long != wire_name("bag-region-east-ss12", 41, "w")


def test_wires_must_pair_ports_both_ways():
    ports = tuple(host_port(i) for i in range(3))
    with pytest.raises(SpecError, match="wires must pair every port"):
        SwitchSpec(name="w", ports=ports, wires=(1, 2, 0))
    with pytest.raises(SpecError, match="wires must pair every port"):
        EngineSpec(switches=(SwitchSpec(name="w", ports=ports[:2], wires=(0, 1)),))


@pytest.mark.parametrize(("asked", "netem", "pfc", "chosen"), [
    ("auto", True, False, "netem"), ("auto", False, False, "engine"), ("engine", True, False, "engine"),
    ("netem", True, False, "netem"), ("auto", True, True, "engine"), ("netem", True, True, "netem")])
def test_link_mode_choice(asked, netem, pfc, chosen):
    """auto takes the engine when PFC is on: netem honours no pause frame."""
    assert choose_links(asked, netem=netem, pfc=pfc) == chosen


def test_netem_links_without_netem_is_one_clear_error():
    with pytest.raises(LinkModeError, match="no netem.*--links engine"):
        choose_links("netem", netem=False)
    with pytest.raises(LinkModeError, match="auto, netem, engine"):
        choose_links("tc", netem=True)


@pytest.mark.root
def test_engine_links_keep_the_delay_with_another_switch_in_the_middle(no_leftovers):
    """A Linux bridge stands where simple_switch would: the engine carries both host links, so a
    ping crosses four link delays (dilated) on a kernel with no netem."""
    import re

    from emu.bench.lab import wired_pair

    dilation, delay = 1000.0, 2e-6
    with wired_pair("wire", rate_bps=10e9, delay_s=delay, dilation=dilation) as (lab, engine):
        out = lab.exec(0, ["ping", "-c", "5", "-i", "0.05", "-W", "2", "10.9.0.3"]).stdout
        ports = engine.stats()["switches"]["bench"]["ports"]
    rtt_fabric = float(re.search(r"= ([\d.]+)/", out).group(1)) / 1e3 / dilation
    assert 4 * delay <= rtt_fabric < 1.3 * 4 * delay, out
    assert ports["emuwbench-0"]["rx_packets"] >= 5 and ports["emuwbench-1"]["rx_packets"] >= 5  # both ways via BMv2's side


# -- PFC on a P4 switch: the wire box is its MAC ----------------------------------------------

LOSSLESS_TOS = 26 << 2  # DSCP 26 -> traffic class 3


def tagged(frame: bytes, port: int, prio: int, charged: int) -> bytes:
    """What fabric.p4's egress sends for a frame it charged: 01 | bytes | port | priority as source MAC."""
    tag = bytes([1]) + charged.to_bytes(2, "big") + port.to_bytes(2, "big") + bytes([prio])
    return frame[:6] + tag + frame[12:]


def credits(vf: VirtualFabric) -> list[tuple[int, int, int, int]]:
    """(time, port, priority, bytes) of every credit the box handed to the P4 switch."""
    out = []
    for t, f in vf.received.get(("s0", wire_name("s0", 0, "w")), []):
        if f[12:14] == b"\x88\xb5":
            out.append((t, int.from_bytes(f[14:16], "big"), f[16], int.from_bytes(f[17:21], "big")))
    return out


def test_a_charged_frame_leaves_with_the_port_mac_and_its_bytes_come_back_as_credit():
    vf = box()
    sw = vf.switches["s0"]
    frame = udp4(1, 0, size=1000, tos=LOSSLESS_TOS)
    vf.loop.at(0, lambda t, f: sw.ingress(1, t, f), tagged(frame, port=2, prio=3, charged=1034))
    vf.run()
    ((t_out, out),) = vf.received[("s0", "s0-eth0")]
    assert out == frame[:6] + sw.ports[0].mac + frame[12:]  # the port's MAC back, nothing else changed
    ((t_credit, port, prio, nbytes),) = credits(vf)
    assert (port, prio, nbytes) == (2, 3, 1034) and t_credit <= t_out  # once it left, not once it arrived


def test_a_pause_off_the_link_holds_that_priority_and_its_credit_until_xon():
    vf = box()
    sw = vf.switches["s0"]
    lossless, other = udp4(1, 0, size=1000, tos=LOSSLESS_TOS), udp4(1, 0, size=1000)
    vf.loop.at(0, lambda t, f: sw.ingress(0, t, f), pk.pfc_frame(b"\x02" * 6, {3: 0xFFFF}))  # peer: XOFF 3
    for i in range(3):
        vf.loop.at(1 * US, lambda t, f: sw.ingress(1, t, f), tagged(lossless, 1, 3, 1000 + i))
    vf.loop.at(1 * US, lambda t, f: sw.ingress(1, t, f), other)
    vf.loop.at(20 * US, lambda t, f: sw.ingress(0, t, f), pk.pfc_frame(b"\x02" * 6, {3: 0}))  # XON
    vf.run()
    out = vf.received[("s0", "s0-eth0")]
    assert sw.ports[0].pfc_rx == 2 and sw.ports[0].tx.paused_ps(PS_PER_S)[3] == 20 * US  # exactly, in ps
    held = [t for t, f in out if f[15] == LOSSLESS_TOS]
    assert len(held) == 3 and min(held) >= 20 * US  # nothing of class 3 left while paused
    assert [t for t, f in out if f[15] == 0][0] < 20 * US  # the other class went on
    owed = credits(vf)
    assert sum(n for *_, n in owed) == 3000 + 3 and all(t >= 20 * US for t, *_ in owed)


def test_a_pause_from_the_p4_switch_to_a_host_stops_the_host_nic_model():
    vf = box()
    sw = vf.switches["s0"]
    vf.loop.at(0, lambda t, f: sw.ingress(1, t, f), pk.pfc_frame(b"\x02" * 6, {3: 0xFFFF}))
    for _ in range(2):
        vf.send("s0", "s0-eth0", udp4(0, 1, size=1000, tos=LOSSLESS_TOS), t=10 * US)
    vf.loop.at(50 * US, lambda t, f: sw.ingress(1, t, f), pk.pfc_frame(b"\x02" * 6, {3: 0}))
    vf.run()
    assert [f[12:14] for _, f in vf.received[("s0", "s0-eth0")]] == [b"\x88\x08"] * 2  # seen by tcpdump there
    got = [t for t, _ in vf.received[("s0", wire_name("s0", 0, "w"))]]
    assert len(got) == 2 and min(got) >= 50 * US + to_ps(DELAY) and sw.ports[0].pfc_tx == 2
