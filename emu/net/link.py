"""FabricLink: a Mininet veth pair whose rate, delay and addressing the engine applies.

Nothing is shaped in the kernel. The engine carries the link: rate and
propagation delay in both directions, PFC on it, counters for it. So a
configured delay is never lost on a kernel without netem, and the same link
behaves the same on every kernel.

The pair itself is made over netlink (emu.net.netlink), not by Mininet's
`ip link add` and `ifconfig` in the nodes' shells: one request makes both
ends, each in its node's namespace with its MAC and MTU, the root-side end
in the fabric's device group, so that stopping the fabric deletes every
pair in one kernel batch (FabricNet.stop). Interfaces come up when the
fabric starts (emu.net.switch), after what must precede their first packet.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from mininet.link import Intf, Link

from emu.net.netlink import Netlink, NetlinkError
from emu.units import UnitError, parse_distance, parse_rate, parse_time, propagation_delay

SWITCH_MTU = 9500  # bytes on the switch-side ends: room for SRv6 encapsulation of a full host frame


class LinkParamError(ValueError):
    pass


def mac_for(ifname: str) -> str:
    """A stable, locally administered MAC per interface name (no per-link `ip link` reads)."""
    h = hashlib.sha1(ifname.encode()).digest()
    return "02:" + ":".join(f"{b:02x}" for b in h[:5])


@dataclass(frozen=True)
class LinkParams:
    """A link in fabric units. `delay` and `distance` are two ways to say the same thing."""

    rate_bps: float = 100e9
    delay_s: float = 5e-9 * 2
    gw4: str = ""
    gw6: str = ""
    host_ip4: str = ""
    host_ip6: str = ""
    host_routes4: tuple[str, ...] = ()
    host_routes6: tuple[str, ...] = ()
    headroom: int = 0

    @classmethod
    def parse(
        cls,
        *,
        rate: str | float = "100G",
        delay: str | float | None = None,
        distance: str | float | None = None,
        **rest: object,
    ) -> LinkParams:
        try:
            rate_bps = parse_rate(rate)
            if delay is not None and distance is not None:
                raise LinkParamError("give a link either delay or distance, not both")
            if distance is not None:
                delay_s = propagation_delay(parse_distance(distance))
            elif delay is not None:
                delay_s = parse_time(delay)
            else:
                delay_s = propagation_delay(2.0)
        except UnitError as exc:
            raise LinkParamError(f"link: {exc}") from None
        if rate_bps <= 0:
            raise LinkParamError(f"link rate must be > 0, got {rate!r}")
        for key in ("host_routes4", "host_routes6"):
            if key in rest:
                rest[key] = tuple(rest[key])  # type: ignore[arg-type]
        return cls(rate_bps=rate_bps, delay_s=delay_s, **rest)  # type: ignore[arg-type]


FABRIC_KEYS = ("rate", "delay", "distance", "gw4", "gw6", "host_ip4", "host_ip6",
               "host_routes4", "host_routes6", "headroom")

_root: Netlink | None = None


def root_netlink() -> Netlink:
    """This process's rtnetlink socket in its own namespace, made once (the switches' ends live here)."""
    global _root
    if _root is None:
        _root = Netlink.here()
    return _root


def node_netlink(node: Any) -> Netlink:
    """A socket in `node`'s namespace, for a few requests; close it (it keeps the namespace alive)."""
    if getattr(node, "isRemote", False):  # its pid is another machine's: never open this one's by it
        raise NetlinkError("reach", node.name, 0, f"it runs on {node.server}: its shell there configures it")
    return Netlink.of_pid(node.pid) if node.inNamespace else Netlink.here()


class FabricIntf(Intf):
    """A Mininet interface set up over netlink: Mininet's Intf runs an `ifconfig` in the node's shell
    for each setting. Up, an address and deletion go through netlink; `ifconfig()` stays the shell's."""

    def config(self, mac: str | None = None, ip: str | None = None, ifconfig: str | None = None,
               up: bool = True, **_params: Any) -> dict[str, Any]:
        """The MAC was set when the pair was made; the fabric brings the interface up when it starts."""
        r: dict[str, Any] = {}
        self.setParam(r, "setMAC", mac=mac)
        self.setParam(r, "setIP", ip=ip)
        self.setParam(r, "ifconfig", ifconfig=ifconfig)
        return r

    def setIP(self, ipstr: str, prefixLen: int | None = None) -> str:
        ip, _, plen = ipstr.partition("/")
        if not plen:
            if prefixLen is None:
                raise ValueError(f"{self.name}: no prefix length for {ipstr}")
            plen = str(prefixLen)
        self.ip, self.prefixLen = ip, int(plen)
        with node_netlink(self.node) as nl:
            nl.add_address(self.name, f"{ip}/{plen}")
            nl.set_link(self.name, up=True)
        return ""

    def setMAC(self, macstr: str) -> str:
        self.mac = macstr
        with node_netlink(self.node) as nl:
            nl.set_link(self.name, mac=macstr)
        return ""

    def isUp(self, setUp: bool = False) -> bool:
        with node_netlink(self.node) as nl:
            if setUp:
                nl.set_link(self.name, up=True)
                return True
            return any(li.up for li in nl.links() if li.name == self.name)

    def delete(self) -> None:
        """Gone already if the fabric deleted its group; else deleted here, in the node's namespace."""
        link = self.link
        if not (isinstance(link, FabricLink) and link.deleted):
            try:
                nl = node_netlink(self.node)
            except NetlinkError:  # its node's namespace is gone, and the interface with it
                nl = None
            if nl is not None:
                with nl:
                    nl.delete_link(self.name)
        self.node.delIntf(self)
        self.link = None


class ChannelIntf(Intf):
    """A switch port with no kernel device: its link, to or between switches on other machines, is a
    channel the engine carries (emu.dataplane.channel); there is nothing to make, move or delete."""

    def config(self, mac: str | None = None, **_params: Any) -> dict[str, Any]:
        if mac:
            self.mac = mac
        return {}

    def MAC(self) -> str | None:  # noqa: N802 (Mininet's name)
        return self.mac

    def isUp(self, setUp: bool = False) -> bool:
        return True

    def delete(self) -> None:
        self.node.delIntf(self)
        self.link = None


class CutIntf(ChannelIntf):
    """A switch's end of a host's cable cut between machines (the host on one, its switch on another):
    its device is on the host's machine, in that machine's root namespace, where the engine worker
    that runs the host carries the cable's NIC and hands frames to the switch's machine over a channel.
    The switch's own machine has nothing of it; it goes with the host's namespace."""


def remote(node: Any) -> bool:
    """A node on another machine (Mininet's cluster edition: emu.cluster.remote)."""
    return bool(getattr(node, "isRemote", False))


class NoKernel:
    """A node with no kernel of its own (RunSettings.kernel False, on the fabric clock): no namespace, no
    shell, no interfaces; its links are the engine's alone (ChannelIntf). A host is then only what jobs
    run on it inside the engine; a switch only its place in the engine. What a fabric of hundreds of hosts
    need not pay for when its traffic is all the project's: a shell and namespace per node, a veth pair and
    two packet rings per link."""

    def startShell(self, mnopts: Any = None) -> None:  # noqa: N802 (Mininet's name)
        self.pid = None

    def mountPrivateDirs(self) -> None:  # noqa: N802
        pass

    def unmountPrivateDirs(self) -> None:  # noqa: N802
        pass

    def configDefault(self, **params: Any) -> None:  # noqa: N802
        pass

    def terminate(self) -> None:
        pass

    def _no_kernel(self, *args: Any, **kw: Any) -> Any:
        raise RuntimeError(f"{self.name} has no kernel: this fabric was built without the hosts' kernels "
                           "(kernel=False, for fabric-clock jobs); build it with kernel=True to run commands")

    cmd = sendCmd = popen = pexec = _no_kernel


def no_kernel(node: Any) -> bool:
    return isinstance(node, NoKernel)


class FabricLink(Link):
    """Link(node1, node2, rate='100G', delay='1us' | distance='50km', gw4=..., ...); `group`: the
    device group of its root-side end (FabricNet gives each fabric its own; 0: none)."""

    deleted = False  # set when its pair is gone (FabricNet deleted the fabric's group)
    in_group = False  # its end here is in the fabric's device group
    channel = False  # between switches, one on another machine: no kernel device (ChannelIntf)

    def __init__(self, node1, node2, port1=None, port2=None, intfName1=None, intfName2=None, **params):
        fabric = {k: params.pop(k) for k in FABRIC_KEYS if k in params}
        self.fabric = LinkParams.parse(**fabric)
        self.group = int(params.pop("group", 0))
        if port1 is None:
            port1 = node1.newPort()
        if port2 is None:
            port2 = node2.newPort()
        intfName1 = intfName1 or f"{node1.name}-eth{port1}"
        intfName2 = intfName2 or f"{node2.name}-eth{port2}"
        params.setdefault("addr1", mac_for(intfName1))
        params.setdefault("addr2", mac_for(intfName2))
        anchor = params.pop("anchor", None)  # a switch on the host's machine, for a cable cut between machines
        self.cut: tuple[Any, Any] | None = None  # (host, anchor): the cable's veth is made on the host's machine
        self.channel = remote(node1) or remote(node2)
        if no_kernel(node1) or no_kernel(node2):  # the engine's alone: no device on either end
            self.channel = True
            params["intf"] = ChannelIntf
        elif self.channel and (node1.inNamespace or node2.inNamespace) \
                and getattr(node1, "server", "localhost") != getattr(node2, "server", "localhost"):
            if anchor is None:
                raise LinkParamError(f"{node1.name} and {node2.name} are on different machines, and none of the "
                                     "host's machine's switches was named to carry its end of the cable")
            host = node1 if node1.inNamespace else node2
            self.cut, self.channel = (host, anchor), False
            host_cls = Intf if remote(host) else FabricIntf
            params["cls1"], params["cls2"] = (host_cls, CutIntf) if host is node1 else (CutIntf, host_cls)
        elif self.channel and (node1.inNamespace or node2.inNamespace):  # a host's cable, on its machine
            self.channel = False
            params["intf"] = Intf  # configured through the nodes' shells there
        elif self.channel:
            params["intf"] = ChannelIntf
        elif params.get("intf") in (None, Intf):  # Mininet passes its default, plain Intf
            params["intf"] = FabricIntf
        super().__init__(node1, node2, port1=port1, port2=port2, intfName1=intfName1, intfName2=intfName2, **params)

    def makeIntfPair(self, intfname1: str, intfname2: str, addr1: str | None = None, addr2: str | None = None,
                     node1: Any = None, node2: Any = None, deleteIntfs: bool = True) -> None:
        """Both ends in one netlink request from this namespace: an end whose node is in a namespace is
        placed straight there; the end here (a switch's) gets the jumbo MTU and the fabric's group. On
        another machine, Mininet's own way, through the host's shell there; a channel, nothing."""
        if self.channel:
            return
        if self.cut is not None:  # both ends on the host's machine: the switch's in the root namespace there
            host, anchor = self.cut
            if host is node1:
                Link.makeIntfPair(intfname1, intfname2, addr1, addr2, host, anchor, deleteIntfs=False)
            else:
                Link.makeIntfPair(intfname2, intfname1, addr2, addr1, host, anchor, deleteIntfs=False)
            return
        if remote(node1) or remote(node2):
            Link.makeIntfPair(intfname1, intfname2, addr1, addr2, node1, node2, deleteIntfs=False)
            return
        ends = [(intfname1, addr1, node1), (intfname2, addr2, node2)]
        if node1 is not None and node1.inNamespace and node2 is not None and not node2.inNamespace:
            ends.reverse()  # the request's own device is the one here, so the group covers it
        (name, mac, node), (peer, peer_mac, peer_node) = ends
        here = node is None or not node.inNamespace
        root_netlink().add_veth(
            name, peer, mac=mac or "", peer_mac=peer_mac or "",
            mtu=SWITCH_MTU if here else 0,
            peer_mtu=SWITCH_MTU if peer_node is None or not peer_node.inNamespace else 0,
            group=self.group if here else 0,
            peer_pid=peer_node.pid if peer_node is not None and peer_node.inNamespace else None,
            pid=None if here else node.pid)
        self.in_group = here and self.group > 0

    def delete(self) -> None:
        """Mininet deletes links before it stops switches: stop the engine first, so no worker
        holds a packet socket and ring on an interface the kernel is tearing down."""
        for intf in (self.intf1, self.intf2):
            engine = getattr(intf.node, "engine", None)
            if engine is not None:
                engine.stop()
        if self.deleted:
            self.intf1 = self.intf2 = None
            return
        super().delete()
