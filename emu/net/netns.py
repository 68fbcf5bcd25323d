"""Bare namespace labs for benchmarks and tests that do not need Mininet.

Every namespace is named `emu-...` and every root-side interface `emu...`,
so `emu clean` can find what a crash left. Creation is one `ip -batch`;
a failure part-way removes what was made.
"""

from __future__ import annotations

import subprocess
import uuid
from dataclasses import dataclass, field

PREFIX = "emu-"


class NetnsError(RuntimeError):
    pass


def ip_batch(lines: list[str], *, ns: str = "", check: bool = True) -> None:
    r = subprocess.run(["ip", *(["-n", ns] if ns else []), "-force", "-batch", "-"], input="\n".join(lines) + "\n",
                       capture_output=True, text=True)
    if check and r.returncode != 0:
        raise NetnsError(f"ip -batch failed: {r.stderr.strip()}")


def run(cmd: list[str], *, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise NetnsError(f"{' '.join(cmd)} failed: {(r.stderr or r.stdout).strip()}")
    return r


def nsexec(ns: str, cmd: list[str]) -> list[str]:
    return ["ip", "netns", "exec", ns, *cmd]


@dataclass
class Lab:
    """Hosts in namespaces, each with one veth whose root end a switch (engine or bridge) takes."""

    tag: str
    hosts: list[str] = field(default_factory=list)
    root_ifs: list[str] = field(default_factory=list)

    def ns(self, i: int) -> str:
        return f"{PREFIX}{self.tag}-h{i}"

    def root_if(self, i: int) -> str:
        return f"emu{self.tag}h{i}"[:15]

    def add_host(self, i: int, *, mac: str, ip4: str, ip6: str = "", gw4: str = "", gw6: str = "",
                 route4: str = "", route6: str = "") -> None:
        ns, rif = self.ns(i), self.root_if(i)
        root = [
            f"netns add {ns}",
            f"link add {rif} type veth peer name eth0 netns {ns}",
            f"link set {rif} up mtu 9500",
        ]
        inside = ["link set lo up", f"link set eth0 address {mac} up", f"addr add {ip4} dev eth0"]
        if ip6:
            inside.append(f"addr add {ip6} dev eth0 nodad")
        if gw4:
            inside.append(f"route add {route4 or 'default'} via {gw4}")
        if gw6:
            inside.append(f"route add {route6 or '::/0'} via {gw6}")
        self.hosts.append(ns)
        self.root_ifs.append(rif)
        try:
            ip_batch(root)
            ip_batch(inside, ns=ns)
            offload_off(rif)
            offload_off("eth0", ns)
            run(["sysctl", "-qw", f"net.ipv6.conf.{rif}.disable_ipv6=1"])
        except Exception:
            self.destroy()
            raise

    def add_port(self, i: int, ifname: str, *, mac: str, addrs: tuple[str, ...] = ()) -> str:
        """One more veth into host i's namespace (a router has several); returns its root end."""
        ns, rif = self.ns(i), f"emu{self.tag}h{i}{ifname}"[:15]
        self.root_ifs.append(rif)
        ip_batch([f"link add {rif} type veth peer name {ifname} netns {ns}", f"link set {rif} up mtu 9500"])
        ip_batch([f"link set {ifname} address {mac} up"] + [f"addr add {a} dev {ifname} nodad" for a in addrs], ns=ns)
        offload_off(rif)
        offload_off(ifname, ns)
        run(["sysctl", "-qw", f"net.ipv6.conf.{rif}.disable_ipv6=1"])
        return rif

    def exec(self, i: int, cmd: list[str], **kw) -> subprocess.CompletedProcess:
        return run(nsexec(self.ns(i), cmd), **kw)

    def popen(self, i: int, cmd: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(nsexec(self.ns(i), cmd), **kw)

    def destroy(self) -> None:
        lines = [f"link del {r}" for r in self.root_ifs] + [f"netns del {n}" for n in self.hosts]
        ip_batch(lines, check=False)
        self.hosts, self.root_ifs = [], []

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


def offload_off(ifname: str, ns: str = "") -> None:
    """Segmentation offloads would hand the engine 64 KB super-frames and partial checksums."""
    cmd = ["ethtool", "-K", ifname, "tx", "off", "tso", "off", "gso", "off", "gro", "off"]
    run(nsexec(ns, cmd) if ns else cmd, check=False)


def list_project_namespaces() -> list[str]:
    out = run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def kernel_has_netem() -> bool:
    """Add a netem qdisc on a throwaway dummy device: only that answers whether the kernel has it
    (a module list can be stale, and a container may forbid loading)."""
    dev = f"emuq{uuid.uuid4().hex[:8]}"
    try:
        if subprocess.run(["ip", "link", "add", dev, "type", "dummy"], capture_output=True, timeout=10).returncode:
            return False
    except (OSError, subprocess.TimeoutExpired):
        return False
    try:
        return subprocess.run(["tc", "qdisc", "add", "dev", dev, "root", "netem", "delay", "1ms"],
                              capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        subprocess.run(["ip", "link", "del", dev], capture_output=True, timeout=10)
