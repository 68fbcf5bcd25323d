"""The BMv2 backend: simple_switch running p4/fabric.p4, fed from the same table model.

Every way a start can fail says why and where the log is, and leaves no
process behind: the compiled program missing or not JSON, the Thrift port
taken, the binary not installed, the switch exiting or not answering.
Links: BMv2 paces queues in packets, not bytes, and has no delay, so each
link gets one netem qdisc (rate and delay) on the switch side where the
kernel has netem. Where it has not, the start is refused: a configured
delay is never dropped silently. (The native engine carrying BMv2's links
as wires, `--links engine`, is not built yet.)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field

from emu.backends.bmv2.cli import bmv2_port, queue_commands, table_commands
from emu.net.switch import FabricSwitch, build_spec

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DEFAULT_JSON = os.path.join(REPO, "p4", "build", "fabric.json")
LOG_DIR = "/tmp/emu-bmv2"
INSTALL_HINT = ("install BMv2 (simple_switch and simple_switch_CLI) from p4lang's packages or a "
                "behavioral-model build, and p4c to compile p4/fabric.p4 (`make p4`)")


class Bmv2Error(RuntimeError):
    pass


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class Bmv2Process:
    name: str
    ports: list[tuple[int, str]]  # (BMv2 port number, interface)
    thrift_port: int
    json_path: str = DEFAULT_JSON
    priority_queues: int = 8
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def log_path(self) -> str:
        return os.path.join(LOG_DIR, f"{self.name}.log")

    def check(self) -> None:
        """Everything that can be known wrong before a process starts."""
        try:
            with open(self.json_path) as f:
                json.load(f)
        except FileNotFoundError:
            raise Bmv2Error(f"{self.name}: {self.json_path} does not exist: {INSTALL_HINT}") from None
        except ValueError as exc:
            raise Bmv2Error(f"{self.name}: {self.json_path} is not valid JSON ({exc}); recompile with `make p4`") from None
        if not port_free(self.thrift_port):
            raise Bmv2Error(f"{self.name}: Thrift port {self.thrift_port} is already in use (another switch?)")
        for tool in ("simple_switch", "simple_switch_CLI"):
            if shutil.which(tool) is None:
                raise Bmv2Error(f"{self.name}: {tool} not found: {INSTALL_HINT}")

    def start(self, timeout: float = 10.0) -> None:
        self.check()
        os.makedirs(LOG_DIR, exist_ok=True)
        cmd = ["simple_switch", "--thrift-port", str(self.thrift_port), "--log-file", self.log_path[:-4],
               "--log-flush", "--log-level", "warn"]
        for num, ifname in self.ports:
            cmd += ["-i", f"{num}@{ifname}"]
        cmd += [self.json_path, "--", "--priority-queues", str(self.priority_queues)]
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise Bmv2Error(f"{self.name}: simple_switch exited with code {self.proc.returncode}: "
                                f"{self._tail()} (log: {self.log_path})")
            if not port_free(self.thrift_port):
                return
            if time.monotonic() > deadline:
                self.stop()
                raise Bmv2Error(f"{self.name}: simple_switch did not answer on Thrift port {self.thrift_port} "
                                f"within {timeout:.0f}s (log: {self.log_path})")
            time.sleep(0.05)

    def load(self, commands: list[str]) -> None:
        r = subprocess.run(["simple_switch_CLI", "--thrift-port", str(self.thrift_port)],
                           input="\n".join(commands) + "\n", capture_output=True, text=True, timeout=120)
        bad = [line for line in r.stdout.splitlines() if "Error" in line or "Invalid" in line]
        if r.returncode != 0 or bad:
            raise Bmv2Error(f"{self.name}: simple_switch_CLI refused entries: {'; '.join(bad[:5]) or r.stderr.strip()}")

    def _tail(self) -> str:
        try:
            with open(self.log_path) as f:
                return " ".join(f.read().split()[-40:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


def _static_neighbours(switches: tuple) -> None:
    """fabric.p4 answers no ARP or NDP: give each host its gateway's MAC, and every same-subnet
    address it might ask for directly, pointing at the switch port (the fabric is routed)."""
    import ipaddress

    for sw in switches:
        for intf in sw.intfList():
            link = getattr(intf, "link", None)
            if link is None or not hasattr(link, "fabric"):
                continue
            peer = link.intf2 if link.intf1 is intf else link.intf1
            if isinstance(peer.node, FabricSwitch):
                continue
            lp, mac = link.fabric, intf.mac or intf.MAC()
            cmds = []
            for gw in (lp.gw4, lp.gw6):
                if not gw:
                    continue
                net = ipaddress.ip_interface(gw).network
                cmds.append(f"ip neigh replace {gw.split('/')[0]} lladdr {mac} dev {peer.name}")
                if net.version == 4 and net.prefixlen >= 24:
                    cmds += [f"ip neigh replace {a} lladdr {mac} dev {peer.name}" for a in net.hosts()]
            if cmds:
                peer.node.cmd("; ".join(cmds))


def netem_available() -> bool:
    from emu.cli.doctor import _netem

    return _netem()


class Bmv2FabricSwitch(FabricSwitch):
    """A fabric switch whose data plane is simple_switch; routes from the same control plane."""

    thrift_base = 9090

    @classmethod
    def batchStartup(cls, switches: tuple, settings=None) -> tuple:  # noqa: N802 (Mininet's name)
        settings = settings or switches[0].settings
        if not netem_available():
            raise Bmv2Error("this kernel has no netem, so BMv2's links cannot carry their rate and delay, and "
                            "`--links engine` is not built yet; refusing rather than dropping the delays silently")
        built = build_spec(switches, settings)
        _static_neighbours(switches)
        procs = []
        try:
            for n, (sw, spec) in enumerate(zip(switches, built.spec.switches, strict=True)):
                proc = Bmv2Process(sw.name, [(bmv2_port(p.index), p.ifname) for p in spec.ports],
                                   cls.thrift_base + n)
                proc.start()
                procs.append(proc)
                cmds = table_commands(spec.tables, port_macs=[p.mac for p in spec.ports],
                                      dscp_to_tc=list(spec.qos.dscp_to_tc))
                for p in spec.ports:
                    cmds += queue_commands(p.index, rate_bps=p.rate_bps, dilation=settings.dilation, depth_pkts=64)
                    rate = p.rate_bps / settings.dilation
                    delay_ms = p.delay_s * settings.dilation * 1e3
                    subprocess.run(["tc", "qdisc", "replace", "dev", p.ifname, "root", "netem", "delay",
                                    f"{delay_ms:.6f}ms", "rate", f"{int(rate)}bit"], check=True,
                                   capture_output=True)
                proc.load(cmds)
                sw.bmv2 = proc
        except BaseException:
            for proc in procs:
                proc.stop()
            raise
        return switches

    @classmethod
    def batchShutdown(cls, switches: tuple) -> tuple:  # noqa: N802
        for sw in switches:
            proc = getattr(sw, "bmv2", None)
            if proc is not None:
                proc.stop()
                sw.bmv2 = None
        return ()


__all__ = ["Bmv2Error", "Bmv2Process", "Bmv2FabricSwitch"]
