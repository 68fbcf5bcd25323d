"""Header layouts and fast builders for the frames the fabric carries.

The switch pipeline parses with precompiled struct.Struct objects on bytes /
memoryviews (see emu.dataplane.pipeline); this module holds the layouts, the
checksums and the builders for frames a switch originates (ARP and NDP
replies, ICMP errors and echo replies, PFC). Scapy is for tests only.
"""

from __future__ import annotations

import socket
import struct

ETH_P_IPV4 = 0x0800
ETH_P_ARP = 0x0806
ETH_P_VLAN = 0x8100
ETH_P_IPV6 = 0x86DD
ETH_P_MAC_CONTROL = 0x8808
PFC_OPCODE = 0x0101
PFC_DST = bytes.fromhex("0180c2000001")
BROADCAST = b"\xff" * 6

IPPROTO_ICMP = 1
IPPROTO_UDP = 17
IPPROTO_ROUTING = 43
IPPROTO_ICMPV6 = 58
IPPROTO_IPV6 = 41
ROCE_UDP_PORT = 4791

ETH = struct.Struct("!6s6sH")  # dst, src, ethertype
VLAN = struct.Struct("!HH")  # TCI, inner ethertype
IPV4 = struct.Struct("!BBHHHBBH4s4s")  # ver/ihl, tos, len, id, frag, ttl, proto, csum, src, dst
IPV6 = struct.Struct("!IHBB16s16s")  # ver/tc/flow, payload len, next header, hop limit, src, dst
SRH = struct.Struct("!BBBBBBH")  # next hdr, hdr ext len, type, segments left, last entry, flags, tag
UDP = struct.Struct("!HHHH")
ARP = struct.Struct("!HHBBH6s4s6s4s")
ICMP = struct.Struct("!BBH")
BTH = struct.Struct("!BBHII")  # opcode, flags, pkey, fecn/becn/destqp, ackreq/psn
RETH = struct.Struct("!QII")
AETH = struct.Struct("!I")
PFC = struct.Struct("!HH8H")  # opcode, class-enable vector, 8 pause times


def mac_bytes(mac: str) -> bytes:
    b = bytes.fromhex(mac.replace(":", "").replace("-", ""))
    if len(b) != 6:
        raise ValueError(f"not a MAC address: {mac!r}")
    return b


def ip4(addr: str) -> bytes:
    return socket.inet_pton(socket.AF_INET, addr)


def ip6(addr: str) -> bytes:
    return socket.inet_pton(socket.AF_INET6, addr)


def checksum(data: bytes | bytearray | memoryview) -> int:
    """Internet checksum (RFC 1071)."""
    if len(data) % 2:
        data = bytes(data) + b"\x00"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def fast_sum(data: bytes | bytearray) -> int:
    """The ones'-complement sum of `data` as 16-bit big-endian words, folded (not inverted), in one
    big-integer reduction: 2^16 = 1 mod 0xFFFF, so the number the bytes spell, mod 0xFFFF, is the
    folded sum (0xFFFF where the fold gives 0 and the data is not all zero). About 20 times faster
    than summing words for a 4 KB packet, and the hot path of a fabric-clock endpoint."""
    if len(data) % 2:
        data = bytes(data) + b"\x00"
    n = int.from_bytes(data, "big")
    r = n % 0xFFFF
    return 0xFFFF if r == 0 and n else r


def udp_headers(v6: bool) -> int:
    """Bytes in front of a UDP datagram's payload on the wire: Ethernet, IPv4 (no options) or IPv6 (no
    extension header), UDP."""
    return 14 + (40 if v6 else 20) + 8


def udp6_frame(eth_head: bytes, tclass: int, src: bytes, dst: bytes, sport: int, dport: int,
               payload: bytes | tuple | list) -> bytes:
    """A whole Ethernet/IPv6/UDP frame (hop limit 64, flow label 0) with a valid UDP checksum.
    `eth_head`: the 14 bytes of destination MAC, source MAC and EtherType 0x86DD; `payload` may
    come in pieces (a RoCE packet's header, payload and ICRC)."""
    body = payload if isinstance(payload, bytes) else b"".join(payload)
    ulen = 8 + len(body)
    total = fast_sum(src + dst + struct.pack("!IIHH", ulen, IPPROTO_UDP, sport, dport) + struct.pack("!H", ulen)
                     + b"\0\0" + body)
    csum = ~total & 0xFFFF or 0xFFFF  # RFC 8200: a computed zero goes out as 0xFFFF
    return (eth_head + IPV6.pack(0x60000000 | tclass << 20, ulen, IPPROTO_UDP, 64, src, dst)
            + UDP.pack(sport, dport, ulen, csum) + body)


def trim_frame(frame: bytes | bytearray, l3: int, ipv: int, size: int, dscp: int) -> bytearray:
    """A packet trimmed as a switch trims it (NDP, Ultra Ethernet): the frame cut to `size` bytes
    after its Ethernet header (`l3`: where the IP header starts), the IP (and UDP) lengths and
    checksums made right for what is left, its DSCP set to `dscp` (ECN bits kept), so the receiver
    sees a valid, short packet that names what was cut. The caller checks the frame is longer."""
    out = bytearray(frame[:l3 + size])
    if ipv == 4:
        ihl = (out[l3] & 0x0F) * 4
        struct.pack_into("!H", out, l3 + 2, size)
        out[l3 + 1] = dscp << 2 | (out[l3 + 1] & 3)
        struct.pack_into("!H", out, l3 + 10, 0)
        struct.pack_into("!H", out, l3 + 10, checksum(out[l3:l3 + ihl]))
        if out[l3 + 9] == IPPROTO_UDP and size >= ihl + 8:
            struct.pack_into("!HH", out, l3 + ihl + 4, size - ihl, 0)  # no UDP checksum: RFC 768 allows it
        return out
    plen = size - 40
    struct.pack_into("!H", out, l3 + 4, plen)
    tclass = dscp << 2 | (out[l3 + 1] >> 4 & 3)
    out[l3] = 0x60 | tclass >> 4
    out[l3 + 1] = (tclass & 0x0F) << 4 | (out[l3 + 1] & 0x0F)
    if out[l3 + 6] == IPPROTO_UDP and plen >= 8:
        u = l3 + 40
        struct.pack_into("!HH", out, u + 4, plen, 0)
        total = fast_sum(bytes(out[l3 + 8:l3 + 40]) + struct.pack("!II", plen, IPPROTO_UDP) + bytes(out[u:]))
        struct.pack_into("!H", out, u + 6, ~total & 0xFFFF or 0xFFFF)
    return out


def ipv4_header(src: bytes, dst: bytes, proto: int, payload_len: int, ttl: int = 64, tos: int = 0) -> bytes:
    hdr = IPV4.pack(0x45, tos, 20 + payload_len, 0, 0x4000, ttl, proto, 0, src, dst)
    return hdr[:10] + struct.pack("!H", checksum(hdr)) + hdr[12:]


def ipv6_header(src: bytes, dst: bytes, nh: int, payload_len: int, hlim: int = 64, tc: int = 0) -> bytes:
    return IPV6.pack((6 << 28) | (tc << 20), payload_len, nh, hlim, src, dst)


def icmpv6_checksum(src: bytes, dst: bytes, body: bytes) -> int:
    pseudo = src + dst + struct.pack("!I3xB", len(body), IPPROTO_ICMPV6)
    return checksum(pseudo + body)


def ethernet(dst: bytes, src: bytes, ethertype: int, payload: bytes) -> bytes:
    return ETH.pack(dst, src, ethertype) + payload


def arp_reply(my_mac: bytes, my_ip: bytes, to_mac: bytes, to_ip: bytes) -> bytes:
    body = ARP.pack(1, ETH_P_IPV4, 6, 4, 2, my_mac, my_ip, to_mac, to_ip)
    return ethernet(to_mac, my_mac, ETH_P_ARP, body)


def icmp4(src: bytes, dst: bytes, icmp_type: int, code: int, rest: bytes, ttl: int = 64) -> bytes:
    """An IPv4 ICMP packet (no Ethernet header): the switch routes it like any other."""
    body = bytes([icmp_type, code, 0, 0]) + rest
    body = body[:2] + struct.pack("!H", checksum(body)) + body[4:]
    return ipv4_header(src, dst, IPPROTO_ICMP, len(body), ttl=ttl) + body


def icmp6(src: bytes, dst: bytes, icmp_type: int, code: int, rest: bytes, hlim: int = 64) -> bytes:
    body = bytes([icmp_type, code, 0, 0]) + rest
    body = body[:2] + struct.pack("!H", icmpv6_checksum(src, dst, body)) + body[4:]
    return ipv6_header(src, dst, IPPROTO_ICMPV6, len(body), hlim=hlim) + body


def neighbor_advert(my_mac: bytes, target: bytes, to_mac: bytes, to_ip: bytes) -> bytes:
    """NDP NA (router, solicited, override) with the target link-layer address option."""
    rest = struct.pack("!I", 0xE0000000) + target + b"\x02\x01" + my_mac
    return ethernet(to_mac, my_mac, ETH_P_IPV6, icmp6(target, to_ip, 136, 0, rest, hlim=255))


def pfc_frame(src_mac: bytes, pause: dict[int, int]) -> bytes:
    """An 802.1Qbb frame: pause[prio] = quanta (0 = XON), padded to 60 bytes (64 with FCS)."""
    vector = 0
    times = [0] * 8
    for prio, quanta in pause.items():
        if not 0 <= prio < 8 or not 0 <= quanta <= 0xFFFF:
            raise ValueError(f"bad PFC priority/quanta {prio}/{quanta}")
        vector |= 1 << prio
        times[prio] = quanta
    frame = ETH.pack(PFC_DST, src_mac, ETH_P_MAC_CONTROL) + PFC.pack(PFC_OPCODE, vector, *times)
    return frame + b"\x00" * (60 - len(frame))


CREDIT_ETHERTYPE = 0x88B5  # IEEE 802 local experimental
CREDIT = struct.Struct("!HBI")


def credit_frame(src_mac: bytes, port: int, prio: int, nbytes: int) -> bytes:
    """Buffer credit for a P4 switch (p4/fabric.p4): `nbytes` charged to (ingress port, priority)
    have left its MAC. Padded to 60 bytes."""
    frame = ETH.pack(b"\xff" * 6, src_mac, CREDIT_ETHERTYPE) + CREDIT.pack(port, prio, nbytes)
    return frame + b"\x00" * (60 - len(frame))


def parse_pfc(frame: bytes | memoryview, offset: int = 14) -> dict[int, int] | None:
    """Pause times by priority from a PFC frame's MAC-control payload, or None if not PFC."""
    if len(frame) < offset + PFC.size:
        return None
    opcode, vector, *times = PFC.unpack_from(frame, offset)
    if opcode != PFC_OPCODE:
        return None
    return {p: times[p] for p in range(8) if vector >> p & 1}


def srh(segments: list[bytes], next_header: int, segments_left: int | None = None) -> bytes:
    """An SRH (RFC 8754) for a segment list given in travel order (first segment first)."""
    n = len(segments)
    sl = n - 1 if segments_left is None else segments_left
    return SRH.pack(next_header, 2 * n, 4, sl, n - 1, 0, 0) + b"".join(reversed(segments))


def bth(opcode: int, dest_qp: int, psn: int, *, pkey: int = 0xFFFF, ack_req: bool = False,
        becn: bool = False, fecn: bool = False, pad: int = 0, se: bool = False) -> bytes:
    """An InfiniBand Base Transport Header (12 bytes) as RoCEv2 carries it."""
    flags = (0x80 if se else 0) | (pad & 3) << 4
    qp = (fecn << 31) | (becn << 30) | (dest_qp & 0xFFFFFF)
    return BTH.pack(opcode, flags, pkey, qp, (ack_req << 31) | (psn & 0xFFFFFF))


def parse_bth(buf: bytes | memoryview, offset: int = 0) -> tuple[int, int, int, bool, bool]:
    """(opcode, dest QP, PSN, ack requested, BECN) from a BTH at `offset`."""
    opcode, _, _, qp, psn = BTH.unpack_from(buf, offset)
    return opcode, qp & 0xFFFFFF, psn & 0xFFFFFF, bool(psn >> 31), bool(qp >> 30 & 1)


def reth(vaddr: int, rkey: int, length: int) -> bytes:
    return RETH.pack(vaddr, rkey, length)


def aeth(syndrome: int, msn: int) -> bytes:
    return AETH.pack((syndrome & 0xFF) << 24 | (msn & 0xFFFFFF))
