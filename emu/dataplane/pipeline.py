"""The native switch pipeline: parse, classify, route, SRv6, traffic manager, egress.

One Switch object per fabric switch, driven by a loop (virtual in tests,
wall clock in a worker). Frames come in through `ingress` (off a wire) or
`from_host` (a kernel host's frame, which first crosses the model of the
host NIC and its link). Frames leave through each port's Transmitter, whose
`deliver` the worker wires to a peer switch or to a socket.

Parsing works on the received bytes with fixed offsets; the frame is copied
once into a bytearray when it is rewritten for forwarding. A malformed frame
is dropped and counted on its ingress port; nothing here raises on input.
"""

from __future__ import annotations

import ipaddress
import math
import random
import struct
import zlib
from collections.abc import Callable
from functools import partial
from typing import Any

from emu import packet as pk
from emu.control.model import SwitchTables
from emu.dataplane.buffer import SharedBuffer
from emu.dataplane.pipe import NQ, Transmitter, pause_ps
from emu.dataplane.spec import PortSpec, SwitchSpec
from emu.dataplane.tables import GroupState, Lpm
from emu.simtime import rate_of, ser_ps, to_ps, to_s
from emu.units import pfc_headroom

CONTROL_TC = 7
PFC_XOFF_QUANTA = 0xFFFF
TRIMMED = -1  # the ingress port a trimmed header is queued with: it is not charged to the buffer
SOLICITED_NODE = int(ipaddress.IPv6Address("ff02::1:ff00:0"))
IPV4 = pk.ETH_P_IPV4
IPV6 = pk.ETH_P_IPV6
_U32 = struct.Struct("!I")
PROBE_ETHERTYPE = 0x88B5  # IEEE 802 local experimental
PROBE_DST = bytes.fromhex("0180c200000e")  # link-local: never forwarded
PROBE_MAGIC = b"EMUP"
_PROBE = struct.Struct("!4sIIBq")  # magic, probe id, sequence, reply flag, send time (the schedule's, ps)


def _csum_replace(hc: int, old: int, new: int) -> int:
    """RFC 1624 incremental update of a 16-bit ones'-complement checksum."""
    s = (~hc & 0xFFFF) + (~old & 0xFFFF) + new
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def traffic_class(dscp_tc: list[int], frame: bytes) -> int:
    """The class a frame is queued in by its DSCP (ARP: network control; anything else: 0)."""
    n = len(frame)
    if n < 15:
        return 0
    et = frame[12] << 8 | frame[13]
    if et == IPV4 and n > 15:  # the common case first
        return dscp_tc[frame[15] >> 2]
    l3 = 14
    if et == pk.ETH_P_VLAN and n >= 19:
        et = frame[16] << 8 | frame[17]
        l3 = 18
    if et == IPV4 and n > l3 + 1:
        return dscp_tc[frame[l3 + 1] >> 2]
    if et == IPV6 and n > l3 + 1:
        return dscp_tc[((frame[l3] & 0x0F) << 2) | (frame[l3 + 1] >> 6)]
    if et == pk.ETH_P_ARP:
        return CONTROL_TC
    return 0


class Port:
    """A switch port: its egress link, its addresses, and its counters."""

    __slots__ = (
        "index", "name", "mac", "peer_kind", "peer_mac", "tx", "nic", "ip4", "ip6",
        "rx_packets", "rx_bytes", "drops", "drops_tc", "ecn_marked", "pfc_tx", "pfc_rx",
        "up", "rate_bps", "delay_ps", "q_enq", "q_over_kmax", "trimmed",
    )

    def __init__(self, index: int, name: str, mac: bytes, peer_kind: str) -> None:
        self.index = index
        self.name = name
        self.mac = mac
        self.peer_kind = peer_kind
        self.peer_mac = b""
        self.tx: Transmitter = None  # type: ignore[assignment]
        self.nic: Transmitter | None = None
        self.ip4: dict[int, bytes] = {}
        self.ip6: dict[int, bytes] = {}
        self.rx_packets = 0
        self.rx_bytes = 0
        self.drops: dict[str, int] = {}
        self.drops_tc = [0] * NQ
        self.q_enq = [0] * NQ  # IP packets queued where ECN is on, and how many found it past Kmax
        self.q_over_kmax = [0] * NQ
        self.ecn_marked = 0
        self.trimmed = [0] * NQ  # by the traffic class the packet had before it was cut
        self.pfc_tx = 0
        self.pfc_rx = 0
        self.up = True
        self.rate_bps = 0  # whole bit/s
        self.delay_ps = 0

    def drop(self, reason: str, tc: int = -1) -> None:
        self.drops[reason] = self.drops.get(reason, 0) + 1
        if tc >= 0:
            self.drops_tc[tc] += 1


class Switch:
    """The pipeline, the reference core's (emu.dataplane.core). The compiled twin (emu.dataplane.native's
    NativeSwitch) subclasses it: it is built by this __init__ and load_tables from the classes named
    here, runs the forwarding path compiled, and hands everything else (ARP, NDP, ICMP, probes, SRv6
    segments and policies, statistics) to these methods, which read its state through the same names."""

    Port = Port
    Transmitter = Transmitter
    SharedBuffer = SharedBuffer
    Lpm = Lpm
    GroupState = GroupState

    def __init__(self, spec: SwitchSpec, loop: Any) -> None:
        self.spec = spec
        self.name = spec.name
        self.loop = loop
        qos = spec.qos
        self.dscp_tc = list(qos.dscp_to_tc)
        self.lossless = [q in qos.lossless for q in range(NQ)]
        self.pfc = qos.pfc
        self.trim = qos.trim
        self.trimmable = [False] * 64  # by DSCP
        if qos.trim is not None:
            for d in qos.trim.classes:
                self.trimmable[d] = True
                self.lossless[self.dscp_tc[d]] = False  # a trimmed class is lossy by design: no PFC
        self.ecn: list[tuple[int, int, float] | None] = [None] * NQ
        for tc, e in qos.ecn.items():
            self.ecn[tc] = (e.kmin, e.kmax, e.pmax)
        self.rng = random.Random(spec.seed)
        self.hash_mult = self.rng.getrandbits(32) | 1
        nports = len(spec.ports)
        self.cpu = nports  # index of the switch's own (CPU) port in buffer accounting
        self.ports: list[Port] = []
        self.local4: dict[int, bytes] = {}
        self.local6: dict[int, bytes] = {}
        for ps in spec.ports:
            p = self.Port(ps.index, ps.ifname, pk.mac_bytes(ps.mac), ps.peer_kind)
            if ps.peer_mac:
                p.peer_mac = pk.mac_bytes(ps.peer_mac)
            p.rate_bps = rate_of(ps.rate_bps)
            p.delay_ps = to_ps(ps.delay_s)  # the cable's delay, rounded once, where the spec is read
            for a in ps.ipv4:
                ip = ipaddress.IPv4Interface(a).ip
                p.ip4[int(ip)] = ip.packed
            for a in ps.ipv6:
                ip = ipaddress.IPv6Interface(a).ip
                p.ip6[int(ip)] = ip.packed
            self.local4.update(p.ip4)
            self.local6.update(p.ip6)
            handover = ps.peer_kind == "p4"  # to a P4 switch beside the engine: no link, no pacing
            p.tx = self.Transmitter(
                loop,
                name=f"{self.name}:{ps.ifname}",
                rate_bps=math.inf if handover else p.rate_bps,
                delay_ps=0 if handover else p.delay_ps,
                deliver=_unwired,
                on_dequeue=self._on_dequeue(ps.index),
                strict=qos.strict,
                weights=qos.weights,
                limit_bytes=self.egress_limit_bytes,
            )
            if ps.peer_kind == "host":
                p.nic = self.Transmitter(
                    loop,
                    name=f"{self.name}:{ps.ifname}:host-nic",
                    rate_bps=p.rate_bps,
                    delay_ps=p.delay_ps,
                    deliver=self.wire_target(ps.index),
                    strict=qos.strict,
                    weights=qos.weights,
                    limit_bytes=qos.host_nic_limit,
                )
            self.ports.append(p)
        self.loopback4 = ipaddress.IPv4Address(spec.loopback4).packed if spec.loopback4 else b""
        self.loopback6 = ipaddress.IPv6Address(spec.loopback6).packed if spec.loopback6 else b""
        if self.loopback4:
            self.local4[int.from_bytes(self.loopback4, "big")] = self.loopback4
        if self.loopback6:
            self.local6[int.from_bytes(self.loopback6, "big")] = self.loopback6
        headroom = [ps.headroom or self.default_headroom(ps.index) for ps in spec.ports] + [0]
        # The shared pool is buffer_per_port x ports; PFC headroom for the links as cabled and the
        # reserves come on top, so a switch with long-haul links is a deep-buffer switch, as BAG's are.
        carve = sum(self.default_headroom(i) for i in range(nports)) + qos.reserve * (nports + 1) * NQ
        self.mmu = self.SharedBuffer(
            nports=nports + 1,
            size=qos.buffer_per_port * max(1, nports) + carve,
            headroom=headroom,
            reserve=qos.reserve,
            shift=qos.alpha_shift,
        )
        self.probe_rtts: dict[int, list[int]] = {}  # picoseconds
        self.load_tables()

    # -- tables ---------------------------------------------------------------

    def load_tables(self, tables: SwitchTables | None = None) -> None:
        """(Re)build the lookup structures; a running switch takes new tables between two packets."""
        t = tables if tables is not None else self.spec.tables
        t.validate()
        for g in t.groups:
            for m in g.members:
                if m.port >= len(self.ports):
                    raise ValueError(f"{self.name}: group {g.id} uses port {m.port} it does not have")
        self.tables = t
        macs = [p.mac for p in self.ports]
        self.groups = {g.id: self.GroupState(g, macs) for g in t.groups}
        self.lpm4 = self.Lpm(32)
        self.lpm6 = self.Lpm(128)
        for r in t.routes:
            g = self.groups[r.group]
            (self.lpm6 if ":" in r.prefix else self.lpm4).add(r.prefix, g)
        self.sids: dict[int, tuple[str, GroupState | None]] = {
            int(ipaddress.IPv6Address(s.sid)): (s.action, self.groups.get(s.group) if s.group is not None else None)
            for s in t.my_sids
        }
        self.encap = self.Lpm(128)
        for e in t.encaps:
            segs = [ipaddress.IPv6Address(s).packed for s in e.segments]
            self.encap.add(e.prefix, (ipaddress.IPv6Address(e.source).packed, segs))
        self.has_encap = len(self.encap) > 0
        for p in self.ports:
            if not p.up:
                for g in self.groups.values():
                    g.set_port_state(p.index, False)

    def wire_target(self, port: int) -> Any:
        """What a transmitter delivers to for frames that enter this switch by `port`."""
        return partial(self.ingress, port)

    def wire(self, port: int, peer: Switch, peer_port: int) -> None:
        """Port `port`'s link ends at `peer`'s port `peer_port`, in this process: its frames enter there."""
        self.ports[port].tx.deliver = peer.wire_target(peer_port)

    def default_headroom(self, port: int) -> int:
        ps = self.spec.ports[port]
        return pfc_headroom(ps.rate_bps, ps.delay_s)

    # -- ports ------------------------------------------------------------------

    def set_port_up(self, port: int, up: bool) -> None:
        p = self.ports[port]
        p.up = up
        p.tx.set_up(up)
        if p.nic is not None:
            p.nic.set_up(up)
        for g in self.groups.values():
            g.set_port_state(port, up)

    def degrade_port(self, port: int, *, loss: float, rate_bps: float, delay_s: float, seed: int = 0) -> None:
        """A degraded link (fabric units; all zero: as built): this port's wire, and the host's NIC
        model where it faces a host, so both directions. Loss is seeded from the switch, the port and `seed`."""
        p = self.ports[port]
        for i, tx in enumerate((p.tx, p.nic)):
            if tx is not None:
                base = self.spec.seed * 1_000_003 + 2 * port + i
                # A user's seed goes in as text, which Python's random hashes (SHA-512): mixed into the
                # integer as high bits, as it was, seed 1 on port 1 drew what seed 0 drew (Mersenne
                # Twister seeds [2] and [2, 1] start alike). Seed 0 keeps the integer: the same frames.
                _degrade(tx, f"{base}/{seed}" if seed else base,
                         loss=loss, rate_bps=rate_bps, delay_s=delay_s)

    def from_host(self, port: int, t: int, frame: bytes) -> None:
        """A frame the host's kernel sent: it first crosses the host NIC and the link."""
        p = self.ports[port]
        nic = p.nic
        if nic is None or not p.up:
            p.drop("link_down")
            return
        tc = traffic_class(self.dscp_tc, frame)
        if not nic.enqueue(t, tc, frame):
            p.drop("host_nic_overflow", tc)

    def classify(self, frame: bytes) -> int:
        return traffic_class(self.dscp_tc, frame)

    # The shared buffer limits egress queues; a wire box's queues are bounded by their own size.
    egress_limit_bytes = 0

    def _on_dequeue(self, port: int) -> Callable[..., Any] | None:
        """What a port's transmitter calls as a frame leaves: buffer release, PFC XON."""
        return partial(self._dequeued, port)

    # -- ingress pipeline -------------------------------------------------------------

    def ingress(self, port: int, t: int, frame: bytes) -> None:
        p = self.ports[port]
        n = len(frame)
        p.rx_packets += 1
        p.rx_bytes += n
        if not p.up:
            p.drop("link_down")
            return
        if n < 14:
            p.drop("malformed")
            return
        et = frame[12] << 8 | frame[13]
        l3 = 14
        if et == pk.ETH_P_VLAN:
            if n < 18:
                p.drop("malformed")
                return
            et = frame[16] << 8 | frame[17]
            l3 = 18
        if et == PROBE_ETHERTYPE:
            self._probe(p, t, frame, l3)
            return
        if et == pk.ETH_P_MAC_CONTROL:
            times = pk.parse_pfc(frame, l3)
            if times is None:
                p.drop("malformed")
                return
            p.pfc_rx += 1
            p.tx.pause(t, times)
            return
        dst = frame[0:6]
        if dst != p.mac and not frame[0] & 1:
            p.drop("not_for_us")
            return
        if et == IPV4:
            self._ipv4(p, t, frame, l3)
        elif et == IPV6:
            self._ipv6(p, t, frame, l3, 0)
        elif et == pk.ETH_P_ARP:
            self._arp(p, t, frame, l3)
        else:
            p.drop("unknown_ethertype")

    # -- link probes: the control plane's cable measurement ---------------------------------

    def send_probe(self, t: int, port: int, probe_id: int, seq: int) -> None:
        """A timestamped probe on the uncongested top queue; the peer switch reflects it."""
        p = self.ports[port]
        body = _PROBE.pack(PROBE_MAGIC, probe_id, seq, 0, t)
        frame = PROBE_DST + p.mac + PROBE_ETHERTYPE.to_bytes(2, "big") + body
        self._enqueue(t, port, CONTROL_TC, frame + bytes(60 - len(frame)), self.cpu)

    def _probe(self, p: Port, t: int, frame: bytes, l3: int) -> None:
        if len(frame) < l3 + _PROBE.size:
            p.drop("malformed")
            return
        magic, probe_id, seq, reply, sent = _PROBE.unpack_from(frame, l3)
        if magic != PROBE_MAGIC:
            p.drop("malformed")
            return
        if not reply:
            body = _PROBE.pack(PROBE_MAGIC, probe_id, seq, 1, sent)
            out = PROBE_DST + p.mac + PROBE_ETHERTYPE.to_bytes(2, "big") + body
            self._enqueue(t, p.index, CONTROL_TC, out + bytes(60 - len(out)), self.cpu)
            return
        self.probe_rtts.setdefault(probe_id, []).append(t - sent)

    def _arp(self, p: Port, t: int, frame: bytes, l3: int) -> None:
        if len(frame) < l3 + 28:
            p.drop("malformed")
            return
        op = frame[l3 + 6] << 8 | frame[l3 + 7]
        target = frame[l3 + 24 : l3 + 28]
        if op != 1 or not self._answers_for(p, int.from_bytes(target, "big"), p.ip4, self.lpm4):
            return
        reply = pk.arp_reply(p.mac, target, frame[l3 + 8 : l3 + 14], frame[l3 + 14 : l3 + 18])
        self._enqueue(t, p.index, CONTROL_TC, reply, self.cpu)

    @staticmethod
    def _answers_for(p: Port, target: int, own: dict[int, bytes], lpm: Lpm) -> bool:
        """Our own address, or (proxy ARP / NDP) one routed out of another port.

        Hosts on one leaf share a subnet but the fabric is routed: the leaf
        answers for a neighbour so that their traffic crosses it too.
        """
        if target in own:
            return True
        g = lpm.lookup(target)
        return g is not None and g.n > 0 and all(port != p.index for port, _ in g.slots)

    def _flow_hash(self, frame: bytes, src_off: int, l4: int, proto: int, src_len: int) -> int:
        """CRC-32 of the 5-tuple, then a per-switch odd multiplier. CRC is linear, so CRCs that
        differ only in their seed differ by a constant XOR, and every switch would pick the same
        slot for a flow (ECMP polarisation); the multiplication breaks that."""
        h = zlib.crc32(frame[src_off : src_off + src_len], proto)
        if proto == 17 or proto == 6:
            h = zlib.crc32(frame[l4 : l4 + 4], h)
        return ((h * self.hash_mult) & 0xFFFFFFFF) >> 8

    def _ipv4(self, p: Port, t: int, frame: bytes, l3: int) -> None:
        n = len(frame)
        if n < l3 + 20:
            p.drop("malformed")
            return
        vihl = frame[l3]
        ihl = (vihl & 0x0F) * 4
        tot = frame[l3 + 2] << 8 | frame[l3 + 3]
        if vihl >> 4 != 4 or ihl < 20 or tot < ihl or n < l3 + tot:
            p.drop("malformed")
            return
        dst = _U32.unpack_from(frame, l3 + 16)[0]
        if dst in self.local4:
            self._local4(p, t, frame, l3, ihl, tot)
            return
        ttl = frame[l3 + 8]
        if ttl <= 1:
            p.drop("ttl_expired")
            src = next(iter(p.ip4.values()), self.loopback4)
            if src:
                body = b"\x00" * 4 + bytes(frame[l3 : l3 + ihl + 8])
                self._originate(t, pk.icmp4(src, frame[l3 + 12 : l3 + 16], 11, 0, body), False)
            return
        g = self.lpm4.lookup(dst)
        if g is None:
            p.drop("no_route")
            return
        if g.n == 1:
            hop = g.slots[0]
        else:
            hop = g.pick(0 if g.spray else self._flow_hash(frame, l3 + 12, l3 + ihl, frame[l3 + 9], 8))
        if hop is None:
            p.drop("no_live_nexthop")
            return
        out_port, l2 = hop
        out = bytearray(frame) if n == l3 + tot else bytearray(frame[: l3 + tot])
        out[0:12] = l2
        out[l3 + 8] = ttl - 1
        c = (out[l3 + 10] << 8 | out[l3 + 11]) + 0x100
        c = (c & 0xFFFF) + (c >> 16)
        out[l3 + 10] = c >> 8
        out[l3 + 11] = c & 0xFF
        self._enqueue(t, out_port, self.dscp_tc[frame[l3 + 1] >> 2], out, p.index, l3, 4)

    def _local4(self, p: Port, t: int, frame: bytes, l3: int, ihl: int, tot: int) -> None:
        if frame[l3 + 9] == pk.IPPROTO_ICMP and tot >= ihl + 8 and frame[l3 + ihl] == 8:
            body = bytes(frame[l3 + ihl + 4 : l3 + tot])
            self._originate(t, pk.icmp4(frame[l3 + 16 : l3 + 20], frame[l3 + 12 : l3 + 16], 0, 0, body), False)
        else:
            p.drop("to_switch")

    def _ipv6(self, p: Port, t: int, frame: bytes, l3: int, depth: int) -> None:
        n = len(frame)
        if n < l3 + 40 or frame[l3] >> 4 != 6:
            p.drop("malformed")
            return
        plen = frame[l3 + 4] << 8 | frame[l3 + 5]
        if n < l3 + 40 + plen:
            p.drop("malformed")
            return
        dst = int.from_bytes(frame[l3 + 24 : l3 + 40], "big")
        sid = self.sids.get(dst)
        out: bytearray | None = None
        via = None
        if sid is not None:
            r = self._srv6_sid(p, t, frame, l3, plen, sid, depth)
            if r is None:
                return
            out, dst, via = r
        elif dst in self.local6 or (dst >> 24) == (SOLICITED_NODE >> 24):
            self._local6(p, t, frame, l3, plen, dst)
            return
        elif frame[0] & 1:
            p.drop("multicast")
            return
        hlim = frame[l3 + 7]
        if hlim <= 1:
            p.drop("ttl_expired")
            src = next(iter(p.ip6.values()), self.loopback6)
            if src:
                body = b"\x00" * 4 + bytes(frame[l3 : l3 + min(40 + plen, 1184)])
                self._originate(t, pk.icmp6(src, frame[l3 + 8 : l3 + 24], 3, 0, body), True)
            return
        if out is None:
            if self.has_encap:
                pol = self.encap.lookup(dst)
                if pol is not None:
                    out, dst = self._h_encaps(frame, l3, plen, pol)
            if out is None:
                out = bytearray(frame[: l3 + 40 + plen])
        g = via or self.lpm6.lookup(dst)
        if g is None:
            p.drop("no_route")
            return
        if g.n == 1:
            hop = g.slots[0]
        else:
            hop = g.pick(0 if g.spray else self._flow_hash(out, l3 + 8, l3 + 40, out[l3 + 6], 32))
        if hop is None:
            p.drop("no_live_nexthop")
            return
        out_port, l2 = hop
        out[0:12] = l2
        out[l3 + 7] -= 1
        tc = self.dscp_tc[((out[l3] & 0x0F) << 2) | (out[l3 + 1] >> 6)]
        self._enqueue(t, out_port, tc, out, p.index, l3, 6)

    def _srv6_sid(
        self, p: Port, t: int, frame: bytes, l3: int, plen: int, sid: tuple[str, GroupState | None], depth: int
    ) -> tuple[bytearray, int, GroupState | None] | None:
        """End / End.X update the SRH and go on; End.DT6 strips the outer header and looks up the inner."""
        action, group = sid
        nh = frame[l3 + 6]
        srh = l3 + 40
        if action == "End.DT6":
            if nh == pk.IPPROTO_ROUTING:
                if plen < 8 or frame[srh + 3] != 0:
                    p.drop("srv6_dt6_segments_left")
                    return None
                inner_nh = frame[srh]
                inner = srh + (frame[srh + 1] + 1) * 8
            else:
                inner_nh, inner = nh, srh
            if inner_nh != pk.IPPROTO_IPV6 or depth > 2:
                p.drop("srv6_no_inner_ipv6")
                return None
            decap = bytes(frame[0:12]) + b"\x86\xdd" + bytes(frame[inner : l3 + 40 + plen])
            self._ipv6(p, t, decap, 14, depth + 1)
            return None
        if nh != pk.IPPROTO_ROUTING or plen < 8 or frame[srh + 2] != 4:
            p.drop("srv6_no_srh")
            return None
        sl = frame[srh + 3]
        if sl == 0 or frame[srh + 4] < sl - 1 or plen < 8 + 16 * (frame[srh + 4] + 1):
            p.drop("srv6_segments_left")
            return None
        sl -= 1
        out = bytearray(frame[: l3 + 40 + plen])
        out[srh + 3] = sl
        seg = out[srh + 8 + 16 * sl : srh + 24 + 16 * sl]
        out[l3 + 24 : l3 + 40] = seg
        return out, int.from_bytes(seg, "big"), group if action == "End.X" else None

    def _h_encaps(self, frame: bytes, l3: int, plen: int, pol: tuple[bytes, list[bytes]]) -> tuple[bytearray, int]:
        source, segs = pol
        inner = bytes(frame[l3 : l3 + 40 + plen])
        tc = ((frame[l3] & 0x0F) << 4) | (frame[l3 + 1] >> 4)
        srh = pk.srh(segs, pk.IPPROTO_IPV6)
        outer = pk.ipv6_header(source, segs[0], pk.IPPROTO_ROUTING, len(srh) + len(inner), hlim=64, tc=tc)
        out = bytearray(frame[0:12]) + b"\x86\xdd" + outer + srh + inner
        return out, int.from_bytes(segs[0], "big")

    def _local6(self, p: Port, t: int, frame: bytes, l3: int, plen: int, dst: int) -> None:
        if frame[l3 + 6] != pk.IPPROTO_ICMPV6 or plen < 8:
            p.drop("to_switch")
            return
        icmp = l3 + 40
        typ = frame[icmp]
        src = frame[l3 + 8 : l3 + 24]
        if typ == 135 and plen >= 24:  # neighbour solicitation
            target = frame[icmp + 8 : icmp + 24]
            if self._answers_for(p, int.from_bytes(target, "big"), p.ip6, self.lpm6):
                self._enqueue(t, p.index, CONTROL_TC, pk.neighbor_advert(p.mac, target, frame[6:12], src), self.cpu)
            return
        if typ == 128 and dst in self.local6:  # echo request
            body = bytes(frame[icmp + 4 : l3 + 40 + plen])
            self._originate(t, pk.icmp6(frame[l3 + 24 : l3 + 40], src, 129, 0, body), True)
            return
        if typ not in (133, 134, 136, 143):
            p.drop("to_switch")

    def _originate(self, t: int, l3pkt: bytes, v6: bool) -> None:
        """Route a packet the switch itself made (echo replies, ICMP errors)."""
        dst = int.from_bytes(l3pkt[24:40] if v6 else l3pkt[16:20], "big")
        g = (self.lpm6 if v6 else self.lpm4).lookup(dst)
        hop = g.pick(dst) if g is not None else None
        if hop is None:
            return
        out_port, l2 = hop
        frame = bytearray(l2 + (b"\x86\xdd" if v6 else b"\x08\x00") + l3pkt)
        self._enqueue(t, out_port, CONTROL_TC, frame, self.cpu)

    # -- traffic manager ------------------------------------------------------------------

    def _enqueue(self, t: int, out_port: int, tc: int, frame: Any, in_port: int, l3: int = 0, ipv: int = 0) -> None:
        port = self.ports[out_port]
        n = len(frame)
        lossless = self.pfc and self.lossless[tc]
        mmu = self.mmu
        reason = mmu.admit(in_port, tc, out_port, n, lossless)
        if reason is not None:
            if self.trim is not None and ipv and n > l3 + self.trim.size and self.trimmable[self._dscp(frame, l3, ipv)]:
                self._trim(t, port, tc, frame, l3, ipv, reason)
            else:
                port.drop(reason, tc)
            return
        ecn = self.ecn[tc]
        if ecn is not None and ipv:
            q = port.tx.qbytes[tc]
            kmin, kmax, pmax = ecn
            port.q_enq[tc] += 1
            if q >= kmax:
                port.q_over_kmax[tc] += 1
            if q > kmin and (q >= kmax or self.rng.random() < pmax * (q - kmin) / (kmax - kmin)):
                if self._mark_ce(frame, l3, ipv):
                    port.ecn_marked += 1
        mmu.charge(in_port, tc, out_port, n, lossless)
        if lossless and in_port != self.cpu and mmu.should_pause(in_port, tc):
            mmu.xoff[in_port][tc] = True
            self.send_pfc(t, in_port, {tc: PFC_XOFF_QUANTA})
        port.tx.enqueue(t, tc, frame, in_port)

    @staticmethod
    def _dscp(frame: Any, l3: int, ipv: int) -> int:
        if ipv == 4:
            return frame[l3 + 1] >> 2
        return (frame[l3] & 0x0F) << 2 | frame[l3 + 1] >> 6

    def _trim(self, t: int, port: Port, tc: int, frame: Any, l3: int, ipv: int, reason: str) -> None:
        """Cut instead of dropping: the header goes out ahead of the data, in its own strict-priority
        queue, uncharged to the shared buffer (TrimSpec); past that queue's cap it is dropped."""
        trim = self.trim
        assert trim is not None
        if port.tx.qbytes[trim.queue] + l3 + trim.size > trim.cap_bytes:
            port.drop("trim_queue_full", tc)
            return
        port.trimmed[tc] += 1
        port.tx.enqueue(t, trim.queue, pk.trim_frame(frame, l3, ipv, trim.size, trim.dscp), TRIMMED)

    @staticmethod
    def _mark_ce(frame: bytearray, l3: int, ipv: int) -> bool:
        if ipv == 4:
            tos = frame[l3 + 1]
            if tos & 3 not in (1, 2):
                return False
            old = frame[l3] << 8 | tos
            frame[l3 + 1] = tos | 3
            c = _csum_replace(frame[l3 + 10] << 8 | frame[l3 + 11], old, old | 3)
            frame[l3 + 10] = c >> 8
            frame[l3 + 11] = c & 0xFF
            return True
        b = frame[l3 + 1]
        if (b >> 4) & 3 not in (1, 2):
            return False
        frame[l3 + 1] = b | 0x30
        return True

    def _dequeued(self, out_port: int, t: int, tc: int, frame: Any, in_port: int) -> Any:
        if in_port == TRIMMED:
            return frame  # a trimmed header was never charged to the buffer
        mmu = self.mmu
        mmu.release(in_port, tc, out_port, len(frame))
        if mmu.xoff[in_port][tc] and mmu.should_resume(in_port, tc):
            mmu.xoff[in_port][tc] = False
            self.send_pfc(t, in_port, {tc: 0})
        return frame

    def cut(self, port: int) -> int:
        """Port `port`'s cable is carried by a channel to another partition (another machine): the
        frames, PFC's included, are handed over when their last bit leaves, and the channel adds the
        propagation delay, returned here (picoseconds). Everything else (headroom, rate) is as built."""
        p = self.ports[port]
        delay, p.delay_ps = p.delay_ps, 0
        p.tx.delay_ps = 0
        p.tx.base = (p.tx.base[0], 0)
        return delay

    def send_pfc(self, t: int, port: int, times: dict[int, int]) -> None:
        """Send a real 802.1Qbb frame to the peer, ahead of the data queues."""
        p = self.ports[port]
        p.pfc_tx += 1
        frame = pk.pfc_frame(p.mac, times)
        arrive = t + _pfc_wire_ps(p.tx) + p.delay_ps
        self.loop.at(arrive, p.tx.deliver, frame)
        if p.nic is not None:
            self.loop.at(arrive, self._host_paused, (port, times))
        if any(times.values()):  # refreshed halfway through the pause it asked for
            self.loop.at(t + pause_ps(PFC_XOFF_QUANTA, p.rate_bps) // 2, self._pfc_refresh, (port, list(times)))

    def _host_paused(self, t: int, arg: tuple[int, dict[int, int]]) -> None:
        port, times = arg
        nic = self.ports[port].nic
        if nic is not None:
            nic.pause(t, times)

    def _pfc_refresh(self, t: int, arg: tuple[int, list[int]]) -> None:
        port, tcs = arg
        still = {tc: PFC_XOFF_QUANTA for tc in tcs if self.mmu.xoff[port][tc]}
        if still:
            self.send_pfc(t, port, still)

    # -- observability --------------------------------------------------------------------

    def stats(self, t: int) -> dict[str, Any]:
        ports = {}
        for p in self.ports:
            d: dict[str, Any] = {
                "rx_packets": p.rx_packets,
                "rx_bytes": p.rx_bytes,
                "tx_packets": p.tx.tx_packets,
                "tx_bytes": p.tx.tx_bytes,
                "drops": dict(p.drops) | ({"degraded_loss": p.tx.lost} if p.tx.lost else {}),
                "drops_tc": list(p.drops_tc),
                "ecn_marked": p.ecn_marked,
                "trimmed": list(p.trimmed),
                "ecn_enqueued": list(p.q_enq),
                "over_kmax": list(p.q_over_kmax),
                "pfc_tx": p.pfc_tx,
                "pfc_rx": p.pfc_rx,
                "paused_s": [to_s(x) for x in p.tx.paused_ps(t)],
                "queue_hwm": list(p.tx.qhwm),
                "queue_bytes": list(p.tx.qbytes),
                "q_tx_packets": list(p.tx.q_tx_packets),
                "up": p.up,
            }
            if p.nic is not None:
                d["host_nic"] = _nic_stats(p.nic, t)
            if p.tx.loss or p.tx.rate_bps != p.tx.base[0] or p.tx.delay_ps != p.tx.base[1]:
                d["degraded"] = {"loss": p.tx.loss, "rate_bps": p.tx.rate_bps, "delay_s": to_s(p.tx.delay_ps)}
            ports[p.name] = d
        return {"ports": ports, "buffer_used": self.mmu.used, "buffer_size": self.mmu.size}


def _degrade(tx: Transmitter, seed: int | str, *, loss: float, rate_bps: float, delay_s: float) -> None:
    """A wire degraded (all zero: as built), its losses seeded by `seed`; the delay rounded to picoseconds here."""
    tx.degrade(loss=loss, rate_bps=rate_bps, extra_delay_ps=to_ps(delay_s), seed=seed)


def _nic_stats(nic: Transmitter, t: int) -> dict[str, Any]:
    """A host NIC model's counters (a port's `host_nic`)."""
    return {"tx_packets": nic.tx_packets, "tx_bytes": nic.tx_bytes,
            "paused_s": [to_s(x) for x in nic.paused_ps(t)], "queue_hwm": list(nic.qhwm),
            "degraded_loss": nic.lost}  # lost on the host's way in


def _pfc_wire_ps(tx: Transmitter) -> int:
    """A PFC frame's time on `tx`'s wire: 64 bytes and the wire's overhead (none on a hand-over)."""
    return ser_ps(64 + 20, tx.rate_bps) if tx.rate_bps else 0


def _unwired(t: int, frame: Any) -> None:
    raise RuntimeError("port delivery is not wired")


class WireBox(Switch):
    """The links of a P4 switch, carried by the engine: what enters one end of a wire leaves by the
    other, through that end's link model (rate, delay, a queue of the port's buffer size). The
    P4 switch beside it does the switching and marks ECN at its own queues. Its own class, so the
    switch pipeline has no mode to test for.

    It is also that switch's MAC for PFC (docs/p4.md): a pause off a link holds that priority on
    the link's transmitter; a pause the P4 program sends goes ahead of the data queues (to a host,
    as on the engine, the host NIC model at this end honours it, since host kernels do not). A frame the P4 program charged to an ingress port
    comes tagged in its source MAC (01 | bytes | port | priority); the box puts the port's MAC
    back and, once the frame has left for the link (or was dropped), returns the bytes to the P4
    switch in a credit frame, so what a pause holds here still counts against the switch's XOFF."""

    CREDIT_BATCH = 6000  # bytes returned per credit frame at most; less once the queue is empty

    def __init__(self, spec: SwitchSpec, loop: Any) -> None:
        self.egress_limit_bytes = spec.qos.buffer_per_port
        self.nlinks = len(spec.ports) // 2  # ports 0..n-1 face the links, n..2n-1 the P4 switch
        self.credit: dict[tuple[int, int], int] = {}  # (link port, port << 3 | priority) -> bytes owed
        super().__init__(spec, loop)
        self.wire_to = list(spec.wires)

    def _on_dequeue(self, port: int) -> Callable[..., Any] | None:
        return partial(self._left, port) if port < self.nlinks else None

    def ingress(self, port: int, t: int, frame: bytes) -> None:
        p = self.ports[port]
        p.rx_packets += 1
        p.rx_bytes += len(frame)
        out = self.ports[self.wire_to[port]]
        mac_control = len(frame) >= 14 and frame[12] == 0x88 and frame[13] == 0x08
        if port < self.nlinks:  # off the link, for the P4 switch
            if not (p.up and out.up):
                p.drop("link_down")
            elif mac_control:  # the peer pauses us: the MAC holds that priority, the pipeline never sees it
                times = pk.parse_pfc(frame, 14)
                if times is None:
                    p.drop("malformed")
                    return
                p.pfc_rx += 1
                p.tx.pause(t, times)
            else:
                tc = self.classify(frame)
                if not out.tx.enqueue(t, tc, frame):
                    out.drop("wire_overflow", tc)
            return
        link = out  # from the P4 switch, onto the link
        if mac_control:
            times = pk.parse_pfc(frame, 14)
            if times is None:
                p.drop("malformed")
                return
            link.pfc_tx += 1
            arrive = t + _pfc_wire_ps(link.tx) + link.delay_ps
            if link.up:
                self.loop.at(arrive, link.tx.deliver, frame)
            if link.nic is not None:  # a host: its NIC, modelled at this end, stops sending that priority
                self.loop.at(arrive, self._host_paused, (link.index, times))
            return
        tag = -1
        if len(frame) >= 14 and frame[6] & 1:
            tag = (frame[9] << 8 | frame[10]) << 3 | (frame[11] & 7)
            tag = tag << 16 | (frame[7] << 8 | frame[8])
            frame = frame[:6] + link.mac + frame[12:]
        tc = self.classify(frame)
        if not (p.up and link.up):
            link.drop("link_down", tc)
        elif link.tx.enqueue(t, tc, frame, tag if tag >= 0 else None):
            return
        else:
            link.drop("wire_overflow", tc)
        if tag >= 0:
            self._owe(t, link.index, tag, flush=True)

    def _left(self, port: int, t: int, tc: int, frame: Any, tag: Any) -> Any:
        """A frame leaves for the link: the bytes the P4 switch charged for it go back."""
        if tag is not None:
            self._owe(t, port, tag, flush=not self.ports[port].tx.qbytes[tc])
        return frame

    def _owe(self, t: int, port: int, tag: int, *, flush: bool) -> None:
        key = (port, tag >> 16)
        owed = self.credit.get(key, 0) + (tag & 0xFFFF)
        if owed < self.CREDIT_BATCH and not flush:
            self.credit[key] = owed
            return
        self.credit[key] = 0
        handover = self.ports[port + self.nlinks]
        frame = pk.credit_frame(handover.mac, tag >> 19, tag >> 16 & 7, owed)
        handover.tx.enqueue(t, CONTROL_TC, frame)


class HostEnd:
    """The host's end of a host port's cable, run apart from its switch (PortSpec.host_worker): a
    host whose planes' switches are on several workers or machines runs whole on one of them, and
    this is its NIC toward a switch another worker runs. It queues and serialises what the host
    sends as the switch's own NIC model would (Switch.from_host: same classes, limit, rate, loss
    seeds), and hands each frame over when its last bit leaves (`to_switch`; the channel adds the
    cable's delay). What the switch sends comes back through `arrive`: its PFC pauses this NIC, as
    Switch.send_pfc pauses the NIC it holds, and every frame goes on to the host (`deliver`)."""

    def __init__(self, spec: SwitchSpec, ps: PortSpec, loop: Any, *, to_switch: Callable[[int, Any], None]) -> None:
        self.switch, self.index, self.name = spec.name, ps.index, ps.ifname
        self.seed = spec.seed
        self.dscp_tc = list(spec.qos.dscp_to_tc)
        self.up = True
        self.drops: dict[str, int] = {}
        self.drops_tc = [0] * NQ
        self.deliver: Callable[[int, Any], None] = _unwired  # to the host: wired by the worker
        self.nic = Transmitter(loop, name=f"{spec.name}:{ps.ifname}:host-nic", rate_bps=ps.rate_bps,
                               delay_ps=0, deliver=to_switch, strict=spec.qos.strict, weights=spec.qos.weights,
                               limit_bytes=spec.qos.host_nic_limit)

    drop = Port.drop  # the same counters

    def from_host(self, t: int, frame: bytes) -> None:
        if not self.up:
            self.drop("link_down")
            return
        tc = traffic_class(self.dscp_tc, frame)
        if not self.nic.enqueue(t, tc, frame):
            self.drop("host_nic_overflow", tc)

    def arrive(self, t: int, frame: Any) -> None:
        if len(frame) >= 14 and frame[12] << 8 | frame[13] == pk.ETH_P_MAC_CONTROL:
            times = pk.parse_pfc(frame, 14)
            if times is not None:
                self.nic.pause(t, times)
        self.deliver(t, frame)

    def set_up(self, up: bool) -> None:
        self.up = up
        self.nic.set_up(up)

    def degrade(self, *, loss: float, rate_bps: float, delay_s: float, seed: int = 0) -> None:
        """As Switch.degrade_port degrades the NIC it holds (the same loss seed)."""
        _degrade(self.nic, (self.seed * 1_000_003 + 2 * self.index + 1) ^ seed << 32,
                 loss=loss, rate_bps=rate_bps, delay_s=delay_s)

    def stats(self, t: int) -> dict[str, Any]:
        """The port's `host_nic` counters, as Switch.stats gives them for a NIC it holds, and the drops
        at the host's end (Switch.from_host counts them on the port)."""
        return {**_nic_stats(self.nic, t), "drops": dict(self.drops)}
