"""Tahan: an Ethernet scale-up domain, every accelerator on every switch.

Current generation (MTIA 300): 51.2T switches (64 x 800G), half the ports to
accelerators: four switches join 16 accelerators non-blocking, each with
2 x 800G to every switch = 6.4 Tb/s. Next generation (`preset=next`):
102.4T silicon with 216 x 400G to accelerators, eight switches, 72
accelerators, 3 x 400G from each to every switch.

Accelerator a's port j to switch w is acc{a}-eth{w*ports_per_switch+j}, in
10.w.j.(a+2)/24 and fdfd:w:j::(a+2)/64; the switch answers for the others on
the same port subnet, so the domain is routed, one hop, with no host routes.
"""

from __future__ import annotations

from dataclasses import dataclass

from emu.topo.common import FabricTopo, TopologyError, check_positive, check_units

PRESETS = {
    "current": {"accelerators": 16, "switch_count": 4, "ports_per_switch": 2, "rate": "800G", "accelerator_ports": 32},
    "next": {"accelerators": 72, "switch_count": 8, "ports_per_switch": 3, "rate": "400G", "accelerator_ports": 216},
}


@dataclass(eq=False)
class TahanTopo(FabricTopo):
    """Tahan: `accelerators` accelerators, each with `ports_per_switch` links at `rate` to every one of
    `switch_count` switches of `accelerator_ports` accelerator-facing ports. What is left out (None)
    comes from `preset`: "current" (MTIA 300, the default) or "next"."""

    accelerators: int | None = None
    switch_count: int | None = None
    ports_per_switch: int | None = None
    rate: str | None = None
    accelerator_ports: int | None = None
    cable: str = "1m"
    preset: str = "current"

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise TopologyError(f"tahan: preset must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        for name, value in PRESETS[self.preset].items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        super().__post_init__()

    def check(self) -> None:
        n, per, total = self.accelerators, self.ports_per_switch, self.accelerator_ports
        assert n is not None and per is not None and total is not None and self.switch_count is not None
        check_positive("tahan", accelerators=n, switch_count=self.switch_count, ports_per_switch=per,
                       accelerator_ports=total)
        if n < 2:
            raise TopologyError(f"tahan: needs at least 2 accelerators, got {n}")
        if n > 250:
            raise TopologyError(f"tahan: at most 250 accelerators, got {n}")
        if n * per > total:
            raise TopologyError(f"tahan: {n} accelerators x {per} ports need {n * per} switch ports, "
                                f"but a switch has {total} for them")
        check_units("tahan", rates=(str(self.rate),), distances=(self.cable,))

    def links_needed(self) -> int:
        return (self.accelerators or 0) * (self.switch_count or 0) * (self.ports_per_switch or 0)

    def build(self) -> None:
        assert self.switch_count is not None and self.accelerators is not None and self.ports_per_switch is not None
        for w in range(self.switch_count):
            self.addFabricSwitch(f"t{w}", shard=w, loopback4=f"10.{w}.255.1", loopback6=f"fdfd:{w}:ff::1")
        for a in range(self.accelerators):
            self.addHost(f"acc{a}", ip=f"10.0.0.{a + 2}/24")
            for w in range(self.switch_count):
                for j in range(self.ports_per_switch):
                    self.addHostLink(f"acc{a}", f"t{w}", port=w * self.ports_per_switch + j, net4=f"10.{w}.{j}",
                                     net6=f"fdfd:{w}:{j}", slot=a, rate=self.rate, cable=self.cable)
