"""A running fabric's counters as objects with fields: what `FabricNet.stats()` returns.

The data plane reports nested dicts (one per worker, merged by the engine);
a script reads `net.stats().port("p0l0", "p0l0-eth2").drops` instead. Bytes
and packets count since the fabric started; times are fabric seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PortStats:
    name: str
    up: bool
    rx_packets: int
    rx_bytes: int
    tx_packets: int
    tx_bytes: int
    drops: int  # every frame this port dropped, whatever the reason
    drop_reasons: dict[str, int] = field(default_factory=dict)  # e.g. {"buffer_full": 3, "link_down": 9}
    drops_by_class: tuple[int, ...] = ()  # per traffic class (0..7); class 3 is the lossless one
    ecn_marked: int = 0
    pfc_tx: int = 0  # PFC pause frames sent out of this port
    pfc_rx: int = 0
    paused_s: tuple[float, ...] = ()  # fabric seconds each priority of this port was paused
    queue_hwm: tuple[int, ...] = ()  # the deepest each egress queue got, bytes
    trimmed: tuple[int, ...] = ()  # packets cut instead of dropped (--trim), by the class they had

    @classmethod
    def from_dict(cls, name: str, d: dict[str, Any]) -> PortStats:
        reasons = {k: int(v) for k, v in d.get("drops", {}).items() if v}
        return cls(name=name, up=bool(d.get("up", True)), rx_packets=d.get("rx_packets", 0),
                   rx_bytes=d.get("rx_bytes", 0), tx_packets=d.get("tx_packets", 0), tx_bytes=d.get("tx_bytes", 0),
                   drops=sum(reasons.values()), drop_reasons=reasons,
                   drops_by_class=tuple(d.get("drops_tc", ())), ecn_marked=d.get("ecn_marked", 0),
                   pfc_tx=d.get("pfc_tx", 0), pfc_rx=d.get("pfc_rx", 0), paused_s=tuple(d.get("paused_s", ())),
                   queue_hwm=tuple(d.get("queue_hwm", ())), trimmed=tuple(d.get("trimmed", ())))


@dataclass(frozen=True)
class SwitchStats:
    name: str
    ports: dict[str, PortStats]

    def port(self, name: str) -> PortStats:
        if name not in self.ports:
            raise KeyError(f"{self.name} has no port {name!r}; ports: {', '.join(sorted(self.ports))}")
        return self.ports[name]

    @property
    def tx_bytes(self) -> int:
        return sum(p.tx_bytes for p in self.ports.values())

    @property
    def drops(self) -> int:
        return sum(p.drops for p in self.ports.values())


@dataclass(frozen=True)
class FabricStats:
    dilation: float
    switches: dict[str, SwitchStats]
    raw: dict[str, Any] = field(repr=False, default_factory=dict)  # the data plane's own report

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FabricStats:
        switches = {name: SwitchStats(name, {p: PortStats.from_dict(p, pd) for p, pd in s["ports"].items()})
                    for name, s in d.get("switches", {}).items()}
        return cls(dilation=float(d.get("dilation", 0.0)), switches=switches, raw=d)

    def switch(self, name: str) -> SwitchStats:
        if name not in self.switches:
            raise KeyError(f"no switch {name!r}; switches: {', '.join(sorted(self.switches))}")
        return self.switches[name]

    def port(self, switch: str, port: str) -> PortStats:
        return self.switch(switch).port(port)

    @property
    def drops(self) -> int:
        return sum(s.drops for s in self.switches.values())
