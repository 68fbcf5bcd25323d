"""MetaRoCE on the wire: RoCEv2 over IPv6/UDP 4791, with the ICRC.

Every data packet is an RDMA WRITE ONLY (0x0A) carrying its own RETH: the
virtual address it belongs at, the R_Key, and its length. That is the
deviation from plain RC that per-packet spraying needs (OpenAI's MRC and UET
do the same): packets of one message cross different planes, arrive out of
order, and are placed where they belong on arrival. The last packet of a
message may be a WRITE ONLY WITH IMMEDIATE (0x0B, 4 more bytes after the
RETH): the responder reports the immediate as a receive completion once
every PSN up to it is placed, so the peer learns a message is whole without
waiting for the requester's ACK and a flag write behind it. ACKs (0x11) carry the
AETH and then a selective-acknowledgement block of our own: the PSN it
starts at and a 256-bit bitmap of PSNs received beyond the cumulative one;
their AETH's MSN field echoes the PSN whose arrival the ACK answers (the
requester's RTT sample, as TCP's timestamp echo), since messages are
counted by the requester and a sprayed, coalesced ACK needs the echo more.
The top bit of the SACK base field says the echoed PSN arrived twice (TCP's
D-SACK, RFC 2883): both copies of a retransmitted packet got through, so the
plane blamed for losing the first only delayed it.
CNPs are opcode 0x81 with BECN set and 16 reserved bytes.

The ICRC covers the IPv6 and UDP headers too, with the variant fields set
to ones (traffic class, flow label, hop limit, UDP checksum, BTH byte 4).
The kernel builds those headers here (UDP sockets), but for IPv6 every
field the ICRC covers is known to the sender, so it is computed exactly.
"""

from __future__ import annotations

import socket
import struct
import zlib

from emu import packet as pk

ROCE_PORT = 4791
OP_WRITE_ONLY = 0x0A
OP_WRITE_ONLY_IMM = 0x0B
OP_ACK = 0x11
OP_CNP = 0x81
SYNDROME_ACK = 0x1F
SYNDROME_NAK_PSN = 0x60
SYNDROME_NAK_INVALID = 0x61
SYNDROME_NAK_ACCESS = 0x62
SACK_BITS = 256
DUPLICATE = 1 << 31  # in the SACK base field: the echoed PSN arrived twice
PSN_MASK = 0xFFFFFF

_FF8 = b"\xff" * 8
_BTH = struct.Struct("!BBHII")
BTH_BYTES = _BTH.size  # 12
_RETH = struct.Struct("!QII")
_AETH = struct.Struct("!I")
_IMM = struct.Struct("!I")
_SACK = struct.Struct("!I32s")
_IP6_HEAD = struct.Struct("!IHBB")
_UDP = struct.Struct("!HHHH")
_ICRC = struct.Struct("<I")


_HEAD_CRC: dict[tuple[bytes, bytes, int, int, int], int] = {}


def _head_crc(src: bytes, dst: bytes, sport: int, dport: int, udp_len: int) -> int:
    """CRC of the masked IPv6 + UDP pseudo-header: the same for every packet of one flow and size,
    so it is computed once (the endpoints' hot path) and kept in a bounded table."""
    key = (src, dst, sport, dport, udp_len)
    crc = _HEAD_CRC.get(key)
    if crc is None:
        if len(_HEAD_CRC) > 4096:
            _HEAD_CRC.clear()
        crc = _HEAD_CRC[key] = zlib.crc32(_FF8 + _IP6_HEAD.pack(0x6FFFFFFF, udp_len, 17, 0xFF) + src + dst
                                          + _UDP.pack(sport, dport, udp_len, 0xFFFF))
    return crc


def icrc(src: bytes, dst: bytes, sport: int, body: bytes | bytearray | memoryview, dport: int = ROCE_PORT) -> int:
    """ICRC of a RoCEv2/IPv6 packet whose UDP payload is `body` (BTH onward) + the 4 ICRC bytes."""
    crc = _head_crc(src, dst, sport, dport, 8 + len(body) + 4)
    crc = zlib.crc32(bytes(body[:4]) + b"\xff" + bytes(body[5:12]), crc)
    return zlib.crc32(body[12:], crc)


def seal(src: bytes, dst: bytes, sport: int, body: bytes) -> bytes:
    """Append the ICRC (little-endian, as on the wire)."""
    return body + _ICRC.pack(icrc(src, dst, sport, body))


_DATA = struct.Struct("!BBHIIQII")  # BTH + RETH of a WRITE ONLY
_DATA_IMM = struct.Struct("!BBHIIQIII")  # BTH + RETH + ImmDt of a WRITE ONLY WITH IMMEDIATE


def data_frame(src: bytes, dst: bytes, sport: int, dest_qp: int, psn: int, va: int, rkey: int,
               payload: bytes | memoryview, *, ack_req: bool,
               imm: int | None = None) -> tuple[bytes, bytes | memoryview, bytes]:
    """A data packet as three pieces for one scatter-gather send (header, the payload as it lies
    in the memory region, ICRC): nothing is copied. Same bytes as seal(src, dst, sport, data_packet(...))."""
    n = len(payload)
    psn_field = (ack_req << 31) | (psn & PSN_MASK)
    qp, masked_qp = dest_qp & PSN_MASK, 0xFF000000 | (dest_qp & PSN_MASK)
    if imm is None:
        head = _DATA.pack(OP_WRITE_ONLY, 0, 0xFFFF, qp, psn_field, va, rkey, n)
        masked = _DATA.pack(OP_WRITE_ONLY, 0, 0xFFFF, masked_qp, psn_field, va, rkey, n)
    else:
        head = _DATA_IMM.pack(OP_WRITE_ONLY_IMM, 0, 0xFFFF, qp, psn_field, va, rkey, n, imm & 0xFFFFFFFF)
        masked = _DATA_IMM.pack(OP_WRITE_ONLY_IMM, 0, 0xFFFF, masked_qp, psn_field, va, rkey, n, imm & 0xFFFFFFFF)
    crc = zlib.crc32(payload, zlib.crc32(masked, _head_crc(src, dst, sport, ROCE_PORT, 8 + len(head) + n + 4)))
    return head, payload, _ICRC.pack(crc)


def check(src: bytes, dst: bytes, sport: int, packet: bytes | memoryview, dport: int = ROCE_PORT) -> bool:
    if len(packet) < 16:
        return False
    return _ICRC.unpack_from(packet, len(packet) - 4)[0] == icrc(src, dst, sport, packet[:-4], dport)


def data_packet(dest_qp: int, psn: int, va: int, rkey: int, payload: bytes | memoryview, *, ack_req: bool,
                imm: int | None = None) -> bytes:
    if imm is None:
        return (pk.bth(OP_WRITE_ONLY, dest_qp, psn, ack_req=ack_req) + _RETH.pack(va, rkey, len(payload))
                + bytes(payload))
    return (pk.bth(OP_WRITE_ONLY_IMM, dest_qp, psn, ack_req=ack_req) + _RETH.pack(va, rkey, len(payload))
            + _IMM.pack(imm & 0xFFFFFFFF) + bytes(payload))


def ack_packet(dest_qp: int, cum_psn: int, msn: int, sack_base: int, bitmap: bytes,
               syndrome: int = SYNDROME_ACK, duplicate: bool = False) -> bytes:
    return (pk.bth(OP_ACK, dest_qp, cum_psn) + _AETH.pack(syndrome << 24 | (msn & PSN_MASK))
            + _SACK.pack((sack_base & PSN_MASK) | (DUPLICATE if duplicate else 0), bitmap))


def cnp_packet(dest_qp: int) -> bytes:
    return pk.bth(OP_CNP, dest_qp, 0, becn=True) + bytes(16)


def parse_bth(packet: bytes | memoryview) -> tuple[int, int, int, bool]:
    """(opcode, dest QP, PSN, ack requested)."""
    op, _, _, qp, psn = _BTH.unpack_from(packet, 0)
    return op, qp & PSN_MASK, psn & PSN_MASK, bool(psn >> 31)


def parse_reth(packet: bytes | memoryview) -> tuple[int, int, int]:
    return _RETH.unpack_from(packet, 12)


def parse_imm(packet: bytes | memoryview) -> int:
    """The immediate of a WRITE ONLY WITH IMMEDIATE (after BTH and RETH)."""
    return _IMM.unpack_from(packet, 28)[0]


def parse_ack(packet: bytes | memoryview) -> tuple[int, int, int, bytes, bool]:
    """(syndrome, MSN, SACK base PSN, SACK bitmap, echoed PSN arrived twice) of an ACK whose BTH PSN
    is the cumulative one."""
    aeth = _AETH.unpack_from(packet, 12)[0]
    if len(packet) >= 16 + _SACK.size:
        base, bitmap = _SACK.unpack_from(packet, 16)
    else:
        base, bitmap = 0, bytes(32)
    return aeth >> 24, aeth & PSN_MASK, base & PSN_MASK, bitmap, bool(base & DUPLICATE)


def ip6(addr: str) -> bytes:
    return socket.inet_pton(socket.AF_INET6, addr)


DATA_HEADER = _BTH.size + _RETH.size
IMM_BYTES = _IMM.size
ICRC_BYTES = 4
