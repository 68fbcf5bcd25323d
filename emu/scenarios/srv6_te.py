"""SRv6 traffic engineering on the regional backbone: steer a flow the long way, and back.

Campus 0's edge router reaches campus 1 over the short side of the ring
(r0-r1-r2). A policy pushed live to pe0 encapsulates campus 1's IPv6 traffic
with segments [r4 End, r3 End, pe1 End.DT6], so it goes r0-r4-r3-r2 and is
decapsulated at pe1; removing the policy brings it back. Which way each
phase went is read from the routers' own counters, not assumed, and the
round trip is measured with ping.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from emu.net.fabric import FabricNet
from emu.net.flows import Flow
from emu.net.switch import RunSettings
from emu.scenarios.base import Scenario
from emu.scenarios.common import ScenarioError, legend_below
from emu.topo.rbb import RBBTopo, dt6_sid, end_sid

PORT = 9300
DST = "fd00:1:0::2"
ROUTERS = [f"r{k}" for k in range(5)]


def _forwarded(stats: dict[str, Any], routers: list[str]) -> dict[str, int]:
    return {r: sum(p["tx_packets"] for p in stats["switches"][r]["ports"].values()) for r in routers}


@dataclass
class Srv6Te(Scenario):
    """A flow of `packets` 1000-byte datagrams from campus 0 to campus 1, in three phases: the shortest
    path, an SRv6 policy steering it the long way round the ring, the policy removed."""

    name = "srv6-te"
    headline = (
        "routers_crossed.shortest", "routers_crossed.policy", "routers_crossed.restored", "phases.0.rtt_fabric_s",
        "phases.1.rtt_fabric_s")
    default_dilation = 1000.0

    packets: int = 200

    def check(self) -> None:
        if self.packets < 1:
            raise ScenarioError(f"srv6-te: packets must be at least 1, got {self.packets}")

    def load_pps(self) -> float:
        """One 10G flow of 1000-byte datagrams."""
        return 10e9 / (1042 * 8)

    def topology(self) -> RBBTopo:
        return RBBTopo(routers=len(ROUTERS), campuses=2, hosts_per_campus=1)

    def measure(self, net: FabricNet, settings: RunSettings, role: str) -> dict[str, Any]:
        topo = self.topology()
        long_way = [end_sid(4), end_sid(3), dt6_sid(topo.pe_id(1))]
        phases: list[dict[str, Any]] = []
        src = net.get("pe0").loopback6
        net.round_trips("c0h0", DST, count=2)  # neighbours resolved before anything is counted

        def phase(name: str) -> None:
            before = _forwarded(net.engine.stats(), ROUTERS)
            flow = Flow("c0h0", "c1h0", DST, PORT, self.packets * 1000, 10e9, size=1000)
            sent, got = net.traffic([flow]).wait()
            rtts, _ = net.round_trips("c0h0", DST, count=5)
            after = _forwarded(net.engine.stats(), ROUTERS)
            phases.append({
                "phase": name,
                "planned_bytes": flow.wire_bytes,  # what the parameters planned: a refused send still counts
                "sent_bytes": sent[0]["sent_bytes"],
                "received_bytes": got[("c1h0", PORT, True)]["received_bytes"],
                "forwarded_by_router": {r: after[r] - before[r] for r in ROUTERS},
                "rtt_fabric_s": statistics.median(rtts) if rtts else None,
            })

        phase("shortest")
        net.control.set_policy("pe0", "fd00:1::/64", long_way, src)
        phase("policy")
        net.control.clear_policy("pe0", "fd00:1::/64")
        phase("restored")
        # The flow is `packets` datagrams: a router it crossed forwarded at least that many in the phase.
        crossed = {ph["phase"]: sorted(r for r, n in ph["forwarded_by_router"].items() if n >= self.packets)
                   for ph in phases}
        return {"segments": long_way, "phases": phases, "routers_crossed": crossed,
                "fidelity": net.verdict(rate_bps=400e9)}

    def missing(self, result: dict[str, Any]) -> list[str]:
        """What a phase did not measure (no ping reply came back within the fabric's slowest round trip
        at this D): the round trips cannot then be compared, and the verdict fails saying so."""
        return [f"no ping reply in phase {ph['phase']}" for ph in result["phases"] if ph["rtt_fabric_s"] is None]

    def verdict(self, result: dict[str, Any]) -> bool:
        """The policy took the flow r0-r4-r3-r2 and nothing else, the other phases the short way; all
        arrived; the long way's round trip is longer."""
        crossed, phases = result["routers_crossed"], result["phases"]
        short, steered = phases[0], phases[1]
        if self.missing(result):
            return False
        return ("r1" in crossed["shortest"] and not {"r3", "r4"} & set(crossed["shortest"])
                and {"r3", "r4"} <= set(crossed["policy"]) and "r1" not in crossed["policy"]
                and "r1" in crossed["restored"] and not {"r3", "r4"} & set(crossed["restored"])
                and all(ph["received_bytes"] == ph["planned_bytes"] for ph in phases)
                and steered["rtt_fabric_s"] > short["rtt_fabric_s"])

    def plot(self, result: dict[str, Any], ax: Any) -> None:
        width = 0.25
        for i, ph in enumerate(result["phases"]):
            ax.bar([k + (i - 1) * width for k in range(len(ROUTERS))],
                   [ph["forwarded_by_router"][r] for r in ROUTERS], width, label=ph["phase"])
        ax.set_xticks(range(len(ROUTERS)), ROUTERS)
        ax.set_ylabel("packets forwarded in the phase")
        ax.set_title("SRv6 policy on pe0: the flow's path, from router counters")
        legend_below(ax)
