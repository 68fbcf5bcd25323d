"""MetaRoCE packets against scapy's independent RoCE layer: fields and ICRC."""

from __future__ import annotations

from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6

from emu.roce import wire

SRC, DST = "fdfa:0:0::2", "fdfa:0:1::3"


def on_wire(body: bytes, sport: int = 50000) -> bytes:
    """The packet as the kernel sends it, with arbitrary values in the fields the ICRC masks."""
    sealed = wire.seal(wire.ip6(SRC), wire.ip6(DST), sport, body)
    return bytes(IPv6(src=SRC, dst=DST, tc=0x6A, fl=0x12345, hlim=61) / UDP(sport=sport, dport=4791) / sealed)


def scapy_icrc(raw: bytes) -> bytes:
    """scapy's own ICRC of the packet as parsed (it masks the variant fields itself)."""
    return IPv6(raw)[BTH].compute_icrc(b"")


def test_data_packet_icrc_matches_scapy():
    body = wire.data_packet(0x42, 1234, 0x10000, 7, b"payload" * 20, ack_req=True)
    raw = on_wire(body)
    assert raw[-4:] == scapy_icrc(raw)
    b = IPv6(raw)[BTH]
    assert (b.opcode, b.dqpn, b.psn, b.ackreq) == (0x0A, 0x42, 1234, 1)


def test_ack_and_cnp_are_what_scapy_reads():
    raw = on_wire(wire.ack_packet(9, 500, 3, 501, b"\x80" + bytes(31)))
    assert raw[-4:] == scapy_icrc(raw)
    ack = IPv6(raw)
    assert ack[BTH].opcode == 0x11 and ack[BTH].psn == 500 and ack[AETH].syndrome == 0x1F
    # What our SACK block adds reads back, the duplicate flag apart from the base PSN.
    assert wire.parse_ack(wire.ack_packet(9, 500, 3, 501, b"\x80" + bytes(31))[:]) == \
        (0x1F, 3, 501, b"\x80" + bytes(31), False)
    assert wire.parse_ack(wire.ack_packet(9, 500, 3, 0xFFFFFF, bytes(32), duplicate=True))[2:5:2] == (0xFFFFFF, True)
    cnp = IPv6(on_wire(wire.cnp_packet(9)))
    assert cnp[BTH].opcode == 0x81 and cnp[BTH].becn == 1 and cnp[BTH].dqpn == 9


def test_check_rejects_a_flipped_bit():
    body = wire.data_packet(1, 2, 3, 4, b"x" * 64, ack_req=False)
    sealed = bytearray(wire.seal(wire.ip6(SRC), wire.ip6(DST), 50000, body))
    assert wire.check(wire.ip6(SRC), wire.ip6(DST), 50000, sealed)
    sealed[40] ^= 1
    assert not wire.check(wire.ip6(SRC), wire.ip6(DST), 50000, sealed)
    assert not wire.check(wire.ip6(SRC), wire.ip6(DST), 50000, b"short")


def test_scatter_gather_frame_is_the_sealed_packet_byte_for_byte():
    """The endpoints send header, payload view and ICRC without copying; the bytes must not change."""
    src, dst = wire.ip6("fdfa:0:0::2"), wire.ip6("fdfa:0:1::2")
    payload = bytes(range(256)) * 4
    for ack_req in (False, True):
        head, body, crc = wire.data_frame(src, dst, 49152, 0x123456, 0xABCDEF, 1 << 40, 0xDEADBEEF,
                                          memoryview(payload), ack_req=ack_req)
        want = wire.seal(src, dst, 49152, wire.data_packet(0x123456, 0xABCDEF, 1 << 40, 0xDEADBEEF, payload,
                                                           ack_req=ack_req))
        assert head + bytes(body) + crc == want
        assert wire.check(src, dst, 49152, want)


def test_write_with_immediate_is_what_scapy_reads_and_sends_the_same_bytes():
    """Opcode 0x0B, the immediate after the RETH, a valid ICRC, and the scatter-gather frame unchanged."""
    body = wire.data_packet(0x42, 77, 0x2000, 9, b"slice" * 30, ack_req=False, imm=0xCAFE0001)
    raw = on_wire(body)
    assert raw[-4:] == scapy_icrc(raw)
    assert IPv6(raw)[BTH].opcode == 0x0B and wire.parse_imm(body) == 0xCAFE0001
    assert wire.parse_reth(body) == (0x2000, 9, 150)
    src, dst = wire.ip6(SRC), wire.ip6(DST)
    head, view, crc = wire.data_frame(src, dst, 50000, 0x42, 77, 0x2000, 9, memoryview(b"slice" * 30),
                                      ack_req=False, imm=0xCAFE0001)
    assert head + bytes(view) + crc == wire.seal(src, dst, 50000, body)
