"""Bare namespace labs for benchmarks and tests that do not need Mininet.

Every namespace is named `emu-...` and every root-side interface `emu...`,
so `emu clean` can find what a crash left. Everything is made over netlink
(emu.net.netlink): the namespaces by a thread that unshares its own, each
veth with its peer placed straight into its host's namespace. The lab's
root-side interfaces share one device group, so destroying the lab deletes
them in one request; a failure part-way removes what was made.
"""

from __future__ import annotations

import subprocess
import uuid
from dataclasses import dataclass, field

from emu.net.netlink import (
    Netlink,
    NetlinkError,
    create_namespace,
    namespace_names,
    new_group,
    remove_namespace,
)

PREFIX = "emu-"
ROOT_MTU = 9500  # the engine's ends: room for SRv6 encapsulation


class NetnsError(RuntimeError):
    pass


def run(cmd: list[str], *, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise NetnsError(f"{' '.join(cmd)} failed: {(r.stderr or r.stdout).strip()}")
    return r


def nsexec(ns: str, cmd: list[str]) -> list[str]:
    """`cmd` run inside namespace `ns` (util-linux's nsenter: no mount or /sys changes)."""
    return ["nsenter", f"--net=/run/netns/{ns}", "--", *cmd]


@dataclass
class Lab:
    """Hosts in namespaces, each with one veth whose root end a switch (engine or bridge) takes."""

    tag: str
    hosts: list[str] = field(default_factory=list)
    root_ifs: list[str] = field(default_factory=list)
    group: int = field(default_factory=new_group)

    def ns(self, i: int) -> str:
        return f"{PREFIX}{self.tag}-h{i}"

    def root_if(self, i: int) -> str:
        return f"emu{self.tag}h{i}"[:15]

    def netlink(self, i: int) -> Netlink:
        """A netlink socket in host i's namespace; close it (or use `with`)."""
        return Netlink.of_name(self.ns(i))

    def add_host(self, i: int, *, mac: str, ip4: str, ip6: str = "", gw4: str = "", gw6: str = "",
                 route4: str = "", route6: str = "") -> None:
        ns = self.ns(i)
        try:
            create_namespace(ns)
            self.hosts.append(ns)
            self._veth(i, self.root_if(i), "eth0", mac, (ip4, *((ip6,) if ip6 else ())))
            with self.netlink(i) as nl:
                nl.set_link("lo", up=True)
                if gw4:
                    nl.add_route(route4 or "default", gw4, "eth0")
                if gw6:
                    nl.add_route(route6 or "::/0", gw6, "eth0")
        except Exception:
            self.destroy()
            raise

    def add_port(self, i: int, ifname: str, *, mac: str, addrs: tuple[str, ...] = ()) -> str:
        """One more veth into host i's namespace (a router has several); returns its root end."""
        rif = f"emu{self.tag}h{i}{ifname}"[:15]
        self._veth(i, rif, ifname, mac, addrs)
        return rif

    def _veth(self, i: int, rif: str, ifname: str, mac: str, addrs: tuple[str, ...]) -> None:
        root = Netlink.here()
        with root, self.netlink(i) as nl:
            root.add_veth(rif, ifname, peer_mac=mac, mtu=ROOT_MTU, group=self.group, peer_fd=nl.nsfd)
            self.root_ifs.append(rif)
            root.sysctl({f"ipv6/conf/{rif}/disable_ipv6": 1})  # no IPv6 chatter from the switch's end
            root.offloads_off(rif)
            root.set_link(rif, up=True)
            nl.sysctl({f"ipv6/conf/{ifname}/accept_dad": 0})
            nl.offloads_off(ifname)
            nl.set_link(ifname, up=True)
            for a in addrs:
                nl.add_address(ifname, a)

    def add_bridge(self, *, mtu: int = 1500) -> str:
        """A Linux bridge here, up, in the lab's group (gone with it); its name."""
        br = f"emu{self.tag}br"[:15]
        with Netlink.here() as root:
            root.add_bridge(br, mtu=mtu, group=self.group)
            self.root_ifs.append(br)
            root.set_link(br, up=True)
        return br

    def exec(self, i: int, cmd: list[str], **kw) -> subprocess.CompletedProcess:
        return run(nsexec(self.ns(i), cmd), **kw)

    def popen(self, i: int, cmd: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(nsexec(self.ns(i), cmd), **kw)

    def destroy(self) -> None:
        """Every root-side interface in one request (its group), then the namespaces."""
        if self.root_ifs:
            with Netlink.here() as root:
                root.delete_group(self.group)
        for ns in self.hosts:
            remove_namespace(ns)
        self.hosts, self.root_ifs = [], []

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


def list_project_namespaces() -> list[str]:
    return [n for n in namespace_names() if n.startswith(PREFIX)]


def kernel_has_netem() -> bool:
    """Add a netem qdisc on a throwaway veth: only that answers whether the kernel has it (a module
    list can be stale, and a container may forbid loading)."""
    dev = f"emuq{uuid.uuid4().hex[:8]}"
    with Netlink.here() as nl:
        try:
            nl.add_veth(dev, dev + "p", group=new_group())  # this process's: `emu clean` leaves it while it runs
        except NetlinkError:
            return False
        try:
            return subprocess.run(["tc", "qdisc", "add", "dev", dev, "root", "netem", "delay", "1ms"],
                                  capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False
        finally:
            nl.delete_link(dev)

