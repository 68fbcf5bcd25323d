"""FabricLink: a Mininet veth pair whose rate, delay and addressing the engine applies.

Mininet creates the veth pair; nothing is shaped in the kernel. The engine
carries the link: rate and propagation delay in both directions, PFC on it,
counters for it. So a configured delay is never lost on a kernel without
netem, and the same link behaves the same on every kernel.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from mininet.link import Link

from emu.units import UnitError, parse_distance, parse_rate, parse_time, propagation_delay


class LinkParamError(ValueError):
    pass


def mac_for(ifname: str) -> str:
    """A stable, locally administered MAC per interface name (no per-link `ip link` reads)."""
    h = hashlib.sha1(ifname.encode()).digest()
    return "02:" + ":".join(f"{b:02x}" for b in h[:5])


@dataclass(frozen=True)
class LinkParams:
    """A link in fabric units. `delay` and `distance` are two ways to say the same thing."""

    rate_bps: float = 100e9
    delay_s: float = 5e-9 * 2
    gw4: str = ""
    gw6: str = ""
    host_ip4: str = ""
    host_ip6: str = ""
    host_routes4: tuple[str, ...] = ()
    host_routes6: tuple[str, ...] = ()
    headroom: int = 0

    @classmethod
    def parse(
        cls,
        *,
        rate: str | float = "100G",
        delay: str | float | None = None,
        distance: str | float | None = None,
        **rest: object,
    ) -> LinkParams:
        try:
            rate_bps = parse_rate(rate)
            if delay is not None and distance is not None:
                raise LinkParamError("give a link either delay or distance, not both")
            if distance is not None:
                delay_s = propagation_delay(parse_distance(distance))
            elif delay is not None:
                delay_s = parse_time(delay)
            else:
                delay_s = propagation_delay(2.0)
        except UnitError as exc:
            raise LinkParamError(f"link: {exc}") from None
        if rate_bps <= 0:
            raise LinkParamError(f"link rate must be > 0, got {rate!r}")
        for key in ("host_routes4", "host_routes6"):
            if key in rest:
                rest[key] = tuple(rest[key])  # type: ignore[arg-type]
        return cls(rate_bps=rate_bps, delay_s=delay_s, **rest)  # type: ignore[arg-type]


FABRIC_KEYS = ("rate", "delay", "distance", "gw4", "gw6", "host_ip4", "host_ip6",
               "host_routes4", "host_routes6", "headroom")


class FabricLink(Link):
    """Link(node1, node2, rate='100G', delay='1us' | distance='50km', gw4=..., ...)."""

    def __init__(self, node1, node2, port1=None, port2=None, intfName1=None, intfName2=None, **params):
        fabric = {k: params.pop(k) for k in FABRIC_KEYS if k in params}
        self.fabric = LinkParams.parse(**fabric)
        if port1 is None:
            port1 = node1.newPort()
        if port2 is None:
            port2 = node2.newPort()
        intfName1 = intfName1 or f"{node1.name}-eth{port1}"
        intfName2 = intfName2 or f"{node2.name}-eth{port2}"
        params.setdefault("addr1", mac_for(intfName1))
        params.setdefault("addr2", mac_for(intfName2))
        super().__init__(node1, node2, port1=port1, port2=port2, intfName1=intfName1, intfName2=intfName2, **params)

    deleted = False  # set when FabricNet removed the veth pair in one batch

    def delete(self) -> None:
        """Mininet deletes links before it stops switches: stop the engine first, so no worker
        holds a packet socket and ring on an interface the kernel is tearing down."""
        for intf in (self.intf1, self.intf2):
            engine = getattr(intf.node, "engine", None)
            if engine is not None:
                engine.stop()
        if self.deleted:
            self.intf1 = self.intf2 = None
            return
        super().delete()
