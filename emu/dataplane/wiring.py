"""Builds the switches of one worker and wires their ports.

A port whose peer switch lives in the same worker is wired directly: the
frame reaches the peer's ingress one propagation delay after its last bit
left, with no trip through the kernel. Every other port (to a host, or to a
switch in another worker) gets a delivery function from the caller: a
socket send in a worker, a recorder in the virtual-time testbed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from emu.dataplane.loop import Loop
from emu.dataplane.pipeline import Switch, WireBox
from emu.dataplane.schedule import origin
from emu.dataplane.spec import EngineSpec, PortSpec
from emu.simtime import NEVER

ExternalDeliver = Callable[[Switch, PortSpec], Callable[[int, Any], None]]


def switch_class(core: str) -> type[Switch]:
    """The pipeline of `core` (emu.dataplane.core): the reference, or its compiled twin."""
    if core == "native":
        from emu.dataplane.native import NativeSwitch

        return NativeSwitch
    return Switch


def build_switches(spec: EngineSpec, loop: Any, worker: int | None, external: ExternalDeliver) -> dict[str, Switch]:
    mine = [s for s in spec.switches if worker is None or s.worker == worker]
    # The one place a switch's kind is chosen: a wire box for a P4 switch's links (on the reference
    # core: its frames cross to BMv2, whose speed bounds them), else the pipeline of the run's core.
    pipeline = switch_class(spec.core)
    switches = {s.name: (WireBox if s.wires else pipeline)(s, loop) for s in mine}
    for sw in switches.values():
        for ps in sw.spec.ports:
            peer = switches.get(ps.peer_switch) if ps.peer_kind == "switch" else None
            if peer is not None:
                sw.wire(ps.index, peer, ps.peer_port)
            else:
                sw.ports[ps.index].tx.deliver = external(sw, ps)
    return switches


def port_key(sent: dict[tuple[str, str], int], switch: str, ifname: str) -> tuple[int, int]:
    """The tie key of the next frame a test's host sends into a switch port: the port is the origin and the
    frame its next child, so frames sent at one instant go in the order sent, on either core and on every
    part of a split (a key is never given twice: the compiled heap would run equal keys in its own order)."""
    c = sent.get((switch, ifname), 0)
    sent[(switch, ifname)] = c + 1
    return origin(switch, ifname), c


class VirtualFabric:
    """All switches of a spec on a virtual clock; frames to hosts are recorded per port."""

    CORE = "python"  # the tests run it on each core

    def __init__(self, spec: EngineSpec, core: str | None = None) -> None:
        core = core or self.CORE
        spec = replace(spec, core=core) if spec.core != core else spec
        self.loop = Loop(core=core)
        self.received: dict[tuple[str, str], list[tuple[int, bytes]]] = {}
        self.sent: dict[tuple[str, str], int] = {}
        self.switches = build_switches(spec, self.loop, None, self._recorder)

    def _recorder(self, sw: Switch, ps: PortSpec) -> Callable[[int, Any], None]:
        box = self.received.setdefault((sw.name, ps.ifname), [])

        def deliver(t: int, frame: Any) -> None:
            box.append((t, bytes(frame)))

        return deliver

    def send(self, switch: str, ifname: str, frame: bytes, t: int | None = None) -> None:
        """A host sends `frame` into the given switch port (through its NIC model), scheduled as that
        port's origin (as emu.dataplane.partition sends: the same tie keys)."""
        sw = self.switches[switch]
        idx = next(p.index for p in sw.ports if p.name == ifname)
        when = self.loop.now if t is None else t
        self.loop.at_key(when, *port_key(self.sent, switch, ifname), lambda tt, f: sw.from_host(idx, tt, f), frame)

    def run(self, until: int = NEVER) -> None:
        self.loop.run(until)

    def frames(self, switch: str, ifname: str) -> list[bytes]:
        return [f for _, f in self.received.get((switch, ifname), [])]
