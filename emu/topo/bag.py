"""BAG: buildings and regions joined by a super-spine over long-haul links.

Each building is a small 2-tier fabric (leaves `b{r}{b}l{i}`, spines
`b{r}{b}s{i}`). Every building spine links to each BAG switch of its
region (`bag{r}x{g}`) over campus fibre; the BAG switches of different
regions are joined all to all over `distance` of fibre. `bag_rates` gives
the capacity of the inter-region links in turn (e.g. "400G,100G"), so the
paths between regions can be unequal; `distances` can do the same for their
lengths. Hosts are 10.(16r+b).leaf.(slot+2)/24 and fdfc:r:b:leaf::(slot+2)/64.
"""

from __future__ import annotations

from dataclasses import dataclass

from emu.topo.common import FabricTopo, TopologyError, check_positive, check_units
from emu.units import parse_distance


@dataclass(eq=False)
class BAGTopo(FabricTopo):
    """BAG: `regions` regions of `buildings` buildings, each `leaves` leaves, `spines` spines and
    `hosts_per_leaf` hosts a leaf; `bags` BAG switches a region, joined across regions over
    `distance` (or `distances`, one per link in turn) at `bag_rates`."""

    regions: int = 2
    buildings: int = 1
    leaves: int = 1
    spines: int = 1
    hosts_per_leaf: int = 2
    bags: int = 2
    rate: str = "400G"
    fabric_rate: str = "400G"
    bag_rates: str = "400G"
    distance: str = "50km"
    distances: str = ""
    campus_cable: str = "2km"
    host_cable: str = "2m"

    def check(self) -> None:
        check_positive("bag", regions=self.regions, buildings=self.buildings, leaves=self.leaves,
                       spines=self.spines, hosts_per_leaf=self.hosts_per_leaf, bags=self.bags)
        if self.regions > 15 or self.buildings > 16:
            raise TopologyError("bag: at most 15 regions of 16 buildings")
        if self.regions * self.buildings * self.leaves * self.hosts_per_leaf < 2:
            raise TopologyError("bag: needs at least 2 hosts in all")
        check_units("bag", rates=(self.rate, self.fabric_rate, *self.bag_rate_list),
                    distances=(self.distance, *self.distance_list, self.campus_cable, self.host_cable))
        for d in (self.distance, *self.distance_list):
            if parse_distance(d) <= 0:
                raise TopologyError(f"bag: long-haul distance must be > 0, got {d!r}")

    def host_group(self, host: str) -> int:
        """The host's region (h{region}{building}{leaf}x{i}): regions are joined by the long-haul links."""
        return int(host[1])

    def switch_group(self, switch: str) -> int | None:
        """The region of a building's switch (b{region}...) or a BAG switch (bag{region}x...)."""
        return int(switch[3]) if switch.startswith("bag") else int(switch[1])

    def links_needed(self) -> int:
        per_building = self.leaves * (self.hosts_per_leaf + self.spines) + self.spines * self.bags
        return (self.regions * self.buildings * per_building
                + self.regions * (self.regions - 1) // 2 * self.bags * self.bags)

    @property
    def bag_rate_list(self) -> list[str]:
        return [r.strip() for r in self.bag_rates.split(",") if r.strip()] or ["400G"]

    @property
    def distance_list(self) -> list[str]:
        return [d.strip() for d in self.distances.split(",") if d.strip()]

    def build(self) -> None:
        for r in range(self.regions):
            for g in range(self.bags):
                self.addFabricSwitch(f"bag{r}x{g}", shard=r, loopback4=f"10.250.{r}.{g + 1}",
                                     loopback6=f"fdfc:ff:{r}::{g + 1}")
            for b in range(self.buildings):
                site = 16 * r + b
                for s in range(self.spines):
                    spine = self.addFabricSwitch(f"b{r}{b}s{s}", shard=r, loopback4=f"10.{site}.255.{128 + s}")
                    for g in range(self.bags):
                        self.addFabricLink(spine, f"bag{r}x{g}", rate=self.fabric_rate, cable=self.campus_cable)
                for i in range(self.leaves):
                    leaf = self.addFabricSwitch(f"b{r}{b}l{i}", shard=r, loopback4=f"10.{site}.255.{i + 1}")
                    for s in range(self.spines):
                        self.addFabricLink(leaf, f"b{r}{b}s{s}", rate=self.fabric_rate, cable="100m")
                    for h in range(self.hosts_per_leaf):
                        name = f"h{r}{b}{i}x{h}"
                        self.addHost(name, ip=f"10.{site}.{i}.{h + 2}/24")
                        self.addHostLink(name, leaf, port=0, net4=f"10.{site}.{i}", net6=f"fdfc:{r}:{b}:{i}",
                                         slot=h, rate=self.rate, cable=self.host_cable,
                                         routes4=("10.0.0.0/8",), routes6=("fdfc::/16",))
        n = 0
        for r in range(self.regions):
            for r2 in range(r + 1, self.regions):
                for g in range(self.bags):
                    for g2 in range(self.bags):
                        rate = self.bag_rate_list[n % len(self.bag_rate_list)]
                        dists = self.distance_list or [self.distance]
                        dist = dists[n % len(dists)]
                        self.addFabricLink(f"bag{r}x{g}", f"bag{r2}x{g2}", rate=rate, cable=dist)
                        n += 1
