"""The fabric clock across machines, its core in virtual time (issue 24): switches in partitions, each on
its own schedule, joined by channels that carry a cut link's frames with their arrival time, run in
windows of the lookahead. Packet in, packet out: the same frames at the same times as one schedule."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emu.control.model import SwitchTables
from emu.dataplane.partition import PartitionedFabric
from emu.dataplane.spec import EngineSpec, PortSpec, SpecError, SwitchSpec
from emu.dataplane.windows import LookaheadError
from emu.dataplane.wiring import VirtualFabric
from emu.simtime import to_ps
from tests.helpers import add_route, host_mac, host_port, port_mac

LONG_HAUL = 100e-6  # 20 km of fibre between the two switches


def two_sites(host_rate: float = 25e9) -> EngineSpec:
    """s0: hosts 0-2 and a 20 km link to s1; s1: that link and host 3 at `host_rate` (a 3:1 incast, and
    a slower last hop: s1's queue fills and it pauses s0 across the long link)."""
    s0, s1 = SwitchTables(), SwitchTables()
    for i in range(3):
        add_route(s0, f"10.0.{i}.2/32", i, host_mac(i))
        add_route(s1, f"10.0.{i}.2/32", 0, port_mac(0, 3))
    add_route(s0, "10.0.3.2/32", 3, port_mac(1, 0))
    add_route(s1, "10.0.3.2/32", 1, host_mac(3))
    trunk = {"rate_bps": 100e9, "delay_s": LONG_HAUL, "peer_kind": "switch"}
    a = SwitchSpec("s0", (*(host_port(i) for i in range(3)),
                          PortSpec(3, "s0-eth3", port_mac(0, 3), peer_switch="s1", peer_port=0, **trunk)), s0)
    h3 = host_port(3, sw=1, rate=host_rate)
    b = SwitchSpec("s1", (PortSpec(0, "s1-eth0", port_mac(1, 0), peer_switch="s0", peer_port=3, **trunk),
                          PortSpec(1, "s1-eth1", h3.mac, h3.rate_bps, h3.delay_s, "host", host_mac(3), ipv4=h3.ipv4)), s1)
    return EngineSpec(switches=(a, b), dilation=1.0)


def incast(fabric: VirtualFabric | PartitionedFabric, frames: int = 300) -> None:
    for i in range(3):
        pkt = bytes(Ether(src=host_mac(i), dst=port_mac(0, i)) / IP(src=f"10.0.{i}.2", dst="10.0.3.2", tos=26 << 2)
                    / UDP(sport=1000 + i, dport=9000) / bytes(1000))
        for _ in range(frames):
            fabric.send("s0", f"s0-eth{i}", pkt, 0)


def test_two_partitions_deliver_the_same_frames_at_the_same_times_as_one_schedule_pfc_across_the_cut():
    one = VirtualFabric(two_sites())
    incast(one)
    one.loop.run()
    split = PartitionedFabric(two_sites(), {"s0": 0, "s1": 1})
    incast(split)
    split.run()
    got_one, got_split = one.received[("s1", "s1-eth1")], split.received[("s1", "s1-eth1")]
    assert len(got_one) == 900 and got_split == got_one  # every frame, same bytes, same fabric time
    for fab in (one, split):
        s0, s1 = fab.switches["s0"].stats(0), fab.switches["s1"].stats(0)
        assert s1["ports"]["s1-eth0"]["pfc_tx"] > 0  # s1 paused s0 across the long link ...
        assert s0["ports"]["s0-eth3"]["pfc_rx"] == s1["ports"]["s1-eth0"]["pfc_tx"]  # ... and every pause arrived
        assert not any(sum(p.get("drops", {}).values()) for s in (s0, s1) for p in s["ports"].values())
    assert split.lookahead == to_ps(LONG_HAUL) and split.handed > 900  # data and pause frames crossed
    # a window per lookahead of fabric time, no more: 409 us of traffic in 5 windows of 100 us
    assert split.windows <= got_split[-1][0] / to_ps(LONG_HAUL) + 2


def test_a_window_longer_than_the_shortest_cut_link_is_caught_not_run():
    """Causality is checked, not assumed: with windows of twice the cable's delay, a frame would arrive
    inside its receiver's past window; the run stops saying so."""
    split = PartitionedFabric(two_sites(), {"s0": 0, "s1": 1}, lookahead=2 * to_ps(LONG_HAUL))
    incast(split, frames=10)
    with pytest.raises(LookaheadError, match="lookahead was broken"):
        split.run()


def test_a_partition_must_place_every_switch_and_be_joined_by_a_delay():
    with pytest.raises(SpecError, match="missing"):
        PartitionedFabric(two_sites(), {"s0": 0})
    with pytest.raises(SpecError, match="N >= 2"):
        PartitionedFabric(two_sites(), {"s0": 0, "s1": 0})


def _pair(lookahead: int = 10):
    """Two parts' Windows joined by calls (the partitions' transport): what each delivered, and when the
    windows ended. Times in whole units (picoseconds, as the schedule's)."""
    from emu.dataplane.windows import Windows

    got: list[list[tuple[int, int, object]]] = [[], []]
    over: list[list[int]] = [[], []]
    parts: list[Windows] = []

    def barrier(i: int):
        return lambda window, t, busy: parts[1 - i].barrier(i, window, t, busy)

    for i in (0, 1):
        parts.append(Windows(lookahead, lambda: 1, barrier(i), lambda kind, t, a, p, key, i=i: got[i].append((t, a, p)),
                             lambda t, i=i: over[i].append(t)))
    return parts, got, over


def test_windows_deliver_in_time_sender_sequence_order_and_end_together():
    """The window algorithm alone, in virtual time: what a peer sent in a window is delivered once both
    barriers are in, in (time, sender, sequence) order whatever order it came in; the next horizon is
    the least next time plus the lookahead; once neither part is busy both end at the same instant."""
    (a, b), got, over = _pair(lookahead=10)
    for w in (a, b):
        w.start(100)
    assert a.horizon == b.horizon == 110
    a.sent(115)
    b.arrive(0, a.window, 115, 1, 7, "second", (0, 0))
    a.sent(112)
    b.arrive(0, a.window, 112, 1, 8, "first", (0, 1))
    a.end_window(120, True)
    assert a.waiting and not got[1]  # nothing is delivered before the peer's barrier
    b.end_window(118, True)
    assert got[1] == [(112, 8, "first"), (115, 7, "second")] and not a.waiting and not b.waiting
    assert a.horizon == b.horizon == 112 + 10  # the least of: a sent at 112, b's next at 118, a's at 120
    a.end_window(125, False)
    b.end_window(130, False)
    assert not a.active and not b.active and over == [[122], [122]] and a.windows == b.windows == 2


def test_windows_refuse_a_message_inside_the_window_that_closed():
    from emu.dataplane.windows import LookaheadError

    (a, b), _, _ = _pair(lookahead=10)
    for w in (a, b):
        w.start(0)
    b.arrive(0, a.window, 5, 1, 0, "too early", (0, 0))  # due inside the window [0, 1): a broken lookahead
    a.end_window(20, True)
    with pytest.raises(LookaheadError, match="lookahead was broken"):
        b.end_window(20, True)


def test_a_window_waiting_for_a_peer_that_died_goes_on_without_it():
    """Paced (the wall clock), a worker outlives a peer whose channel closed: a window already waiting for
    that peer's barrier completes once it is forgotten, with what the peer had sent before."""
    from emu.dataplane.windows import Windows

    peers = [1]
    got: list[tuple[int, int, object]] = []
    w = Windows(10, lambda: peers[0], lambda *_: None, lambda kind, t, a, p, key: got.append((t, a, p)), lambda t: None)
    w.start(0)
    w.arrive(1, w.window, 15, 1, 3, "sent before it died", (0, 0))
    w.end_window(20, True)
    assert w.waiting and not got
    peers[0] = 0  # the channel closed: no peer left
    w.forget(1)
    assert not w.waiting and got == [(15, 3, "sent before it died")] and w.horizon == 20 + 10
