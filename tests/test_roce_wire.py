"""MetaRoCE packets against scapy's independent RoCE layer: fields and ICRC; and what a device alone sends,
completes, numbers and frees (no fabric, no root)."""

from __future__ import annotations

import gc

import pytest
from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6

from emu.dataplane.core import native
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


def _device(core: str, send=lambda frame: None, addr: str = "fd00::1", seed: int = 1, payload: bool = True):
    """A MetaRoCE device of `core` alone on a virtual schedule, one plane, its frames handed to `send`."""
    from types import SimpleNamespace

    from emu.dataplane.core import make_schedule
    from emu.roce import transport

    if core == "native" and native() is None:
        pytest.skip("the compiled core is not built")
    loop = SimpleNamespace(sched=make_schedule(core, "virtual"))
    loop.clock = loop.sched.clock
    if core == "native":
        from emu.roce._device import Device
    else:
        Device = transport.Device
    return Device([addr], clock=loop, io=transport.FabricIO([send], [b"\x02" * 6], [b"\x04" * 6]), seed=seed,
                  payload=payload)


def test_a_compiled_headers_only_device_sends_zeros_whatever_the_region_holds():
    """A compiled headers-only device does not read the region it writes from (a region never written maps a
    page of zeros on each first read of 4 KiB: what made FPF 8 x 8's headers-only run slower than it needed
    to be); its frames carry zeros where a real device's carry the region's bytes, at the same length."""

    def payloads(payload: bool, imm: int | None) -> list[bytes]:
        sent: list[bytes] = []
        dev = _device("native", sent.append, payload=payload)
        mr = dev.reg_mr(4096)
        memoryview(mr.buf)[:] = b"\xab" * 4096
        qp = dev.create_qp()
        qp.connect(0x123, ["fd00::2"])
        qp.post_write(1, mr, 0, 4096, 0, mr.rkey, imm=imm)
        for t in range(10):  # a microsecond each: all four segments go, none yet due again
            dev.step(t * 1_000_000)
        assert len(sent) == 4
        assert all(wire.check(f[22:38], f[38:54], int.from_bytes(f[54:56], "big"), f[62:]) for f in sent)  # ICRC
        if imm is not None:  # the last segment carries the immediate, after the BTH and RETH, kept
            assert [f[62] for f in sent][-1] == 0x0B and int.from_bytes(sent[-1][90:94], "big") == imm
        return [f[-4 - 1024:-4] for f in sent]  # a full segment's payload, before the ICRC

    # The frames of the real run go back to the pool with the region's bytes in them, and the headers-only
    # run's frames are made from the same buffers: its zeros are written only as a frame leaves the core.
    for imm in (None, 0x5A5A5A5A):
        real, none = payloads(True, imm), payloads(False, imm)
        assert real and len(real) == len(none)
        assert all(p == b"\xab" * 1024 for p in real) and all(p == bytes(1024) for p in none)


@pytest.mark.parametrize("core", ["native", "python"])
def test_an_unsignaled_write_completes_without_a_completion_on_either_core(core):
    """ibverbs' IBV_SEND_SIGNALED: a write posted unsignaled (a collective's, whose completions nobody reads)
    makes no completion once acknowledged, while the signaled ones before and after it do, and its immediate
    still reaches the peer. Two devices wired back to back in this process, no fabric."""
    wire: dict[str, list[bytes]] = {"a": [], "b": []}
    a = _device(core, wire["a"].append, "fd00::1", 1)
    b = _device(core, wire["b"].append, "fd00::2", 2)
    mra, mrb = a.reg_mr(8192), b.reg_mr(8192)
    qa, qb = a.create_qp(), b.create_qp()
    qa.connect(qb.qpn, ["fd00::2"])
    qb.connect(qa.qpn, ["fd00::1"])
    qa.post_write(1, mra, 0, 4096, mrb.va, mrb.rkey, imm=11)
    qa.post_write(2, mra, 4096, 4096, mrb.va + 4096, mrb.rkey, imm=12, signaled=False)
    qa.post_write(3, mra, 0, 100, mrb.va, mrb.rkey)
    t = 0
    for _ in range(1000):  # a microsecond a round: each side sends what is due, the other takes it
        a.step(t)
        b.step(t)
        moved = bool(wire["a"] or wire["b"])
        for me, peer in (("a", b), ("b", a)):
            while wire[me]:
                peer.on_frame(0, wire[me].pop(0), t)
        if not moved and qa.idle():
            break
        t += 1_000_000
    assert qa.idle()
    assert [c.wr_id for c in a.poll_cq()] == [1, 3]
    assert [c.wr_id for c in b.poll_recv()] == [11, 12]


@pytest.mark.parametrize("core", ["native", "python"])
def test_a_queue_pairs_number_is_never_one_already_taken(core):
    """Numbers are drawn at random (24 bits): a draw already taken is drawn again, or the later queue pair
    would take the earlier one's frames (at 1024 ranks of a mesh, a device has 1023 of them)."""
    dev = _device(core)
    draws = iter([5000, 5000, 5000, 6000])
    dev.rng = type("Draws", (), {"randrange": lambda self, lo, hi: next(draws)})()
    a, b = dev.create_qp(), dev.create_qp()
    assert (a.qpn, b.qpn) == (5000, 6000) and dev.qps == {5000: a, 6000: b}


def test_a_finished_compiled_device_and_its_queue_pairs_are_freed():
    """The compiled device finds a frame's queue pair in a table that holds no reference (the queue pairs are
    its qp_list's): a device and its queue pairs, dropped, are freed by the cycle collector (with references
    it cannot see, none ever was)."""
    dev = _device("native")
    QueuePair = type(dev.create_qp())
    del dev

    def live() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is QueuePair)

    before = live()
    for _ in range(20):
        dev = _device("native")
        for _ in range(5):
            dev.create_qp()
    del dev
    assert live() == before


def _many_queue_pairs(core: str, rounds_run: int = 400, lose: int = 0, rounds: dict | None = None,
                      cancels: dict | None = None) -> tuple[list, list, list, int]:
    """Two devices back to back with 150 queue pairs each (three words of the compiled device's bitmap of
    queue pairs with work), written on a few at a time: some across word boundaries, some again after they
    went idle, some while others are busy. `lose`: every lose-th frame on the wire is lost, so that queue
    pairs wait on their recovery checks; `cancels`: the queue pairs whose unsent data is dropped at a round.
    What each step returned, every frame in order, the completions and
    the retransmissions."""
    wire: dict[str, list[bytes]] = {"a": [], "b": []}
    a = _device(core, wire["a"].append, "fd00::1", 1)
    b = _device(core, wire["b"].append, "fd00::2", 2)
    mra, mrb = a.reg_mr(1 << 16), b.reg_mr(1 << 16)
    pairs = [(a.create_qp(), b.create_qp()) for _ in range(150)]
    for qa, qb in pairs:
        qa.connect(qb.qpn, ["fd00::2"])
        qb.connect(qa.qpn, ["fd00::1"])
    rounds = rounds or {0: [0, 63, 64, 149], 3: [1, 64, 127], 40: [0, 63, 128, 149], 41: [2, 65, 100]}
    steps, frames = [], []
    t, wr, sent = 0, 0, 0
    for r in range(rounds_run):
        for i in rounds.get(r, []):
            wr += 1
            pairs[i][0].post_write(wr, mra, 0, 3000 + 100 * i, mrb.va, mrb.rkey)
            pairs[i][1].post_write(1000 + wr, mrb, 0, 1000, mra.va, mra.rkey)
        for i in (cancels or {}).get(r, []):
            pairs[i][0].cancel()
        steps.append((t, a.step(t), b.step(t)))
        for me, peer in (("a", b), ("b", a)):
            while wire[me]:
                frame = wire[me].pop(0)
                frames.append((t, me, bytes(frame)))
                sent += 1
                if not (lose and sent % lose == 0):
                    peer.on_frame(0, frame, t)
        t += 250_000  # a quarter of a microsecond a round
    done = [(c.wr_id, c.status) for c in a.poll_cq()] + [(c.wr_id, c.status) for c in b.poll_cq()]
    assert all(qa.idle() and qb.idle() for qa, qb in pairs)
    resent = sum(qa.retransmits + qb.retransmits for qa, qb in pairs)
    return steps, frames, done, resent


def test_a_device_with_many_queue_pairs_steps_as_the_reference():
    """The compiled step visits only the queue pairs that may have work (a bitmap in list order) in one
    pass; the reference visits all of them twice. The same frames in the same order, the same wake-ups and
    the same completions."""
    native, python = _many_queue_pairs("native"), _many_queue_pairs("python")
    assert len(native[2]) == 2 * 14 and len(native[1]) > 100
    assert native == python


def test_queue_pairs_waiting_on_their_timers_recover_as_the_reference():
    """A compiled queue pair whose only work is a time (its ACK's deadline, its recovery check) is parked on
    the device's timers, off the step's pass, until that time or a frame for it; the reference visits it
    at every step. With frames lost, parked queue pairs resend on their recovery checks alone: the same
    frames, wake-ups and completions."""
    native, python = _many_queue_pairs("native", 4000, 11), _many_queue_pairs("python", 4000, 11)
    assert len(native[2]) == 2 * 14 and native[3] > 0
    assert native == python


def test_queue_pairs_waiting_for_a_plane_send_as_the_reference():
    """A compiled queue pair whose data waits for a plane (none free) is left out of the step's pass while
    none is, its next send kept on the device's heap; the reference visits it at every step and finds no
    plane. Many writes at once on one plane, some posted again by queue pairs whose earlier packets are
    acknowledged (so one waits for a plane with nothing in flight, after waiting on its recovery check),
    and some whose waiting data is cancelled: the same frames, wake-ups and completions."""
    rounds = {0: [149], 5: list(range(8)), 30: [140, 148], 34: list(range(100, 110)), 80: [64, 149], 83: [0, 1]}
    cancels = {36: [108, 109], 84: [149]}
    native = _many_queue_pairs("native", 3000, 0, rounds, cancels)
    python = _many_queue_pairs("python", 3000, 0, rounds, cancels)
    assert native == python
