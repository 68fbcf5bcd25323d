"""Flattened Planar Fabric: every GPU on P planes, each plane a 2-tier Clos.

Plane p, leaf l: hosts in 10.p.l.0/24 and fdfa:p:l::/64, gateway .1 / ::1.
GPU g's port on plane p is gpuG-ethP, so a host's plane is its port number.
Leaf-to-spine links are sized so that each plane is non-blocking unless the
caller gives `uplink`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from emu.topo.common import FabricTopo, TopologyError, check_units
from emu.units import format_rate, parse_rate


@dataclass(eq=False)
class FPFTopo(FabricTopo):
    """FPF: `gpus` GPUs on `planes` planes, each plane `leaves` leaves and `spines` spines; GPU
    ports at `rate`, leaf uplinks at `uplink` (default: non-blocking); switches of `radix` ports."""

    gpus: int = 8
    planes: int = 8
    leaves: int = 2
    spines: int = 2
    rate: str = "100G"
    uplink: str = ""
    host_cable: str = "2m"
    fabric_cable: str = "100m"
    radix: int = 64

    def check(self) -> None:
        for name in ("gpus", "planes", "leaves", "radix"):
            if getattr(self, name) < 1:
                raise TopologyError(f"fpf: {name} must be at least 1, got {getattr(self, name)}")
        if self.gpus < 2:
            raise TopologyError(f"fpf: needs at least 2 GPUs, got {self.gpus}")
        if self.planes > 16:
            raise TopologyError(f"fpf: at most 16 planes are supported, got {self.planes}")
        if self.leaves > self.gpus:
            raise TopologyError(f"fpf: {self.leaves} leaves for {self.gpus} GPUs leaves a leaf empty")
        if self.leaves > 1 and self.spines < 1:
            raise TopologyError("fpf: more than one leaf per plane needs at least one spine")
        if self.spines < 0 or self.spines > 64:
            raise TopologyError(f"fpf: spines must be in 0..64, got {self.spines}")
        if self.leaves > 200:
            raise TopologyError(f"fpf: at most 200 leaves per plane, got {self.leaves}")
        uplinks = self.spines if self.leaves > 1 else 0
        ports = self.gpus_per_leaf + uplinks
        if ports > self.radix:
            raise TopologyError(
                f"fpf: a leaf needs {ports} ports ({self.gpus_per_leaf} GPUs + {uplinks} spines) "
                f"but has radix {self.radix}"
            )
        if self.leaves > self.radix:
            raise TopologyError(f"fpf: a spine needs {self.leaves} ports but has radix {self.radix}")
        check_units("fpf", rates=(self.rate, *((self.uplink,) if self.uplink else ())),
                    distances=(self.host_cable, self.fabric_cable))

    def links_needed(self) -> int:
        return self.planes * (self.gpus + (self.leaves * self.spines if self.leaves > 1 else 0))

    @property
    def gpus_per_leaf(self) -> int:
        return math.ceil(self.gpus / self.leaves)

    @property
    def uplink_rate(self) -> str:
        if self.uplink:
            return self.uplink
        per_spine = parse_rate(self.rate) * self.gpus_per_leaf / max(1, self.spines)
        return format_rate(per_spine).replace("b/s", "")

    def build(self) -> None:
        for g in range(self.gpus):
            leaf, slot = divmod(g, self.gpus_per_leaf)
            self.addHost(f"gpu{g}", ip=f"{host_ip4(0, leaf, slot)}/24")
        for plane in range(self.planes):
            for leaf in range(self.leaves):
                self.addFabricSwitch(f"p{plane}l{leaf}", shard=plane, loopback4=f"10.{plane}.255.{leaf + 1}",
                                     loopback6=f"fdfa:{plane}:ff::{leaf + 1}")
            for s in range(self.spines if self.leaves > 1 else 0):
                self.addFabricSwitch(f"p{plane}s{s}", shard=plane, loopback4=f"10.{plane}.255.{128 + s}",
                                     loopback6=f"fdfa:{plane}:ff::{128 + s:x}")
                for leaf in range(self.leaves):
                    self.addFabricLink(f"p{plane}l{leaf}", f"p{plane}s{s}", rate=self.uplink_rate,
                                       cable=self.fabric_cable)
        for g in range(self.gpus):
            leaf, slot = divmod(g, self.gpus_per_leaf)
            for plane in range(self.planes):
                self.addHostLink(f"gpu{g}", f"p{plane}l{leaf}", port=plane, net4=f"10.{plane}.{leaf}",
                                 net6=f"fdfa:{plane}:{leaf}", slot=slot, rate=self.rate, cable=self.host_cable,
                                 routes4=(f"10.{plane}.0.0/16",), routes6=(f"fdfa:{plane}::/32",))


def host_ip4(plane: int, leaf: int, slot: int) -> str:
    return f"10.{plane}.{leaf}.{slot + 2}"
