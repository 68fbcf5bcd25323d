"""RBB: an SRv6 regional backbone joining campuses.

`routers` backbone routers `r{i}` form a ring with `distance` of fibre
between neighbours; campus c's edge router `pe{c}` hangs off router
r{c * routers // campuses}, and its hosts `c{c}h{j}` off the edge router.
Every router k has an End SID fc00:k::e (edge routers are numbered after the
backbone), and every edge router an End.DT6 SID fc00:k::d6 that removes the
outer header and routes the inner packet to its campus. Without a policy,
traffic takes the shortest path as plain IPv6 (and IPv4); a policy on an
edge router (FabricController.set_policy) pushes H.Encaps with an explicit
segment list, live.
"""

from __future__ import annotations

from dataclasses import dataclass

from emu.topo.common import FabricTopo, TopologyError, check_positive, check_units


def end_sid(k: int) -> str:
    return f"fc00:{k:x}::e"


def dt6_sid(k: int) -> str:
    return f"fc00:{k:x}::d6"


@dataclass(eq=False)
class RBBTopo(FabricTopo):
    """RBB: `routers` backbone routers in a ring, `distance` apart; `campuses` campuses of
    `hosts_per_campus` hosts, each behind an edge router `campus_cable` from the ring."""

    routers: int = 5
    campuses: int = 2
    hosts_per_campus: int = 1
    rate: str = "400G"
    distance: str = "20km"
    campus_cable: str = "1km"

    def check(self) -> None:
        check_positive("rbb", routers=self.routers, hosts_per_campus=self.hosts_per_campus)
        if self.campuses < 2:
            raise TopologyError(f"rbb: joins at least 2 campuses, got {self.campuses}")
        if self.campuses > self.routers:
            raise TopologyError(f"rbb: {self.campuses} campuses need at least as many backbone routers")
        if self.routers > 200 or self.hosts_per_campus > 200:
            raise TopologyError("rbb: at most 200 routers and 200 hosts per campus")
        check_units("rbb", rates=(self.rate,), distances=(self.distance, self.campus_cable))

    def links_needed(self) -> int:
        return self.routers + self.campuses * (1 + self.hosts_per_campus)

    def attach(self, c: int) -> int:
        return c * self.routers // self.campuses

    def pe_id(self, c: int) -> int:
        return self.routers + c

    def build(self) -> None:
        for k in range(self.routers):
            self.addFabricSwitch(f"r{k}", loopback4=f"10.255.0.{k + 1}", loopback6=f"fd00:ff::{k + 1:x}",
                                 sids={end_sid(k): "End"})
        for k in range(self.routers if self.routers > 2 else self.routers - 1):
            self.addFabricLink(f"r{k}", f"r{(k + 1) % self.routers}", rate=self.rate, cable=self.distance)
        for c in range(self.campuses):
            k = self.pe_id(c)
            pe = self.addFabricSwitch(f"pe{c}", loopback4=f"10.255.1.{c + 1}", loopback6=f"fd00:ff::{k + 1:x}",
                                      sids={end_sid(k): "End", dt6_sid(k): "End.DT6"})
            self.addFabricLink(pe, f"r{self.attach(c)}", rate=self.rate, cable=self.campus_cable)
            for j in range(self.hosts_per_campus):
                name = f"c{c}h{j}"
                self.addHost(name, ip=f"10.{c}.0.{j + 2}/24")
                self.addHostLink(name, pe, port=0, net4=f"10.{c}.0", net6=f"fd00:{c}:0", slot=j, rate=self.rate,
                                 cable="2m", routes4=("10.0.0.0/8",), routes6=("fd00::/16",))
