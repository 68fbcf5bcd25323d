"""NSF: the single-plane 3-tier Clos that FPF replaces, for the same GPUs.

Each GPU has one NIC link at the aggregate rate (8 x 100G = 800G). Racks of
GPUs hang off rack switches (RSW); the RSWs of a pod meet at fabric switches
(FSW); FSW i of every pod joins spine plane i (SSW). A GPU-to-GPU path
across pods is RSW-FSW-SSW-FSW-RSW, five switches where FPF has three.
Hosts are 10.100+pod.rack.(slot+2)/24 and fdfb:pod:rack::(slot+2)/64.
"""

from __future__ import annotations

import math
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
from emu.units import format_rate, parse_rate


@dataclass(frozen=True)
class NSFParams:
    gpus: int = 8
    rate: str = "800G"
    gpus_per_rack: int = 2
    racks_per_pod: int = 2
    fsw: int = 2
    spines: int = 1
    host_cable: str = "2m"
    fabric_cable: str = "100m"
    radix: int = 64

    def __post_init__(self) -> None:
        check_positive("nsf", gpus=self.gpus, gpus_per_rack=self.gpus_per_rack, racks_per_pod=self.racks_per_pod,
                       fsw=self.fsw, spines=self.spines, radix=self.radix)
        if self.gpus < 2:
            raise TopologyError(f"nsf: needs at least 2 GPUs, got {self.gpus}")
        if self.pods > 100:
            raise TopologyError(f"nsf: at most 100 pods, got {self.pods}")
        if self.gpus_per_rack + self.fsw > self.radix:
            raise TopologyError(f"nsf: a rack switch needs {self.gpus_per_rack + self.fsw} ports, radix {self.radix}")
        if self.racks_per_pod + self.spines > self.radix or self.pods > self.radix:
            raise TopologyError(f"nsf: a fabric or spine switch needs more than radix {self.radix} ports")
        check_units("nsf", rates=(self.rate,), distances=(self.host_cable, self.fabric_cable))

    @property
    def racks(self) -> int:
        return math.ceil(self.gpus / self.gpus_per_rack)

    @property
    def pods(self) -> int:
        return math.ceil(self.racks / self.racks_per_pod)


class NSFTopo(Topo):
    def build(self, **params: object) -> None:
        p = NSFParams(**params)  # type: ignore[arg-type]
        rate = parse_rate(p.rate)
        rsw_up = format_rate(rate * p.gpus_per_rack / p.fsw).replace("b/s", "")
        fsw_up = format_rate(rate * p.gpus_per_rack * p.racks_per_pod / p.fsw / p.spines).replace("b/s", "")
        multi_pod = p.pods > 1
        for plane in range(p.fsw):
            for s in range(p.spines if multi_pod else 0):
                add_switch(self, f"ssw{plane}x{s}", loopback4=f"10.99.{plane}.{s + 1}")
        for pod in range(p.pods):
            for f in range(p.fsw):
                fsw = add_switch(self, f"fsw{pod}x{f}", loopback4=f"10.98.{pod}.{f + 1}")
                for s in range(p.spines if multi_pod else 0):
                    fabric_link(self, fsw, f"ssw{f}x{s}", rate=fsw_up, distance=p.fabric_cable)
            for r in range(p.racks_per_pod):
                rack = pod * p.racks_per_pod + r
                if rack >= p.racks:
                    break
                rsw = add_switch(self, f"rsw{rack}", loopback4=f"10.97.{rack // 250}.{rack % 250 + 1}")
                for f in range(p.fsw):
                    fabric_link(self, rsw, f"fsw{pod}x{f}", rate=rsw_up, distance=p.fabric_cable)
                for slot in range(p.gpus_per_rack):
                    g = rack * p.gpus_per_rack + slot
                    if g >= p.gpus:
                        break
                    net4 = f"10.{100 + pod}.{r}"
                    self.addHost(f"gpu{g}", ip=f"{net4}.{slot + 2}/24")
                    host_link(self, f"gpu{g}", rsw, port=0, net4=net4, net6=f"fdfb:{pod}:{r}", slot=slot,
                              rate=p.rate, distance=p.host_cable, routes4=("10.0.0.0/8",), routes6=("fdfb::/16",))
