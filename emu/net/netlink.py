"""Netlink in any network namespace, through pyroute2: links, addresses, routes, neighbours,
offloads and sysctls, with no `ip` process.

Why this shape (measured here, docs/performance.md "Bring-up"):
- One rtnetlink socket per namespace, made in the namespace: a short-lived
  thread enters it (setns moves only the calling thread) and makes the
  sockets there; a socket stays in the namespace it was made in, so the
  caller then uses it from its own thread. pyroute2's own `netns=` forks a
  helper per namespace (about 30 ms each); this costs about 1.5 ms.
- A veth pair is made by one request from the root namespace with each end
  placed straight into its node's namespace (by pid or fd), its MAC, MTU and
  device group set in the same request: no move, no rename, no second call.
- A fabric's root-side ends share one device group, and one RTM_DELLINK of
  the group removes every pair in one kernel batch (one RCU grace period):
  deleting 160 pairs one by one takes about 3.5 s, by group 50 ms.
- Offloads are ethtool ioctls on a socket in the namespace; sysctls are
  files written by a thread inside it.

Errors are `NetlinkError`, naming the operation, the interface and the
kernel's reason.
"""

from __future__ import annotations

import ctypes
import errno as errno_mod
import fcntl
import ipaddress
import itertools
import os
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pyroute2 import IPRoute
from pyroute2 import netns as pr_netns
from pyroute2.netlink.exceptions import NetlinkError as _PyrNetlinkError

from emu.launch import held_signals

T = TypeVar("T")

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"
IFA_F_NODAD = 0x02
NUD_PERMANENT = 0x80
SIOCETHTOOL = 0x8946
ETHTOOL_GSTRINGS, ETHTOOL_GSSET_INFO, ETHTOOL_SFEATURES = 0x1B, 0x37, 0x3B  # linux/ethtool.h
ETH_SS_FEATURES = 4
_libc = ctypes.CDLL(None, use_errno=True)


class NetlinkError(RuntimeError):
    """The kernel refused a request: `op` on `ifname` (an interface, address or namespace), errno `errno`."""

    def __init__(self, op: str, ifname: str, errno: int, reason: str = "") -> None:
        self.op, self.ifname, self.errno = op, ifname, errno
        super().__init__(f"{op} {ifname}: {reason or os.strerror(errno)}")


def _raise(op: str, name: str, exc: BaseException) -> None:
    if isinstance(exc, _PyrNetlinkError):
        raise NetlinkError(op, name, exc.code, exc.args[1] if len(exc.args) > 1 else "") from None
    if isinstance(exc, OSError):
        raise NetlinkError(op, name, exc.errno or 0, exc.strerror or str(exc)) from None
    raise exc


def _libc_call(rc: int, what: str) -> None:
    """OSError naming `what` if a libc call returned non-zero."""
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _in_thread(fn: Callable[[], T], name: str) -> T:
    """fn() run by a fresh thread, its result or its exception handed back: namespace calls (setns,
    unshare) move only the calling thread, so they are made where nothing else runs."""
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=body, name=name)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


def _in_netns(nsfd: int | None, fn: Callable[[], T]) -> T:
    """fn() run by a thread inside the namespace `nsfd` (None: here); what it makes stays there."""
    if nsfd is None:
        return fn()

    def inside() -> T:
        _libc_call(_libc.setns(nsfd, CLONE_NEWNET), "setns")
        return fn()

    return _in_thread(inside, "emu-netns")


def _given(**attrs: Any) -> dict[str, Any]:
    """The attributes given (not None, "" or 0, which mean "the kernel's default"): what a request carries."""
    return {k: v for k, v in attrs.items() if v not in (None, "", 0)}


_groups = itertools.count(1)


def new_group() -> int:
    """A device group no other live user of this module has: this process's pid in the low 22 bits
    (pid_max is at most 2^22), a count of the groups it has taken in the next 8, bit 30 set (group 0
    is every interface's default). Deleting a group deletes its interfaces in one kernel batch."""
    return 0x4000_0000 | (next(_groups) % 255 + 1) << 22 | os.getpid()


def group_pid(group: int) -> int | None:
    """The pid that took device group `group` by new_group (who owns its interfaces), None for a group
    new_group does not make (0, everyone's default, or one set by hand)."""
    return group & 0x3F_FFFF if group & 0x4000_0000 else None


def _ethtool(fd: int, ifname: str, buf: ctypes.Array) -> None:
    """One SIOCETHTOOL request on `ifname`; the kernel reads and writes `buf` in place."""
    fcntl.ioctl(fd, SIOCETHTOOL, struct.pack("16sP16x", ifname.encode(), ctypes.addressof(buf)))


_FEATURES: list[str] = []


def _feature_names(fd: int, ifname: str) -> list[str]:
    """The kernel's netdev feature names, by bit (the same for every device; read once)."""
    if not _FEATURES:
        info = ctypes.create_string_buffer(struct.pack("IIQI", ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_FEATURES, 0))
        _ethtool(fd, ifname, info)
        count = struct.unpack_from("I", info, 16)[0]
        strings = ctypes.create_string_buffer(struct.pack("III", ETHTOOL_GSTRINGS, ETH_SS_FEATURES, count)
                                              + bytes(32 * count))
        _ethtool(fd, ifname, strings)
        raw = strings.raw[12:12 + 32 * count]
        _FEATURES[:] = [raw[i:i + 32].split(b"\0", 1)[0].decode() for i in range(0, len(raw), 32)]
    return _FEATURES


@dataclass(frozen=True)
class LinkInfo:
    name: str
    index: int
    kind: str  # "veth", "bridge", ... ("" for a device without rtnl link ops, e.g. a NIC)
    group: int
    up: bool


class _Held:
    """pyroute2's IPRoute with every call made under held_signals(): a SIGTERM raised in the middle of
    a request would leave its asyncio loop broken, and the tear-down needs it."""

    def __init__(self, ipr: IPRoute) -> None:
        self._ipr = ipr

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._ipr, name)
        if not callable(attr):
            return attr

        def held(*args: Any, **kw: Any) -> Any:
            with held_signals():
                out = attr(*args, **kw)
                # A dump is read lazily: read it whole here, inside the hold.
                return list(out) if hasattr(out, "__next__") else out

        return held


class Netlink:
    """An rtnetlink socket (pyroute2) and an ioctl socket inside one network namespace.

    `Netlink.here()` is the caller's namespace, `Netlink.of_pid(pid)` a process's (a Mininet
    node's), `Netlink.of_name(name)` one made by `ip netns add` or `create_namespace`. Close it
    when done (or use `with`): an open socket keeps its namespace alive after its last process.
    """

    def __init__(self, nsfd: int | None, label: str) -> None:
        self.nsfd = nsfd
        self.label = label
        self._index: dict[str, int] = {}
        try:
            nl, io = _in_netns(nsfd, lambda: (socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 0),
                                              socket.socket(socket.AF_INET, socket.SOCK_DGRAM)))
        except OSError as exc:
            self._close_fd()
            raise NetlinkError("enter namespace", label, exc.errno or 0, exc.strerror or str(exc)) from None
        self._io = io
        with held_signals():
            self.ipr = _Held(IPRoute(use_socket=nl))

    @classmethod
    def here(cls) -> Netlink:
        return cls(None, "(this namespace)")

    @classmethod
    def of_pid(cls, pid: int) -> Netlink:
        try:
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise NetlinkError("open namespace of pid", str(pid), exc.errno or 0) from None
        return cls(fd, f"namespace of pid {pid}")

    @classmethod
    def of_name(cls, name: str) -> Netlink:
        try:
            fd = os.open(os.path.join(NETNS_DIR, name), os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise NetlinkError("open namespace", name, exc.errno or 0) from None
        return cls(fd, f"namespace {name}")

    def _close_fd(self) -> None:
        if self.nsfd is not None:
            os.close(self.nsfd)
            self.nsfd = None

    def close(self) -> None:
        ipr = getattr(self, "ipr", None)
        if ipr is not None:
            ipr.close()
            self.ipr = None  # type: ignore[assignment]
        io = getattr(self, "_io", None)
        if io is not None:
            io.close()
            self._io = None  # type: ignore[assignment]
        self._close_fd()

    def __enter__(self) -> Netlink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- links ---------------------------------------------------------------------------

    def index(self, ifname: str) -> int:
        """The interface's index in this namespace. A name not seen yet reads every interface's in
        one dump (one request, not one per name); names here are ours and not reused while we hold
        them, and a deletion forgets its name."""
        idx = self._index.get(ifname)
        if idx is None:
            self._index = {li.name: li.index for li in self.links()}
            idx = self._index.get(ifname)
            if idx is None:
                raise NetlinkError("look up", ifname, errno_mod.ENODEV, f"no interface {ifname} in {self.label}")
        return idx

    def _on(self, op: str, ifname: str, request: Callable[[int], Any]) -> Any:
        """request(index of ifname); if the kernel has no such index (the name was deleted and made
        again by someone else since it was cached), once more with the index read afresh."""
        for attempt in (0, 1):
            try:
                return request(self.index(ifname))
            except _PyrNetlinkError as exc:
                if exc.code == errno_mod.ENODEV and attempt == 0 and ifname in self._index:
                    self._index.clear()
                    continue
                _raise(op, ifname, exc)
        raise AssertionError("unreachable")

    def add_veth(self, name: str, peer: str, *, mac: str = "", peer_mac: str = "", mtu: int = 0,
                 peer_mtu: int = 0, group: int = 0, peer_pid: int | None = None,
                 peer_fd: int | None = None, pid: int | None = None) -> None:
        """A veth pair, `name` here (or in the namespace of `pid`) and `peer` in the namespace of
        `peer_pid` (or of the fd `peer_fd`; neither: here too), both down; MACs, MTUs (bytes) and
        `name`'s device group set in the one request."""
        peer_attrs = {"ifname": peer, **_given(address=peer_mac, mtu=peer_mtu, net_ns_pid=peer_pid,
                                               net_ns_fd=peer_fd if peer_pid is None else None)}
        attrs = {"ifname": name, "kind": "veth", "peer": peer_attrs,
                 **_given(address=mac, mtu=mtu, group=group, net_ns_pid=pid)}
        try:
            self.ipr.link("add", **attrs)
        except _PyrNetlinkError as exc:
            _raise(f"create veth pair {name} <->", peer, exc)

    def add_bridge(self, name: str, *, mtu: int = 0, group: int = 0) -> None:
        try:
            self.ipr.link("add", ifname=name, kind="bridge", **_given(mtu=mtu, group=group))
        except _PyrNetlinkError as exc:
            _raise("create bridge", name, exc)

    def set_link(self, ifname: str, *, up: bool | None = None, mtu: int = 0, mac: str = "",
                 master: str = "") -> None:
        """State, MTU (bytes), MAC and bridge master of one interface, in one request."""
        attrs = _given(state=None if up is None else "up" if up else "down", mtu=mtu, address=mac,
                       master=self.index(master) if master else None)
        self._on("set link", ifname, lambda idx: self.ipr.link("set", index=idx, **attrs))

    def move_link(self, ifname: str, namespace: str) -> None:
        """Move one interface into the namespace `namespace` (made by create_namespace). The kernel
        takes it down and resets its per-namespace settings (IPv6) to that namespace's defaults."""
        try:
            fd = os.open(os.path.join(NETNS_DIR, namespace), os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise NetlinkError("open namespace", namespace, exc.errno or 0) from None
        try:
            self._on("move link", ifname, lambda idx: self.ipr.link("set", index=idx, net_ns_fd=fd))
        finally:
            os.close(fd)
            self._index.pop(ifname, None)

    def delete_link(self, ifname: str, *, missing_ok: bool = True) -> bool:
        """Delete one interface (a veth takes its peer with it); whether it was there."""
        try:
            self._on("delete link", ifname, lambda idx: self.ipr.link("del", index=idx))
        except NetlinkError as exc:
            if missing_ok and exc.errno == errno_mod.ENODEV:
                return False
            raise
        finally:
            self._index.pop(ifname, None)
        return True

    def delete_group(self, group: int) -> bool:
        """Delete every interface of device group `group` here in one kernel batch (veth peers go with
        them, wherever they are); whether there was any."""
        if group <= 0:
            raise ValueError("device group 0 is every interface's default: refusing to delete it")
        try:
            self.ipr.link("del", group=group)
        except _PyrNetlinkError as exc:
            if exc.code == errno_mod.ENODEV:
                return False
            _raise("delete device group", str(group), exc)
        self._index.clear()
        return True

    def links(self) -> list[LinkInfo]:
        out = []
        for msg in self.ipr.get_links():
            info = msg.get_attr("IFLA_LINKINFO")
            kind = info.get_attr("IFLA_INFO_KIND") if info is not None else ""
            out.append(LinkInfo(name=msg.get_attr("IFLA_IFNAME"), index=msg["index"], kind=kind or "",
                                group=msg.get_attr("IFLA_GROUP") or 0, up=bool(msg["flags"] & 1)))
        return out

    # -- addresses, routes, neighbours ---------------------------------------------------

    def add_address(self, ifname: str, cidr: str) -> None:
        """Address `cidr` ("10.0.0.2/24", "fdfa:0:1::2/64") on `ifname`, replacing it if present;
        IPv6 without duplicate address detection (the fabric's addresses are planned unique)."""
        iface = ipaddress.ip_interface(cidr)
        kw: dict[str, Any] = {}
        if iface.version == 6:
            kw["flags"] = IFA_F_NODAD
        self._on(f"add address {cidr} on", ifname, lambda idx: self.ipr.addr(
            "replace", index=idx, address=str(iface.ip), prefixlen=iface.network.prefixlen, **kw))

    def add_route(self, dst: str, gateway: str, ifname: str) -> None:
        """Route `dst` ("10.1.0.0/16", "default", "::/0") via `gateway` out of `ifname`, replacing any."""
        gw = ipaddress.ip_address(gateway.split("/")[0])
        if dst in ("default", ""):
            dst = "0.0.0.0/0" if gw.version == 4 else "::/0"
        net = ipaddress.ip_network(dst, strict=False)
        family = socket.AF_INET if gw.version == 4 else socket.AF_INET6
        self._on(f"add route {dst} via {gw} on", ifname, lambda idx: self.ipr.route(
            "replace", family=family, dst=str(net.network_address), dst_len=net.prefixlen, gateway=str(gw), oif=idx))

    def add_neighbour(self, ifname: str, ip: str, mac: str) -> None:
        """A permanent neighbour entry: `ip` is at `mac` on `ifname` (no resolution on the wire)."""
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        self._on(f"add neighbour {ip} at {mac} on", ifname, lambda idx: self.ipr.neigh(
            "replace", family=family, dst=ip, lladdr=mac, ifindex=idx, state=NUD_PERMANENT))

    def addresses(self, family: int = 4) -> dict[str, list[str]]:
        """Global addresses per interface (no prefix length), in the kernel's order."""
        names = {li.index: li.name for li in self.links()}
        out: dict[str, list[str]] = {}
        fam = socket.AF_INET if family == 4 else socket.AF_INET6
        for msg in self.ipr.get_addr(family=fam):
            if msg["scope"] != 0:  # RT_SCOPE_UNIVERSE: not link or host scope
                continue
            out.setdefault(names.get(msg["index"], str(msg["index"])), []).append(msg.get_attr("IFA_ADDRESS"))
        return out

    # -- offloads and sysctls ------------------------------------------------------------

    def offloads_off(self, ifname: str) -> None:
        """Every TX checksum, segmentation and GRO feature off (ethtool's `tx off tso off gso off gro
        off`, and the segmentation kinds newer kernels add): an engine reading the wire would otherwise
        get 64 KB super-frames and packets whose checksums the NIC was to fill in."""
        names = _feature_names(self._io.fileno(), ifname)
        words = (len(names) + 31) // 32
        valid = [0] * words
        for bit, name in enumerate(names):
            if name.startswith(("tx-checksum", "rx-gro")) or name.endswith("segmentation"):
                valid[bit // 32] |= 1 << (bit % 32)
        blocks = b"".join(struct.pack("II", v, 0) for v in valid)  # requested 0: off
        buf = ctypes.create_string_buffer(struct.pack("II", ETHTOOL_SFEATURES, words) + blocks)
        try:
            _ethtool(self._io.fileno(), ifname, buf)
        except OSError as exc:
            raise NetlinkError("turn offloads off on", ifname, exc.errno or 0) from None

    def sysctl(self, values: dict[str, str | int]) -> None:
        """Write this namespace's sysctls under /proc/sys/net ({"ipv6/conf/all/accept_dad": 0, ...}:
        paths, as an interface name may hold a dot)."""
        def write() -> None:
            for key, value in values.items():
                path = "/proc/sys/net/" + key
                with open(path, "w") as f:
                    f.write(str(value))

        try:
            _in_netns(self.nsfd, write)
        except OSError as exc:
            raise NetlinkError("set sysctl in", self.label, exc.errno or 0, str(exc)) from None


# -- named namespaces (the benchmarks' and tests' bare labs) ------------------------------


def create_namespace(name: str) -> None:
    """A namespace called `name` as `ip netns add` makes it (bound at /run/netns/NAME), made by a
    thread that unshares its own network namespace: no process is forked."""
    path = os.path.join(NETNS_DIR, name)
    existed = os.path.exists(path)

    def make() -> None:
        _libc_call(_libc.unshare(CLONE_NEWNET), "unshare")
        pr_netns.attach(name, "thread-self")

    try:
        _in_thread(make, "emu-netns-create")
    except OSError as exc:
        if not existed:  # a half-made mount point of ours; never someone else's namespace
            try:
                os.unlink(path)
            except OSError:
                pass
        raise NetlinkError("create namespace", name, exc.errno or 0, str(exc)) from None


def remove_namespace(name: str) -> bool:
    """Unbind /run/netns/NAME; the namespace and its interfaces go with its last process and socket."""
    path = os.path.join(NETNS_DIR, name)
    if not os.path.exists(path):
        return False
    pr_netns.remove(name)
    return True


def namespace_names() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_DIR))
    except OSError:
        return []


def namespace_pids(name: str) -> list[int]:
    """Processes inside namespace `name` (what `ip netns pids` prints), found by its inode."""
    try:
        st = os.stat(os.path.join(NETNS_DIR, name))
    except OSError:
        return []
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                s = os.stat(f"/proc/{p}/ns/net")
            except OSError:
                continue
            if (s.st_dev, s.st_ino) == (st.st_dev, st.st_ino):
                out.append(int(p))
    return out
