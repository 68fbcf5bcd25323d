"""The switch of the compiled core: the reference pipeline, built and run by its compiled twin.

`NativeSwitch` is emu.dataplane.pipeline.Switch with the classes it builds from
(ports, links, buffer, tables) replaced by emu.dataplane._core's and its
forwarding path (ingress, IPv4/IPv6 forwarding, the traffic manager, PFC,
ECN, trimming's queueing) compiled. The reference's __init__ and
load_tables build it, so both cores start from the same state; everything
the compiled path hands back (ARP, NDP, ICMP, probes, SRv6 segments and
policies, TTL expiry, statistics, cuts and degradations) runs the
reference's own code on the compiled state. Built only where the compiled
core is (emu.dataplane.core).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from emu.dataplane import _core
from emu.dataplane.pipeline import Switch
from emu.dataplane.spec import SwitchSpec


class NativeSwitch(_core.SwitchBase, Switch):
    Port = _core.Port
    Transmitter = _core.Transmitter
    SharedBuffer = _core.SharedBuffer
    Lpm = _core.Lpm
    GroupState = _core.GroupState

    def __init__(self, spec: SwitchSpec, loop: Any) -> None:
        Switch.__init__(self, spec, loop)
        self.compile()

    def _on_dequeue(self, port: int) -> Any:
        return _core.Target(self, port)  # the compiled Switch._dequeued of that port

    def load_tables(self, tables: Any = None) -> None:
        Switch.load_tables(self, tables)
        self.compile_tables()

    def wire(self, port: int, peer: Switch, peer_port: int) -> None:
        """As the reference's; a peer of the reference core (a wire box) is entered through Python."""
        target = peer.wire_target(peer_port)
        self.ports[port].tx.deliver = target if isinstance(target, _core.Target) else partial(peer.ingress, peer_port)
