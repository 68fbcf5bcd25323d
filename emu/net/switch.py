"""FabricSwitch: a Mininet switch whose data plane is the native engine or BMv2.

Mininet makes the node and its veth ends in the root namespace. When the
network starts, `batchStartup` sees every FabricSwitch at once: it reads the
wiring back from Mininet's links, computes routes, configures the hosts'
plane addresses and routes, and has the settings' backend (emu.net.backend)
start one data plane for the whole fabric, which the controller drives.
This works under FabricNet, a plain Mininet() and `mn --custom`.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from mininet.node import Host, Node, Switch

from emu.clock import ClockKind, check_clock
from emu.control.model import MySid
from emu.control.routes import Attachment, FabricGraph, LocalEntries, compute_tables, with_local
from emu.control.runtime import ControlTiming, FabricController
from emu.dataplane.core import check_core, default_core
from emu.dataplane.engine import new_run_dir
from emu.dataplane.partition import hosts_to_workers, split_at_longest, split_by_shards
from emu.dataplane.spec import (
    EcnSpec,
    EngineSpec,
    PortSpec,
    QosSpec,
    SpecError,
    SwitchSpec,
    TrimSpec,
)
from emu.launch import LOCAL_MACHINES
from emu.net.backend import BACKENDS, DataPlane, backend
from emu.net.cleanup import record
from emu.net.link import (
    SWITCH_MTU,
    ChannelIntf,
    CutIntf,
    FabricLink,
    LinkParams,
    NoKernel,
    no_kernel,
    node_netlink,
    root_netlink,
)
from emu.units import Dilation, UnitError


@dataclass(frozen=True)
class RunSettings:
    """How the engine runs a fabric; the same for every switch of it."""

    dilation: float = 1000.0
    pfc: bool = True
    spray: bool = False
    workers: int = 0  # 0: one (see build_spec)
    pcap_dir: str = ""
    buffer_per_port: int = 1 << 20
    control: ControlTiming = ControlTiming()
    measured_headroom: bool = False
    ecn: tuple[int, int, float] | None = None  # (Kmin bytes, Kmax bytes, Pmax) for classes 0 and 3
    backend: str = "native"  # or "bmv2": simple_switch running p4/fabric.p4
    links: str = "auto"  # bmv2 only: netem, engine, or auto (engine with PFC on, else netem where the kernel has it)
    p4_json: str = ""  # bmv2 only: the compiled P4 program (default p4/build/fabric.json; a lab gives its own)
    # bmv2 only: the user's own P4 program (source), compiled and run by every switch instead of fabric.p4,
    # and the Python file whose tables(switch) gives each switch's table entries (emu.backends.bmv2.program).
    p4: str = ""
    p4_tables: str = ""
    # "fabric": fabric time is a clock of its own (every switch in one worker, the project's endpoints
    # inside it, nothing late, results the same on any machine); `dilation` then only paces the kernel's
    # traffic while none of ours runs. "wall": fabric time = wall time / dilation (kernel traffic, BMv2).
    # `workers` > 1 splits the fabric at its longest links into that many workers joined by channels
    # (emu.dataplane.channel; on the fabric clock kept in step by windows); 0 is one worker.
    clock: ClockKind = ClockKind.WALL  # a name given is made the kind here (check_clock)
    # Packet trimming (size in bytes after the Ethernet header, the trimmed packets' DSCP), or None:
    # MetaRoCE's data (DSCP 24 in this mode) is cut instead of dropped (emu.dataplane.spec.TrimSpec).
    trim: tuple[int, int] | None = None
    # Fabric clock only: wall seconds a job's fabric second takes at least (0: as fast as the CPU
    # allows), to watch a run in the live view; results do not change (FabricNet.pace changes it).
    pace: float = 0.0
    # Fabric clock: the machines the fabric runs on, one engine worker each, reached by ssh ("localhost":
    # this one), and where nodes go (node -> machine, the rest on the first machine; none given: split at
    # the longest links).
    machines: tuple[str, ...] = ()
    placement: Any = ()  # {node: machine} or its items; kept as sorted items
    # The core that runs the hot path (emu.dataplane.core): "native", the compiled one (the default where
    # it was built), or "python", the reference; the same figures either way. "": the default.
    core: str = ""
    # Whether the hosts have kernels (a namespace each, veths to their switches). Without (the fabric clock
    # only), every node is the engine's alone: nothing to make in the kernel, so a fabric of hundreds of
    # GPUs builds in seconds; jobs run as ever, and the hosts cannot run commands (ping, iperf3).
    kernel: bool = True
    # The hosts' kernels' TCP congestion control (each host namespace's net.ipv4.tcp_congestion_control).
    # reno by default: its window grows and shrinks on ACKs and losses, where BBR keeps clocks of its own
    # in wall seconds (a 10-second window on the least round trip, a 200 ms probe). With BBR, this
    # machine's default, some of NetPIPE's 8-32 MiB messages over FPF 8 x 8 took ~90 wall ms longer at any
    # D; with reno none did (docs/performance.md, "NetPIPE's stalls"; which of BBR's clocks was not split).
    # The kernel's own timers (its 200 ms floor on a retransmission timeout) keep wall time on any.
    host_cc: str = "reno"

    def __post_init__(self) -> None:
        object.__setattr__(self, "core", check_core(self.core or default_core()))
        object.__setattr__(self, "clock", check_clock(self.clock))
        if not self.kernel and (self.clock.paced or self.backend != "native" or self.machines):
            raise ValueError("a fabric without the hosts' kernels (kernel=False) runs the native engine on the "
                             "fabric clock, on one machine: its hosts are only the jobs the engine runs")
        try:
            Dilation(self.dilation)
        except UnitError as exc:
            raise ValueError(str(exc)) from None
        if self.workers < 0:
            raise ValueError(f"workers must be >= 0, got {self.workers}")
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.host_cc):
            raise ValueError(f"host_cc: a TCP congestion control's name (reno, bbr, ...), got {self.host_cc!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.links not in ("auto", "netem", "engine"):
            raise ValueError(f"links must be auto, netem or engine, got {self.links!r}")
        if self.backend == "native" and self.links != "auto":
            raise ValueError("--links is for --backend bmv2: the native engine always carries its own links")
        if self.ecn is not None:
            kmin, kmax, pmax = self.ecn
            if not (0 <= kmin < kmax and 0 < pmax <= 1):
                raise ValueError(f"ECN needs 0 <= KMIN < KMAX and 0 < PMAX <= 1, got {kmin}, {kmax}, {pmax}")
        if self.backend == "native" and (self.p4_json or self.p4 or self.p4_tables):
            raise ValueError("a P4 program is for --backend bmv2: the native engine does not run one")
        if self.p4_tables and not self.p4:
            raise ValueError("--p4-tables goes with --p4 PROG.p4: fabric.p4's tables are the control plane's")
        if self.p4 and self.p4_json:
            raise ValueError("--p4 (a program to compile) or p4_json (one compiled), not both")
        if self.p4 and (self.ecn is not None or self.trim is not None):
            raise ValueError("--ecn and --trim configure fabric.p4; with --p4 your program does its own")
        if not 0.0 <= self.pace <= 1e6:
            raise ValueError(f"pace: wall seconds per fabric second in [0, 1e6] (1e6: a fabric microsecond a "
                             f"second), got {self.pace}")
        if self.pace and self.clock.paced:
            raise ValueError("--pace is for the fabric clock (--clock fabric); on the wall clock, D is the pace")
        if self.trim is not None:
            try:
                TrimSpec(size=self.trim[0], dscp=self.trim[1])
            except SpecError as exc:
                raise ValueError(str(exc)) from None
            if self.backend == "bmv2" and self.trim[0] != 64:
                raise ValueError("--trim on BMv2 keeps 64 bytes (fabric.p4's UDP checksum covers exactly the "
                                 f"headers it parses), not {self.trim[0]}")
        # Given as lists and a dict (FabricNet(machines=[...], placement={...})): kept as tuples.
        object.__setattr__(self, "machines", tuple(self.machines))
        object.__setattr__(self, "placement", tuple(sorted(dict(self.placement).items())))
        if self.machines:
            if len(set(self.machines)) != len(self.machines):
                raise ValueError(f"machines: each once; got {', '.join(self.machines)}")
            if self.backend != "native":
                raise ValueError("BMv2 runs on one machine: --machines is the native engine's")
            if self.workers not in (0, len(self.machines)):
                raise ValueError(f"one engine worker a machine: --workers {self.workers} with "
                                 f"{len(self.machines)} machines")
        unknown = sorted({m for _, m in self.placement} - set(self.machines))
        if unknown:
            raise ValueError(f"placement names machines not in --machines: {', '.join(unknown)}")
        if self.backend != "native" and self.workers > 1:
            raise ValueError("BMv2's links are carried by one engine worker: --workers is the native engine's")
        if self.clock is ClockKind.FABRIC and self.backend != "native":
            raise ValueError("the fabric clock is the native engine's: BMv2's simple_switch keeps wall time "
                             "(use --clock wall with --backend bmv2)")


def _subnet(gateway: str, address: str) -> str:
    """The host link's subnet (its gateway's network), if the host's address is in it; else none."""
    if not gateway:
        return ""
    net, text = _network(gateway)
    return text if ipaddress.ip_address(address.split("/")[0]) in net else ""


@lru_cache(maxsize=1 << 16)
def _network(gateway: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str]:
    """A gateway's network and its text, parsed once: a leaf's hosts share one (FPF 4096 x 8: 65 536 links)."""
    net = ipaddress.ip_interface(gateway).network
    return net, str(net)


def default_settings() -> RunSettings:
    """The settings of a fabric built without any: the native engine at EMU_DILATION, else D = 1000."""
    text = os.environ.get("EMU_DILATION", "1000")
    try:
        return RunSettings(dilation=float(text))
    except ValueError:
        raise ValueError(f"EMU_DILATION must be a finite number > 0, got {text!r}") from None


class FabricSwitch(Switch):
    """A switch of the emulated fabric. `shard` groups switches onto one engine worker (FPF: the plane)."""

    settings: RunSettings = RunSettings()  # FabricNet gives each switch the run's own
    run_dir: str = ""  # and the run directory it recorded the fabric in before building it

    def __init__(self, name: str, shard: int | None = None, loopback4: str = "", loopback6: str = "",
                 sids: dict[str, str] | None = None, **params: Any):
        params.pop("batch", None)
        params["inNamespace"] = False
        super().__init__(name, **params)
        self._fabric(shard, loopback4, loopback6, sids)

    def _fabric(self, shard: int | None, loopback4: str, loopback6: str, sids: dict[str, str] | None) -> None:
        self.shard = shard
        self.loopback4 = loopback4
        self.loopback6 = loopback6
        self.sids = dict(sids or {})  # SRv6 SID -> End | End.DT6
        self.engine: DataPlane | None = None  # the fabric's data plane, whichever backend runs it
        self.control: FabricController | None = None

    def start(self, controllers: list) -> None:  # the engine starts in batchStartup
        pass

    def stop(self, deleteIntfs: bool = True) -> None:
        super().stop(deleteIntfs)

    def connected(self) -> bool:
        return self.engine is not None

    @classmethod
    def batchStartup(cls, switches: tuple[FabricSwitch, ...], settings: RunSettings | None = None) -> tuple:
        settings = settings or switches[0].settings
        chosen = backend(settings.backend)
        chosen.check(settings, [sw.name for sw in switches])  # before anything is made
        built = build_spec(switches, settings)
        record_nodes(built.spec.run_dir, switches)
        # Interfaces first, then the data plane. Configuring them while the workers open their ports (each
        # waiting for an RCU grace period, from threads) took 7-8 s instead of 0.6 s here; the workers'
        # own start is 0.25 s, so nothing is worth overlapping.
        built.configure()
        plane = chosen.start(switches, built, settings)
        try:
            control = FabricController(plane, built.graph, built.attachments, port_names=built.port_names,
                                       dilation=settings.dilation, spray=settings.spray, timing=settings.control,
                                       local=built.local, pushed={s.name: s.tables for s in built.spec.switches})
        except BaseException:
            plane.stop()
            raise
        for sw in switches:
            sw.engine = plane
            sw.control = control
        plane.before_job = control.settle  # a job starts on settled routes (Engine.start_job)
        if settings.measured_headroom:
            for a, b in sorted({tuple(sorted((u, v))) for u, v in built.graph.graph.edges()}):
                control.size_headroom(a, b)
        return switches

    @classmethod
    def batchShutdown(cls, switches: tuple[FabricSwitch, ...]) -> tuple:
        planes = {id(sw.engine): sw.engine for sw in switches if sw.engine is not None}
        controls = {id(sw.control): sw.control for sw in switches if sw.control is not None}
        for c in controls.values():
            c.close()
        for plane in planes.values():
            plane.stop()
        for sw in switches:
            sw.engine = None
            sw.control = None
        return ()


class EngineSwitch(NoKernel, FabricSwitch):
    """A fabric switch that is the engine's alone (RunSettings.kernel False): no shell, no interfaces (not
    even Mininet's loopback one, which a root-namespace switch configures through its shell)."""

    def __init__(self, name: str, shard: int | None = None, loopback4: str = "", loopback6: str = "",
                 sids: dict[str, str] | None = None, dpid: str | None = None, **params: Any):
        params.pop("batch", None)
        params["inNamespace"] = False
        Node.__init__(self, name, **params)
        self.dpid, self.opts, self.listenPort = self.defaultDpid(dpid), "", None
        self._fabric(shard, loopback4, loopback6, sids)


class EngineHost(NoKernel, Host):
    """A host that is only the jobs the engine runs on it (RunSettings.kernel False): no namespace, no shell,
    no interfaces; its planes are its links' plans (FabricNet.host_planes)."""

    def __init__(self, name: str, **params: Any) -> None:
        params["inNamespace"] = False  # none of its own
        super().__init__(name, **params)

    def IP(self, intf: Any = None) -> str | None:  # noqa: N802 (Mininet's name)
        """Its first plane's IPv4 address, from the link's plan (it has no interface to read it from)."""
        for i in self.intfList():
            link = getattr(i, "link", None)
            if isinstance(link, FabricLink) and link.fabric.host_ip4 and (intf is None or i.name == str(intf)):
                return link.fabric.host_ip4.split("/")[0]
        return None


def record_nodes(run_dir: str, switches: tuple[FabricSwitch, ...]) -> None:
    """What `emu clean` needs after a crash: the switches' interfaces, the node shells, the hosts."""
    # Only this machine's: a node on another has its pid there, and its interfaces go with its namespace.
    nodes = {id(n): n for sw in switches for n in (sw, *(_other(i).node for i in _ports(sw)))
             if machine_of(n) == "localhost"}
    record(
        run_dir,
        interfaces=[i.name for sw in switches if machine_of(sw) == "localhost" for i in _ports(sw)
                    if not isinstance(i, ChannelIntf)],
        pids=[n.pid for n in nodes.values() if getattr(n, "pid", None)],
        hosts={n.name: n.pid for n in nodes.values() if not isinstance(n, FabricSwitch) and getattr(n, "pid", None)},
    )


def _ports(sw: FabricSwitch) -> list:
    return [sw.intfs[k] for k in sorted(sw.intfs) if sw.intfs[k].name != "lo" and sw.intfs[k].link is not None]


def _other(intf):
    link = intf.link
    return link.intf2 if link.intf1 is intf else link.intf1


def _params(intf) -> LinkParams:
    link = intf.link
    return link.fabric if isinstance(link, FabricLink) else LinkParams()


@dataclass(frozen=True)
class BuiltFabric:
    spec: EngineSpec
    graph: FabricGraph
    attachments: list[Attachment]
    port_names: dict[tuple[str, int], str]
    local: dict[str, LocalEntries]
    root_ifs: dict[str, list[str]]  # the data plane's ends of the links, by machine
    host_ports: dict[Any, list[HostPort]]  # each host's ends, with their plan
    # A switch on each other machine (emu.cluster.remote.RemoteFabricSwitch), which configures its machine.
    remote: dict[str, Any] = field(default_factory=dict)

    def configure(self) -> None:
        """Configure the interfaces: the data plane's ends, then every host's; on other machines, there."""
        here = {h: p for h, p in self.host_ports.items() if machine_of(h) == "localhost"}
        raise_neighbour_limits(sum(len(c) for c in here.values()) * len(here))
        configure_root_side(self.root_ifs.get("localhost", []))
        configure_hosts(here)
        for machine, sw in self.remote.items():
            sw.configure_machine({h: p for h, p in self.host_ports.items() if machine_of(h) == machine},
                                 self.root_ifs.get(machine, []))


def machine_of(node: Any) -> str:
    """The machine a node runs on ("localhost": this one; emu.cluster.remote's nodes have a server)."""
    server = getattr(node, "server", "localhost") if getattr(node, "isRemote", False) else "localhost"
    return server or "localhost"


def _worker_on(machines: tuple[str, ...], sw: FabricSwitch) -> int:
    m = machine_of(sw)
    for i, name in enumerate(machines):
        if name == m or (m == "localhost" and name in LOCAL_MACHINES):
            return i
    raise ValueError(f"{sw.name} runs on this machine, which --machines ({', '.join(machines)}) does not name")


# Not asked (`workers` 0), the fabric clock splits a fabric of this many hosts or more over two workers at its
# longest links, where those are this long or more, on a machine of two cores or more: measured faster there
# and the same figures bit for bit (docs/performance.md: FPF 512 x 8 split at its 100 m leaf-spine cables,
# 0.5 us of lookahead, 1.86x the packet-hops a second of one worker; FPF 64 x 8 1.1x; FPF 8 x 8 0.64x; a
# split by planes, 10 ns, 1.7x slower).
AUTO_SPLIT_HOSTS = 256
AUTO_SPLIT_LOOKAHEAD_S = 100e-9


def _auto_split(settings: RunSettings, ports: dict[str, list[PortSpec]], hosts: int) -> dict[str, int]:
    """The placement of a split over two workers that the fabric clock makes unasked, or {} for one."""
    if (settings.workers != 0 or settings.clock is not ClockKind.FABRIC or settings.backend != "native"
            or hosts < AUTO_SPLIT_HOSTS or (os.cpu_count() or 1) < 2):
        return {}
    try:
        place = split_at_longest(ports, 2)
    except SpecError:
        return {}
    cut = [p.delay_s for a, ps in ports.items() for p in ps
           if p.peer_kind == "switch" and place[a] != place[p.peer_switch]]
    return place if cut and min(cut) >= AUTO_SPLIT_LOOKAHEAD_S else {}


def build_spec(switches: tuple[FabricSwitch, ...], settings: RunSettings) -> BuiltFabric:
    """Read Mininet's wiring, compute tables, and describe the engine's job and the interfaces' configuration
    (made by BuiltFabric.configure)."""
    names = {sw.name for sw in switches}
    index: dict[tuple[str, str], int] = {}
    for sw in switches:
        for i, intf in enumerate(_ports(sw)):
            index[(sw.name, intf.name)] = i
    graph = FabricGraph()
    attachments: list[Attachment] = []
    host_ports: dict[Any, list[HostPort]] = {}
    root_ifs: dict[str, list[str]] = {}
    port_specs: dict[str, list[PortSpec]] = {}
    host_node: dict[str, Any] = {}  # host name -> its node
    host_of: dict[tuple[str, int], str] = {}  # (switch, port) -> the host it faces
    for sw in switches:
        graph.add_switch(sw.name)
        if sw.loopback4:
            attachments.append(Attachment(f"{sw.loopback4}/32", sw.name))
        if sw.loopback6:
            attachments.append(Attachment(f"{sw.loopback6}/128", sw.name))
        for sid in sw.sids:
            attachments.append(Attachment(f"{sid}/128", sw.name))
        specs = []
        for i, intf in enumerate(_ports(sw)):
            peer = _other(intf)
            lp = _params(intf)
            if isinstance(intf, CutIntf):  # a host's cable cut between machines: its end is on the host's
                root_ifs.setdefault(machine_of(peer.node), []).append(intf.name)
            elif not isinstance(intf, ChannelIntf):  # a channel's port has no device to configure
                root_ifs.setdefault(machine_of(sw), []).append(intf.name)
            mac = intf.mac or intf.MAC()
            if peer.node.name in names:
                j = index[(peer.node.name, peer.name)]
                specs.append(PortSpec(index=i, ifname=intf.name, mac=mac, rate_bps=lp.rate_bps, delay_s=lp.delay_s,
                                      peer_kind="switch", peer_switch=peer.node.name, peer_port=j,
                                      headroom=lp.headroom))
                if sw.name < peer.node.name:
                    graph.add_link(sw.name, i, mac, peer.node.name, j, peer.mac or peer.MAC(), lp.rate_bps)
                continue
            host_mac = peer.mac or peer.MAC()
            kernel = not no_kernel(peer.node)
            ip4 = lp.host_ip4 or (f"{peer.IP()}/{peer.prefixLen}" if kernel and peer.IP() else "")
            specs.append(PortSpec(index=i, ifname=intf.name, mac=mac, rate_bps=lp.rate_bps, delay_s=lp.delay_s,
                                  peer_kind="host", peer_mac=host_mac,
                                  ipv4=(lp.gw4,) if lp.gw4 else (), ipv6=(lp.gw6,) if lp.gw6 else (),
                                  headroom=lp.headroom, kernel=kernel))
            if ip4:
                attachments.append(Attachment(ip4.split("/")[0] + "/32", sw.name, i, host_mac, _subnet(lp.gw4, ip4)))
            if lp.host_ip6:
                attachments.append(Attachment(lp.host_ip6.split("/")[0] + "/128", sw.name, i, host_mac,
                                              _subnet(lp.gw6, lp.host_ip6)))
            if kernel:
                host_ports.setdefault(peer.node, []).append(HostPort(peer.name, lp))
            host_node[peer.node.name] = peer.node
            host_of[(sw.name, i)] = peer.node.name
        port_specs[sw.name] = specs
    local = {sw.name: LocalEntries(my_sids=[MySid(sid, action) for sid, action in sw.sids.items()])
             for sw in switches if sw.sids}
    tables = with_local(compute_tables(graph, attachments, spray=settings.spray), local)
    # One worker unless asked: it holds the whole fabric, and no second worker competes with the hosts'
    # own processes for the cores. Split or not, the project's endpoints run inside the engine
    # (compiled, frames crossing no kernel: Timebase.endpoints_inside).
    fabric_clock = settings.clock is ClockKind.FABRIC
    place: dict[str, int] = {}
    host_home: dict[str, int] = {}  # a host whose switches are on several workers runs on one of them
    if settings.machines:  # a worker a machine, for the nodes FabricNet placed there
        workers = len(settings.machines)
        place = {sw.name: _worker_on(settings.machines, sw) for sw in switches}
        host_home = {h: _worker_on(settings.machines, node) for h, node in host_node.items()}
    else:  # one worker, or (workers asked for) one per piece of a split at its longest links, else by
        # shards, with the hosts' cables cut: on either clock, each host runs whole on one worker
        workers = max(1, settings.workers)
        place = _auto_split(settings, port_specs, len(set(host_of.values())))
        if place:
            workers = 2
        elif workers > 1:
            try:
                try:
                    place = split_at_longest(port_specs, workers)
                except SpecError:
                    place = split_by_shards({sw.name: sw.shard or 0 for sw in switches}, workers)
            except SpecError as exc:
                raise ValueError(str(exc)) from None
        if workers > 1:
            around: dict[str, list[str]] = {}
            for (sw_name, _), h in sorted(host_of.items()):
                around.setdefault(h, []).append(sw_name)
            host_home = hosts_to_workers(around, place)
    if host_home:
        for name, specs in port_specs.items():
            port_specs[name] = [replace(p, host_worker=host_home[host_of[(name, p.index)]])
                                if (name, p.index) in host_of and host_home[host_of[(name, p.index)]] != place[name]
                                else p for p in specs]
    qos = replace(QosSpec(), pfc=settings.pfc, buffer_per_port=settings.buffer_per_port,
                  trim=TrimSpec(size=settings.trim[0], dscp=settings.trim[1]) if settings.trim else None)
    if settings.ecn is not None:
        kmin, kmax, pmax = settings.ecn
        qos = replace(qos, ecn={3: EcnSpec(kmin, kmax, pmax), 0: EcnSpec(kmin, kmax, pmax)})
    spec = EngineSpec(
        switches=tuple(
            SwitchSpec(
                name=sw.name,
                ports=tuple(port_specs[sw.name]),
                tables=tables[sw.name],
                qos=qos,
                loopback4=sw.loopback4,
                loopback6=sw.loopback6,
                worker=place.get(sw.name, 0),
                seed=n,
            )
            for n, sw in enumerate(switches)
        ),
        dilation=1.0 if fabric_clock else settings.dilation,
        run_dir=switches[0].run_dir or new_run_dir(),
        pcap_dir=settings.pcap_dir,
        workers=workers,
        clock=settings.clock,
        idle_dilation=settings.dilation,
        machines=settings.machines,
        core=settings.core,
    )
    port_names = {(sw, p.index): p.ifname for sw, ports in port_specs.items() for p in ports}
    remote = {machine_of(sw): sw for sw in switches if machine_of(sw) != "localhost"}
    return BuiltFabric(spec, graph, attachments, port_names, local, root_ifs, host_ports, remote)


@dataclass(frozen=True)
class HostPort:
    """A host's end of a fabric link, and the link's plan for it (addresses, gateway, routes)."""

    ifname: str
    params: LinkParams


# A host's IPv6 defaults, set in its namespace before its interfaces exist (FabricNet.addHost) and
# again on them: no duplicate address detection, no router advertisements, and MLD reports all at
# once when an address is made rather than repeated over the next second or two (a fabric-clock job
# starting then would have the kernel's frames cross it).
QUIET_HOST: dict[str, str | int] = {
    f"ipv6/conf/{scope}/{key}": 0 for scope in ("all", "default")
    for key in ("accept_dad", "accept_ra", "mldv1_unsolicited_report_interval", "mldv2_unsolicited_report_interval")}


# A host's TCP keeps its window over an idle time: the kernel would shrink it after an idle longer than a
# retransmission timeout, a wall time (at least 200 ms), where a real host idle for the same fabric time
# (1/D of it) would not. The congestion control (RunSettings.host_cc) is set apart: a kernel may refuse it.
HOST_TCP: dict[str, str | int] = {"ipv4/tcp_slow_start_after_idle": 0}


def host_sysctls(settings: RunSettings) -> dict[str, str | int]:
    """All a host's namespace is given before its interfaces, as one list for a host on another machine
    (a host here is given QUIET_HOST and HOST_TCP, then its congestion control, whose refusal is said)."""
    return dict(QUIET_HOST, **HOST_TCP, **{"ipv4/tcp_congestion_control": settings.host_cc})


def configure_hosts(ports: dict[Any, list[HostPort]]) -> None:
    """Each host's fabric interfaces over one netlink socket in its namespace: no duplicate address
    detection and no router advertisements (before they come up), offloads off, up, the planned
    addresses, and routes to the rest of the fabric via each interface's gateway."""
    for host, mine in ports.items():
        keys: dict[str, str | int] = dict(QUIET_HOST, **{"ipv6/conf/all/disable_ipv6": 0})
        for p in mine:
            keys[f"ipv6/conf/{p.ifname}/accept_dad"] = 0
            keys[f"ipv6/conf/{p.ifname}/accept_ra"] = 0
        with node_netlink(host) as nl:
            nl.sysctl(keys)
            for p in mine:
                lp = p.params
                nl.offloads_off(p.ifname)
                nl.set_link(p.ifname, up=True)
                if lp.host_ip4:
                    nl.add_address(p.ifname, lp.host_ip4)
                if lp.host_ip6:
                    nl.add_address(p.ifname, lp.host_ip6)
                for routes, gw in ((lp.host_routes4, lp.gw4), (lp.host_routes6, lp.gw6)):
                    for r in routes if gw else ():
                        nl.add_route(r, gw.split("/")[0], p.ifname)


def raise_neighbour_limits(entries: int) -> None:
    """Neighbour tables are one kernel-wide pool for all namespaces (gc_thresh3 defaults to 1024):
    16 GPUs x 8 planes already hold 2048 IPv6 neighbours. Raise the limits, never lower them."""
    want = max(4096, 4 * entries)
    for fam in ("ipv4", "ipv6"):
        for i, scale in ((1, 1), (2, 2), (3, 4)):
            key = f"/proc/sys/net/{fam}/neigh/default/gc_thresh{i}"
            try:
                with open(key) as f:
                    if int(f.read()) >= want * scale:
                        continue
                with open(key, "w") as f:
                    f.write(str(want * scale))
            except OSError:
                pass


def configure_root_side(ifnames: list[str]) -> None:
    """The data plane's ends: no IPv6 chatter (set before they come up), no offloads, jumbo, up."""
    nl = root_netlink()
    nl.sysctl({f"ipv6/conf/{n}/disable_ipv6": 1 for n in ifnames})
    for n in ifnames:
        nl.offloads_off(n)
        nl.set_link(n, up=True, mtu=SWITCH_MTU)
