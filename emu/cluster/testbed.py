"""Machines made of network namespaces on this one, each with its own sshd, on one LAN: what the cluster's
tests run a fabric over (newer Mininet's examples/fakecluster.py does the like; Debian's predates it).

Each machine is a namespace of the project's (`emu-...`) with one interface on a bridge in the root
namespace, which has an address on the LAN too: this process is the controller, and reaches every
machine as `ssh -F CONFIG NAME`. The keys, the sshd and ssh configurations and the known hosts are
made fresh in a scratch folder of this process: nothing of the user's ~/.ssh or /etc/ssh is read or
changed. The machines share this one's file system (one venv, one checkout), as two VMs with the
same image would, but for /run/emu: each has its own, so what a run leaves on a machine only that
machine's `emu clean` sees (`emu clean --machines`), as on machines of their own. `close()` removes everything; `emu clean` does if this process is killed.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time

from emu.dataplane.channel import CLOCK_OFFSET_ENV as OFFSET_ENV
from emu.launch import RUN_ROOT, SCRATCH, scratch_dir, stop_on_signals
from emu.net.cleanup import SCRATCH_IFS, SCRATCH_NETNS, SCRATCH_SPARE, named_netns_id, netns_trees
from emu.net.netlink import Netlink
from emu.net.netns import Lab, run

SSHD = "/usr/sbin/sshd"
LAN = "198.18.250.0/24"  # RFC 2544's benchmarking range: no real network of the user's


class TestbedError(RuntimeError):
    """The namespace machines could not be made; the message says what is missing."""


class NamespaceCluster:
    """`NamespaceCluster(["m1", "m2"])`: machine i at LAN address .(i+2), the controller at .1."""

    __test__ = False  # a pytest collector must not take the name for a test class

    def __init__(self, names: list[str], *, lan: str = LAN, timeout_s: float = 20.0,
                 clock_offset_s: dict[str, float] | None = None) -> None:
        """`clock_offset_s`: machine -> seconds its clock reads ahead, for what runs there over ssh (the
        machines share this kernel's one clock, so a test that needs disagreeing clocks says so here)."""
        if not names or len(set(names)) != len(names) or not all(n.isidentifier() for n in names):
            raise TestbedError(f"machine names must be distinct identifiers, got {names}")
        for tool in (SSHD, "ssh", "ssh-keygen"):
            if shutil.which(tool) is None:
                raise TestbedError(f"{tool} not found: install openssh-server and openssh-client (make setup does)")
        net = ipaddress.ip_network(lan)
        self.names = list(names)
        self.address = {n: str(net[i + 2]) for i, n in enumerate(names)}
        self.controller = str(net[1])
        self.lab = Lab(f"c{os.getpid() % 100000}")
        self.dir = scratch_dir("cluster")
        self.config = os.path.join(self.dir, "ssh_config")
        self.clock_offset_s = dict(clock_offset_s or {})
        if set(self.clock_offset_s) - set(names):
            raise TestbedError(f"clock offsets for unknown machines: {sorted(set(self.clock_offset_s) - set(names))}")
        self.sshds: list[subprocess.Popen] = []
        self.spaces: set[str] = set()
        # SIGTERM and SIGHUP unwind as Ctrl-C does, so that `with` removes the machines (as FabricNet does),
        # where nobody chose otherwise.
        self._restore = (stop_on_signals((signal.SIGTERM, signal.SIGHUP))
                         if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL else None)
        try:
            self._build(net.prefixlen)
            self._start_sshds()
            self._wait(timeout_s)
        except BaseException:
            self.close()
            raise

    def _build(self, prefixlen: int) -> None:
        br = self.lab.add_bridge()
        for i, name in enumerate(self.names):
            self.lab.add_host(i, mac=f"02:c1:00:00:00:{i + 2:02x}", ip4=f"{self.address[name]}/{prefixlen}")
            with Netlink.here() as root:
                root.set_link(self.lab.root_if(i), master=br)
        self.spaces = {named_netns_id(self.lab.ns(i)) for i in range(len(self.names))}
        with open(os.path.join(self.dir, SCRATCH_NETNS), "w") as f:  # what dies with this process, for emu clean
            json.dump(sorted(self.spaces), f)
        with open(os.path.join(self.dir, SCRATCH_IFS), "w") as f:  # and what `emu clean` leaves while it lives
            json.dump(self.lab.root_ifs, f)
        with open(os.path.join(self.dir, SCRATCH_SPARE), "w") as f:  # and `emu clean` on a machine of it
            json.dump(sorted(self.spaces | {os.readlink("/proc/self/ns/net")}), f)
        with Netlink.here() as root:
            root.add_address(br, f"{self.controller}/{prefixlen}")

    def _start_sshds(self) -> None:
        d = self.dir
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "emu-cluster", "-f", f"{d}/id"])
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "emu-cluster-host", "-f", f"{d}/host"])
        shutil.copy(f"{d}/id.pub", f"{d}/authorized_keys")
        host_key = open(f"{d}/host.pub").read().split()[:2]
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        with open(f"{d}/known_hosts", "w") as kh, open(self.config, "w") as cfg:
            for i, name in enumerate(self.names):
                addr = self.address[name]
                kh.write(f"{addr} {' '.join(host_key)}\n")
                cfg.write(f"Host {name} {addr}\n  HostName {addr}\n  User root\n  IdentityFile {d}/id\n  IdentitiesOnly yes\n"
                          f"  UserKnownHostsFile {d}/known_hosts\n  StrictHostKeyChecking yes\n  BatchMode yes\n"
                          f"  ConnectTimeout 5\n  LogLevel ERROR\n")
                if name in self.clock_offset_s:
                    cfg.write(f"  SetEnv {OFFSET_ENV}={self.clock_offset_s[name]!r}\n")
                sshd_config = f"{d}/sshd_{name}"
                with open(sshd_config, "w") as f:
                    f.write(f"ListenAddress {addr}\nPort 22\nHostKey {d}/host\nAuthorizedKeysFile {d}/authorized_keys\n"
                            f"PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                            f"UsePAM no\nUseDNS no\nStrictModes no\nPidFile {d}/sshd_{name}.pid\nAcceptEnv LANG {OFFSET_ENV}\n")
                # Each machine's own /run/emu (its run directories, which only its own `emu clean` can see,
                # as on a machine of its own), with the shared scratch folder (this testbed's keys and
                # records) inside: made aside, the scratch bound in while it is still in view, moved over.
                aside = f"{d}/root-{name}"
                os.mkdir(aside)
                own = (f"mount -t tmpfs -o mode=0755 emu-{name} {aside} && mkdir {aside}/scratch && "
                       f"mount --bind {SCRATCH} {aside}/scratch && mount --move {aside} {RUN_ROOT} && "
                       f"exec {SSHD} -D -e -f {sshd_config}")
                self.sshds.append(self.lab.popen(i, ["unshare", "--mount", "--propagation", "private", "--",
                                                     "sh", "-c", own],
                                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))

    def _wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for name, sshd in zip(self.names, self.sshds, strict=True):
            while True:
                if sshd.poll() is not None:
                    raise TestbedError(f"sshd of {name} exited: {sshd.stderr.read().decode()[-400:]}")  # type: ignore[union-attr]
                if self.ssh(name, "true", check=False, timeout=5).returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise TestbedError(f"{name}: no ssh login within {timeout_s:g} s")
                time.sleep(0.1)

    def remote_host(self) -> type:
        """Mininet's cluster edition's RemoteHost, reaching these machines: its ssh (sudo -E -u USER ssh ...)
        reads this cluster's configuration, keys and known hosts (`addHost(name, cls=..., server="m1",
        serverIP=cluster.address["m1"])`). Only the ssh command is changed; the class is Mininet's."""
        from mininet.examples.cluster import RemoteHost

        base = list(RemoteHost.sshbase)  # ["ssh", "-q", "-o", "BatchMode=yes", ...]
        return type("TestbedRemoteHost", (RemoteHost,), {"sshbase": [base[0], "-F", self.config, *base[1:]]})

    def ssh_command(self, name: str, command: str) -> list[str]:
        """The command line that runs `command` (a shell line) on machine `name`."""
        if name not in self.address:
            raise TestbedError(f"no machine {name!r}; machines: {', '.join(self.names)}")
        return ["ssh", "-F", self.config, name, command]

    def ssh(self, name: str, command: str, *, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        return run(self.ssh_command(name, command), check=check, timeout=timeout)

    def close(self) -> None:
        """Everything that runs on the machines (sshds, sessions, the shells they started), then the
        machines, the LAN and the keys."""
        for pid in netns_trees(getattr(self, "spaces", set())):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for sshd in self.sshds:
            if sshd.poll() is None:
                sshd.kill()
            sshd.wait()
        self.sshds = []
        self.lab.destroy()
        shutil.rmtree(self.dir, ignore_errors=True)
        if self._restore is not None:
            self._restore()
            self._restore = None

    def __enter__(self) -> NamespaceCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
