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

from mininet.topo import Topo

from emu.topo.common import (
    TopologyError,
    add_switch,
    check_positive,
    check_units,
    fabric_link,
    host_link,
)


def end_sid(k: int) -> str:
    return f"fc00:{k:x}::e"


def dt6_sid(k: int) -> str:
    return f"fc00:{k:x}::d6"


@dataclass(frozen=True)
class RBBParams:
    routers: int = 5
    campuses: int = 2
    hosts: int = 1
    rate: str = "400G"
    distance: str = "20km"
    campus_cable: str = "1km"

    def __post_init__(self) -> None:
        check_positive("rbb", routers=self.routers, hosts=self.hosts)
        if self.campuses < 2:
            raise TopologyError(f"rbb: joins at least 2 campuses, got {self.campuses}")
        if self.campuses > self.routers:
            raise TopologyError(f"rbb: {self.campuses} campuses need at least as many backbone routers")
        if self.routers > 200 or self.hosts > 200:
            raise TopologyError("rbb: at most 200 routers and 200 hosts per campus")
        check_units("rbb", rates=(self.rate,), distances=(self.distance, self.campus_cable))

    def attach(self, c: int) -> int:
        return c * self.routers // self.campuses

    def pe_id(self, c: int) -> int:
        return self.routers + c


class RBBTopo(Topo):
    def build(self, **params: object) -> None:
        p = RBBParams(**params)  # type: ignore[arg-type]
        for k in range(p.routers):
            add_switch(self, f"r{k}", loopback4=f"10.255.0.{k + 1}", loopback6=f"fd00:ff::{k + 1:x}",
                       sids={end_sid(k): "End"})
        for k in range(p.routers if p.routers > 2 else p.routers - 1):
            fabric_link(self, f"r{k}", f"r{(k + 1) % p.routers}", rate=p.rate, distance=p.distance)
        for c in range(p.campuses):
            k = p.pe_id(c)
            pe = add_switch(self, f"pe{c}", loopback4=f"10.255.1.{c + 1}", loopback6=f"fd00:ff::{k + 1:x}",
                            sids={end_sid(k): "End", dt6_sid(k): "End.DT6"})
            fabric_link(self, pe, f"r{p.attach(c)}", rate=p.rate, distance=p.campus_cable)
            for j in range(p.hosts):
                name = f"c{c}h{j}"
                self.addHost(name, ip=f"10.{c}.0.{j + 2}/24")
                host_link(self, name, pe, port=0, net4=f"10.{c}.0", net6=f"fd00:{c}:0", slot=j, rate=p.rate,
                          distance="2m", routes4=("10.0.0.0/8",), routes6=("fd00::/16",))
