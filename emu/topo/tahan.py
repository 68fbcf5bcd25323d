"""Tahan: an Ethernet scale-up domain, every accelerator on every switch.

Current generation (MTIA 300): 51.2T switches (64 x 800G), half the ports to
accelerators: four switches join 16 accelerators non-blocking, each with
2 x 800G to every switch = 6.4 Tb/s. Next generation (`preset=next`):
102.4T silicon with 216 x 400G to accelerators, eight switches, 72
accelerators, 3 x 400G from each to every switch.

Accelerator a's port j to switch w is acc{a}-eth{w*ports+j}, in
10.w.j.(a+2)/24 and fdfd:w:j::(a+2)/64; the switch answers for the others on
the same port subnet, so the domain is routed, one hop, with no host routes.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from mininet.topo import Topo

from emu.topo.common import TopologyError, add_switch, check_positive, check_units, host_link

PRESETS = {
    "current": {"accelerators": 16, "switches": 4, "ports": 2, "rate": "800G", "accelerator_ports": 32},
    "next": {"accelerators": 72, "switches": 8, "ports": 3, "rate": "400G", "accelerator_ports": 216},
}


@dataclass(frozen=True)
class TahanParams:
    accelerators: int = 16
    switches: int = 4
    ports: int = 2
    rate: str = "800G"
    accelerator_ports: int = 32
    cable: str = "1m"
    preset: str = ""

    def __post_init__(self) -> None:
        check_positive("tahan", accelerators=self.accelerators, switches=self.switches, ports=self.ports,
                       accelerator_ports=self.accelerator_ports)
        if self.accelerators < 2:
            raise TopologyError(f"tahan: needs at least 2 accelerators, got {self.accelerators}")
        if self.accelerators > 250:
            raise TopologyError(f"tahan: at most 250 accelerators, got {self.accelerators}")
        if self.accelerators * self.ports > self.accelerator_ports:
            raise TopologyError(
                f"tahan: {self.accelerators} accelerators x {self.ports} ports need "
                f"{self.accelerators * self.ports} switch ports, but a switch has {self.accelerator_ports} for them"
            )
        if self.preset and self.preset not in PRESETS:
            raise TopologyError(f"tahan: preset must be one of {', '.join(PRESETS)}")
        check_units("tahan", rates=(self.rate,), distances=(self.cable,))

    @classmethod
    def make(cls, **params: object) -> TahanParams:
        """A preset first, then whatever the caller gave on top of it."""
        preset = str(params.get("preset", "") or "")
        if preset and preset not in PRESETS:
            raise TopologyError(f"tahan: preset must be one of {', '.join(PRESETS)}")
        known = {f.name for f in fields(cls)}
        return cls(**{**PRESETS.get(preset, {}), **{k: v for k, v in params.items() if k in known}})  # type: ignore[arg-type]


class TahanTopo(Topo):
    def build(self, **params: object) -> None:
        p = TahanParams.make(**params)
        for w in range(p.switches):
            add_switch(self, f"t{w}", shard=w, loopback4=f"10.{w}.255.1", loopback6=f"fdfd:{w}:ff::1")
        for a in range(p.accelerators):
            self.addHost(f"acc{a}", ip=f"10.0.0.{a + 2}/24")
            for w in range(p.switches):
                for j in range(p.ports):
                    host_link(self, f"acc{a}", f"t{w}", port=w * p.ports + j, net4=f"10.{w}.{j}",
                              net6=f"fdfd:{w}:{j}", slot=a, rate=p.rate, distance=p.cable)
