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

from emu.topo.common import FabricTopo, TopologyError, check_positive, check_units
from emu.units import format_rate, parse_rate


@dataclass(eq=False)
class NSFTopo(FabricTopo):
    """NSF: `gpus` GPUs, `gpus_per_rack` per rack switch, `racks_per_pod` racks per pod, `fsw` fabric
    switches per pod (and spine planes), `spines` spines per plane; one NIC link per GPU at `rate`."""

    gpus: int = 8
    rate: str = "800G"
    gpus_per_rack: int = 2
    racks_per_pod: int = 2
    fsw: int = 2
    spines: int = 1
    host_cable: str = "2m"
    fabric_cable: str = "100m"
    radix: int = 64

    def check(self) -> None:
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

    def links_needed(self) -> int:
        return self.gpus + self.racks * self.fsw + self.pods * self.fsw * self.spines

    @property
    def racks(self) -> int:
        return math.ceil(self.gpus / self.gpus_per_rack)

    @property
    def pods(self) -> int:
        return math.ceil(self.racks / self.racks_per_pod)

    def build(self) -> None:
        rate = parse_rate(self.rate)
        rsw_up = format_rate(rate * self.gpus_per_rack / self.fsw).replace("b/s", "")
        fsw_up = format_rate(rate * self.gpus_per_rack * self.racks_per_pod / self.fsw / self.spines).replace("b/s", "")
        multi_pod = self.pods > 1
        for plane in range(self.fsw):
            for s in range(self.spines if multi_pod else 0):
                self.addFabricSwitch(f"ssw{plane}x{s}", loopback4=f"10.99.{plane}.{s + 1}")
        for pod in range(self.pods):
            for f in range(self.fsw):
                fsw = self.addFabricSwitch(f"fsw{pod}x{f}", loopback4=f"10.98.{pod}.{f + 1}")
                for s in range(self.spines if multi_pod else 0):
                    self.addFabricLink(fsw, f"ssw{f}x{s}", rate=fsw_up, cable=self.fabric_cable)
            for r in range(self.racks_per_pod):
                rack = pod * self.racks_per_pod + r
                if rack >= self.racks:
                    break
                rsw = self.addFabricSwitch(f"rsw{rack}", loopback4=f"10.97.{rack // 250}.{rack % 250 + 1}")
                for f in range(self.fsw):
                    self.addFabricLink(rsw, f"fsw{pod}x{f}", rate=rsw_up, cable=self.fabric_cable)
                for slot in range(self.gpus_per_rack):
                    g = rack * self.gpus_per_rack + slot
                    if g >= self.gpus:
                        break
                    net4 = f"10.{100 + pod}.{r}"
                    self.addHost(f"gpu{g}", ip=f"{net4}.{slot + 2}/24")
                    self.addHostLink(f"gpu{g}", rsw, port=0, net4=net4, net6=f"fdfb:{pod}:{r}", slot=slot,
                                     rate=self.rate, cable=self.host_cable, routes4=("10.0.0.0/8",),
                                     routes6=("fdfb::/16",))
