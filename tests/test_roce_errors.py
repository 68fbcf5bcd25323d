"""Bad input to a MetaRoCE device is answered with a NAK or dropped and counted; nothing crashes."""

from __future__ import annotations

import os

import pytest

from emu.roce import wire
from emu.roce.transport import Device

pytestmark = pytest.mark.root  # binds UDP 4791 on ::1 in the root namespace's loopback

LO = wire.ip6("::1")
SPORT = 50001


@pytest.fixture
def dev():
    d = Device(["::1"], dilation=1.0, seed=os.getpid())
    qp = d.create_qp()
    qp.connect(0x123, ["::1"])
    mr = d.reg_mr(4096)
    yield d, qp, mr
    d.close()


def deliver(d: Device, body: bytes, *, seal: bool = True) -> None:
    pkt = wire.seal(LO, LO, SPORT, body) if seal else body
    d._packet(d.planes[0], pkt, LO, SPORT, 0, 0.0)


def test_good_write_lands(dev):
    d, qp, mr = dev
    deliver(d, wire.data_packet(qp.qpn, 0, mr.va + 100, mr.rkey, b"hello", ack_req=False))
    assert bytes(mr.buf[100:105]) == b"hello" and qp.expected == 1


@pytest.mark.parametrize("case", ["wrong_key", "past_the_end", "before_the_start", "length_lies"])
def test_bad_writes_are_nakked_and_leave_memory_alone(dev, case):
    d, qp, mr = dev
    va, key, payload = mr.va, mr.rkey, b"x" * 64
    if case == "wrong_key":
        key ^= 0xFFFF
    elif case == "past_the_end":
        va = mr.va + mr.size - 10
    elif case == "before_the_start":
        va = mr.va - 8
    body = wire.data_packet(qp.qpn, 0, va, key, payload, ack_req=False)
    if case == "length_lies":
        body = body[:24] + (9999).to_bytes(4, "big") + body[28:]
    deliver(d, body)
    assert qp.bad == 1 and d.counters["nak_sent"] == 1
    assert mr.buf == bytearray(4096) and qp.expected == 0


def test_unknown_qp_bad_icrc_and_truncated_are_counted(dev):
    d, qp, mr = dev
    deliver(d, wire.data_packet(0x777, 0, mr.va, mr.rkey, b"z", ack_req=False))
    good = bytearray(wire.seal(LO, LO, SPORT, wire.data_packet(qp.qpn, 0, mr.va, mr.rkey, b"z", ack_req=False)))
    good[20] ^= 0xFF
    deliver(d, bytes(good), seal=False)
    deliver(d, b"\x0a\x00", seal=False)
    deliver(d, wire.seal(LO, LO, SPORT, wire.data_packet(qp.qpn, 0, 0, 0, b"", ack_req=False)[:14]), seal=False)
    assert d.counters["unknown_qp"] == 1 and d.counters["bad_icrc"] == 1 and d.counters["truncated"] == 2
    assert mr.buf == bytearray(4096)


def test_a_nak_fails_the_work_request(dev):
    d, qp, mr = dev
    qp.post_write(7, mr, 0, 10, 0x1000, 1)
    qp.pending.clear()
    deliver(d, wire.ack_packet(qp.qpn, 0, 0, 1, bytes(32), syndrome=wire.SYNDROME_NAK_ACCESS))
    (c,) = d.poll_cq()
    assert c.wr_id == 7 and c.status.startswith("remote access error")


def test_an_immediate_completes_only_once_everything_before_it_is_placed(dev):
    """A write with immediate that overtakes earlier packets (another plane) waits for them."""
    d, qp, mr = dev
    deliver(d, wire.data_packet(qp.qpn, 1, mr.va + 8, mr.rkey, b"tail", ack_req=False, imm=5))
    assert d.poll_recv() == [] and bytes(mr.buf[8:12]) == b"tail"  # placed, but PSN 0 is missing
    deliver(d, wire.data_packet(qp.qpn, 0, mr.va, mr.rkey, b"head", ack_req=False))
    got = d.poll_recv()
    assert [(c.wr_id, c.qpn) for c in got] == [(5, qp.qpn)] and qp.expected == 2
    deliver(d, wire.data_packet(qp.qpn, 1, mr.va + 8, mr.rkey, b"tail", ack_req=False, imm=5))  # a retransmit
    assert d.poll_recv() == []  # a duplicate completes nothing


def test_a_truncated_immediate_is_counted_not_placed(dev):
    d, qp, mr = dev
    body = wire.data_packet(qp.qpn, 0, mr.va, mr.rkey, b"", ack_req=False, imm=1)
    deliver(d, body[:30])
    assert d.counters["truncated"] == 1 and qp.expected == 0 and d.poll_recv() == []
