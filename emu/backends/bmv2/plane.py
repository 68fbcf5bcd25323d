"""BMv2 switches as the control plane's data plane: table updates as diffs, port state, counters.

FabricController talks to its data plane through set_tables, set_port and
stats. Bmv2DataPlane answers them for a fabric of simple_switch processes,
so failures, SRv6 policies and capacity changes reach BMv2 from the same
code that drives the native engine. A table update is a diff against what
the switch holds, keyed by (table, match key): new entries are added and
changed ones modified before stale ones are deleted (make before break),
using the handles simple_switch_CLI printed when each entry was added.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from typing import Any

from emu.backends.bmv2.cli import bmv2_port, table_commands
from emu.backends.bmv2.links import wire_name
from emu.control.model import SwitchTables
from emu.dataplane.spec import SwitchSpec
from emu.fidelity import add_speeds
from emu.launch import Supervisor, peak_rss, proc_stat
from emu.net.netlink import Netlink, NetlinkError

_HANDLE = re.compile(r"Entry has been added with handle (\d+)")
# simple_switch_CLI's answer to `counter_read NAME I`: "NAME[I]= (B bytes, P packets)".
_COUNTER = re.compile(r"([\w.]+)\[(\d+)\]=\s*\((\d+) bytes, (\d+) packets\)")


class Bmv2RuntimeError(RuntimeError):
    pass


@dataclass(frozen=True)
class Entry:
    table: str
    key: str
    action: str
    params: str

    @classmethod
    def parse(cls, command: str) -> Entry:
        """`table_add TABLE ACTION KEY... => PARAMS...` as cli.table_commands writes it."""
        left, _, params = command.partition("=>")
        words = left.split()
        if len(words) < 4 or words[0] != "table_add":
            raise Bmv2RuntimeError(f"not a table_add command: {command!r}")
        return cls(words[1], " ".join(words[3:]), words[2], params.strip())

    def add(self) -> str:
        return f"table_add {self.table} {self.action} {self.key} => {self.params}".rstrip()

    def modify(self, handle: int) -> str:
        return f"table_modify {self.table} {self.action} {handle} => {self.params}".rstrip()


@dataclass
class InstalledTables:
    """What one switch holds: entry by (table, key), with the handle BMv2 gave it."""

    entries: dict[tuple[str, str], tuple[Entry, int]] = field(default_factory=dict)

    def update(self, commands: list[str]) -> tuple[list[str], list[Entry]]:
        """The commands that turn what is installed into `commands` (table_add lines), and the
        entries those commands add, in order, to be given their handles by `added`."""
        want = {}
        for c in commands:
            e = Entry.parse(c)
            want[(e.table, e.key)] = e
        out, adds = [], []
        for k, e in want.items():
            have = self.entries.get(k)
            if have is None:
                out.append(e.add())
                adds.append(e)
            elif have[0] != e:
                out.append(e.modify(have[1]))
                self.entries[k] = (e, have[1])
        for k in [k for k in self.entries if k not in want]:
            out.append(f"table_delete {k[0]} {self.entries.pop(k)[1]}")
        return out, adds

    def added(self, adds: list[Entry], cli_output: str) -> None:
        handles = [int(h) for h in _HANDLE.findall(cli_output)]
        if len(handles) != len(adds):
            raise Bmv2RuntimeError(f"simple_switch_CLI added {len(handles)} of {len(adds)} entries")
        for e, h in zip(adds, handles, strict=True):
            self.entries[(e.table, e.key)] = (e, h)


def counter_values(cli_output: str) -> dict[tuple[str, int], tuple[int, int]]:
    """{(counter, index): (packets, bytes)} from the answers to `counter_read` commands.
    Keyed by name and index, not by position, so a missing answer is noticed, not shifted."""
    return {(m.group(1), int(m.group(2))): (int(m.group(4)), int(m.group(3)))
            for m in _COUNTER.finditer(cli_output)}


class Bmv2DataPlane:
    """The fabric's simple_switch processes behind the interface FabricController drives."""

    def __init__(self, specs: list[SwitchSpec], procs: dict[str, Any], *, dilation: float, wires: Any = None,
                 run_dir: str = "", ecn_red: dict[str, dict[int, tuple[int, int, int]]] | None = None,
                 pfc: dict[str, dict[int, tuple[int, int, int]]] | None = None,
                 trim: dict[str, dict[int, tuple[int, int]]] | None = None, user_program: bool = False) -> None:
        self.specs = {s.name: s for s in specs}
        # The switches run the user's program (RunSettings.p4): its tables are its hook's, written once at
        # start; the control plane's routes (fabric.p4's tables) are not written, and fabric.p4's counters
        # are not read.
        self.user_program = user_program
        self.procs = procs
        self.dilation = dilation
        self.wires = wires  # EngineLinks, when the engine carries the links
        self.ecn_red = ecn_red or {}
        self.pfc = pfc or {}  # per switch, per port: fabric.p4's (XOFF, XON, refresh); empty: no PFC
        self.trim = trim or {}  # per switch, per port: fabric.p4's (cut from this queue depth, DSCP)
        self.installed = {s.name: InstalledTables() for s in specs}
        self.down: set[tuple[str, str]] = set()  # (switch, port) the controller set down
        self.run_dir = run_dir  # what `emu clean` reads after a crash; removed at stop
        self.supervisor: Supervisor | None = None  # reports a simple_switch that dies, at once
        self.speeds: list[dict[str, Any]] = []  # simple_switch runs on the wall clock: no fabric-clock job

    def speed(self, since: int = 0) -> dict[str, Any]:
        return add_speeds(self.speeds[since:])

    def commands(self, switch: str, tables: SwitchTables) -> list[str]:
        s = self.specs[switch]
        return table_commands(tables, port_macs=[p.mac for p in s.ports], dscp_to_tc=list(s.qos.dscp_to_tc),
                              ecn_red=self.ecn_red.get(switch), pfc=self.pfc.get(switch), lossless=s.qos.lossless,
                              trim=self.trim.get(switch))

    def set_tables(self, switch: str, tables: dict[str, Any] | SwitchTables, extra: list[str] | None = None) -> None:
        if self.user_program:
            if extra:
                self.procs[switch].load(list(extra))
            return
        t = tables if isinstance(tables, SwitchTables) else SwitchTables.from_dict(tables)
        inst = self.installed[switch]
        cmds, adds = inst.update(self.commands(switch, t))
        if cmds or extra:
            inst.added(adds, self.procs[switch].load(cmds + list(extra or [])))

    def set_port(self, switch: str, port: str, up: bool) -> None:
        """A failed link: the engine's wire stops carrying it, or the interface goes down."""
        if self.wires is not None and self.wires.engine is not None:
            self.wires.engine.set_port(switch, port, up)
        else:
            try:  # the port is in its switch's own namespace (emu.backends.bmv2.switch)
                ns = getattr(self.procs.get(switch), "namespace", "")
                with (Netlink.of_name(ns) if ns else Netlink.here()) as nl:
                    nl.set_link(port, up=up)
            except NetlinkError as exc:
                raise Bmv2RuntimeError(f"{switch}: cannot set {port} {'up' if up else 'down'}: {exc}") from None
        (self.down.discard if up else self.down.add)((switch, port))

    def reset_fidelity(self) -> None:
        """The engine carrying the links starts a new lateness window (simple_switch keeps none)."""
        if self.wires is not None and self.wires.engine is not None:
            self.wires.engine.reset_fidelity()

    def cpu_seconds(self) -> float:
        """CPU time of every simple_switch and of the engine carrying the links, so far."""
        ticks = os.sysconf("SC_CLK_TCK")
        own = sum(max(0, proc_stat(p.proc.pid, 11)) + max(0, proc_stat(p.proc.pid, 12))
                  for p in self.procs.values() if p.proc is not None) / ticks
        wires = self.wires.engine.cpu_seconds() if self.wires is not None and self.wires.engine is not None else 0.0
        return own + wires

    def peak_rss_bytes(self) -> int:
        """The most memory each simple_switch (and the engine carrying the links) has held at once, summed."""
        own = sum(peak_rss(p.proc.pid) for p in self.procs.values() if p.proc is not None)
        return own + (self.wires.engine.peak_rss_bytes() if self.wires is not None and self.wires.engine is not None else 0)

    def stats(self) -> dict[str, Any]:
        """BMv2's own port counters in the engine's stats layout; with engine links, each port's MAC
        side too (the wire box: drops, pauses received and how long they held the port, queues)."""
        out: dict[str, Any] = {"switches": {}, "backend": "bmv2", "dilation": self.dilation, "workers": []}
        macs: dict[str, Any] = {}
        if self.wires is not None and self.wires.engine is not None:
            # The engine's workers carry the links: their lateness is this fabric's fidelity too.
            engine = self.wires.engine.stats()
            out["workers"] = engine["workers"]
            macs = engine["switches"]
        if self.user_program:  # fabric.p4's counters are not there: the MAC's where the engine carries the links
            out["counters"] = "the links' (engine links only); the program's own: counter_read"
            for name, s in self.specs.items():
                ports = {}
                for p in s.ports:
                    mac = macs.get(name, {}).get("ports", {}).get(p.ifname, {})
                    ports[p.ifname] = {"up": (name, p.ifname) not in self.down,
                                       **{k: mac.get(k, 0) for k in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes")},
                                       "drops": dict(mac.get("drops", {}))}
                out["switches"][name] = {"queue_drops": 0, "ports": ports}
            return out
        counters = (("FabricIngress.rx_port", "rx"), ("FabricEgress.tx_port", "tx"),
                    ("FabricEgress.ecn_marked", "ecn"), ("FabricIngress.pfc_rx", "pfc"),
                    ("FabricIngress.pfc_xoff_sent", "xoff"), ("FabricIngress.pfc_xon_sent", "xon"),
                    ("FabricIngress.dropped", "dropped"), ("FabricEgress.trimmed", "trimmed"))
        for name, s in self.specs.items():
            cmds = [f"counter_read {c} {bmv2_port(p.index)}" for p in s.ports for c, _ in counters]
            values = counter_values(self.procs[name].load(cmds))
            missing = [(c, bmv2_port(p.index)) for p in s.ports for c, _ in counters
                       if (c, bmv2_port(p.index)) not in values]
            if missing:
                raise Bmv2RuntimeError(f"{name}: no answer for {len(missing)} of {len(cmds)} counters, "
                                       f"e.g. {missing[0][0]}[{missing[0][1]}]")
            ports = {}
            unaccounted = 0  # in, less dropped on purpose, less out that was not a cloned pause frame
            for k, p in enumerate(s.ports):
                i = bmv2_port(p.index)
                (rxp, rxb), (txp, txb), (ecn, _), (pfc, _), (xoff, _), (xon, _), (dropped, _), (cut, _) = (
                    values[(c, i)] for c, _ in counters)
                unaccounted += rxp - dropped - (txp - xoff - xon)
                port = {"up": (name, p.ifname) not in self.down,
                        "rx_packets": rxp, "rx_bytes": rxb, "tx_packets": txp, "tx_bytes": txb,
                        "ecn_marked": ecn, "pfc_rx": pfc, "pfc_tx": xoff + xon, "pfc_xoff_p4": xoff, "pfc_xon_p4": xon,
                        # cut in egress, by the class the trimmable DSCP maps to (the engine's layout)
                        "trimmed": [cut if tc == s.qos.dscp_to_tc[24] else 0 for tc in range(8)]}
                mac_ports = macs.get(name, {}).get("ports", {})
                mac = mac_ports.get(p.ifname)
                if mac is not None:  # what the MAC saw: the pauses it honoured, what it held and dropped
                    port.update({k: mac[k] for k in ("drops_tc", "paused_s", "queue_hwm") if k in mac})
                    port["drops"] = dict(mac.get("drops", {}))
                    port["pfc_rx"] = mac["pfc_rx"]
                    port["pfc_tx_mac"] = mac["pfc_tx"]
                    if "host_nic" in mac:
                        port["host_nic"] = mac["host_nic"]
                handover = mac_ports.get(wire_name(name, k, "w"))  # as links.wire_spec names it
                if handover is not None:
                    # The MAC's own side of the handover to simple_switch: what it could not send or take.
                    drops = port.setdefault("drops", {})
                    for reason, n in handover.get("drops", {}).items():
                        drops[reason] = drops.get(reason, 0) + n
                    # Handed to simple_switch but never seen by its ingress counter: lost on the way in (the
                    # kernel's queue, its capture socket, or simple_switch's input buffer, full while its one
                    # ingress thread lags). Exact once the fabric is quiet, as the queue figure is.
                    into = handover["tx_packets"] - handover.get("drops", {}).get("tx_error", 0) - rxp
                    if into > 0:
                        drops["p4_input"] = drops.get("p4_input", 0) + into
                    # Sent by its egress (which drops nothing after counting) but never read by the MAC, nor
                    # counted as the MAC's socket overflow: lost in the kernel between the two.
                    lost_out = txp - handover["rx_packets"] - handover.get("drops", {}).get("rx_socket_overflow", 0)
                    if lost_out > 0:
                        drops["p4_output"] = drops.get("p4_output", 0) + lost_out
                ports[p.ifname] = port
            # What simple_switch's own queues dropped (tail drops, which no P4 counter sees), read once
            # the fabric is quiet: while packets are queued inside, they count here too.
            out["switches"][name] = {"ports": ports, "queue_drops": max(0, unaccounted)}
        return out

    def ecn_by_depth(self, switch: str) -> list[tuple[int, int]]:
        """(ECN-capable packets seen, marked) by the queue depth they found, 0..63 packets (63: or more):
        fabric.p4's RED as a measured curve."""
        cmds = [f"counter_read FabricEgress.{c} {i}" for i in range(64) for c in ("ecn_depth_seen", "ecn_depth_marked")]
        v = counter_values(self.procs[switch].load(cmds))
        try:
            return [(v[("FabricEgress.ecn_depth_seen", i)][0], v[("FabricEgress.ecn_depth_marked", i)][0])
                    for i in range(64)]
        except KeyError as exc:
            raise Bmv2RuntimeError(f"{switch}: no answer for counter {exc}") from None

    def _native_only(self, what: str) -> Any:
        raise Bmv2RuntimeError(f"{what} is native-only: BMv2 has no cable probes, shared buffer or queue sampling")

    def probe_rtts(self, *a: Any, **k: Any) -> list[float]:
        return self._native_only("measuring cables")

    def set_headroom(self, *a: Any, **k: Any) -> None:
        self._native_only("PFC headroom")

    samples_ports = False  # simple_switch's queues are not sampled in fabric time (Engine.sample_queues)

    def sample_queues(self, *a: Any, **k: Any) -> None:
        self._native_only("queue sampling")

    @property
    def deaths(self) -> list[str]:
        """Every simple_switch (and wire worker) death seen so far, one line each."""
        wires = self.wires.engine.deaths if self.wires is not None and getattr(self.wires, "engine", None) else []
        return (list(self.supervisor.deaths) if self.supervisor else []) + wires

    def stop(self) -> None:
        """Idempotent: Mininet's links and switches each ask, in their own order."""
        if self.supervisor is not None:  # what follows is asked for, not a death
            self.supervisor.stop()
            self.supervisor = None
        for proc in self.procs.values():
            proc.stop()
        if self.wires is not None:
            self.wires.stop()
            self.wires = None
        if self.run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)


__all__ = ["Bmv2DataPlane", "Bmv2RuntimeError", "Entry", "InstalledTables", "counter_values"]
