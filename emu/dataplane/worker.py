"""One engine worker: a process running the event loop for its share of the switches.

Started by emu.dataplane.engine as `python -m emu.dataplane.worker SPEC INDEX`.
It opens an AF_PACKET socket on the root-namespace end of every veth it
must carry (host links, and switch links whose far end another worker owns),
answers JSON requests on a unix control socket, and exits on SIGTERM or a
`stop` request. Anything fatal is printed with its traceback to the log the
engine named, so the engine can report it.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import resource
import shutil
import signal
import socket
import struct
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from emu.control.model import SwitchTables
from emu.dataplane.channel import FRAME, Channels, common_offset, port_id
from emu.dataplane.core import check_native
from emu.dataplane.host import HostDelivery
from emu.dataplane.job import Job
from emu.dataplane.loop import EngineLoop
from emu.dataplane.pcap import PcapWriter
from emu.dataplane.pipeline import HostEnd, Switch
from emu.dataplane.protocol import (
    Connect,
    Degrade,
    JobResult,
    Ping,
    Probe,
    ProbeResult,
    QueueSamples,
    Request,
    ResetFidelity,
    RunJob,
    SampleQueues,
    SetHeadroom,
    SetPace,
    SetPort,
    SetTables,
    StartJob,
    Stats,
    Stop,
    decode,
)
from emu.dataplane.ring import FABRIC_PORT_RING, HOST_PORT_RING, RING_BUDGET, RxRing, ring_sizes
from emu.dataplane.spec import EngineSpec, PortSpec, SwitchSpec
from emu.dataplane.wiring import build_switches
from emu.launch import private_dir, process_start, watch_owner
from emu.simtime import NEVER, to_ps, to_s

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23
PACKET_STATISTICS = 6
# Frames taken from one port's ring in a turn (a turn that takes fewer emptied it: EngineLoop.took_from_kernel).
RX_BURST = 32
# A job of the project's own runs inside a worker, named by its class (Job.kind: "module:Class", a
# subclass of emu.dataplane.job.Job in the emu package), imported when first asked for: the engine knows
# no endpoint code, imports stay downward, and a new kind needs no line here. On a fabric split over
# workers every job runs a part on each, for its own hosts (Job.here); the parts agree through notes
# (Job.tell: on the wall clock a note crosses at once, due a lookahead on, and is late if it arrives
# after that, as a frame is), and each kind's `merge` joins their results. These are the project's own,
# loaded at a fabric-clock worker's start so that a job's wall time is its own work.
PRELOAD = ("emu.traffic.job", "emu.roce.perf", "emu.collectives.job", "emu.collectives.elastic")


def _captured(pcap: PcapWriter, f: Callable[[int, Any], None]) -> Callable[[int, Any], None]:
    def g(t: int, frame: Any) -> None:
        pcap.write(t, frame)
        f(t, frame)

    return g


def control_path(run_dir: str, index: int) -> str:
    return os.path.join(run_dir, f"worker-{index}.sock")


class Worker:
    def __init__(self, spec: EngineSpec, index: int) -> None:
        self.spec = spec
        self.index = index
        # One loop in fabric seconds, paced at D on the wall clock (its workers' fabric time 0 at one common
        # instant, spec.origin), unpaced on the fabric clock.
        self.across = bool(spec.machines)
        origin = spec.origin - common_offset(self.across) if spec.paced and spec.origin >= 0 else None
        self.loop = EngineLoop(spec.dilation if spec.paced else spec.idle_dilation, core=spec.core,
                               paced=spec.paced, origin=origin)
        # (switch, port index) -> what its host is handed (a job's endpoint or receiver there, else the kernel)
        self.deliveries: dict[tuple[str, int], Any] = {}
        self.core = spec.core  # the core a job's endpoints run on (Attach.core)
        self.native = check_native() if spec.core == "native" else None  # its module, emu.dataplane._core
        self.jobs: dict[int, Any] = {}
        self.meters: dict[int, _Meter] = {}
        self.kernel_ports: list[Any] = []  # compiled readers of packet rings (let go of before the rings close)
        self.for_no_kernel = 0  # frames for the kernel of a host that has none (_no_kernel)
        self.sockets: list[socket.socket] = []
        self.pcaps: list[PcapWriter] = []
        self.pcap_of: dict[str, PcapWriter] = {}  # by port: a job's endpoint writes its frames there too
        self.rx_sockets: list[tuple[socket.socket, Any]] = []
        self.tx_sockets: list[socket.socket] = []
        self.rings: list[RxRing] = []
        self._probes = 0
        self.sampled: list[tuple[Switch, int]] = []
        self.sample_names: list[str] = []
        self.samples: deque = deque()
        self.sample_every = 0  # picoseconds
        self.sampler_idle = False  # fabric clock: sampling waits for the next job
        # Workers joined by channels (emu.dataplane.channel): a fabric split over several, on either clock.
        self.split = spec.channelled
        self.worker_of = {s.name: s.worker for s in spec.switches}
        self.spec_ports = {(s.name, p.ifname): (s, p) for s in spec.switches for p in s.ports}
        self.channels: Channels | None = None
        self.channel_addr: tuple[str, int] | None = None
        if self.split:
            self.channels = Channels(index, spec.workers, spec.lookahead_ps(), self.loop, self._from_peer,
                                     spec.worker_name, paced=spec.paced, across_machines=self.across)
            self.loop.split_over(self.channels.sync)
            self.channel_addr = self.channels.listen(spec.channel_host(index))
        self.opened = self._open_ports()
        self.switches = build_switches(spec, self.loop, index, self._external)
        self.ingress_of: dict[int, Callable[[int, Any], None]] = {}
        # The hosts run here whose cables to other workers' switches are cut: (switch, port) -> its NIC.
        self.host_ends: dict[tuple[str, int], HostEnd] = {}
        if self.split:
            self._cut_links()
        self.control = self._open_control()

    def _cut_links(self) -> None:
        """Each port whose peer another worker runs (a switch, or a host: PortSpec.host_worker) hands
        its frames to that worker's channel (Switch.cut: the channel adds the cable's delay), and takes
        the peer's from it. A host run here whose cable is cut gets its NIC (HostEnd), toward the
        switch's worker."""
        assert self.channels is not None
        place = {s.name: i for i, s in enumerate(self.spec.switches)}
        send = self.channels.send_frame

        loop = self.loop

        def out_to(peer: int, pid: int, delay: int) -> Callable[[int, Any], None]:
            def out(t: int, frame: Any) -> None:  # the frame's landing here: its tie key goes with it
                send(peer, pid, t + delay, frame, loop.key)
            return out

        for sw in self.switches.values():
            for ps in sw.spec.ports:
                if ps.peer_kind == "switch" and self.worker_of[ps.peer_switch] != self.index:
                    peer, pid = self.worker_of[ps.peer_switch], port_id(place[ps.peer_switch], ps.peer_port)
                elif ps.peer_kind == "host" and self.spec.host_side(sw.spec, ps) != self.index:
                    peer, pid = ps.host_worker, port_id(place[sw.name], ps.index)  # the host's end: same port id
                else:
                    continue
                ingress: Callable[[int, Any], None] = partial(sw.ingress, ps.index)
                out = out_to(peer, pid, sw.cut(ps.index))
                pcap = self._pcap(sw.name, ps) if ps.peer_kind == "switch" else None  # a host's: at its end
                if pcap is not None:  # captured as a veth's port is: what leaves as it leaves, what arrives
                    ingress, out = _captured(pcap, ingress), _captured(pcap, out)
                self.ingress_of[port_id(place[sw.name], ps.index)] = ingress
                sw.ports[ps.index].tx.deliver = out
        for s in self.spec.switches:
            if s.worker == self.index:
                continue
            for ps in s.ports:
                if ps.host_worker == self.index:
                    pid = port_id(place[s.name], ps.index)
                    end = HostEnd(s, ps, self.loop, to_switch=out_to(s.worker, pid, to_ps(ps.delay_s)))
                    end.deliver = (self._kernel_port(s.name, ps, end.from_host, end) if ps.kernel
                                   else self._no_kernel_port(s.name, ps, end))
                    self.host_ends[(s.name, ps.index)] = end
                    self.ingress_of[pid] = end.arrive

    def _from_peer(self, kind: int, t: int, a: int, payload: bytes, key: tuple[int, int]) -> None:
        """What a peer worker sent, due at t with the tie key it took: a frame for one of our ports, or a
        note for a job's part."""
        if kind == FRAME:
            self.loop.at_key(t, *key, self.ingress_of[a], payload)
        else:
            job = self.jobs.get(a)
            if job is not None:
                self.loop.at_key(t, *key, job.heard, json.loads(payload))

    # -- data sockets ----------------------------------------------------------------

    def _open_ports(self) -> dict[str, tuple[socket.socket, RxRing, socket.socket]]:
        """A packet socket and its receive ring for every port this worker carries to a kernel (to a host
        run here, or to another data plane: BMv2's), opened by threads at once: each ring waits for an
        RCU grace period, and in turn 96 ports took 1.5 s here, at once 0.1 s. A link between switches
        is never a kernel's: within a worker it is in memory, between workers a channel."""
        ports = []
        for sw in self.spec.switches:
            for ps in sw.ports:
                if ps.peer_kind == "host":
                    here = self.spec.host_side(sw, ps) == self.index and ps.kernel  # no kernel: no veth
                else:
                    here = sw.worker == self.index and ps.peer_kind != "switch"
                if here:
                    ports.append((ps.ifname, ps.peer_kind == "host"))
        opened: dict[str, tuple[socket.socket, RxRing, socket.socket]] = {}
        hosts = sum(1 for _, from_host in ports if from_host)
        sizes = ring_sizes(hosts, len(ports) - hosts)
        if sizes != (HOST_PORT_RING, FABRIC_PORT_RING):
            print(f"worker {self.index}: {len(ports)} ports: rings of {sizes[0] >> 10} KiB (host) and "
                  f"{sizes[1] >> 10} KiB (switch) to stay within {RING_BUDGET >> 20} MiB", flush=True)
        with ThreadPoolExecutor(max_workers=max(1, min(64, len(ports)))) as pool:
            futures = {pool.submit(self._open_packet_socket, ifname, from_host, sizes[0] if from_host else sizes[1]):
                       ifname for ifname, from_host in ports}
            errors = []
            for fut, ifname in futures.items():
                try:
                    opened[ifname] = fut.result()
                except OSError as exc:
                    errors.append(exc)
        self.sockets += [s for s, _, _ in opened.values()]
        self.rings += [r for _, r, _ in opened.values()]
        self.tx_sockets += [t for _, _, t in opened.values()]
        print(f"worker {self.index}: {len(opened)} of {len(ports)} ports open", flush=True)
        if errors:
            raise errors[0]
        return opened

    @staticmethod
    def _open_packet_socket(ifname: str, from_host: bool, ring_bytes: int
                            ) -> tuple[socket.socket, RxRing, socket.socket]:
        """A port's receiving socket with its ring, and a socket to send on.

        Two, because a socket epoll watches has epoll's callback on its wait queue, and every frame the
        socket sent called it when the kernel freed the frame (sock_def_write_space: 3.5 % of the
        worker's time under `emu bench engine`'s load, a lock taken with interrupts off each time); a
        socket only sent on has no one waiting on it."""
        # Protocol 0 until bound: a socket that already receives must stop for its ring to be set,
        # which costs a second grace period.
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            s.setsockopt(socket.SOL_SOCKET, 33, 4 << 20)  # SO_RCVBUFFORCE
            tx.setsockopt(socket.SOL_SOCKET, 32, 4 << 20)  # SO_SNDBUFFORCE
            ring = RxRing(s, frame_size=2048 if from_host else 16384, ring_bytes=ring_bytes)
            s.bind((ifname, ETH_P_ALL))
            tx.bind((ifname, 0))  # protocol 0: it receives nothing
        except OSError as exc:
            s.close()
            tx.close()
            raise OSError(exc.errno, f"cannot open a packet socket on {ifname}: {exc.strerror}") from None
        s.setblocking(False)
        tx.setblocking(False)
        return s, ring, tx

    def _pcap(self, switch: str, ps: PortSpec) -> PcapWriter | None:
        if not self.spec.pcap_dir:
            return None
        os.makedirs(self.spec.pcap_dir, exist_ok=True)  # on another machine, the folder may be new there
        w = PcapWriter(os.path.join(self.spec.pcap_dir, f"{switch}-{ps.ifname}.pcap"))
        self.pcaps.append(w)
        self.pcap_of[ps.ifname] = w
        return w

    def _external(self, sw: Switch, ps: PortSpec) -> Callable[[int, Any], None]:
        if self.split and (ps.peer_kind == "switch" or self.spec.host_side(sw.spec, ps) != self.index):
            return lambda t, frame: None  # a channel, wired once every switch exists (_cut_links)
        if ps.peer_kind == "host" and not ps.kernel:  # only jobs' endpoints: nothing goes to a kernel
            return self._no_kernel_port(sw.name, ps, sw.ports[ps.index])
        entry = sw.from_host if ps.peer_kind == "host" else sw.ingress
        compiled = (sw, ps.index, ps.peer_kind == "host") if self.native and isinstance(sw, self.native.SwitchBase) \
            else None
        return self._kernel_port(sw.name, ps, partial(entry, ps.index), sw.ports[ps.index], compiled)

    def _no_kernel_port(self, switch: str, ps: PortSpec, port: Any) -> Callable[[int, Any], None]:
        """What arrives for a host with no kernel interface (the fabric clock's hosts, made for the jobs'
        endpoints alone): to a job's endpoint attached there, else counted (`_no_kernel`). `port` keeps the
        drop counters (a Port, or the HostEnd of a host whose cable is cut)."""
        deliver = (self.native.HostPort if self.native else HostDelivery)(self._no_kernel, port, self._pcap(switch, ps))
        self.deliveries[(switch, ps.index)] = deliver
        return deliver

    def _no_kernel(self, frame: Any) -> None:
        """A frame for a host's kernel where the host has none (PFC to a host's NIC, which the NIC model
        has already honoured): counted, in the worker's statistics, not as a loss of the fabric."""
        self.for_no_kernel += 1

    def _kernel_port(self, switch: str, ps: PortSpec, entry: Callable[[int, Any], None],
                     port: Any, compiled: tuple[Any, int, bool] | None = None) -> Callable[[int, Any], None]:
        """Port `ps` of `switch` carried to its packet socket: what the kernel sends goes to entry(t,
        frame); the returned deliver(t, frame) gives the host what arrives (to a job's endpoint attached
        there, else to the kernel). `port` keeps the drop counters (a Port, or a HostEnd). `compiled`
        (a compiled switch, its port, whether it faces a host): the ring read and the socket written by
        the compiled core (KernelPort), Python once per burst."""
        sock, ring, tx = self.opened[ps.ifname]
        pcap = self._pcap(switch, ps)
        clock = self.loop.sched.stamp  # the instant a frame enters the schedule (Schedule.stamp)
        frames_ready = ring.frames_ready
        loop = self.loop
        if compiled is not None and pcap is None:
            kport = self.native.KernelPort(ring, tx.fileno(), *compiled)
            self.kernel_ports.append(kport)

            def on_burst() -> None:
                n = kport.read(clock(), RX_BURST)
                loop.took_from_kernel(n, n < RX_BURST)
                if kport.truncated:
                    port.drops["rx_truncated"] = port.drops.get("rx_truncated", 0) + kport.truncated
                    kport.truncated = 0

            self.loop.add_reader(sock.fileno(), on_burst)
            self.rx_sockets.append((sock, port))
            deliver = self.native.HostPort(kport, port, None)
            self.deliveries[(switch, ps.index)] = deliver
            return deliver

        def on_readable() -> None:
            now = clock()
            n = 0
            for frame in frames_ready(RX_BURST):
                if pcap is not None:
                    pcap.write(now, frame)
                entry(now, frame)
                n += 1
            loop.took_from_kernel(n, n < RX_BURST)
            if ring.truncated:
                port.drops["rx_truncated"] = port.drops.get("rx_truncated", 0) + ring.truncated
                ring.truncated = 0

        self.loop.add_reader(sock.fileno(), on_readable)
        self.rx_sockets.append((sock, port))

        # What arrives for the host: to a job's endpoint attached there, else the kernel (emu.dataplane.host).
        deliver = (self.native.HostPort if self.native else HostDelivery)(tx.send, port, pcap)
        self.deliveries[(switch, ps.index)] = deliver
        return deliver

    # -- jobs on the fabric clock -----------------------------------------------------

    def attach(self, switch: str, port: str, on_frame: Callable[[int, Any], None]
               ) -> tuple[Callable[[Any], None], bytes, bytes]:
        """A job's endpoint at the host behind (switch, port): see emu.dataplane.job.Attach."""
        key, ps, from_host = self._host_port(switch, port)
        self.deliveries[key].roce = on_frame
        loop = self.loop
        pcap = self.pcap_of.get(ps.ifname)
        macs = bytes.fromhex(ps.peer_mac.replace(":", "")), bytes.fromhex(ps.mac.replace(":", ""))
        sw = self.switches.get(switch)
        if self.native and pcap is None and key not in self.host_ends and isinstance(sw, self.native.SwitchBase):
            return self.native.FromHost(sw, ps.index), *macs  # a compiled endpoint calls it without Python

        def send(frame: Any) -> None:
            t = loop.now
            if pcap is not None:
                pcap.write(t, frame)
            from_host(t, frame)

        return send, *macs

    def attach_udp(self, switch: str, port: str, udp_port: int,
                   on_frame: Callable[[int, Any], None] | None) -> None:
        """UDP frames (IPv4 or IPv6) to `udp_port` arriving at the host behind (switch, port) go to
        on_frame(t, frame) (a job's counting receiver) instead of the host's kernel; None gives them back
        to the kernel."""
        key, _, _ = self._host_port(switch, port)
        delivery = self.deliveries[key]
        delivery.udp, delivery.udp_port = (None, -1) if on_frame is None else (on_frame, udp_port)

    def _host_port(self, switch: str, port: str) -> tuple[tuple[str, int], PortSpec, Callable[[int, Any], None]]:
        """The host port (switch, port) whose host runs here: its key, spec, and where its host's frames go."""
        s, ps = self._spec_port(switch, port)
        if ps.peer_kind != "host":
            raise ValueError(f"{switch}/{port} faces a {ps.peer_kind}, not a host")
        key = (switch, ps.index)
        end = self.host_ends.get(key)
        if end is not None:
            return key, ps, end.from_host
        if self.spec.host_side(s, ps) != self.index:
            raise ValueError(f"the host behind {switch}/{port} runs on worker {self.spec.host_side(s, ps)}, "
                             f"not {self.index}")
        return key, ps, partial(self.switches[switch].from_host, ps.index)

    def hosts(self, switch: str, port: str) -> bool:
        s, ps = self._spec_port(switch, port)
        return ps.peer_kind == "host" and self.spec.host_side(s, ps) == self.index

    def carries(self, switch: str, port: str) -> bool:
        s, ps = self._spec_port(switch, port)
        return s.worker == self.index or (switch, ps.index) in self.host_ends

    def tell(self, job: Any, payload: Any) -> None:
        """A job part's message to all its parts (emu.dataplane.job.Attach.tell)."""
        if self.channels is None:
            self.loop.at(self.loop.now, job.heard, payload)
            return
        t = min(self.loop.now + self.channels.lookahead, NEVER)  # no cut link: never (as the windows)
        key = self.loop.reserve()  # every part hears it with one tie key
        self.loop.at_key(t, *key, job.heard, payload)
        job_id = next(i for i, j in self.jobs.items() if j is job)
        self.channels.send_note(job_id, t, payload, key)

    def set_port(self, switch: str, port: str, up: bool) -> None:
        """A port down or up: asked over the control socket, or scheduled by a job (Attach). Up is as
        built, so a degraded port comes back whole too (a job heals a degraded plane so, at a fabric time).
        A cut host cable's end here (HostEnd) goes down or up with its switch's port."""
        if up:
            self.degrade(switch, port, loss=0.0, rate_bps=0.0, delay_s=0.0)
        for sw, idx in self._port_ends(switch, port):
            if isinstance(sw, HostEnd):
                sw.set_up(up)
            else:
                sw.set_port_up(idx, up)

    def degrade(self, switch: str, port: str, *, loss: float, rate_bps: float, delay_s: float, seed: int = 0) -> None:
        """Both directions of a port's link, as far as they run here (Switch.degrade_port, HostEnd.degrade)."""
        for sw, idx in self._port_ends(switch, port):
            if isinstance(sw, HostEnd):
                sw.degrade(loss=loss, rate_bps=rate_bps, delay_s=delay_s, seed=seed)
            else:
                sw.degrade_port(idx, loss=loss, rate_bps=rate_bps, delay_s=delay_s, seed=seed)

    def _port_ends(self, switch: str, port: str) -> list[tuple[Switch | HostEnd, int]]:
        """What runs here of port (switch, port): the switch's port, its cut cable's host end, or both."""
        _, ps = self._spec_port(switch, port)
        out: list[tuple[Switch | HostEnd, int]] = []
        if switch in self.switches:
            out.append((self.switches[switch], ps.index))
        end = self.host_ends.get((switch, ps.index))
        if end is not None:
            out.append((end, ps.index))
        if not out:
            raise KeyError(f"worker {self.index} runs neither {switch} nor the host end of {switch}/{port}")
        return out

    def _run_job(self, kind: str, params: dict[str, Any], hold: bool = False) -> dict[str, Any]:
        """Build a job; start it at once, or (`hold`: a split fabric's part) when StartJob says."""
        cls = job_class(kind)
        if self.spec.clock not in cls.clocks:
            raise ValueError(f"a {cls.__name__} runs inside the engine on the {' or '.join(cls.clocks)} clock only")
        if self.split and not hold:
            raise ValueError("a job on a split fabric is built on every worker first (RunJob.hold), then started "
                             "at one instant (StartJob)")
        meter = _Meter(self)
        job_id = len(self.jobs) + 1  # the same on every worker: each is asked for every job, in order
        with self.loop.origin("build"):  # what building schedules, alike on every worker
            job = cls(self, params)
        job.on_finish.append(meter.stop)  # (Job.finish calls it, from the job's start on)
        self.jobs[job_id] = job
        self.meters[job_id] = meter
        if not hold:
            self._go(job)
        return {"ok": True, "job": job_id}

    def _start_job(self, job_id: int, at: int, wall_at: float) -> dict[str, Any]:
        """A held job's part starts at fabric instant `at` (StartJob), at once: its loop's begin moves fabric
        time there and opens the windows; paced, the wall meets it at `wall_at` (the workers' common clock)."""
        job = self.jobs.get(job_id)
        if job is None or job.begun:
            raise ValueError(f"no job {job_id} waiting to start")
        job.params["at"] = int(at)
        if wall_at >= 0:
            job.params["wall_at"] = wall_at - common_offset(self.across)
        self._go(job)
        return {"ok": True, "job": job_id}

    def _go(self, job: Any) -> None:
        """Start a built job. An error fails the job with its reason, for whoever asks (JobResult), and not
        the worker (a split job's part starts on StartJob, whose answer does not wait for the job)."""
        try:
            job.go()
        except Exception as exc:
            job.fail(f"{type(exc).__name__}: {exc}")
        if self.sampler_idle:
            self.sampler_idle = False
            self.loop.at(self.loop.now, self._sample, None)

    def _job_result(self, job_id: int) -> dict[str, Any]:
        job = self.jobs.get(job_id)
        if job is None:
            raise KeyError(f"no job {job_id}")
        if not job.finished:
            return {"ok": True, "done": False, "fabric_s": job.since(self.loop.now) if job.begun else 0.0,
                    "events": getattr(self.loop, "events", 0)}
        if job.error:
            return {"ok": False, "done": True, "error": job.error}
        return {"ok": True, "done": True, "result": job.result(), "speed": self.meters[job_id].figures(),
                "kernel_frames": getattr(self.loop, "kernel_frames", 0)}

    def packet_hops(self) -> int:
        """Frames every wire this worker runs has carried so far (switch ports, host NIC models, cut cables'
        host ends): packet-hops, the unit of a packet simulator's work."""
        n = 0
        for sw in self.switches.values():
            for p in sw.ports:
                n += p.tx.tx_packets + (p.nic.tx_packets if p.nic is not None else 0)
        return n + sum(e.nic.tx_packets for e in self.host_ends.values())

    # -- control socket ---------------------------------------------------------------

    def _open_control(self) -> socket.socket:
        path = control_path(self.spec.run_dir, self.index)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # 0600 whatever the caller's umask: it takes commands as root
        try:
            s.bind(path)
        finally:
            os.umask(old)
        s.listen(8)
        s.setblocking(False)
        self.loop.add_reader(s.fileno(), self._on_control)
        return s

    def _on_control(self) -> None:
        try:
            conn, _ = self.control.accept()
        except BlockingIOError:
            return
        with conn:
            conn.settimeout(2.0)
            try:
                data = b""
                while not data.endswith(b"\n"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                reply = self.handle(decode(data))
            except Exception as exc:  # a bad request must not take the worker down
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            try:
                _send_progressing(conn, json.dumps(reply).encode() + b"\n")
            except OSError:
                pass

    def handle(self, req: Request) -> dict[str, Any]:
        """One request, dispatched on its type (emu/dataplane/protocol.py defines them)."""
        now = self.loop.clock()
        match req:
            case Ping():
                return {"ok": True, "worker": self.index, "switches": sorted(self.switches), "now_ps": now,
                        "channel": list(self.channel_addr) if self.channel_addr else None,
                        "peers": self.channels.connected if self.channels else 0}
            case Stats():
                self._collect_socket_drops()
                return {"ok": True, "worker": self.index, "dilation": self.spec.dilation, "fabric_now_s": to_s(now),
                        "fidelity": self.loop.lateness.summary(),
                        **({"channel": {"windows": self.channels.windows, "received": self.channels.handed,
                                        **({"clocks": self.channels.clock_bounds()} if self.spec.paced else {}),
                                        # peers whose channel closed (wall clock): messages for them dropped
                                        **({"dead": {str(j): n for j, n in self.channels.dead.items()}}
                                           if self.channels.dead else {})}}
                           if self.channels else {}),
                        "for_no_kernel": self.for_no_kernel,
                        # What runs inside (the live view's job line): each job's progress and its fabric time.
                        "jobs": [{"job": i, "what": job.progress(), "fabric_s": job.since(self.loop.now) if job.begun else 0.0}
                                 for i, job in self.jobs.items() if not job.finished],
                        "switches": {n: sw.stats(now) for n, sw in self.switches.items()},
                        "host_ends": {f"{e.switch}/{e.name}": e.stats(now) for e in self.host_ends.values()}}
            case ResetFidelity():
                self.loop.lateness.reset()
                if self.channels is not None:
                    self.channels.reset_clocks()
            case SetPort(switch, port, up):
                self.set_port(switch, port, bool(up))
            case Degrade(switch, port, loss, rate_bps, delay_s, seed):
                self.degrade(switch, port, loss=float(loss), rate_bps=float(rate_bps), delay_s=float(delay_s),
                             seed=int(seed))
            case SetTables(switch, tables):
                self._switch(switch).load_tables(SwitchTables.from_dict(tables))
            case SetHeadroom(switch, port, nbytes):
                sw, idx = self._port(switch, port)
                sw.mmu.set_headroom(idx, int(nbytes))
            case Probe(switch, port, count, spacing_s):
                sw, idx = self._port(switch, port)
                self._probes += 1
                pid = self._probes
                for seq in range(int(count)):
                    self.loop.at(now + seq * to_ps(float(spacing_s)), self._probe_one, (sw, idx, pid, seq))
                return {"ok": True, "probe": pid}
            case ProbeResult(switch, probe):
                return {"ok": True, "rtts_s": [to_s(r) for r in self._switch(switch).probe_rtts.get(int(probe), [])]}
            case SampleQueues(ports, interval_s, most):
                # Queue depth over time, for the ports asked for: (engine time, bytes queued) pairs.
                self.sampled = [self._port(sw, port) for sw, port in ports]
                self.sample_names = [f"{sw}/{port}" for sw, port in ports]
                self.samples = deque(maxlen=int(most))
                self.sample_every = to_ps(float(interval_s))
                self.loop.at(now, self._sample, None)
            case QueueSamples():
                return {"ok": True, "ports": self.sample_names,
                        "samples": [(to_s(t), q) for t, q, _ in self.samples],
                        "paused": [(to_s(t), p) for t, _, p in self.samples],
                        "origin_s": 0.0}
            case RunJob(kind, params, hold):
                return self._run_job(kind, params, hold)
            case StartJob(job, at, wall_at):
                return self._start_job(job, at, wall_at)
            case Connect(peers):
                if self.channels is None:
                    raise ValueError("this worker's fabric is not split: it has no peers")
                self.channels.connect([(h, int(p)) for h, p in peers])
            case JobResult(job):
                return self._job_result(int(job))
            case SetPace(wall_s):
                self.loop.set_pace(float(wall_s))
            case Stop():
                self.loop.running = False
        return {"ok": True}

    def _collect_socket_drops(self) -> None:
        """Frames the kernel dropped because this worker did not read them in time (each read resets the
        kernel's count, so what is read is added)."""
        for sock, port in self.rx_sockets:
            try:
                _, drops = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
            except OSError:
                continue
            if drops:
                port.drops["rx_socket_overflow"] = port.drops.get("rx_socket_overflow", 0) + drops

    def _sample(self, t: int, _: Any) -> None:
        if not self.sampled:
            return
        if not self.loop.measuring:
            self.sampler_idle = True  # nothing of ours runs: sample again when a job starts
            return
        self.samples.append((t, [sw.ports[i].tx.queued() for sw, i in self.sampled],
                             [_paused(sw.ports[i], t) for sw, i in self.sampled]))
        self.loop.at(t + self.sample_every, self._sample, None)

    def _switch(self, name: str) -> Switch:
        sw = self.switches.get(name)
        if sw is None:
            raise KeyError(f"worker {self.index} has no switch {name!r}")
        return sw

    def _spec_port(self, switch: str, port: str) -> tuple[SwitchSpec, PortSpec]:
        found = self.spec_ports.get((switch, port))
        if found is None:
            raise KeyError(f"no port {switch}/{port}")
        return found

    def _port(self, switch: str, port: str) -> tuple[Switch, int]:
        sw = self._switch(switch)
        idx = next((p.index for p in sw.ports if p.name == port), None)
        if idx is None:
            raise KeyError(f"{sw.name} has no port {port!r}")
        return sw, idx

    @staticmethod
    def _probe_one(t: int, arg: tuple[Switch, int, int, int]) -> None:
        sw, idx, pid, seq = arg
        sw.send_probe(t, idx, pid, seq)

    def close(self) -> None:
        """Each packet socket's close waits for an RCU grace period: closed by threads at once."""
        for kport in self.kernel_ports:
            kport.close()
        def close_one(port: tuple[socket.socket, RxRing, socket.socket]) -> None:
            port[1].close()
            port[0].close()
            port[2].close()

        with ThreadPoolExecutor(max_workers=max(1, min(64, len(self.sockets)))) as pool:
            list(pool.map(close_one, zip(self.sockets, self.rings, self.tx_sockets, strict=True)))
        for p in self.pcaps:
            p.close()
        if self.channels is not None:
            self.channels.close()
        self.control.close()
        try:
            os.unlink(control_path(self.spec.run_dir, self.index))
        except FileNotFoundError:
            pass


def _paused(port: Any, t: int) -> float:
    """Fabric seconds up to t that anything sending through this switch port was held by PFC: its
    transmitter's pauses, and a host port's NIC model's (the host held by the switch's own XOFF)."""
    held = sum(port.tx.paused_ps(t)) + (sum(port.nic.paused_ps(t)) if port.nic is not None else 0)
    return to_s(held)


def job_class(kind: str) -> type[Job]:
    """The Job subclass a request names ("module:Class", in the emu package); one error otherwise."""
    module, _, name = kind.partition(":")
    if not module.startswith("emu.") or not name:
        raise ValueError(f"a job kind is a Job subclass of the emu package, as \"module:Class\"; got {kind!r}")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        raise ValueError(f"no job kind {kind!r}") from None
    if not (isinstance(cls, type) and issubclass(cls, Job)):
        raise ValueError(f"{kind!r} is not a Job")
    return cls


class _Meter:
    """What a job cost this worker, from its start to its end: wall and CPU seconds and packet-hops."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        t = os.times()
        self.wall, self.user, self.system, self.hops = time.monotonic(), t.user, t.system, worker.packet_hops()
        self.events = self._events()
        self.done: tuple[float, float, float, int, int] | None = None

    def _events(self) -> int:
        return int(getattr(self.worker.loop, "events", 0))

    def stop(self) -> None:
        if self.done is None:
            t = os.times()
            self.done = (time.monotonic() - self.wall, t.user - self.user, t.system - self.system,
                         self.worker.packet_hops() - self.hops, self._events() - self.events)

    def figures(self) -> dict[str, Any]:
        """CPU split as the kernel counts it: the process's own work, and the kernel's on its behalf (most
        of it mapping the memory the job touches first: the endpoints' regions)."""
        wall, user, system, hops, events = self.done or (0.0, 0.0, 0.0, 0, 0)
        # The core that ran, as the worker's schedule is (not the setting it was given).
        ran = "native" if type(self.worker.loop.sched).__module__ == "emu.dataplane._core" else "python"
        return {"core": ran, "wall_s": wall, "cpu_s": user + system, "user_s": user, "system_s": system,
                "packet_hops": hops, "events": events}


class _Stopped(BaseException):
    """SIGTERM or SIGINT: the worker stops. Not an Exception, so the handlers that keep a bad request or a
    job's error from taking the worker down (a job being built when the stop came) let it through."""


def _raise_priority() -> None:
    """A switch owns its cores: weigh the worker's scheduling group above the hosts' processes, but
    never take a core from them the instant a frame wakes it.

    Each worker runs in its own session, hence its own autogroup (plain nice does
    not reach across autogroups). Best effort: without root it stays as it is.

    SCHED_BATCH: a frame a host sends wakes the worker synchronously, on the sender's own core
    (the kernel's wake-affine), and at nice -10 the worker then preempted the sender on every frame
    (measured with `emu bench engine`: iperf3 reached 61-82k of 100k pps asked while 41 % of both
    cores sat idle). As a batch task the worker runs as soon as a core is free or its turn comes,
    with its weight unchanged; the sender kept its asked rate, and the wall clock's lateness did
    not grow where it decides (docs/performance.md, the engine against the bridge, 2026-12-05).
    """
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write("-10")
    except OSError:
        pass
    try:
        os.nice(-10)
    except OSError:
        pass
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except OSError:
        pass


def _raise_open_files() -> None:
    """A packet socket per port: the default soft limit (1024 files) is below a large fabric's ports
    on one worker; the hard limit is what the machine allows (the topology's size check uses it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _spec_from_session(path: str) -> EngineSpec:
    """A worker on another machine: its spec, the first line of stdin, kept in the run directory it makes
    for itself, recorded as its session's (`emu clean` there, or where its process is seen, removes it
    once that session is gone)."""
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(0, 1 << 20)
        if not chunk:
            raise SystemExit("worker: the session closed before its spec arrived")
        line += chunk
    spec = EngineSpec.from_json(line.decode())
    if os.path.dirname(path) != spec.run_dir:
        raise SystemExit(f"worker: {path} is not in the spec's run directory {spec.run_dir}")
    private_dir(os.path.dirname(spec.run_dir))
    os.makedirs(spec.run_dir, mode=0o700, exist_ok=True)
    # Its owner is its session (the parent ssh started it from: sshd's), not itself: a worker whose session
    # is gone (its controller killed) is a dead run's to `emu clean` here and on the controller's machine.
    session = {"pid": os.getppid(), "start": process_start(os.getppid())}
    with open(os.path.join(spec.run_dir, "created.json"), "w") as f:
        json.dump({"owner": session, "interfaces": [], "pids": [], "netns": [], "hosts": {}}, f)
    with open(path, "w") as f:
        f.write(line.decode())
    return spec


def _send_progressing(conn: socket.socket, data: bytes) -> None:
    """All of `data`, each send making progress within the socket's timeout: sendall's timeout bounds the
    whole reply, and the stats of FPF 4096 x 8 (40 MB) took longer than 2 s to be read."""
    view = memoryview(data)
    while view:
        view = view[conn.send(view):]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (2, 3):
        print("usage: python -m emu.dataplane.worker SPEC.json INDEX [OWNER_PID|-]\n"
              "  -: started over ssh: the spec is the first line of stdin, written to SPEC.json in a run\n"
              "     directory of its own, and the worker ends when its session (stdin) does", file=sys.stderr)
        return 2
    made = len(argv) == 3 and argv[2] == "-"
    # No cycle collection while the spec is read and the switches built (millions of objects, walked again
    # and again), and what they made frozen once they are (gc.freeze): it lives as long as the worker, and
    # merely switched back on, the collector would walk all of it in the job's first collections.
    gc.disable()
    if made:
        spec = _spec_from_session(argv[0])
    else:
        with open(argv[0]) as f:
            spec = EngineSpec.from_json(f.read())
    index = int(argv[1])
    _raise_priority()
    _raise_open_files()
    try:
        worker = Worker(spec, index)
    except Exception:
        traceback.print_exc()
        if made:
            shutil.rmtree(spec.run_dir, ignore_errors=True)
        return 1

    def stop(*_: Any) -> None:
        raise _Stopped  # out of epoll at once, rather than after its timeout

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # From here a stop, an error or the end goes through one tear-down (a stop during the bring-up too).
    try:
        if len(argv) == 3 and argv[2] == "-":  # owned by whoever holds stdin: stop when it closes

            def session_gone() -> None:
                if not os.read(0, 4096):
                    print(f"worker {index}: its session (stdin) closed: stopping", flush=True)
                    worker.loop.remove_reader(0)
                    worker.loop.running = False

            worker.loop.add_reader(0, session_gone)
        elif len(argv) == 3:  # die with the process that owns the run, however it ends (kill -9 included)
            try:
                owner = watch_owner(int(argv[2]))
            except ProcessLookupError:
                print(f"worker {index}: the run's owner (pid {argv[2]}) is gone: stopping", flush=True)
                return 1

            def owner_gone() -> None:
                print(f"worker {index}: the run's owner (pid {argv[2]}) ended: stopping", flush=True)
                worker.loop.remove_reader(owner)
                worker.loop.running = False

            worker.loop.add_reader(owner, owner_gone)
        for module in PRELOAD:  # the jobs' code loaded now, in the bring-up: a job's wall time is its own work
            importlib.import_module(module)
        if worker.native:
            importlib.import_module("emu.roce._device")
        gc.freeze()
        gc.enable()
        print(f"worker {index} ready: {', '.join(sorted(worker.switches))}", flush=True)
        worker.loop.run_forever()
    except _Stopped:
        pass
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second stop must not cut the tear-down short
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        worker.close()
        if made:
            shutil.rmtree(spec.run_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    code = main()
    # Out without tearing the heap down object by object (a worker of FPF 4096 x 8 holds 3.5 GB of them,
    # and its engine's stop waited seconds for it): main has closed what needs closing; the kernel frees
    # the rest at once.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
