"""Packet trimming in the engine's switch, on the virtual clock: packet in, packet out (issue 23)."""

from __future__ import annotations

from typing import Any

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from emu import packet as pk
from emu.dataplane.spec import QosSpec, SpecError, TrimSpec
from emu.dataplane.wiring import VirtualFabric
from emu.simtime import NEVER, PS_PER_US, to_ps
from tests.helpers import host_mac, port_mac, star

pytestmark = pytest.mark.usefixtures("both_cores")

TRIMMABLE = 24 << 2 | 0b10  # DSCP 24, ECT(0): MetaRoCE's data in trimming mode
OTHER = 26 << 2  # DSCP 26: the same traffic class (3), not trimmable (MetaRoCE's ACKs)


def udp6(src: int, dst: int, tclass: int, size: int = 1000, sport: int = 1000) -> bytes:
    return bytes(Ether(src=host_mac(src), dst=port_mac(0, src))
                 / IPv6(src=f"fd00:0:{src}::2", dst=f"fd00:0:{dst}::2", tc=tclass)
                 / UDP(sport=sport, dport=4791) / (bytes(range(256)) * 4)[:size])


def incast(trim: TrimSpec | None, tclass: int = TRIMMABLE, senders: int = 4, packets: int = 300):
    tb = VirtualFabric(star(senders + 1, qos=QosSpec(pfc=True, buffer_per_port=128 * 1024, trim=trim)))
    for s in range(1, senders + 1):
        for i in range(packets):
            tb.send("s0", f"s0-eth{s}", udp6(s, 0, tclass, sport=1000 + i), t=0)
    tb.run()
    return tb, tb.switches["s0"]


def test_a_full_queue_trims_instead_of_dropping_and_pfc_is_off_for_the_trimmed_class():
    tb, sw = incast(TrimSpec())
    out = [Ether(f) for f in tb.frames("s0", "s0-eth0")]
    full = [f for f in out if len(f) > 200]
    cut = [f for f in out if len(f) <= 200]
    port = sw.ports[0]
    assert sum(port.trimmed) == len(cut) > 0 and port.trimmed[3] == len(cut)  # counted by the class it had
    assert len(full) + len(cut) == 4 * 300 and not port.drops  # nothing lost: cut instead
    assert sum(p.pfc_tx for p in sw.ports) == 0  # a trimmed class is lossy by design: no pause
    assert sw.stats(tb.loop.now)["ports"]["s0-eth0"]["trimmed"][3] == len(cut)
    assert sw.mmu.used == 0  # the headers were never charged, the data all released


def test_a_trimmed_frame_has_valid_lengths_checksums_and_the_trim_dscp():
    tb, _ = incast(TrimSpec(size=64, dscp=11))
    cut = [f for f in tb.frames("s0", "s0-eth0") if len(f) <= 200]
    f = Ether(cut[0])
    assert len(cut[0]) == 14 + 64
    ip = f[IPv6]
    assert ip.plen == 64 - 40 and ip.tc == 11 << 2 | 0b10  # DSCP rewritten, ECN bits kept
    assert f[UDP].len == 24 and f[UDP].dport == 4791
    sent = f[UDP].chksum
    del f[UDP].chksum
    assert IPv6(bytes(f[IPv6]))[UDP].chksum == sent  # scapy recomputes: the same
    whole = Ether(udp6(1, 0, TRIMMABLE))
    assert bytes(f[UDP].payload) == bytes(whole[UDP].payload)[:16]  # the first bytes survive as they were


def test_ipv4_trimmed_frame_is_valid_too():
    frame = bytes(Ether() / IP(src="10.0.1.2", dst="10.0.0.2", tos=TRIMMABLE) / UDP(sport=1, dport=4791)
                  / bytes(1000))
    f = Ether(bytes(pk.trim_frame(frame, 14, 4, 64, 11)))
    assert f[IP].len == 64 and f[IP].tos == 11 << 2 | 0b10 and f[UDP].len == 44 and f[UDP].chksum == 0
    sent = f[IP].chksum
    del f[IP].chksum
    assert IP(bytes(f[IP])).chksum == sent


def test_headers_go_out_first_strict_priority_over_the_data(monkeypatch):
    """A header waits at most for the frame already on the wire (and the headers before it), never for
    the data queued ahead of it, which is tens of frames deep."""
    trimmed_at: list[int] = []
    loops = []
    real = pk.trim_frame

    def record(*args):
        trimmed_at.append(loops[0].now)  # when the switch cut it: the event's time
        return real(*args)

    monkeypatch.setattr(pk, "trim_frame", record)
    monkeypatch.setattr(VirtualFabric, "run", lambda self, until=NEVER: (loops.append(self.loop),
                                                                               self.loop.run(until)))
    tb, sw = incast(TrimSpec())
    got = [t for t, f in tb.received[("s0", "s0-eth0")] if len(f) <= 200]
    assert len(got) == len(trimmed_at) > 0
    ser = 80  # ps a byte at 100 Gb/s
    data, header = (1062 + 14 + 24) * ser, (78 + 24) * ser
    waits = [r - t - header - PS_PER_US for t, r in zip(trimmed_at, got, strict=True)]  # less its own wire and cable
    assert max(waits) <= data + 4 * header, max(waits) / data
    assert max(sw.ports[0].tx.qhwm[3:4]) > 30 * 1100  # FIFO behind the data would have waited 30 frames and more


def test_the_header_queue_cap_drops_and_counts():
    tb, sw = incast(TrimSpec(cap_bytes=100))  # room for one header
    port = sw.ports[0]
    assert port.drops.get("trim_queue_full", 0) > 0
    assert sum(port.trimmed) + port.drops["trim_queue_full"] + len(
        [f for f in tb.frames("s0", "s0-eth0") if len(f) > 200]) == 4 * 300


def test_only_the_trimmable_dscp_is_cut_the_rest_of_its_class_is_dropped():
    tb, sw = incast(TrimSpec(), tclass=OTHER)
    assert sum(sw.ports[0].trimmed) == 0
    assert sum(sw.ports[0].drops.values()) > 0  # the class is lossy now (no PFC), and this DSCP is not cut


def test_without_trimming_the_same_incast_pauses_and_cuts_nothing():
    tb, sw = incast(None)
    assert sum(sw.ports[0].trimmed) == 0 and sum(p.pfc_tx for p in sw.ports) > 0


@pytest.mark.parametrize("kw", [{"size": 40}, {"dscp": 64}, {"dscp": 24}, {"queue": 8}, {"cap_bytes": 0}])
def test_an_impossible_trim_setting_is_one_clear_error(kw):
    with pytest.raises(SpecError):
        TrimSpec(**kw)


def test_the_trim_queue_must_be_strict_and_the_spec_survives_json():
    with pytest.raises(SpecError, match="strict"):
        QosSpec(trim=TrimSpec(queue=3))
    qos = QosSpec(trim=TrimSpec(size=128, dscp=12))
    assert QosSpec.from_dict(qos.to_dict()) == qos


@pytest.mark.root
@pytest.mark.mininet
def test_trimmed_frames_and_their_nacks_are_real_and_tshark_decodes_them(tmp_path, no_leftovers):
    """A MetaRoCE incast on a trimming fabric (fabric clock, pcap on): every byte arrives, every cut is
    NACKed (no timer fires), and on the receiver's port tshark reads the cut frames as RDMA writes with
    DSCP 11 and 24 bytes of UDP, and the NACKs going back as AETH syndrome 0x60."""
    import subprocess

    from emu import FabricNet, FPFTopo
    from emu.roce.run import EnginePerf

    with FabricNet(FPFTopo(gpus=5, planes=1, leaves=1), clock="fabric", pfc=False, trim=(64, 11),
                   buffer_per_port=64 << 10, pcap_dir=str(tmp_path)) as net:
        clients, server = EnginePerf(net.engine, [net.host_planes(f"gpu{i}") for i in range(1, 5)],
                                     net.host_planes("gpu0"), nbytes=256 << 10, cc="dcqcn", lat_iters=0,
                                     trim_dscp=11).wait()
    nacks = sum(c["trim_nacks"] for c in clients)
    assert server["data_ok"] and nacks > 0 and sum(c["timeouts"] for c in clients) == 0
    assert server["counters"]["trimmed"] == nacks and server["counters"]["bad_icrc"] == 0

    def fields(display: str, *names: str) -> list[list[str]]:
        args = [a for n in names for a in ("-e", n)]
        out = subprocess.run(["tshark", "-r", str(tmp_path / "p0l0-p0l0-eth1.pcap"), "-Y", display, "-T", "fields",
                              *args], capture_output=True, text=True, timeout=60).stdout
        return [line.split("\t") for line in out.splitlines() if line]

    cut = fields("ipv6.tclass.dscp == 11", "ipv6.plen", "udp.length", "infiniband.bth.opcode")
    assert cut and all(row == ["24", "24", "10"] for row in cut), cut[:5]  # RDMA WRITE Only, cut to 64 bytes
    syndromes = [int(s) for (s,) in fields("infiniband.aeth", "infiniband.aeth.syndrome")]
    assert syndromes.count(0x60) == len(cut) == nacks  # one NACK back for each cut delivered


def test_bad_trim_options_are_one_clear_error_before_anything_is_built():
    import subprocess
    import sys

    from emu.net.switch import RunSettings

    with pytest.raises(ValueError, match="trim size"):
        RunSettings(trim=(40, 11))
    with pytest.raises(ValueError, match="BMv2 keeps 64 bytes"):
        RunSettings(trim=(128, 11), backend="bmv2", clock="wall")
    assert RunSettings(trim=(64, 11), backend="bmv2", clock="wall").trim == (64, 11)
    for bad in ("abc", "64,11,3", "30"):
        out = subprocess.run([sys.executable, "-m", "emu.cli.main", "scenario", "trimming", "--trim", bad],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode != 0 and "trim" in out.stderr and "Traceback" not in out.stderr, out.stderr


# -- the endpoints' half: what a NACK makes the sender do (issue 41, item 5) -------------------------

TRIM_DSCP = 11


def _trimmed_write(core: str, cc: str, trims: int, nbytes: int = 64 << 10) -> tuple[list[tuple], Any, bool]:
    """Two MetaRoCE devices on two planes, joined by a wire of 1 us each way in virtual time; the first
    `trims` data packets host a sends on plane 0 arrive marked with the trim DSCP, as a trimming switch
    delivers them. What crossed each wire (time, from, plane, PSN, opcode, trimmed), a's queue pair, and
    whether b's memory holds the write. `core`: the endpoints' and the schedule's (both_cores)."""
    from emu.dataplane.loop import Loop
    from emu.roce import wire
    from emu.roce.endpoint import Endpoint

    loop = Loop(core=core)
    log: list[tuple] = []
    hosts: dict[str, Any] = {}
    data_ops = {0x06, 0x07, 0x08, 0x0A, 0x0B}  # RDMA write first, middle, last, only, only with immediate

    def carry(src: str, plane: int, frame: Any) -> None:
        f = bytearray(frame)
        op, _, psn, _ = wire.parse_bth(f[62:])
        cut = src == "a" and plane == 0 and op in data_ops and sum(x[5] for x in log) < trims
        if cut:  # the traffic class's DSCP, as the switch sets it on a trimmed packet
            tclass = TRIM_DSCP << 2
            f[14], f[15] = (f[14] & 0xF0) | tclass >> 4, (f[15] & 0x0F) | (tclass & 0x0F) << 4
        log.append((loop.now, src, plane, psn, op, cut))
        peer = hosts["b" if src == "a" else "a"]
        loop.at(loop.now + PS_PER_US, lambda t, fr: peer.deliver[plane](t, fr), bytes(f))

    class Host:
        def __init__(self, name: str) -> None:
            self.name, self.loop, self.deliver, self.core = name, loop, {}, core
            hosts[name] = self

        def attach(self, switch: str, port: str, deliver: Any) -> tuple[Any, bytes, bytes]:
            self.deliver[int(port)] = deliver
            return (lambda frame, p=int(port): carry(self.name, p, frame)), b"\x02" * 6, b"\x04" * 6

    def planes(h: int) -> list[list[Any]]:
        return [[f"s{p}", str(p), f"fd00:0:{p}:{h}::2", 100e9] for p in range(2)]

    fails: list[str] = []
    a = Endpoint.attached(Host("a"), planes(1), fails.append, "a", trim_dscp=TRIM_DSCP, cc=cc, seed=1)
    b = Endpoint.attached(Host("b"), planes(2), fails.append, "b", trim_dscp=TRIM_DSCP, cc=cc, seed=2)
    src, dst = a.dev.reg_mr(nbytes), b.dev.reg_mr(nbytes)
    src.buf[:] = bytes(i % 251 for i in range(nbytes))
    qa, qb = a.dev.create_qp(), b.dev.create_qp()
    qa.connect(qb.qpn, [p[2] for p in planes(2)])
    qb.connect(qa.qpn, [p[2] for p in planes(1)])

    def write() -> Any:
        qa.post_write(1, src, 0, nbytes, dst.va, dst.rkey)
        yield qa.idle

    done: list[int] = []
    a.start(write(), 0, lambda _, t: done.append(t))
    loop.run(until=to_ps(0.01))
    assert done and not fails, (done, fails)
    return log, qa, bytes(dst.buf) == bytes(src.buf)


def test_a_nacked_packet_is_resent_at_once_on_the_other_plane(both_cores):
    """Packet in, packet out: a data packet that arrives trimmed is NACKed by the receiver, and the sender
    sends that PSN again on the other plane (the trimming plane's queue was full a moment ago), long
    before any retransmission timer; the write is whole."""
    log, qa, whole = _trimmed_write(both_cores, "none", trims=1)
    (t_cut, _, _, psn, _, _), = [x for x in log if x[5]]
    again = [x for x in log if x[1] == "a" and x[3] == psn and x[4] != 0x11 and x[0] > t_cut]
    assert whole and qa.trim_nacks == 1 and qa.timeouts == 0
    assert again and again[0][2] == 1, again  # resent on plane 1, not the plane that trimmed it
    assert again[0][0] - t_cut < 10 * PS_PER_US, again  # a round trip and the NACK's turn, not an RTO (200 us)


def test_a_trim_counts_as_a_cnp_at_most_once_a_cnp_interval(both_cores):
    """With DCQCN a trim cuts the rate as a CNP does (DCQCN's only way down), but two trims within one CNP
    interval cut it once, as the receiver paces its CNPs; without congestion control nothing is cut. The cut
    is DCQCN's (emu.roce.cc, the reference's): a CNP at the trim's instant, alpha still 1, halves the rate."""
    from emu.roce.cc import make

    _, one, _ = _trimmed_write(both_cores, "dcqcn", trims=1)
    _, two, _ = _trimmed_write(both_cores, "dcqcn", trims=2)
    _, none, _ = _trimmed_write(both_cores, "none", trims=2)
    (t, cut), = one.rate_trace
    ref = make("dcqcn", one.cc.line_rate)
    ref.tick(to_ps(t))
    ref.on_cnp(to_ps(t))
    assert one.cc.cnps == 1 and one.trim_nacks == 1 and cut == ref.rate == one.cc.line_rate / 2, (cut, ref.rate)
    assert two.trim_nacks == 2 and two.cc.cnps == 1
    assert none.trim_nacks == 2 and none.cc.cnps == 0
