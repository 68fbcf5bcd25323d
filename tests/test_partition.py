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
            fabric.send("s0", f"s0-eth{i}", pkt, 0.0)


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
        s0, s1 = fab.switches["s0"].stats(0.0), fab.switches["s1"].stats(0.0)
        assert s1["ports"]["s1-eth0"]["pfc_tx"] > 0  # s1 paused s0 across the long link ...
        assert s0["ports"]["s0-eth3"]["pfc_rx"] == s1["ports"]["s1-eth0"]["pfc_tx"]  # ... and every pause arrived
        assert not any(sum(p.get("drops", {}).values()) for s in (s0, s1) for p in s["ports"].values())
    assert split.lookahead == pytest.approx(LONG_HAUL) and split.handed > 900  # data and pause frames crossed
    # a window per lookahead of fabric time, no more: 409 us of traffic in 5 windows of 100 us
    assert split.windows <= got_split[-1][0] / LONG_HAUL + 2


def test_a_window_longer_than_the_shortest_cut_link_is_caught_not_run():
    """Causality is checked, not assumed: with windows of twice the cable's delay, a frame would arrive
    inside its receiver's past window; the run stops saying so."""
    split = PartitionedFabric(two_sites(), {"s0": 0, "s1": 1}, lookahead=2 * LONG_HAUL)
    incast(split, frames=10)
    with pytest.raises(LookaheadError, match="lookahead was broken"):
        split.run()


def test_a_partition_must_place_every_switch_and_be_joined_by_a_delay():
    with pytest.raises(SpecError, match="missing"):
        PartitionedFabric(two_sites(), {"s0": 0})
    with pytest.raises(SpecError, match="N >= 2"):
        PartitionedFabric(two_sites(), {"s0": 0, "s1": 0})
