"""How a BMv2 fabric's links get their rate and delay: netem qdiscs, or the native engine as wires.

BMv2 switches; it does not model links. `netem` shapes each switch port
with one qdisc (rate and delay) where the kernel has netem. `engine` puts
the native engine's link model between every BMv2 port and its link: each
BMv2 switch gets a wire box in the engine, one handover port per BMv2 port
(a veth whose other end simple_switch takes) wired to the link as Mininet
cabled it. A frame BMv2 sends crosses the link model once (serialisation
at the link rate, propagation delay, a queue the peer's pauses hold), and
a frame arriving off a link is handed to BMv2 unshaped. So delays hold on
any kernel, and the box is the port's MAC for PFC (WireBox). `auto` is the
engine when PFC is on, else netem where the kernel has it: a configured
delay is never dropped.
"""

from __future__ import annotations

import zlib
from dataclasses import replace

from emu.dataplane.engine import Engine
from emu.dataplane.spec import EngineSpec, PortSpec, SwitchSpec
from emu.net.cleanup import record
from emu.net.netlink import Netlink, new_group
from emu.net.switch import configure_root_side

LINK_MODES = ("auto", "netem", "engine")


class LinkModeError(RuntimeError):
    pass


def choose_links(requested: str, *, netem: bool, pfc: bool = False) -> str:
    """The link mode a BMv2 fabric runs with, or one clear reason why the one asked for cannot be.
    auto: the engine when PFC is on (netem honours no pause frame; the engine is each port's MAC),
    else netem where the kernel has it."""
    if requested not in LINK_MODES:
        raise LinkModeError(f"links must be one of {', '.join(LINK_MODES)}, got {requested!r}")
    if requested == "auto":
        return "netem" if netem and not pfc else "engine"
    if requested == "netem" and not netem:
        raise LinkModeError("this kernel has no netem, so `--links netem` cannot carry the links' rate and delay; "
                            "use `--links engine` (the native engine carries them) or leave --links out")
    return requested


def wire_name(switch: str, port: int, side: str) -> str:
    """The handover veth of a BMv2 port: side "b" is simple_switch's end, "w" the engine's. Recorded as
    the run's (EngineLinks.start), so `emu clean` tells a live run's from a dead one's."""
    name = f"emu{side}{switch}-{port}"
    return name if len(name) <= 15 else f"emu{side}{zlib.crc32(f'{switch}/{port}'.encode()):08x}"


def wire_spec(native: EngineSpec) -> EngineSpec:
    """Every switch of a native spec as a wire box: its ports and links as they are (ports 0..n-1),
    then one handover port per link (n..2n-1); a frame entering port k leaves by port n + k, and back.
    No tables, no addresses: BMv2 does the switching."""
    boxes = []
    for s in native.switches:
        n = len(s.ports)
        links = tuple(replace(p, ipv4=(), ipv6=(), headroom=0) for p in s.ports)
        handover = tuple(
            PortSpec(index=n + k, ifname=wire_name(s.name, k, "w"), mac=p.mac, rate_bps=p.rate_bps, delay_s=0.0,
                     peer_kind="p4")
            for k, p in enumerate(s.ports)
        )
        boxes.append(SwitchSpec(name=s.name, ports=links + handover, qos=replace(s.qos, pfc=False, ecn={}),
                                worker=s.worker, seed=s.seed,
                                wires=tuple(range(n, 2 * n)) + tuple(range(n))))
    return replace(native, switches=tuple(boxes))


class EngineLinks:
    """The engine carrying a P4 fabric's links. start() returns the interface each P4 port takes.
    Its veths are in the run's record and in a device group of this process (netlink.new_group)."""

    def __init__(self, native: EngineSpec) -> None:
        self.spec = wire_spec(native)
        self.engine: Engine | None = None
        self.pairs = [(wire_name(s.name, k, "b"), wire_name(s.name, k, "w"))
                      for s in native.switches for k in range(len(s.ports))]
        self.group = new_group()  # the pairs' device group: one request deletes them all

    def p4_ports(self) -> dict[tuple[str, int], str]:
        return {(s.name, k): wire_name(s.name, k, "b")
                for s in self.spec.switches for k in range(len(s.ports) // 2)}

    def start(self) -> dict[tuple[str, int], str]:
        """The veths, recorded in the run's record (emu.net.cleanup) before they are made, with their
        device group, and again once they exist (their indexes): `emu clean` leaves a live run's alone
        and removes a dead one's, a crash half-way through included."""
        names = [i for pair in self.pairs for i in pair]
        record(self.spec.run_dir, interfaces=names, groups=[self.group])
        try:
            with Netlink.here() as nl:
                for b, w in self.pairs:
                    nl.add_veth(b, w, group=self.group)
            record(self.spec.run_dir, interfaces=names)
            configure_root_side(names)
            self.engine = Engine(self.spec, owns_run_dir=False)  # the BMv2 data plane's run directory
            self.engine.start()
        except BaseException:
            self.stop()
            raise
        return self.p4_ports()

    def stop(self) -> None:
        if self.engine is not None:
            self.engine.stop()
            self.engine = None
        with Netlink.here() as nl:
            nl.delete_group(self.group)


__all__ = ["EngineLinks", "LINK_MODES", "LinkModeError", "choose_links", "wire_name", "wire_spec"]
