from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting

from emu import packet as pk


def test_pfc_frame_layout():
    f = pk.pfc_frame(bytes(6), {3: 0xFFFF, 5: 10})
    assert len(f) == 60
    assert f[:6] == pk.PFC_DST and f[12:14] == b"\x88\x08" and f[14:16] == b"\x01\x01"
    assert f[16:18] == bytes([0, 0b101000])
    assert pk.parse_pfc(f) == {3: 0xFFFF, 5: 10}


def test_ipv4_header_checksum_matches_scapy():
    hdr = pk.ipv4_header(pk.ip4("10.0.0.1"), pk.ip4("10.0.1.2"), 17, 8, ttl=9, tos=0x68)
    s = IP(hdr)
    c = s.chksum
    del s.chksum
    assert IP(bytes(s)).chksum == c


def test_srh_segment_list_is_reversed_on_the_wire():
    segs = [pk.ip6("fc00::1"), pk.ip6("fc00::2"), pk.ip6("fc00::3")]
    srh = pk.srh(segs, 41)
    pkt = IPv6(pk.ipv6_header(pk.ip6("fd00::1"), segs[0], 43, len(srh)) + srh)
    h = pkt[IPv6ExtHdrSegmentRouting]
    assert h.segleft == 2 and h.lastentry == 2 and h.len == 6 and h.nh == 41
    assert h.addresses == ["fc00::3", "fc00::2", "fc00::1"]


def test_bth_reth_aeth_agree_with_scapy():
    import struct

    from scapy.contrib.roce import AETH, BTH

    raw = pk.bth(0x0A, 0x11, 0xABCDE, ack_req=True, becn=True) + pk.reth(0x1000, 7, 4096) + pk.aeth(0x1F, 5)
    b = BTH(raw)
    assert (b.opcode, b.dqpn, b.psn, b.ackreq, b.becn, b.pkey) == (0x0A, 0x11, 0xABCDE, 1, 1, 0xFFFF)
    assert struct.unpack("!QII", raw[12:28]) == (0x1000, 7, 4096)  # scapy has no RETH
    a = AETH(raw[28:32])
    assert (a.syndrome, a.msn) == (0x1F, 5)
    assert pk.parse_bth(raw) == (0x0A, 0x11, 0xABCDE, True, True)
