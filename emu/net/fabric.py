"""FabricNet: Mininet with the emulator's fabric switches, on the backend the settings name.

    with FabricNet(FPFTopo(gpus=2, planes=2), dilation=10_000) as net:
        print(net.pingall_planes().loss)
        net.fail(plane=1)
"""

from __future__ import annotations

import gc
import ipaddress
import json
import math
import os
import re
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from itertools import groupby
from typing import TYPE_CHECKING, Any

from mininet.net import Mininet

from emu.cluster.placement import PlacementError, place
from emu.cluster.remote import RemoteFabricHost, RemoteFabricSwitch, host_addresses
from emu.control.runtime import FabricController
from emu.dataplane.engine import Engine, new_run_dir
from emu.launch import LOCAL_MACHINES, stop_on_signals
from emu.net import kerneltcp
from emu.net.backend import backend
from emu.net.cleanup import make_way, netns_id, record
from emu.net.flows import EngineFlows, Flow, KernelFlows
from emu.net.link import FabricLink, no_kernel, node_netlink, root_netlink
from emu.net.netlink import NetlinkError, new_group
from emu.net.stats import FabricStats
from emu.net.switch import (
    HOST_TCP,
    QUIET_HOST,
    EngineHost,
    EngineSwitch,
    FabricSwitch,
    RunSettings,
    default_settings,
    host_sysctls,
)
from emu.net.timebase import Perf, Timebase
from emu.units import parse_rate, parse_time

if TYPE_CHECKING:
    from emu.collectives.run import CollectiveResult, RankHost, Tenant
    from emu.collectives.trace import Trace
    from emu.net.ranks import RankResult


@dataclass(frozen=True)
class RoceWrite:
    """One MetaRoCE write between two hosts, as the writer and the peer saw it (fabric units)."""

    nbytes: int
    fabric_s: float  # from the first packet to the last completion
    bw_fabric_bps: float
    retransmits: int
    data_ok: bool  # the peer's memory holds exactly what was written
    planes: list[dict[str, Any]]  # per plane: tx_bytes, retransmits, healthy, downs, probes
    fidelity: list[dict[str, Any]]  # the endpoints' own lateness (emu.fidelity parts)
    client: dict[str, Any]  # everything the writer reported (plane_trace, rate_trace, ...)
    server: dict[str, Any]
    kernel_frames: int = 0  # fabric clock: kernel frames the engine took while the write ran
    failed_at_fabric_s: float | None = None  # with fail_plane: when, on the client's traces' clock


# Who is told how a bring-up goes (emu.cli.progress draws it on a terminal): watch(stage, done, total), and
# watch("", 0, 0) once the fabric is up. Stages: "hosts", "links", then "engine" (its switches, tables
# and routes, one step).
BRINGUP_WATCHERS: list[Callable[[str, int, int], None]] = []


def _bringup(stage: str, done: int, total: int) -> None:
    for watch in list(BRINGUP_WATCHERS):
        watch(stage, done, total)


PING_LINE_BYTES = 3000  # targets on one shell command line (the pty's line is 4 KiB)


def _chunks(words: list[str], limit: int) -> list[list[str]]:
    """`words` in order, in runs whose joined length stays under `limit`."""
    out: list[list[str]] = []
    size = limit
    for w in words:
        if size + len(w) + 1 > limit:
            out.append([])
            size = 0
        out[-1].append(w)
        size += len(w) + 1
    return out


class RoceOps:
    """MetaRoCE from the root namespace: `net.roce.write("gpu0", "gpu1", nbytes=1 << 20)` runs the
    endpoints over every plane the hosts have, on the fabric's clock: inside the engine on the fabric
    clock, as processes in the two hosts at the fabric's D on the wall clock."""

    def __init__(self, net: FabricNet) -> None:
        self.net = net

    def write(self, src: str, dst: str, *, nbytes: int, cc: str = "none", message: int = 1 << 20,
              timeout: float | None = None, fail_plane: tuple[int, float] | None = None,
              spray: str = "weighted") -> RoceWrite:
        """Write `nbytes` (bytes) from host `src` to host `dst` in `message`-byte RDMA writes; `cc`:
        "none" or "dcqcn"; on the wall clock, `timeout` in wall seconds (default: room for the write at
        1 Gb/s of fabric rate, stretched by D; on the fabric clock the endpoints run inside the engine
        and only a fabric time that stops advancing ends the wait). `fail_plane=(plane, fraction)`, as
        for `net.traffic`: that plane fails under the write once the source's switch on it has forwarded
        `fraction` of the plane's even share of the write (nbytes / planes; on the fabric clock the engine
        fails it at the fabric time those bytes take at the plane's line rate, as nothing outside the
        engine can act while the write runs), and is restored after. `spray`:
        "weighted" (each plane's share follows its measured health) or "equal". Raises RuntimeError if
        an endpoint fails."""
        from emu.roce.transport import SPRAYS

        if spray not in SPRAYS:
            raise ValueError(f"spray is one of {', '.join(SPRAYS)}, not {spray!r}")
        net = self.net
        src_planes = net.host_planes(src)
        fail_after = None
        if fail_plane is not None:
            plane, fraction = fail_plane
            if not 0 <= plane < len(src_planes):
                raise ValueError(f"fail_plane: {src} has planes 0..{len(src_planes) - 1}, not {plane}")
            if not 0.0 <= fraction <= 1.0:
                raise ValueError(f"fail_plane: the fraction of the plane's share sent before it fails is in [0, 1], "
                                 f"not {fraction}")
            fail_after = (plane, int(fraction * nbytes / len(src_planes)))
        run = net.timebase.perf([src], dst, nbytes=nbytes, cc=cc, message=message, fail_after=fail_after,
                                timeout=timeout, trim_dscp=net.settings.trim[1] if net.settings.trim else None,
                                spray=spray)
        (client,), server, kernel_frames, failed_at = run.clients, run.server, run.kernel_frames, run.failed_at_s
        return RoceWrite(nbytes=client["bytes"], fabric_s=client["fabric_s"], bw_fabric_bps=client["bw_fabric_bps"],
                         retransmits=client["retransmits"], data_ok=bool(server["data_ok"]), planes=client["planes"],
                         fidelity=client["fidelity"] + server["fidelity"], client=client, server=server,
                         kernel_frames=kernel_frames, failed_at_fabric_s=failed_at)

    def perf(self, srcs: list[str], dst: str, *, nbytes: int, cc: str = "none") -> Perf:
        """Every host in `srcs` writes `nbytes` (bytes) to host `dst` at once (an incast of writers, one
        server): each client's result, the server's, and what the verdict needs (`net.verdict`)."""
        net = self.net
        return net.timebase.perf(srcs, dst, nbytes=nbytes, cc=cc,
                                 trim_dscp=net.settings.trim[1] if net.settings.trim else None)


@dataclass(frozen=True)
class PingResult:
    sent: int
    received: int
    failed: tuple[tuple[str, str], ...]
    retried: int = 0

    @property
    def loss(self) -> float:
        return 0.0 if not self.sent else 100.0 * (self.sent - self.received) / self.sent


_SETTINGS = {f.name for f in fields(RunSettings)}


def _writable_dir(path: str) -> None:
    """`path` made if need be and writable, else one ValueError naming it (before a run exists)."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--pcap {path}: cannot make the folder ({exc.strerror})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"--pcap {path}: the folder cannot be written")


VIEW_RECORD = "view.json"  # in the run directory: the topology as the live view draws it


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Python's cycle collector held off while a fabric is built and started, and what they made frozen
    (gc.freeze) until it stops: millions of objects that live as long as the fabric, which the collector
    walked again and again while they were made (2M small dicts: 3.3 s made with it on, 0.7 s off) and
    would walk again in the next collections if merely switched back on (1.7 s more, in the run)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was:
            gc.enable()


def _allowed_cc() -> list[str] | None:
    """The TCP congestion controls this kernel lets a namespace other than its first choose (None: unread)."""
    try:
        with open("/proc/sys/net/ipv4/tcp_allowed_congestion_control") as f:
            return f.read().split()
    except OSError:
        return None


class FabricNet(Mininet):
    """A Mininet whose switches and links are the fabric's. Any RunSettings field can be given as a
    keyword (`dilation=10_000`, `backend="bmv2"`, `pfc=False`, `spray=True`): it overrides `settings`
    (default: EMU_DILATION or 1000, the native engine). Used as a context manager it starts the
    fabric on entry and stops it on exit, an exception included, leaving nothing behind."""

    def __init__(self, topo: Any = None, *, settings: RunSettings | None = None, **kw: Any) -> None:
        settings = settings or default_settings()  # settings.backend picks the data plane (emu.net.backend)
        overrides = {k: kw.pop(k) for k in list(kw) if k in _SETTINGS}
        if overrides:
            settings = replace(settings, **overrides)
        kw.setdefault("switch", FabricSwitch)
        kw.setdefault("link", FabricLink)
        kw.setdefault("controller", None)
        self.settings = settings
        self.timebase = Timebase.of(settings)(self)  # the run's clock, chosen once (emu.net.timebase)
        self.link_group = new_group()  # every root-side link end: one request deletes them all
        self._restore_signals: Callable[[], None] | None = None
        self._switch_paths: dict[str, dict[str, float]] = {}  # one_way_s's shortest paths, by first switch
        self._degraded: set[tuple[str, str]] = set()  # (switch, port) that degrade() changed
        self._reported: dict[tuple[str, str], float] = {}  # links whose rate degrade(report=True) told: built rate
        self._views: list[Any] = []  # web views serving this fabric (web()), closed by stop()
        self._recorders: list[tuple[str, Any]] = []  # (path, Recorder) from record(), saved by stop()
        self.machine_of: dict[str, str] = {}  # node -> machine, over settings.machines (build())
        self.job_tcp_timers: dict[str, int] = {}  # the last run()'s hosts' TCP timer firings (emu.net.kerneltcp)
        super().__init__(topo=topo, **kw)

    def addHost(self, name: str, cls: Any = None, **params: Any) -> Any:
        """Mininet's addHost, with the host's IPv6 defaults quiet before any interface is made in it
        (the first one is brought up by Mininet before the fabric configures the rest). A host placed on
        another machine is Mininet's cluster-edition RemoteHost there."""
        machine = self.machine_of.get(name, "localhost")
        self._made_one("hosts")
        if machine not in LOCAL_MACHINES:
            host = super().addHost(name, RemoteFabricHost, server=machine, **params)
            said = host.cmd(" ".join(f"sysctl -qw net.{k.replace('/', '.')}={v} || echo refused {k};"
                                     for k, v in host_sysctls(self.settings).items()))
            if "refused ipv4/tcp_congestion_control" in said:
                raise ValueError(self._cc_refused(f"on {machine}"))
            return host
        if not self.settings.kernel:
            return super().addHost(name, EngineHost, **params)
        host = super().addHost(name, cls, **params)
        if getattr(host, "inNamespace", False):  # (build() has checked the name against the allowed list)
            with node_netlink(host) as nl:
                nl.sysctl(dict(QUIET_HOST, **HOST_TCP))
                try:
                    nl.sysctl({"ipv4/tcp_congestion_control": self.settings.host_cc})
                except NetlinkError:
                    raise ValueError(self._cc_refused(f"here (allowed: {', '.join(_allowed_cc() or ())})")) from None
        return host

    def _cc_refused(self, where: str) -> str:
        return (f"the hosts' TCP congestion control {self.settings.host_cc!r} cannot be set in a host's "
                f"namespace {where}: --host-cc takes one the kernel allows a namespace")

    def addSwitch(self, name: str, cls: Any = None, **params: Any) -> Any:
        """Mininet's addSwitch; a switch placed on another machine has its shell there (RemoteFabricSwitch)."""
        machine = self.machine_of.get(name, "localhost")
        if machine not in LOCAL_MACHINES:
            return super().addSwitch(name, RemoteFabricSwitch, server=machine, **params)
        if not self.settings.kernel and (cls is None or cls is FabricSwitch):
            return super().addSwitch(name, EngineSwitch, **params)
        return super().addSwitch(name, cls, **params)

    def configHosts(self) -> None:  # noqa: N802 (Mininet's name)
        """Mininet's, for the hosts that have a kernel (the others have nothing to configure)."""
        hosts, self.hosts = self.hosts, [h for h in self.hosts if not no_kernel(h)]
        try:
            super().configHosts()
        finally:
            self.hosts = hosts

    def _place(self) -> None:
        """Where each node runs, over `settings.machines` (emu.cluster.placement): at the longest links,
        or as `settings.placement` says (the nodes it does not name on the first machine)."""
        machines = list(self.settings.machines)
        if not machines or self.topo is None:
            return
        given = dict(self.settings.placement)
        full = {n: given.get(n, machines[0]) for n in self.topo.nodes()} if given else None
        try:
            placed = place(self.topo, machines, full)
        except PlacementError as exc:
            if given or len(machines) == 1:
                raise ValueError(str(exc)) from None
            # A fabric too small to split (a scenario's one-building baseline) runs whole on the first.
            print(f"emu: {exc}: the whole fabric runs on {machines[0]}", file=sys.stderr, flush=True)
            placed = place(self.topo, machines[:1])
        with_switches = {placed.machine[n] for n in self.topo.nodes() if self.topo.isSwitch(n)}
        for a, b, _ in placed.cut:  # a host's cable cut: its end at the switch is made on the host's machine,
            host = b if self.topo.isSwitch(a) else a  # for the engine worker of a switch there
            if placed.machine[host] not in with_switches:
                raise ValueError(f"{host} is placed on {placed.machine[host]}, which runs none of the fabric's "
                                 "switches: place a host on the machine of one of its switches")
        self.machine_of = placed.machine
        used = tuple(m for m in machines if m in placed.machine.values())  # a worker a machine with nodes
        self.settings = replace(self.settings, machines=used, placement=())

    def addLink(self, node1: Any, node2: Any, port1: int | None = None, port2: int | None = None,
                cls: Any = None, **params: Any) -> Any:
        """Mininet's addLink, with this fabric's device group for a FabricLink."""
        link_cls = self.link if cls is None else cls
        if isinstance(link_cls, type) and issubclass(link_cls, FabricLink):
            params.setdefault("group", self.link_group)
            anchor = self._anchor(node1, node2)
            if anchor is not None:
                params["anchor"] = anchor
        self._made_one("links")
        return super().addLink(node1, node2, port1, port2, cls, **params)

    def _anchor(self, node1: Any, node2: Any) -> Any:
        """For a host's cable between machines: a switch on the host's machine, whose root namespace
        there holds the cable's switch end (emu.net.link.CutIntf); else None."""
        names = [n if isinstance(n, str) else n.name for n in (node1, node2)]
        where = [self.machine_of.get(n, "localhost") for n in names]
        if where[0] == where[1]:  # before the switches' names, a set that was 6 s of FPF 4096 x 8's links
            return None
        switches = {s.name for s in self.switches}
        hosts = [i for i, n in enumerate(names) if n not in switches]
        if len(hosts) != 1:
            return None
        return next(s for s in self.switches if self.machine_of.get(s.name, "localhost") == where[hosts[0]])

    @property
    def roce(self) -> RoceOps:
        """MetaRoCE writes between hosts: `net.roce.write("gpu0", "gpu1", nbytes=...)`."""
        return RoceOps(self)

    def __enter__(self) -> FabricNet:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def build(self) -> None:
        """Record the names the links will have before Mininet makes them, so that a run killed
        mid-build leaves nothing `emu clean` cannot name; the engine runs in the same directory.
        What can be known wrong before (a pcap folder that cannot be written) is said before."""
        if self.settings.pcap_dir:
            _writable_dir(self.settings.pcap_dir)
        # The backend's own checks (tools, link modes, a user's P4 program compiled, their table hook
        # imported) before any host exists; batchStartup asks again for a plain Mininet's switches.
        backend(self.settings.backend).check(self.settings, [])
        if hasattr(self.topo, "check_fits"):  # the memory and sockets of what will be built, before it is
            self.topo.check_fits(kernel=self.settings.kernel)
        # SIGTERM and SIGHUP (a cancelled CI job, systemd, a closed terminal) unwind as Ctrl-C does, so
        # the `with` block or the caller's `finally` tears the fabric down; only where nobody chose
        # otherwise (the CLI installs its own, for SIGINT too).
        if self._restore_signals is None and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            self._restore_signals = stop_on_signals((signal.SIGTERM, signal.SIGHUP))
        self._place()
        # The hosts' congestion control, asked once before any host of this machine is made (writing a name
        # a namespace may not take would load a module only to refuse it; a host elsewhere asks its own).
        allowed = _allowed_cc()
        if (self.settings.kernel and allowed is not None and self.settings.host_cc not in allowed and self.topo
                and any(self.machine_of.get(h, "localhost") in LOCAL_MACHINES for h in self.topo.hosts())):
            raise ValueError(self._cc_refused(f"here (allowed: {', '.join(allowed)})"))
        planned = []  # the interfaces made here (a node on another machine has its own there, or none)
        if self.topo is not None:
            for a, b, info in self.topo.links(withInfo=True):
                if self._engine_only(a) or self._engine_only(b):  # the engine's alone: no device (FabricLink)
                    continue
                for node, port in ((info.get("node1", a), info.get("port1")), (info.get("node2", b), info.get("port2"))):
                    if port is not None and self.machine_of.get(node, "localhost") in LOCAL_MACHINES:
                        planned.append(f"{node}-eth{port}")
        said = make_way(planned)  # a dead run's veths would make this one fail with "File exists"
        if said:
            print(f"emu: {said}", file=sys.stderr, flush=True)
        self.run_dir = new_run_dir()
        record(self.run_dir, interfaces=planned, groups=[self.link_group])
        self._made = {"hosts": 0, "links": 0}
        self._to_make = {"hosts": len(self.topo.hosts()) if self.topo is not None else 0,
                         "links": len(self.topo.links()) if self.topo is not None else 0}
        try:
            with _no_cycle_collection():
                super().build()
        except BaseException:  # a signal or an error mid-build: what was made goes (Mininet's constructor
            self.stop()         # builds, so no caller holds this object yet to stop it)
            raise
        for sw in self.switches:
            sw.run_dir = self.run_dir

    def _engine_only(self, node: str) -> bool:
        """Whether the topology's node will be made without a kernel (addHost, addSwitch): its links make no
        interface, so none is planned (FPF 4096 x 8: 131 072 names, each looked up in sysfs by `record`)."""
        if self.settings.kernel:
            return False
        return not self.topo.isSwitch(node) or self.topo.nodeInfo(node).get("cls") in (None, FabricSwitch)

    def start(self) -> None:
        if not self.built:
            self.build()
        for sw in self.switches:
            sw.settings = self.settings
        _bringup("engine", 0, 1)
        with _no_cycle_collection():
            self._start_switches()
        _bringup("engine", 1, 1)
        if self.settings.pace:
            self.engine.set_pace(self.settings.pace)
        self._record_view()
        _bringup("", 0, 0)

    def _made_one(self, what: str) -> None:
        made = getattr(self, "_made", None)
        if made is not None:
            made[what] += 1
            _bringup(what, made[what], self._to_make[what])

    def _start_switches(self) -> None:
        """Mininet's start, with every fabric switch in one batch, here or on another machine (Mininet
        batches by class, and a RemoteFabricSwitch is one more): one engine, one control plane."""
        for c in self.controllers:
            c.start()
        for sw in self.switches:
            sw.start(self.controllers)
        fabric = tuple(sw for sw in self.switches if isinstance(sw, FabricSwitch))
        if fabric:
            FabricSwitch.batchStartup(fabric)
        others = sorted((sw for sw in self.switches if not isinstance(sw, FabricSwitch)), key=lambda s: str(type(s)))
        for cls, group in groupby(others, type):
            if hasattr(cls, "batchStartup"):
                cls.batchStartup(tuple(group))
        if self.waitConn:
            self.waitConnected(self.waitConn)

    def _record_view(self) -> None:
        """The fabric's drawing, beside its engine in the run directory: what `emu web` serves when it
        attaches from another process (which has no Mininet objects to read it from)."""
        from emu.web.scene import topology_of

        if getattr(self, "run_dir", ""):
            with open(os.path.join(self.run_dir, VIEW_RECORD), "w") as f:
                # dumps, not dump: json.dump encodes in Python (FPF 4096 x 8's drawing: 2.7 s under the profiler)
                f.write(json.dumps({"topology": topology_of(self).to_json(), "clock": self.settings.clock}))

    def stop(self) -> None:
        """Stop the engine, then delete every veth pair in one request, by device group: the kernel
        removes them in one batch (one by one, each waits for an RCU grace period: about 20 ms a link
        here, most of Mininet's tear-down time)."""
        for view in self._views:
            view.close()
        self._views.clear()
        for path, recorder in self._recorders:
            try:  # a recording that cannot be written must not keep the fabric from stopping
                with open(path, "w") as f:
                    json.dump(recorder.stop(), f)
            except OSError as exc:
                print(f"emu: the recording {path} was not written: {exc.strerror or exc}", file=sys.stderr)
        self._recorders.clear()
        _kill_host_processes(self.hosts)
        for sw in self.switches:
            if getattr(sw, "engine", None) is not None:
                sw.engine.stop()
        grouped = [link for link in self.links if isinstance(link, FabricLink) and link.in_group and not link.deleted]
        if grouped:
            root_netlink().delete_group(self.link_group)
            for link in grouped:
                link.deleted = True
        super().stop()
        if getattr(self, "run_dir", ""):
            shutil.rmtree(self.run_dir, ignore_errors=True)  # everything it recorded is gone
        gc.unfreeze()  # what the build froze (_no_cycle_collection) is the collector's again
        if self._restore_signals is not None:
            self._restore_signals()
            self._restore_signals = None

    @property
    def engine(self) -> Engine:
        for sw in self.switches:
            if getattr(sw, "engine", None) is not None:
                return sw.engine
        raise RuntimeError("the fabric is not started")

    def collective(self, op: str = "allreduce", *, sizes: Sequence[int | str] = ("1MiB",),
                   cc: str = "none", seed: int = 0, spray: str = "weighted", algo: str | None = None,
                   hosts: Sequence[str] | None = None, planes: Sequence[int] | None = None,
                   payload: str = "auto") -> CollectiveResult:
        """Run collective `op` (allreduce, allgather, reducescatter, alltoall, sendrecv) with one rank per
        host over every plane it has, on the fabric's clock (inside the engine on the fabric clock, a
        process per host at the fabric's D on the wall clock); `sizes` in bytes or with units ("64KiB"),
        rounded down to whole int32 chunks per rank; `cc`: "none" or "dcqcn"; `seed`: the endpoints'
        (a fabric-clock run is the same for the same seed); `spray`: the ranks' ("weighted" or "equal");
        `algo`: ring, rhd or tree for allreduce, ring or rhd for reducescatter and allgather, direct or
        pairwise for alltoall (emu.collectives.algorithms; None: the op's first); `hosts`: only these, in
        this rank order (default every host); `planes`: only these of each host's planes (indices);
        `payload`: "real" (every byte moved and every result checked), "none" (headers only, as htsim:
        delivery of every byte exactly once checked, not the values; the ranks' memory is never
        touched) or "auto" (real while the ranks' regions fit 4 GiB; the result says which ran, and
        what was checked). Rows as nccl-tests prints them, and the fidelity verdict of the run."""
        from emu.collectives.run import CollectiveResult, whole_chunks
        from emu.units import parse_size

        n = len(hosts) if hosts is not None else len(self.hosts)
        chunks = whole_chunks([s if isinstance(s, int) else parse_size(s) for s in sizes], n)
        return CollectiveResult.from_report(self.timebase.collective(op, chunks, cc=cc, seed=seed, spray=spray,
                                                                     algo=algo, hosts=hosts, planes=planes,
                                                                     payload=payload))

    def replay(self, trace: str | Trace, *, hosts: Sequence[str] | None = None, algo: str | None = None,
               cc: str = "none", seed: int = 0, spray: str = "weighted",
               groups: dict[str, list[int]] | None = None) -> dict[str, Any]:
        """Replay a Chakra execution trace (PREFIX of PREFIX.RANK.et files, or a folder of them; read with
        MLCommons' mlc-chakra): rank r on hosts[r] (default the hosts in order), compute nodes for their
        duration, collectives and sends over MetaRoCE (`algo` where the op runs it); `groups`: the ranks
        of each process group the trace's collectives name (`pg_name`). The step time, each collective's
        time and wait, each message's, each rank's exposed communication, in fabric us."""
        from emu.collectives.trace import read

        return self.timebase.replay(read(trace, groups) if isinstance(trace, str) else trace, hosts, algo=algo,
                                    cc=cc, seed=seed, spray=spray)

    def collectives(self, *tenants: Tenant) -> list[CollectiveResult]:
        """Several collectives started at one fabric instant (the fabric clock), each a `Tenant` with its
        own hosts and, if given, planes; each its own result. Tenants on links no other uses give the
        figures they give alone, bit for bit; those that share links show what sharing costs."""
        from emu.collectives.run import CollectiveResult

        return [CollectiveResult.from_report(r) for r in self.timebase.collectives(list(tenants))]

    def traffic(self, flows: list[Flow], *, fail_plane: tuple[int, float] | None = None) -> EngineFlows | KernelFlows:
        """Start paced UDP `flows` (emu.net.flows) on the fabric's clock; `.wait()` gives per flow what it
        sent and per receiver what arrived, in fabric units. `fail_plane=(plane, fraction)`: that plane
        fails once the flow leaving by it is that fraction through, and is restored after."""
        return self.timebase.traffic(flows, fail_plane=fail_plane)

    def verdict(self, *, rate_bps: float = 100e9, frame_bytes: int = 1500, kernel_frames: int = 0,
                senders: list[dict[str, Any]] | None = None, endpoints: list[dict[str, Any]] | None = None
                ) -> dict[str, Any]:
        """The fidelity verdict of what just ran (Timebase.verdict): packet times are one `frame_bytes`
        frame at `rate_bps`; pass the run's `kernel_frames`, paced `senders` and MetaRoCE `endpoints`."""
        return self.timebase.verdict(rate_bps=rate_bps, frame_bytes=frame_bytes, kernel_frames=kernel_frames,
                                     senders=senders, endpoints=endpoints)

    def rank_hosts(self) -> list[RankHost]:
        """Every host as a collective rank: how to start a process in it, its planes (IPv6 address and
        rate, in port order) and the switch port facing each."""
        from emu.collectives.run import RankHost
        from emu.roce.run import mininet_popen

        hosts = []
        order = sorted(self.hosts, key=lambda h: (len(h.name), h.name))
        narrowest = min((lk.fabric.rate_bps for lk in self.links if isinstance(lk, FabricLink)), default=math.inf)
        # Any host's one way to another is at most its way to the first host and on (first plane, idle).
        rtt = 4 * max((self.one_way_s(order[0].name, h.name) for h in order[1:]), default=0.0)
        if not math.isfinite(rtt):  # a host cut off: every cable's round trip bounds it
            rtt = self.rtt_bound_s()
        for h in order:
            planes = self.host_planes(h.name)
            grouped = getattr(self.topo, "host_group", None)  # a FabricTopo's (topologies sit above this)
            group = grouped(h.name) if grouped is not None else 0
            hosts.append(RankHost(h.name, mininet_popen(h), [(a, r) for _, _, a, r in planes],
                                  [(sw, port) for sw, port, _, _ in planes], group, narrowest, rtt))
        return hosts

    def group_capacity_bps(self, a: int, b: int) -> float:
        """Bits a second one way between host groups `a` and `b` (topology.host_group): the rates of the
        links joining a switch of one to a switch of the other (topology.switch_group); inf where the
        topology does not say its switches' groups."""
        grouped = getattr(self.topo, "switch_group", None)
        if grouped is None:
            return math.inf
        total = 0.0
        for link in self.links:
            if isinstance(link, FabricLink) and all(isinstance(i.node, FabricSwitch) for i in (link.intf1, link.intf2)):
                ga, gb = grouped(link.intf1.node.name), grouped(link.intf2.node.name)
                if ga is None or gb is None:
                    return math.inf
                if {ga, gb} == {a, b} and a != b:
                    total += link.fabric.rate_bps
        return total or math.inf

    def one_way_s(self, a: str, b: str, frame_bytes: int = 1100) -> float:
        """Seconds a `frame_bytes` frame takes from host `a` to host `b` on their first plane's shortest
        path, idle: each cable's propagation plus the frame's store-and-forward at each link's rate.
        What a cost model needs to know about distance (emu.collectives.algorithms.predict)."""
        first = {}
        for h in (a, b):
            intf = next(i for i in self.get(h).intfList() if isinstance(getattr(i, "link", None), FabricLink))
            first[h] = (_peer(intf).node.name, intf.link.fabric.delay_s + frame_bytes * 8 / intf.link.fabric.rate_bps)
        src, dst = first[a][0], first[b][0]
        if src not in self._switch_paths:
            self._switch_paths[src] = self._switch_distances(src, frame_bytes)
        return first[a][1] + self._switch_paths[src].get(dst, math.inf) + first[b][1]

    def _switch_distances(self, src: str, frame_bytes: int) -> dict[str, float]:
        """Dijkstra over the switch-to-switch links from `src`: seconds to each switch."""
        import heapq

        adj: dict[str, list[tuple[str, float]]] = {}
        for link in self.links:
            if isinstance(link, FabricLink) and all(isinstance(i.node, FabricSwitch) for i in (link.intf1, link.intf2)):
                w = link.fabric.delay_s + frame_bytes * 8 / link.fabric.rate_bps
                x, y = link.intf1.node.name, link.intf2.node.name
                adj.setdefault(x, []).append((y, w))
                adj.setdefault(y, []).append((x, w))
        dist = {src: 0.0}
        todo = [(0.0, src)]
        while todo:
            d, u = heapq.heappop(todo)
            if d > dist.get(u, math.inf):
                continue
            for v, w in adj.get(u, ()):
                if d + w < dist.get(v, math.inf):
                    dist[v] = d + w
                    heapq.heappush(todo, (d + w, v))
        return dist

    def host_planes(self, name: str) -> list[list[Any]]:
        """Host `name`'s planes in port order, each [switch, the switch's port facing it, the host's IPv6
        address, rate b/s]: where an endpoint inside the engine attaches (fabric clock)."""
        out = []
        for i in self.get(name).intfList():
            if isinstance(getattr(i, "link", None), FabricLink) and i.link.fabric.host_ip6:
                out.append([_peer(i).node.name, _peer(i).name, i.link.fabric.host_ip6.split("/")[0],
                            i.link.fabric.rate_bps])
        return out

    def host_port(self, name: str, dst_ip: str) -> tuple[str, str, str]:
        """Where host `name`'s frames to `dst_ip` (IPv4 or IPv6) leave: (switch, the switch's port, the
        host's address of that family on it), the plane whose subnet holds `dst_ip` as the kernel's route
        would pick, else its first plane (the default route's)."""
        v6 = ipaddress.ip_address(dst_ip).version == 6
        first: tuple[str, str, str] | None = None
        for i in self.get(name).intfList():
            if not isinstance(getattr(i, "link", None), FabricLink):
                continue
            mine = i.link.fabric.host_ip6 if v6 else i.link.fabric.host_ip4
            if not mine:
                continue
            addr = ipaddress.ip_interface(mine)
            here = (_peer(i).node.name, _peer(i).name, str(addr.ip))
            if ipaddress.ip_address(dst_ip) in addr.network:
                return here
            first = first or here
        if first is None:
            raise ValueError(f"{name} has no IPv{6 if v6 else 4} fabric interface")
        return first

    def plane_ports(self, plane: int) -> list[tuple[str, str]]:
        """Every port of plane `plane`'s switches, (switch, port) each: what a job's port events take
        down to fail the plane at a fabric time (on the fabric clock nothing outside the engine can)."""
        ports = [(sw.name, i.name) for sw in self.switches if isinstance(sw, FabricSwitch) and sw.shard == plane
                 for i in sw.intfList() if i.name.startswith(f"{sw.name}-")]
        if not ports:
            raise ValueError(f"no plane {plane}")
        return ports

    @property
    def deaths(self) -> list[str]:
        """What died while the fabric ran (engine workers, BMv2 switches), one line each; each was also
        reported the moment it happened (to stderr, or `net.engine.on_death`)."""
        return self.engine.deaths

    def run(self, argv: Sequence[str], *, np: int | None = None, hosts: Sequence[str] | None = None,
            env: dict[str, str] | None = None, timeout: float | None = None, mpi: bool = False,
            planes: Sequence[int] | None = None, dilate_time: bool = True,
            sink: Callable[[int, str, str], None] | None = None) -> list[RankResult]:
        """A distributed job: `argv` started once per host in the hosts' namespaces, rank i on hosts[i]
        (default: the first `np` hosts in order, np default all), each with RANK, WORLD_SIZE, LOCAL_RANK,
        MASTER_ADDR (rank 0's first address), MASTER_PORT and EMU_HOSTS (the ranks' addresses in order),
        and `env` on top. `mpi`: through Open MPI's mpirun (its rsh agent enters the hosts' namespaces;
        its TCP transport on their fabric interfaces; `planes`: only these of each host's planes, by
        index, e.g. [0] for one plane, where the default is all). On the wall clock with `dilate_time`,
        the ranks' clocks and waits run at fabric speed (libfaketime: emu.net.ranks); a host's own shell
        (`net.get(h).cmd(...)`) keeps the wall's, as Mininet and this class drive it with wall-second waits
        (run one process with `hosts=[h]`, or prefix one command: ranks.fabric_time_prefix). `timeout`: wall s, after
        which every rank is stopped and JobTimeout (a TimeoutError naming timeout= and its value) is raised.
        Every rank's result in rank order; RankFailed (one line: which rank, host, code) if one failed,
        the others stopped; `sink(rank, "out"|"err", line)` sees each line as it comes (rank -1: mpirun's).
        After it, `job_tcp_timers` holds what the ranks' kernels' TCP timers fired during the job, which the
        fidelity verdict does not see (emu.net.kerneltcp; `emu run` says it beside the verdict).
        (Mininet's own `run(test)`, a start-test-stop cycle that nothing here or in Mininet calls, gives
        way: a FabricNet starts and stops with `with`.)"""
        from emu.net.ranks import fabric_time_env, run_mpi, run_ranks

        self.job_tcp_timers = {}
        if not self.settings.kernel:
            raise ValueError("this fabric's hosts have no kernel (kernel=False): nothing to run processes in")
        names = list(hosts) if hosts is not None else [h.name for h in self.hosts]
        missing = [n for n in names if self.nameToNode.get(n) not in self.hosts]
        if missing:
            raise ValueError(f"no host {missing[0]!r} in this fabric; hosts: {', '.join(h.name for h in self.hosts)}")
        if len(set(names)) != len(names):
            raise ValueError("a host is named twice: one rank per host")
        if np is not None:
            if not 1 <= np <= len(names):
                raise ValueError(f"-np {np}: this job has {len(names)} host(s) to run on (one rank per host)")
            names = names[:np] if hosts is None else names
            if hosts is not None and np != len(names):
                raise ValueError(f"-np {np} but {len(names)} hosts named: one rank per host")
        nodes = [self.nameToNode[n] for n in names]
        by_host = {n: [i.link.fabric.host_ip4 for i in self.nameToNode[n].intfList()
                      if isinstance(getattr(i, "link", None), FabricLink) and i.link.fabric.host_ip4] for n in names}
        if not all(by_host.values()):
            raise ValueError(f"{next(n for n in names if not by_host[n])} has no IPv4 fabric interface to run a job on")
        if planes is not None:
            if not mpi:
                raise ValueError("planes= is for an MPI job (mpi=True): its transport is told which interfaces")
            width = min(len(v) for v in by_host.values())
            bad = [p for p in planes if not 0 <= p < width]
            if bad or not planes:
                raise ValueError(f"planes: the hosts have planes 0..{width - 1}, not {list(planes)}")
            by_host = {n: [v[p] for p in planes] for n, v in by_host.items()}
        addresses = [by_host[n][0].split("/")[0] for n in names]  # on the job's first plane
        extra = dict(env or {})
        if dilate_time and self.settings.clock.paced:
            extra.update(fabric_time_env(self.settings.dilation))
        # The ranks' kernels' TCP timers over the job: on this machine's hosts (a pid elsewhere is not ours).
        here = [n for n in nodes if self.machine_of.get(n.name, "localhost") in LOCAL_MACHINES]
        before = {n.name: kerneltcp.counters(n.pid) for n in here}
        try:
            if mpi:
                return run_mpi(nodes, addresses, [by_host[n] for n in names], list(argv), env=extra,
                               timeout=timeout, sink=sink)
            return run_ranks(nodes, addresses, list(argv), env=extra, timeout=timeout, sink=sink)
        finally:  # what the ranks' kernels' TCP timers did, however the job ended (kerneltcp.said)
            self.job_tcp_timers = kerneltcp.fired(before, {n.name: kerneltcp.counters(n.pid) for n in here})

    def host_addresses(self, family: int = 4) -> dict[str, list[str]]:
        """Every address of every host (one per plane interface), read from the hosts."""
        if not self.settings.kernel:
            raise RuntimeError("this fabric's hosts have no kernel (kernel=False): nothing to ping or read; "
                               "build it with kernel=True for the hosts' own traffic")
        out: dict[str, list[str]] = {}
        remote: dict[str, dict[str, int]] = {}  # machine -> its hosts' shells, read there in one request
        for h in self.hosts:
            if getattr(h, "isRemote", False):
                remote.setdefault(h.server, {})[h.name] = h.pid
                continue
            with node_netlink(h) as nl:
                out[h.name] = [a for addrs in nl.addresses(family).values() for a in addrs]
        for machine, hosts in remote.items():
            out.update(host_addresses(machine, hosts, family))
        return {h.name: out[h.name] for h in self.hosts}

    def rtt_bound_s(self) -> float:
        """A round trip no path of this fabric can exceed, in fabric seconds: every cable once each way
        and an MTU's serialisation at every link end (a shortest path crosses a link at most once)."""
        links = [lk.fabric for lk in self.links if isinstance(lk, FabricLink)]
        return sum(2 * (p.delay_s + (1500 + 24) * 8 / p.rate_bps) for p in links)

    def kernel_wait_s(self, fabric_s: float) -> float:
        """Wall seconds the hosts' kernels need for `fabric_s` of fabric time, with a second's slack: their
        traffic crosses the fabric at 1/D of its speed on either clock (on the fabric clock, between jobs)."""
        return 1.0 + self.timebase.kernel_wall_s(fabric_s)

    def round_trips(self, host: str, dst: str, *, count: int = 5, family: int = 6, interval_s: float = 0.05
             ) -> tuple[list[float], list[int]]:
        """`count` pings from `host` to `dst` sent `interval_s` wall seconds apart: their round trips in
        fabric seconds, and the replies' TTLs. Each reply is waited for as long as the slowest path of
        this fabric takes at this D (rtt_bound_s, twice), so a reply lost at a large D is one the fabric
        lost, not one the wait gave up on."""
        wait = math.ceil(self.kernel_wait_s(2 * self.rtt_bound_s()))
        out = self.get(host).cmd(f"ping -{family} -c{count} -i{interval_s:g} -W{wait} {dst}")
        rtts = [float(x) / 1e3 / self.timebase.dilation for x in re.findall(r"time=([\d.]+) ms", out)]
        return rtts, [int(x) for x in re.findall(r"ttl=(\d+)", out)]

    def pingall_planes(self, family: int = 4, timeout: int | None = None) -> PingResult:
        """Ping every address of every other host from every host, on every plane. `timeout`: wall
        seconds per reply (default: as round_trips() waits, from the fabric's slowest path at this D)."""
        if timeout is None:
            timeout = max(2, math.ceil(self.kernel_wait_s(2 * self.rtt_bound_s())))
        addrs = self.host_addresses(family)
        flag = "-6" if family == 6 else "-4"
        # Hosts ping in parallel, each host its targets one after another: a storm of thousands of
        # ping processes on a few cores would starve the engine. One retry, as a first packet can wait on
        # neighbour discovery; retries are reported. The targets go on the command line, a few at a time:
        # a line longer than the shell's pty line (4 KiB) would hang, and a file would have to be on the
        # host's own machine (with --machines, not this one).
        once = f"ping {flag} -c1 -W{timeout} $a >/dev/null 2>&1"
        rounds = {h: _chunks([a for other, lst in addrs.items() if other != h.name for a in lst], PING_LINE_BYTES)
                  for h in self.hosts}
        sent = received = retried = 0
        failed = []
        for k in range(max((len(c) for c in rounds.values()), default=0)):
            busy = [h for h in self.hosts if k < len(rounds[h])]
            for h in busy:
                h.sendCmd(f"for a in {' '.join(rounds[h][k])}; do {once} && echo OK $a || {{ echo RETRY $a; {once} "
                          f"&& echo OK $a || echo FAIL $a; }}; done")
            for h in busy:
                text = h.waitOutput()
                ok = re.findall(r"^OK (\S+)", text, re.M)
                bad = re.findall(r"^FAIL (\S+)", text, re.M)
                sent += len(rounds[h][k])
                received += len(ok)
                retried += len(re.findall(r"^RETRY ", text, re.M))
                failed += [(h.name, a) for a in bad]
        return PingResult(sent, received, tuple(failed), retried)

    def stats(self) -> FabricStats:
        """Every switch's counters now: `net.stats().port("p0l0", "p0l0-eth2").drops`."""
        return FabricStats.from_dict(self.engine.stats())

    def forwarded(self, switch: str) -> int:
        """Bytes `switch` has sent out of all its ports so far (its data plane's counters)."""
        return self.stats().switch(switch).tx_bytes

    def wait_forwarded(self, switch: str, nbytes: int, timeout: float | None = None) -> float:
        """Wait until `switch` has sent `nbytes` more than when called; the wall seconds it took.
        What a failure "mid-transfer" waits for: traffic under way, not a guess at when it starts.
        `timeout` (wall s) follows the bytes and D by default (as if they crawled at 1 Gb/s)."""
        if timeout is None:
            timeout = 120.0 + self.timebase.kernel_wall_s(nbytes * 8 / 1e9)
        start = time.monotonic()
        base = self.forwarded(switch)
        while self.forwarded(switch) - base < nbytes:
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"{switch} forwarded less than {nbytes} B in {timeout:g} s")
            time.sleep(0.05)
        return time.monotonic() - start

    @property
    def control(self) -> FabricController:
        for sw in self.switches:
            if getattr(sw, "control", None) is not None:
                return sw.control
        raise RuntimeError("the fabric is not started")

    def web(self, port: int = 0, host: str = "127.0.0.1", *, control: bool = False) -> Any:
        """Serve the live view of this fabric (emu.web) from this process on host:port (0: a free one);
        its `url` carries the token every request needs. Read-only unless `control`: then the page
        fails and restores planes, links and switches (through fail and restore, one at a time).
        stop() closes it."""
        from emu.web.app import WebView, make_app
        from emu.web.scene import topology_of

        lock = threading.Lock()  # the page's requests arrive on the server's threads

        def act(verb: str, target: dict[str, Any]) -> None:
            with lock:
                (self.fail if verb == "fail" else self.restore)(**target)

        topo = topology_of(self)
        view = WebView(lambda token: make_app(topo, self.engine.stats, token, clock=self.settings.clock,
                                              control=act if control else None), host=host, port=port)
        self._views.append(view)
        return view

    def record(self, path: str) -> None:
        """Record the live view's snapshots (four a wall second, whether or not a page is open) until
        stop(), which writes them to `path` (JSON) for `emu view` to replay on the live view's page.
        The path is checked now: a recording that cannot be written is refused before it starts."""
        from emu.web.app import Recorder, check_recording_path
        from emu.web.scene import topology_of

        check_recording_path(path)
        self._recorders.append((path, Recorder(topology_of(self), self.engine.stats, clock=self.settings.clock)))

    def pace(self, wall_s: float) -> None:
        """Fabric clock: from now on a fabric second of a job takes at least `wall_s` wall seconds
        (1000: a millisecond a second; 0: as fast as the CPU allows), so that the live view can be
        watched. Results are the same at any pace; only the wall time changes."""
        self.engine.set_pace(wall_s)

    def fail(self, *, plane: int | None = None, link: tuple[str, str] | None = None,
             switch: str | None = None) -> None:
        """Take one thing down: `plane=1` (every switch of plane 1 and its host links),
        `link=("p0l0", "p0s1")` (between two switches, or a host and its switch), `switch="p0s0"`.
        The control plane reroutes after its detection time, as a fabric's would."""
        self._target(plane, link, switch, up=False)

    def restore(self, *, plane: int | None = None, link: tuple[str, str] | None = None,
                switch: str | None = None) -> None:
        """Bring back what `fail` took down or `degrade` degraded (the same keywords)."""
        back = set(self._ports(plane, link, switch)) & self._degraded
        for sw, port in sorted(back):
            self.engine.degrade(sw, port)
        self._degraded -= back
        for a, b, _ in self._switch_links(sorted(back)):
            built = self._reported.pop((a, b), None)
            if built is not None:
                self.control.set_capacity(a, b, built)
        self._target(plane, link, switch, up=True)

    def degrade(self, *, plane: int | None = None, link: tuple[str, str] | None = None, switch: str | None = None,
                loss: float = 0.0, rate: str | float | None = None, delay: str | float | None = None,
                seed: int = 0, report: bool = False) -> None:
        """Degrade rather than fail: `plane=1`, `link=("p0l0", "p0s1")` or `switch="p0s0"` (as `fail`), every
        link of it in both directions: each frame lost with probability `loss` (seeded per port: the same
        run loses the same frames), its wires at `rate` ("25G", or b/s) instead of their own, `delay`
        ("5us", or fabric s) more on each cable; `seed` picks another set of lost frames (repetitions).
        The control plane is not told (a degraded link is up) unless `report`: then it learns the
        switch-to-switch links' new rate, as from an optic's telemetry, and WCMP weights the paths
        through them by it. Which layer does what: WCMP in the switches shares every flow by capacity
        it is told of; MetaRoCE's spraying weights each plane per connection, end to end, by what it
        measures (loss, queueing, round trip), told of nothing. `restore` brings it back."""
        if not hasattr(self.engine, "degrade"):
            raise ValueError("degrade is the native engine's: this fabric runs on BMv2")
        rate_bps = parse_rate(rate) if isinstance(rate, str) else float(rate or 0.0)
        delay_s = parse_time(delay) if isinstance(delay, str) else float(delay or 0.0)
        if not 0.0 <= loss < 1.0:
            raise ValueError(f"degrade: loss is a probability in [0, 1), got {loss}")
        if not (loss or rate_bps or delay_s):
            raise ValueError("degrade: give loss=, rate= or delay= (restore() brings a link back)")
        ports = self._ports(plane, link, switch)
        for sw, port in ports:
            self.engine.degrade(sw, port, loss=loss, rate_bps=rate_bps, delay_s=delay_s, seed=seed)
        self._degraded |= set(ports)
        if report and rate_bps:
            for a, b, built in self._switch_links(ports):
                self._reported.setdefault((a, b), built)
                self.control.set_capacity(a, b, rate_bps)

    def _switch_links(self, ports: list[tuple[str, str]]) -> list[tuple[str, str, float]]:
        """The switch-to-switch links among `ports`: (switch, peer switch, the link's built rate) each."""
        out = []
        for sw, port in ports:
            intf = self.nameToNode[sw].intf(port)
            peer = _peer(intf).node
            if isinstance(peer, FabricSwitch) and sw < peer.name:
                out.append((sw, peer.name, float(intf.link.fabric.rate_bps)))
        return out

    def _ports(self, plane: int | None, link: tuple[str, str] | None, switch: str | None) -> list[tuple[str, str]]:
        """The switch ports a plane, a link or a switch is made of: (switch, port) each."""
        if sum(x is not None for x in (plane, link, switch)) != 1:
            raise ValueError("give exactly one of plane=, link=(a, b) or switch=")
        if plane is not None:
            return self.plane_ports(plane)
        if switch is not None:
            node = self.nameToNode.get(switch)
            if not isinstance(node, FabricSwitch):
                raise ValueError(f"no fabric switch named {switch!r}")
            return [(switch, i.name) for i in node.intfList() if i.link is not None]
        a, b = link  # type: ignore[misc]
        nodes = [self.nameToNode.get(a), self.nameToNode.get(b)]
        if None in nodes:
            raise ValueError(f"no node named {a if nodes[0] is None else b!r}")
        links = self.linksBetween(*nodes)
        if not links:
            raise ValueError(f"no link between {a} and {b}")
        return [(i.node.name, i.name) for lk in links for i in (lk.intf1, lk.intf2) if isinstance(i.node, FabricSwitch)]

    def _target(self, plane: int | None, link: tuple[str, str] | None, switch: str | None, *, up: bool) -> None:
        given = [x is not None for x in (plane, link, switch)]
        if sum(given) != 1:
            raise ValueError("give exactly one of plane=, link=(a, b) or switch=")
        if plane is not None:
            switches = [s for s in self.switches if isinstance(s, FabricSwitch) and s.shard == plane]
            if not switches:
                raise ValueError(f"no plane {plane}")
            for sw in switches:
                self._set(sw.name, None, up=up)
        elif link is not None:
            a, b = link
            self._set(a, b, up=up)
        else:
            self._set(str(switch), None, up=up)

    def _set(self, a: str, b: str | None, *, up: bool) -> None:
        node = self.nameToNode.get(a)
        if node is None:
            raise ValueError(f"no node named {a!r}")
        if b is None:
            if not isinstance(node, FabricSwitch):
                raise ValueError(f"{a} is not a fabric switch; to cut a host off, fail its link: fail {a} SWITCH")
            self.control.set_switch(a, up)
            for intf in node.intfList():
                if intf.link is not None and not isinstance(_peer(intf).node, FabricSwitch):
                    self.engine.set_port(a, intf.name, up)  # its host links too
            return
        other = self.nameToNode.get(b)
        if other is None:
            raise ValueError(f"no node named {b!r}")
        if isinstance(node, FabricSwitch) and isinstance(other, FabricSwitch):
            self.control.set_link(a, b, up)
            return
        links = self.linksBetween(node, other)
        if not links:
            raise ValueError(f"no link between {a} and {b}")
        for link in links:
            for intf in (link.intf1, link.intf2):
                if isinstance(intf.node, FabricSwitch):
                    self.engine.set_port(intf.node.name, intf.name, up)


def _kill_host_processes(hosts: list[Any]) -> None:
    """Whatever still runs in a host's namespace besides its shell (traffic, ranks, endpoints, a user's
    iperf3) dies with the fabric: a scenario cut short by a signal never got to reap its own, and a
    process left in a namespace keeps it, and its veth, alive."""
    shells = {h.shell.pid for h in hosts if getattr(h, "shell", None) is not None and h.inNamespace}
    spaces = {netns_id(pid) for pid in shells} - {netns_id(os.getpid()), ""}
    if not spaces:
        return
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) not in shells and netns_id(int(p)) in spaces:
            try:
                os.kill(int(p), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _peer(intf):
    link = intf.link
    return link.intf2 if link.intf1 is intf else link.intf1
