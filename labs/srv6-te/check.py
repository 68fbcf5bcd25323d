"""Checker of lab srv6-te: the student's SIDs and policy on a real RBB fabric, the path proved by counters."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from emu import FabricNet, FabricStats, RBBTopo
from emu.labs import StepFailed
from emu.net.flows import Flow
from emu.topo import rbb

MODULE = "srv6.py"
CLOCKS = ("fabric", "wall")  # the flow is the project's own: exact on the fabric clock; D for the wall's
DST = "fd00:1:0::2"  # c1h0
PREFIX = "fd00:1::/64"
PACKETS = 200  # one way: a ping's replies would take the shortest path back and count on r1
BACKBONE = ("r0", "r1", "r2", "r3", "r4")


@contextmanager
def fabric(clock: str) -> Iterator[FabricNet]:
    with FabricNet(RBBTopo(routers=5, campuses=2, hosts_per_campus=1), clock=clock, dilation=1000) as net:
        net.round_trips("c0h0", DST, count=2)  # neighbours resolved before anything is counted
        yield net


def _flow(net: FabricNet) -> tuple[FabricStats, FabricStats, bool]:
    """PACKETS datagrams from c0h0 to c1h0, counted around; whether all arrived."""
    before = net.stats()
    flow = Flow("c0h0", "c1h0", DST, 9300, PACKETS * 1000, 10e9, size=1000)
    sent, got = net.traffic([flow]).wait()
    after = net.stats()
    return before, after, got[("c1h0", 9300, True)]["received_bytes"] == sent[0]["sent_bytes"] > 0


def _crossed(before: FabricStats, after: FabricStats) -> list[str]:
    def sent(s: FabricStats, r: str) -> int:
        return sum(p.tx_packets for p in s.switch(r).ports.values())

    return sorted(r for r in BACKBONE if sent(after, r) - sent(before, r) >= PACKETS)


def step_sids(work, net: FabricNet) -> str:
    """Step 1: SIDs"""
    for k in range(7):
        if work.end_sid(k) != rbb.end_sid(k) or work.dt6_sid(k) != rbb.dt6_sid(k):
            raise StepFailed(f"router {k}: End is {rbb.end_sid(k)}, End.DT6 {rbb.dt6_sid(k)}; you said "
                             f"{work.end_sid(k)} and {work.dt6_sid(k)}")
    return "End and End.DT6 SIDs of 7 routers right"


def step_long_way(work, net: FabricNet) -> str:
    """Step 2: the long way"""
    segments = list(work.long_way())
    net.control.set_policy("pe0", PREFIX, segments, net.get("pe0").loopback6)
    try:
        before, after, delivered = _flow(net)
    finally:
        net.control.clear_policy("pe0", PREFIX)
    crossed = _crossed(before, after)
    if not delivered:
        raise StepFailed(f"with segments {segments} the flow did not all arrive: the last segment must be "
                         "pe1's End.DT6, which delivers into campus 1")
    if crossed != ["r0", "r2", "r3", "r4"]:
        raise StepFailed(f"with segments {segments} the flow crossed {crossed}; the long way is r0, r4, r3, r2")
    return f"crossed {', '.join(crossed)}"


def step_path(work, net: FabricNet) -> str:
    """Step 3: the path, from counters"""
    before, after, _ = _flow(net)
    truth, said = _crossed(before, after), sorted(work.routers_crossed(before, after, PACKETS))
    if said != truth:
        raise StepFailed(f"the shortest path crossed {truth}; routers_crossed said {said}")
    net.control.set_policy("pe0", PREFIX, [rbb.end_sid(4), rbb.end_sid(3), rbb.dt6_sid(6)],
                           net.get("pe0").loopback6)
    try:
        before, after, _ = _flow(net)
    finally:
        net.control.clear_policy("pe0", PREFIX)
    truth, said = _crossed(before, after), sorted(work.routers_crossed(before, after, PACKETS))
    if said != truth:
        raise StepFailed(f"the steered path crossed {truth}; routers_crossed said {said}")
    return f"shortest and steered paths read right from the counters ({truth})"


STEPS = [step_sids, step_long_way, step_path]
