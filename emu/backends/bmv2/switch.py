"""The BMv2 backend: simple_switch running p4/fabric.p4, fed from the same table model.

Every way a start can fail says why and where the log is, and leaves no
process behind: the compiled program missing or not JSON, the binary not
installed, the switch exiting or not answering.

Each simple_switch runs in a network namespace of its own (emu-p4-...),
holding its ports and a loopback: its Thrift server, which takes table
writes from anyone who reaches it and which BMv2 binds to every address,
is reachable only from inside (our simple_switch_CLI is started there),
never from the machine's network, and no switch can take another's port.
Each has its own device id, and where the build has nanomsg its
notifications socket is in the run folder, not at a fixed name in /tmp.
Links: BMv2 paces queues in packets, not bytes, and has no delay, so the
links get their rate and delay from netem qdiscs or from the native
engine's link model (emu.backends.bmv2.links).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from emu.backends.bmv2.cli import (
    bmv2_port,
    hash_commands,
    mirror_commands,
    pfc_params,
    queue_commands,
    red_params,
)
from emu.backends.bmv2.links import EngineLinks, LinkModeError, choose_links
from emu.backends.bmv2.plane import Bmv2DataPlane
from emu.backends.bmv2.program import compile_program, hook_tables, load_hook, switch_facts
from emu.dataplane.engine import RUN_ROOT
from emu.launch import Supervisor, die_with_parent, private_dir
from emu.net.cleanup import BMV2_LOG_DIR, switch_namespace
from emu.net.link import node_netlink
from emu.net.netlink import NETNS_DIR, Netlink, NetlinkError, create_namespace, remove_namespace
from emu.net.netns import kernel_has_netem, nsexec
from emu.net.switch import FabricSwitch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# `make p4` writes the program here; EMU_BMV2_JSON points the backend at another build.
DEFAULT_JSON = os.environ.get("EMU_BMV2_JSON") or os.path.join(REPO, "p4", "build", "fabric.json")
INSTALL_HINT = ("install BMv2 (simple_switch and simple_switch_CLI) from p4lang's packages or a "
                "behavioral-model build, and p4c to compile p4/fabric.p4 (`make p4`)")


class Bmv2Error(RuntimeError):
    pass


def listening(pid: int, port: int, namespace: str) -> bool:
    """Whether process `pid`, inside `namespace`, has a TCP socket listening on `port`: read from the
    process's own view of the network (/proc/PID/net), as no socket of ours could reach it."""
    try:
        mine, want = os.stat(f"/proc/{pid}/ns/net"), os.stat(os.path.join(NETNS_DIR, namespace))
    except OSError:
        return False
    if (mine.st_dev, mine.st_ino) != (want.st_dev, want.st_ino):
        return False  # not there yet (setpriv and nsenter exec it in turn)
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # LISTEN on local :port
                return True
    return False


def check_tools(name: str) -> None:
    for tool in ("simple_switch", "simple_switch_CLI"):
        if shutil.which(tool) is None:
            raise Bmv2Error(f"{name}: {tool} not found: {INSTALL_HINT}")


_NOTIFICATIONS: bool | None = None


def has_notifications_option() -> bool:
    """Whether this simple_switch has nanomsg notifications (p4lang's packages do), whose socket it
    otherwise opens at a fixed name in /tmp, the same for every switch."""
    global _NOTIFICATIONS
    if _NOTIFICATIONS is None:
        try:
            out = subprocess.run(["simple_switch", "--help"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        _NOTIFICATIONS = "--notifications-addr" in out
    return _NOTIFICATIONS


class CliSession:
    """One long-lived simple_switch_CLI per switch. A fresh CLI costs about 0.2 s of wall time to
    start (Python, Thrift, the program's JSON) before its first command: a round of route updates
    across a fabric then took seconds, long enough in fabric time to change what a scenario measures
    (wcmp's damping). This one answers a round in milliseconds. Each batch ends with a marker the
    CLI does not know; its "Unknown syntax" answer says the batch is done. Commands are written
    while answers are read, so neither pipe fills and blocks the other."""

    def __init__(self, name: str, thrift_port: int, namespace: str) -> None:
        self.name = name
        self.thrift_port = thrift_port
        self.namespace = namespace  # the switch's: its Thrift server is reachable only from there
        self.proc: subprocess.Popen | None = None
        self.batches = 0

    def _start(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            # Unbuffered: the CLI (Python) would otherwise hold its answers until it exits.
            cmd = nsexec(self.namespace, ["simple_switch_CLI", "--thrift-port", str(self.thrift_port)])
            self.proc = subprocess.Popen(cmd,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
            # Both ends non-blocking: a write larger than the room in the pipe then writes what fits
            # instead of waiting for a CLI that is itself waiting for us to read its answers.
            os.set_blocking(self.proc.stdout.fileno(), False)
            os.set_blocking(self.proc.stdin.fileno(), False)
        return self.proc

    def run(self, commands: list[str], timeout: float = 120.0) -> str:
        proc = self._start()
        self.batches += 1
        mark = f"emu_end_of_batch_{self.batches}"
        done = f"Unknown syntax: {mark}".encode()
        todo = memoryview(("\n".join(commands) + f"\n{mark}\n").encode())
        out = bytearray()
        deadline = time.monotonic() + timeout
        assert proc.stdin is not None and proc.stdout is not None
        rfd, wfd = proc.stdout.fileno(), proc.stdin.fileno()
        while done not in out:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise Bmv2Error(f"{self.name}: simple_switch_CLI gave no answer within {timeout:.0f}s")
            readable, writable, _ = select.select([rfd], [wfd] if todo else [], [], left)
            if writable:
                try:
                    todo = todo[os.write(wfd, todo[:65536]):]
                except BlockingIOError:
                    pass
                except BrokenPipeError:
                    todo = todo[:0]
            if readable:
                chunk = os.read(rfd, 1 << 16)
                if not chunk:  # the CLI exited: it could not reach the switch, or the switch died
                    self.close()
                    text = out.decode(errors="replace").strip().splitlines()
                    raise Bmv2Error(f"{self.name}: simple_switch_CLI exited: {' '.join(text[-3:]) or 'no output'}")
                out += chunk
        return out[: out.index(done)].decode(errors="replace")

    def close(self) -> None:
        if self.proc is None:
            return
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.proc = None


@dataclass
class Bmv2Process:
    """One simple_switch. start() moves its ports (interfaces in this namespace) into a namespace of
    its own and runs it there; stop() deletes them with it: once started, the switch owns its ports."""

    name: str
    ports: list[tuple[int, str]]  # (BMv2 port number, interface)
    thrift_port: int = 9090  # inside the switch's own namespace: every switch can have BMv2's default
    json_path: str = DEFAULT_JSON
    priority_queues: int = 8
    log_dir: str = BMV2_LOG_DIR  # a fabric's switches log in its run directory: `emu clean` knows whose
    device_id: int = 0  # how BMv2's IPC messages tell switches apart: a fabric numbers its own
    proc: subprocess.Popen | None = field(default=None, repr=False)
    cli: CliSession | None = field(default=None, repr=False)
    namespace: str = field(default="", repr=False)

    @property
    def log_path(self) -> str:
        return os.path.join(self.log_dir, f"bmv2-{self.name}.log")

    def check(self) -> None:
        """Everything that can be known wrong before a process starts."""
        try:
            with open(self.json_path) as f:
                json.load(f)
        except FileNotFoundError:
            raise Bmv2Error(f"{self.name}: {self.json_path} does not exist: {INSTALL_HINT}") from None
        except ValueError as exc:
            raise Bmv2Error(f"{self.name}: {self.json_path} is not valid JSON ({exc}); recompile with `make p4`") from None
        check_tools(self.name)

    def command(self, notifications: bool) -> list[str]:
        """simple_switch's arguments (inside its namespace); `notifications`: the build takes
        --notifications-addr, whose socket then goes in the run folder."""
        cmd = ["simple_switch", "--thrift-port", str(self.thrift_port), "--device-id", str(self.device_id),
               "--log-file", self.log_path[:-4], "--log-flush", "--log-level", "warn"]
        if notifications:
            cmd += ["--notifications-addr", f"ipc://{os.path.join(self.log_dir, f'bmv2-{self.name}-notifications.ipc')}"]
        for num, ifname in self.ports:
            cmd += ["-i", f"{num}@{ifname}"]
        return cmd + [self.json_path, "--", "--priority-queues", str(self.priority_queues)]

    def start(self, timeout: float = 10.0) -> None:
        self.check()
        private_dir(RUN_ROOT)
        private_dir(self.log_dir)
        try:
            self._namespace()
            cmd = [*die_with_parent(), *nsexec(self.namespace, self.command(has_notifications_option()))]
            with open(self.log_path, "w") as log:
                self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            deadline = time.monotonic() + timeout
            while not listening(self.proc.pid, self.thrift_port, self.namespace):
                if self.proc.poll() is not None:
                    raise Bmv2Error(f"{self.name}: simple_switch exited with code {self.proc.returncode}: "
                                    f"{self._tail()} (log: {self.log_path})")
                if time.monotonic() > deadline:
                    raise Bmv2Error(f"{self.name}: simple_switch did not answer on Thrift port {self.thrift_port} "
                                    f"within {timeout:.0f}s (log: {self.log_path})")
                time.sleep(0.05)
        except BaseException:
            self.stop()
            raise

    def _namespace(self) -> None:
        """The switch's namespace: loopback up (Thrift), no IPv6 on its ports (the kernel's own
        solicitations would enter the fabric), its ports moved in and up."""
        name = switch_namespace(self.name, self.log_dir)
        try:
            if os.path.exists(os.path.join(NETNS_DIR, name)):
                raise Bmv2Error(f"{self.name}: namespace {name} exists already (another switch of this name "
                                "in this run, or a crash's: `emu clean`)")
            create_namespace(name)
            self.namespace = name
            with Netlink.of_name(name) as nl:
                nl.sysctl({"ipv6/conf/all/disable_ipv6": 1, "ipv6/conf/default/disable_ipv6": 1})
                nl.set_link("lo", up=True)
            with Netlink.here() as here:
                for _, ifname in self.ports:
                    here.move_link(ifname, name)
            with Netlink.of_name(name) as nl:
                for _, ifname in self.ports:
                    nl.set_link(ifname, up=True)
        except NetlinkError as exc:
            raise Bmv2Error(f"{self.name}: cannot give the switch its namespace: {exc}") from None

    def load(self, commands: list[str]) -> str:
        """Run commands through simple_switch_CLI; its output (handles, counter values) is returned."""
        if self.cli is None:
            self.cli = CliSession(self.name, self.thrift_port, self.namespace)
        out = self.cli.run(commands)
        bad = [line.replace("RuntimeCmd: ", "").strip() for line in out.splitlines()
               if "Error" in line or "Invalid" in line]  # less the CLI's prompts, which share its line
        if bad:
            raise Bmv2Error(f"{self.name}: simple_switch_CLI refused entries: {'; '.join(bad[:5])}")
        return out

    def _tail(self) -> str:
        try:
            with open(self.log_path) as f:
                return " ".join(f.read().split()[-40:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """The switch, its CLI, and its namespace with the ports in it (deleted here, not left to
        the kernel's asynchronous clean-up of a namespace: their names are free when this returns)."""
        if self.cli is not None:
            self.cli.close()
            self.cli = None
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
        if self.namespace:
            try:
                with Netlink.of_name(self.namespace) as nl:
                    for li in nl.links():
                        if li.name != "lo":
                            nl.delete_link(li.name)
            except NetlinkError:
                pass
            remove_namespace(self.namespace)
            self.namespace = ""
        if self.log_dir == BMV2_LOG_DIR:  # a check's or a bench's switch, stopped: no run keeps its log
            for suffix in (".log", ".txt", "-notifications.ipc"):
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(self.log_dir, f"bmv2-{self.name}{suffix}"))


def _static_neighbours(switches: tuple) -> None:
    """fabric.p4 answers no ARP or NDP: give each host interface its gateways' MAC and the MAC for
    every other host address in its subnets, all pointing at the switch port (the fabric is routed)."""
    import ipaddress

    links = []  # (host interface, switch port MAC, LinkParams, the host's addresses on it)
    for sw in switches:
        for intf in sw.intfList():
            link = getattr(intf, "link", None)
            if link is None or not hasattr(link, "fabric"):
                continue
            peer = link.intf2 if link.intf1 is intf else link.intf1
            if isinstance(peer.node, FabricSwitch):
                continue
            lp = link.fabric
            ip4 = lp.host_ip4 or (f"{peer.IP()}/{peer.prefixLen}" if peer.IP() else "")
            links.append((peer, intf.mac or intf.MAC(), lp, [a for a in (ip4, lp.host_ip6) if a]))
    everyone = [ipaddress.ip_interface(a).ip for *_, addrs in links for a in addrs]
    for peer, mac, lp, addrs in links:
        mine = {ipaddress.ip_interface(a).ip for a in addrs}
        nets = [ipaddress.ip_interface(a).network for a in (lp.gw4, lp.gw6, *addrs) if a]
        wanted = {ipaddress.ip_interface(g).ip for g in (lp.gw4, lp.gw6) if g}
        wanted |= {a for a in everyone if a not in mine and any(a in n for n in nets)}
        if wanted:
            with node_netlink(peer.node) as nl:
                for a in sorted(wanted, key=lambda a: (a.version, int(a))):
                    nl.add_neighbour(peer.name, str(a), mac)


def netem_available() -> bool:
    return kernel_has_netem()


class Bmv2Backend:
    """simple_switch per switch, running p4/fabric.p4 with entries from the table model (emu.net.backend),
    or the user's own program (RunSettings.p4) with entries from their hook (emu.backends.bmv2.program)."""

    def check(self, settings, switches: list[str]) -> None:
        """The link mode, the program and the binaries (each switch's Thrift port is in its own namespace).
        A user's program (settings.p4) is compiled here, and their table hook imported: either's error
        comes before anything is built."""
        try:
            choose_links(settings.links, netem=netem_available(), pfc=_pfc_on(settings))
        except LinkModeError as exc:
            raise Bmv2Error(str(exc)) from None
        if settings.p4:
            compile_program(settings.p4)  # kept in memory for start()
            if settings.p4_tables:
                load_hook(settings.p4_tables)
            check_tools((switches or ["check"])[0])
            return
        Bmv2Process((switches or ["check"])[0], [], json_path=settings.p4_json or DEFAULT_JSON).check()

    def start(self, switches: tuple, built, settings) -> Bmv2DataPlane:
        links = choose_links(settings.links, netem=netem_available(), pfc=_pfc_on(settings))
        json_path = settings.p4_json or DEFAULT_JSON
        if settings.p4:  # the user's program, into the run's own directory, which goes with the run
            json_path = os.path.join(built.spec.run_dir, "program.json")
            with open(json_path, "w") as f:
                f.write(compile_program(settings.p4))
        _static_neighbours(switches)
        wires = EngineLinks(built.spec) if links == "engine" else None
        specs = list(built.spec.switches)
        depth = max(64, settings.buffer_per_port // 1500)  # BMv2 queues count packets
        pfc = {}
        if _pfc_on(settings) and wires is not None:
            pfc = {s.name: _pfc(s, depth * 1500, settings.dilation) for s in specs}
        elif _pfc_on(settings):
            print("emu: PFC is off on this BMv2 fabric: with --links netem nothing honours a pause frame "
                  "(--links engine makes the engine each port's MAC)", file=sys.stderr)
        own_dir = "" if switches[0].run_dir else built.spec.run_dir  # a FabricNet removes its own
        plane = Bmv2DataPlane(specs, {}, dilation=settings.dilation, wires=wires, run_dir=own_dir,
                              ecn_red={s.name: _ecn_red(s) for s in specs}, pfc=pfc,
                              trim={s.name: _trim(s, depth) for s in specs if s.qos.trim is not None},
                              user_program=bool(settings.p4))
        try:
            facts = switch_facts(list(switches), specs, built.attachments, bmv2_port) if settings.p4 else []
            taken = wires.start() if wires is not None else {}
            for n, (sw, spec) in enumerate(zip(switches, specs, strict=True)):
                ports = [(bmv2_port(p.index), taken.get((sw.name, p.index), p.ifname)) for p in spec.ports]
                proc = Bmv2Process(sw.name, ports, json_path=json_path, log_dir=built.spec.run_dir, device_id=n)
                plane.procs[sw.name] = proc
                proc.start()
                if plane.supervisor is None:
                    plane.supervisor = Supervisor(built.spec.run_dir)
                plane.supervisor.watch(proc.proc, f"BMv2 switch {sw.name} (simple_switch; log {proc.log_path})")
                queues = [] if settings.p4 else hash_commands(spec.seed)
                queues += mirror_commands([p.index for p in spec.ports]) if pfc else []
                for p in spec.ports:
                    queues += queue_commands(p.index, rate_bps=p.rate_bps, dilation=settings.dilation,
                                             depth_pkts=depth)
                    if wires is None:
                        _netem_link(p.ifname, rate_bps=p.rate_bps, delay_s=p.delay_s, dilation=settings.dilation,
                                    namespace=proc.namespace)
                        if p.peer_kind == "host":  # the host's side of its link too, or it sends unshaped
                            host_if = _peer_intf(sw, p.ifname)
                            _netem_link(host_if.name, rate_bps=p.rate_bps, delay_s=p.delay_s,
                                        dilation=settings.dilation, node=host_if.node)
                if settings.p4:  # the user's hook writes the tables; the control plane's routes are fabric.p4's
                    mine = hook_tables(settings.p4_tables, facts[n]) if settings.p4_tables else []
                    proc.load(queues + mine)
                else:
                    plane.set_tables(sw.name, spec.tables, extra=queues)
        except BaseException:
            plane.stop()
            raise
        return plane


def _pfc_on(settings) -> bool:
    """PFC is fabric.p4's (its thresholds, its pause frames): a user's program runs without it."""
    return settings.pfc and not settings.p4


def _ecn_red(spec) -> dict[int, tuple[int, int, int]]:
    """fabric.p4 runs RED on enq_qdepth with the lossless class's Kmin, Kmax and Pmax (in packets)."""
    ecn = spec.qos.ecn.get(3)
    return {p.index: red_params(ecn.kmin, ecn.kmax, ecn.pmax) for p in spec.ports} if ecn is not None else {}


def _trim(spec, depth: int) -> dict[int, tuple[int, int]]:
    """fabric.p4 cuts a trimmable write that found its queue three quarters full (BMv2 would drop it
    at the full queue, before egress could cut it): the last quarter is left to what is cut."""
    return {p.index: (max(1, depth * 3 // 4), spec.qos.trim.dscp) for p in spec.ports}


def _pfc(spec, queue_bytes: int, dilation: float) -> dict[int, tuple[int, int, int]]:
    """fabric.p4's XOFF, XON and refresh for every port of a switch (its lossless classes)."""
    return {p.index: pfc_params(rate_bps=p.rate_bps, delay_s=p.delay_s, ports=len(spec.ports),
                                queue_bytes=queue_bytes, dilation=dilation) for p in spec.ports}


def _peer_intf(sw, ifname: str):
    intf = sw.intf(ifname)
    return intf.link.intf2 if intf.link.intf1 is intf else intf.link.intf1


def _netem_link(ifname: str, *, rate_bps: float, delay_s: float, dilation: float, node=None,
                namespace: str = "") -> None:
    """One netem qdisc: the dilated rate and delay of the link leaving `ifname` (in `node`'s namespace,
    or the named `namespace`: a switch's own)."""
    cmd = ["tc", "qdisc", "replace", "dev", ifname, "root", "netem", "delay", f"{delay_s * dilation * 1e3:.6f}ms",
           "rate", f"{int(rate_bps / dilation)}bit"]
    if namespace:
        cmd = nsexec(namespace, cmd)
    if node is None:
        r = subprocess.run(cmd, capture_output=True, text=True)
        code, err = r.returncode, r.stderr
    else:
        _, err, code = node.pexec(cmd)
    if code != 0:
        raise Bmv2Error(f"tc netem on {ifname} failed: {err.strip()}")


__all__ = ["Bmv2Backend", "Bmv2Error", "Bmv2Process", "listening"]
