"""Builds the switches of one worker and wires their ports.

A port whose peer switch lives in the same worker is wired directly: the
frame reaches the peer's ingress one propagation delay after its last bit
left, with no trip through the kernel. Every other port (to a host, or to a
switch in another worker) gets a delivery function from the caller: a
socket send in a worker, a recorder in the virtual-time testbed.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from emu.dataplane.loop import Loop
from emu.dataplane.spec import EngineSpec, PortSpec
from emu.dataplane.switch import Switch, WireBox

ExternalDeliver = Callable[[Switch, PortSpec], Callable[[float, Any], None]]


def build_switches(spec: EngineSpec, loop: Any, worker: int | None, external: ExternalDeliver) -> dict[str, Switch]:
    mine = [s for s in spec.switches if worker is None or s.worker == worker]
    # The one place a switch's kind is chosen: a wire box for a P4 switch's links, else the pipeline.
    switches = {s.name: (WireBox if s.wires else Switch)(s, loop, dilation=spec.dilation) for s in mine}
    for sw in switches.values():
        for ps in sw.spec.ports:
            port = sw.ports[ps.index]
            peer = switches.get(ps.peer_switch) if ps.peer_kind == "switch" else None
            if peer is not None:
                port.tx.deliver = partial(peer.ingress, ps.peer_port)
            else:
                port.tx.deliver = external(sw, ps)
    return switches


class VirtualFabric:
    """All switches of a spec on a virtual clock; frames to hosts are recorded per port."""

    def __init__(self, spec: EngineSpec) -> None:
        self.loop = Loop()
        self.received: dict[tuple[str, str], list[tuple[float, bytes]]] = {}
        self.switches = build_switches(spec, self.loop, None, self._recorder)

    def _recorder(self, sw: Switch, ps: PortSpec) -> Callable[[float, Any], None]:
        box = self.received.setdefault((sw.name, ps.ifname), [])

        def deliver(t: float, frame: Any) -> None:
            box.append((t, bytes(frame)))

        return deliver

    def send(self, switch: str, ifname: str, frame: bytes, t: float | None = None) -> None:
        """A host sends `frame` into the given switch port (through its NIC model)."""
        sw = self.switches[switch]
        idx = next(p.index for p in sw.ports if p.name == ifname)
        when = self.loop.now if t is None else t
        self.loop.at(when, lambda tt, f: sw.from_host(idx, tt, f), frame)

    def run(self, until: float = float("inf")) -> None:
        self.loop.run(until)

    def frames(self, switch: str, ifname: str) -> list[bytes]:
        return [f for _, f in self.received.get((switch, ifname), [])]
