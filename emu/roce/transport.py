"""MetaRoCE endpoints: a user-space RoCEv2 RC transport that sprays every packet over all planes.

A Device is one host's NIC: one port per plane (the host's address on that
plane). Each port has a receive socket on UDP 4791 and a few send sockets
whose source ports are the flow entropy switches hash on. Verbs-like:
register memory (a key), create a queue pair, connect it through the
rendezvous, post writes, poll the completion queue; `progress()` turns the
crank (single-threaded; the caller drives it, as a NIC's firmware loop).

Reliability: every data packet is self-contained (RETH on each), so the
receiver places it on arrival whatever the order; it acknowledges the
cumulative PSN plus a SACK bitmap; the sender retransmits a PSN that later
ones overtook (three per plane, or any, at a transfer's tail) once it is
older than two round trips of the plane that carried it, or whose
retransmission timer ran out, on another plane. Spraying: each plane's share
of the packets follows its measured health (`Device._reweigh`: a plane that
queues more than the typical one gets less, one whose round trip exceeds the
fastest plane's by more than the SACK bitmap can cover gets none and is
probed, a lossy one keeps its share while it delivers most of what it is
given), or is equal (`spray="equal"`). Plane health: a plane that keeps losing packets stops getting new
ones; a probe goes over it now and then, and when one is acknowledged over
that plane, the plane is used again. A probe is a zero-length write that
repeats the last PSN acknowledged: it takes no new PSN, so a lost probe
leaves no hole for the cumulative ACK to wait on and is never resent, and
the responder answers it at once, as it answers any duplicate. A plane's losses
count only since the last packet it alone carried was acknowledged (a late
ACK is not a dead plane); a duplicate arrival, which the responder reports
(D-SACK), proves the plane charged with losing that packet only delayed it:
the loss is refunded and, if it was down, the plane is used again at once
(a stalled worker or a congested plane is not a dead one). The last plane
in use is never marked down: a device whose planes all look dead keeps
retransmitting on one and probing the rest, it does not stop.

The responder coalesces ACKs: one per ACK_EVERY data packets or ACK_DELAY_PS
of fabric time, whichever comes first, and at once for a packet that asks
(a retransmission or a probe) or that ends a write with immediate. Every
ACK is cumulative with the SACK bitmap, so a lost ACK costs nothing but time.

Time comes from one clock (emu.clock), and it is fabric seconds either way:
inside the engine, the engine's loop, frames going to and from the switch
port as whole Ethernet/IPv6/UDP frames (`FabricIO`), with `step(now)` saying
when the device next has something to do; in its own process in a host's
namespace (BMv2, kernel UDP sockets), a `ProcessClock` ((monotonic() - epoch) / D),
`progress()` sleeping in select(). D is applied by that clock where the
process sleeps and where it reports its lateness, never in the logic, which
is the same code either way.
"""

from __future__ import annotations

import errno
import mmap
import os
import random
import select
import socket
import struct
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from emu import packet as pk
from emu.clock import Clock, ProcessClock
from emu.fidelity import Lateness, Part, tight_timers
from emu.roce import wire
from emu.roce.cc import CongestionControl, make
from emu.simtime import NEVER, PS_PER_US, rate_of, ser_ps, to_ps, to_s

HEADERS = wire.DATA_HEADER + wire.ICRC_BYTES + 8 + 40 + 14 + 24  # RoCE + UDP + IPv6 + Ethernet + wire
TC_DATA = 26 << 2 | 0b10  # lossless class, ECT(0)
# Trimming mode: data is marked DSCP 24 (the same class, 3, but the switches' trimmable DSCP) so that
# a switch cuts it rather than drop it, while ACKs keep DSCP 26 and are never cut.
TC_DATA_TRIMMABLE = 24 << 2 | 0b10
TC_ACK = 26 << 2
TC_CNP = 48 << 2
DUP_THRESH = 3
# Packets due within this much wall time are sent in one go: the engine's model of the host NIC
# (at the switch port's ingress) serialises them at line rate whenever they arrive, so sending a
# little early costs no fidelity, while a sleep that short would cost a timer wake-up each (about
# 50 us with the default timer slack, more than a packet's whole budget).
BURST_S = 20e-6  # wall seconds
LOSS_TO_DOWN = 8
CHARGED_KEPT = 4096  # retransmitted PSNs remembered for a late duplicate's refund
ACK_EVERY = 16  # data packets per coalesced ACK
ACK_DELAY_PS = PS_PER_US // 2  # fabric time an arrival waits for its ACK at most
ENTROPY = 4
SPRAYS = ("weighted", "equal")
LOSS_GAIN = 1 / 256  # a plane's loss rate averages over about this many of its packets' fates
W_MIN = 1 / 16  # the least share a live plane keeps: enough to keep measuring it
W_STEP = 1 / 64  # the most a plane's weight grows by an ACK: a queue that drained while idle is no cure
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_CMSG_SPACE = socket.CMSG_SPACE(4) + socket.CMSG_SPACE(16)  # traffic class + kernel arrival stamp
_TIMESPEC = struct.Struct("qq")


class RoceError(RuntimeError):
    pass


def zeroed(size: int) -> memoryview:
    """A region's memory, zero-filled: an anonymous mapping, which the kernel maps as it is first touched
    (a bytearray writes every byte first, a second pass over memory that took a tenth of a second for the
    256 MiB of a 16 MiB allreduce on 8 GPUs), and whose pages can be given back (release)."""
    return memoryview(mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS))[:size]


def release(buf: memoryview, start: int, nbytes: int) -> None:
    """Give the kernel back the whole pages of region memory `buf[start:start + nbytes]` (from zeroed()),
    which then read as zero: a staging slice once its data has been used. A collective's staging then
    holds a few slices at a time rather than its whole size (half the memory of 512 ranks' allreduce), and
    the pages it touches next are ones the kernel just had back."""
    owner = buf.obj
    if not isinstance(owner, mmap.mmap):
        return
    page = mmap.PAGESIZE
    lo = -(-start // page) * page
    hi = (start + nbytes) // page * page
    if hi > lo:
        owner.madvise(mmap.MADV_DONTNEED, lo, hi - lo)


@dataclass(frozen=True)
class MemoryRegion:
    va: int
    rkey: int
    buf: memoryview  # writable bytes (zeroed()); a bytearray serves as well

    @property
    def size(self) -> int:
        return len(self.buf)

    def info(self) -> dict[str, int]:
        return {"va": self.va, "rkey": self.rkey, "size": self.size}


@dataclass(frozen=True, slots=True)  # slots: 64 bytes, not 104 (a ring's receiver makes one a message)
class Completion:
    wr_id: int  # the work request's id; for a receive completion, the immediate
    status: str  # "ok" or the reason
    byte_len: int
    qpn: int = 0


@dataclass(slots=True)
class Segment:
    psn: int
    va: int
    rkey: int
    view: memoryview
    wr: int
    plane: int = -1
    sent_at: int = 0  # picoseconds
    sends: int = 0
    acked: bool = False
    imm: int | None = None  # the last segment of a write with immediate carries it


@dataclass
class Plane:
    """One port of the device. Its sockets are the kernel's (wall clock); on the fabric clock there
    are none, and its UDP source ports are fixed numbers (the same run hashes the same way)."""

    index: int
    addr: str
    addr_b: bytes
    rx: socket.socket | None
    tx: list[Any]
    tx_ports: list[int]
    ctl: Any
    ctl_port: int
    cnp: Any
    cnp_port: int
    next_free: int = 0  # picoseconds, as every time here
    healthy: bool = True
    losses: int = 0
    probe_due: int = 0
    probe_psn: int = -1  # the PSN the last probe over this plane repeated
    probe_at: int = -1  # when it went (its answer is a round trip sample of the plane)
    # Health (weighted spraying): the plane's own round trip, smoothed and least seen, the share of its
    # packets it loses (smoothed), and the weight they give it (its share of the sends).
    srtt: int = 0
    base_rtt: int = NEVER
    loss_rate: float = 0.0
    weight: float = 1.0
    stats: dict[str, int] = field(default_factory=lambda: {"tx_packets": 0, "tx_bytes": 0, "rx_packets": 0,
                                                           "retransmits": 0, "probes": 0,
                                                           "tx_after_down": 0, "downs": 0,
                                                           "spurious_retransmits": 0, "trims": 0,
                                                           "excluded": 0})


class QueuePair:
    def __init__(self, dev: Device, qpn: int, cc: CongestionControl) -> None:
        self.dev = dev
        self.qpn = qpn
        self.cc = cc
        self.remote_qpn = -1
        self.remote_planes: list[bytes] = []
        self.remote_addrs: list[str] = []
        # requester
        self.next_psn = 0
        self.pending: deque[Segment] = deque()
        self.inflight: dict[int, Segment] = {}
        self.sacked = 0  # segments in `inflight` already SACKed: delivered, kept until the cumulative ACK
        self.cum_acked = -1
        # When the cumulative ACK last moved (RFC 6298, 5.3: the timer restarts on new data acknowledged):
        # a long queue that delays but delivers is not a loss.
        self.cum_at = 0
        # After a timer fired, every packet then in flight (up to this PSN) is timed from its own send
        # until the cumulative ACK passes it: a loss the timer found is repaired at once, not one hole
        # per restart (TCP's recovery point after a timeout).
        self.recover_psn = -1
        self.wrs: deque[tuple[int, Segment, int, bool]] = deque()  # (wr_id, its last segment, bytes, signaled)
        self.next_send = 0
        self.ready_at = 0  # when the queue last became non-empty: a send is due no earlier
        self.window_full = False  # sends wait for ACKs: not late while they do
        self.srtt = 0
        self.retransmits = 0
        self.timeouts = 0  # retransmissions the timer sent (no SACK, no NACK had said the packet was lost)
        self.trim_nacks = 0  # NACKs for trimmed packets: each resent at once, on another plane
        self.resend: deque[int] = deque()  # PSNs a NACK asked for again, to go before new data
        self.last_trim_cut = -1  # when a trim last cut the rate (at most once a CNP interval; -1: never)
        # PSN -> the plane its last retransmission charged with losing it and when that copy was sent
        # (-1: not the first copy), until a duplicate arrival
        # proves that plane innocent (kept past the cumulative ACK: the duplicate may come later).
        self.charged: dict[int, tuple[int, int]] = {}
        self.rate_trace: list[tuple[float, float]] = []  # (fabric s, bps): on every CNP and every sample
        self.highest_sacked = -1
        self.sacked_since = False
        # How much longer than two round trips a packet that later ones overtook may still be on its
        # way (RACK's reordering window, RFC 8985): grown by a quarter round trip each time a packet
        # taken for lost arrives after all, up to two round trips. Spraying over planes whose queues
        # differ (an ECMP collision on one leaf uplink) reorders by more than a fixed rule allows.
        self.reo_wnd = 0
        self.rto_check = 0
        self.error: str | None = None
        # responder
        self.expected = 0
        self.newest = -1  # the PSN that arrived last: each ACK echoes it, the requester's RTT sample
        self.beyond: set[int] = set()
        self.ack_due = False
        self.ack_unsent = 0  # data packets arrived since the last ACK
        self.ack_deadline = 0  # when a coalesced ACK goes out at the latest
        self.ack_plane = 0
        self.last_cnp = -1  # when this receiver last sent a CNP (-1: never)
        self.cnps_sent = 0
        self.bad = 0
        self.rx_bytes = 0
        self.imm_wait: dict[int, int] = {}  # PSN of a write-with-immediate's last packet -> immediate
        self.rx_trace: list[tuple[float, int]] = []  # (fabric s, bytes placed so far), sampled

    def connect(self, remote_qpn: int, remote_addrs: list[str]) -> None:
        if len(remote_addrs) != len(self.dev.planes):
            raise RoceError(f"the peer has {len(remote_addrs)} planes, this device {len(self.dev.planes)}")
        self.remote_qpn = remote_qpn
        self.remote_addrs = list(remote_addrs)
        self.remote_planes = [wire.ip6(a) for a in remote_addrs]

    def post_write(self, wr_id: int, mr: MemoryRegion, offset: int, length: int, remote_va: int, rkey: int,
                   imm: int | None = None, signaled: bool = True) -> None:
        """Write mr[offset:offset+length] to the peer's memory at remote_va (its key rkey). With an
        immediate (32 bits), the peer gets a receive completion carrying it once the whole write, and
        everything posted before it, is placed. Signaled (ibverbs' IBV_SEND_SIGNALED), the write's own
        completion is in poll_cq() once it is acknowledged; unsignaled, only if it fails."""
        if self.remote_qpn < 0:
            raise RoceError("the queue pair is not connected")
        if self.error:  # a queue pair in error flushes what is posted to it, as verbs does
            self.dev.cq.append(Completion(wr_id, f"flushed: {self.error}", 0, self.qpn))
            return
        if offset < 0 or length < 0 or offset + length > mr.size:
            raise RoceError(f"write of {length} B at {offset} is outside the {mr.size} B region")
        if not self.pending:
            self.ready_at = self.dev.clock.clock()  # segmenting below counts against the first send
        mtu = self.dev.mtu
        view = memoryview(mr.buf)
        first = True
        pos = 0
        seg = None
        while first or pos < length:
            n = min(mtu, length - pos)
            # PSNs are given at first transmission, so the in-flight table stays in PSN order
            # even when a probe goes out between two posted segments.
            seg = Segment(-1, remote_va + pos, rkey, view[offset + pos: offset + pos + n], wr_id)
            self.pending.append(seg)
            pos += n
            first = False
        assert seg is not None
        if imm is not None:
            seg.imm = imm & 0xFFFFFFFF
        self.wrs.append((wr_id, seg, length, signaled))

    def busy(self) -> bool:
        return bool(self.pending or self.inflight)

    def idle(self) -> bool:
        """Nothing posted is still to send or unacknowledged: what an operation waits on (a wait the
        compiled device evaluates itself, emu.roce._device)."""
        return not (self.pending or self.inflight)

    def cancel(self) -> None:
        """Drop what is posted and not yet sent (a write may be cut short: the peer holds part of it);
        what is in flight still completes. Its work requests complete no more."""
        self.pending.clear()
        self.wrs.clear()

    def fail(self, why: str) -> None:
        """The queue pair is in error: every work request completes with `why`, nothing more is sent."""
        self.error = why
        for wr_id, *_ in self.wrs:
            self.dev.cq.append(Completion(wr_id, why, 0, self.qpn))
        self.wrs.clear()
        self.pending.clear()
        self.inflight.clear()
        self.resend.clear()
        self.sacked = 0


FABRIC_TX_PORTS = tuple(range(49152, 49152 + ENTROPY))  # fabric clock: fixed source ports, for determinism
FABRIC_CTL_PORT = 49168
FABRIC_CNP_PORT = 49169


class KernelIO:
    """A device's ports as the kernel's UDP sockets in this namespace (the wall clock): one receive socket
    on UDP 4791 per plane and a few send sockets (ENTROPY data ports, control, CNP), read by
    `Device.progress`. Packets due within BURST_S go in one go (a sleep that short costs more than it
    saves), and a plane marked down is probed at most every 10 ms of wall time."""

    burst = BURST_S  # wall seconds
    min_probe_s = 0.01

    def open_plane(self, i: int, addr: str, tc_data: int) -> Plane:
        def sock(port: int, tclass: int) -> socket.socket:
            s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, tclass)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            try:
                s.bind((addr, port))
            except OSError as exc:
                s.close()
                if exc.errno == errno.EADDRINUSE:
                    raise RoceError(f"UDP {port} on {addr} is already in use (another MetaRoCE device?)") from None
                raise RoceError(f"cannot bind {addr}:{port}: {exc.strerror}") from None
            s.setblocking(False)
            return s

        rx = sock(wire.ROCE_PORT, 0)
        rx.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE
        rx.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVTCLASS, 1)
        rx.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        tx = [sock(0, tc_data) for _ in range(ENTROPY)]
        ctl, cnp = sock(0, TC_ACK), sock(0, TC_CNP)
        return Plane(i, addr, wire.ip6(addr), rx, tx, [s.getsockname()[1] for s in tx], ctl, ctl.getsockname()[1],
                     cnp, cnp.getsockname()[1])

    @staticmethod
    def start() -> None:
        tight_timers()  # this process's timers woken within a microsecond, not the kernel's default 50

    @staticmethod
    def send_packet(plane: Plane, k: int, sport: int, tclass: int, dst: bytes, dst_text: str, payload: Any) -> bool:
        """Through the socket whose source port is `sport` (k: which data socket; -1 ctl, -2 cnp); False if
        the kernel would block (nothing changed: try again later)."""
        try:
            if k >= 0:
                plane.tx[k].sendmsg(payload, (), 0, (dst_text, wire.ROCE_PORT))  # in pieces, nothing copied
            else:
                (plane.ctl if k == -1 else plane.cnp).sendto(payload, (dst_text, wire.ROCE_PORT))
        except BlockingIOError:
            return False
        return True


class FabricIO:
    """A device's ports on the fabric clock: each plane's frames go straight to its switch port's NIC
    model (`send[plane](frame)`), built whole here (Ethernet, IPv6 with its traffic class, UDP with
    its checksum, RoCEv2 with its ICRC), and arrive through `Device.on_frame`. No kernel socket, fixed
    UDP source ports (the same run hashes the same way), and every send woken exactly when it is due."""

    burst = 0.0  # wall seconds: none
    min_probe_s = 0.0

    def __init__(self, send: list[Any], host_macs: list[bytes], switch_macs: list[bytes]) -> None:
        self.send = send
        self.head = [switch_macs[i] + host_macs[i] + b"\x86\xdd" for i in range(len(send))]

    @staticmethod
    def open_plane(i: int, addr: str, tc_data: int) -> Plane:
        return Plane(i, addr, wire.ip6(addr), None, [None] * ENTROPY, list(FABRIC_TX_PORTS), None, FABRIC_CTL_PORT,
                     None, FABRIC_CNP_PORT)

    @staticmethod
    def start() -> None:
        pass

    def send_packet(self, plane: Plane, k: int, sport: int, tclass: int, dst: bytes, dst_text: str,
                    payload: Any) -> bool:
        self.send[plane.index](pk.udp6_frame(self.head[plane.index], tclass, plane.addr_b, dst, sport,
                                             wire.ROCE_PORT, payload))
        return True


# Packets a queue pair may have in flight where its paths are short (a few microseconds at any rate this
# project models); jobs over long links give more (emu.collectives.run.transport_for). Also the compiled
# device's default.
WINDOW = 512
RTO_S = 200e-6  # the retransmission timer's floor, fabric seconds, where the paths are short (likewise)


class Device:
    def __init__(self, addrs: list[str], *, dilation: float = 1.0, plane_rate_bps: float = 100e9, mtu: int = 1024,
                 cc: str = "none", window: int = WINDOW, rto_fabric_s: float = RTO_S, seed: int | None = None,
                 clock: Clock | None = None, io: KernelIO | FabricIO | None = None, trim_dscp: int | None = None,
                 spray: str = "weighted", retry_limit: int | None = None, rtt_hint_fabric_s: float = 0.0,
                 payload: bool = True, epoch_s: float | None = None) -> None:
        """`clock` and `io`: a ProcessClock at `dilation` counting from monotonic instant `epoch_s` (by
        default from now; emu.clock.ProcessClock) and KernelIO (the default: kernel sockets bound to
        `addrs`, in this namespace), or the engine's loop and the FabricIO
        of the host's switch ports (`dilation` unused). Every time inside is whole picoseconds of fabric time
        (emu.simtime): the settings in seconds are rounded once, here. `trim_dscp`:
        trimming mode (the fabric's switches cut instead of dropping): data goes out trimmable, and a
        packet that arrives with this DSCP is a trimmed one, NACKed at once. `spray`: "weighted" (each
        plane's share follows its measured health, `_reweigh`) or "equal" (every live plane alike).
        `retry_limit`: timer retransmissions of one packet after which its queue pair fails with
        "retry exceeded" (RoCE's retry_cnt: a peer that never answers is dead); None: never.
        `rtt_hint_fabric_s`: a queue pair's round trip until it has measured one (its timer is 4 of them,
        as it is 4 measured ones later): the longest path's, where that is long (emu.collectives.run).
        `payload`: False keeps what arrives out of the memory regions (headers only, as htsim: a region
        nobody writes is never given pages), still counting every byte accepted (`rx_bytes`); what is sent
        is read from the regions, which a headers-only run never writes (the compiled device sends zeros
        without reading them)."""
        if not addrs:
            raise RoceError("a device needs at least one port (plane address)")
        if spray not in SPRAYS:
            raise RoceError(f"spray is one of {', '.join(SPRAYS)}, not {spray!r}")
        self.spray = spray
        self.payload = payload
        self.retry_limit = retry_limit
        self.alarm_at = NEVER  # the user's own wake-up (Device.alarm)
        self.trim_dscp = trim_dscp
        self.tc_data = TC_DATA if trim_dscp is None else TC_DATA_TRIMMABLE
        self.clock = clock = clock if clock is not None else ProcessClock(dilation, epoch_s)
        # In a process of its own, the clock says how long the wall's waits and lateness are in fabric time.
        self.process = clock if isinstance(clock, ProcessClock) else None
        self.io = io = io if io is not None else KernelIO()
        # Sends due within this go in one go; a plane marked down is probed at most this often (the wall's
        # seconds in a process of its own, where the kernel's timers are what it saves).
        self.burst = self.process.fabric_ps_of_wall(io.burst) if self.process else to_ps(io.burst)
        self.min_probe = self.process.fabric_ps_of_wall(io.min_probe_s) if self.process else to_ps(io.min_probe_s)
        self.mtu = mtu
        self.window = window
        self.cc_name = cc
        self.plane_rate = plane_rate_bps
        self.wire_rate = rate_of(plane_rate_bps)  # whole bit/s, what a packet's time on a plane is of
        self.rto = to_ps(rto_fabric_s)
        self.rtt_hint = to_ps(rtt_hint_fabric_s)
        self.ack_delay = ACK_DELAY_PS
        # How far apart in time the planes may deliver: a packet on a plane slower than the rest holds
        # the cumulative ACK, and what arrives more than SACK_BITS packets past it is reported late and
        # counts against the window, so the whole connection stalls. At the device's full rate that
        # is SACK_BITS packets' time (2.9 us at 8 x 100G, 1 KiB MTU).
        self.reorder_budget = ser_ps(wire.SACK_BITS * (mtu + HEADERS), self.wire_rate) // len(addrs)
        self.rng = random.Random(seed)
        self.planes = [io.open_plane(i, a, self.tc_data) for i, a in enumerate(addrs)]
        self.qps: dict[int, QueuePair] = {}
        self.mrs: dict[int, MemoryRegion] = {}
        self.cq: deque[Completion] = deque()
        self.recv_cq: deque[Completion] = deque()  # writes with immediate, whole and in order
        self.counters = {"bad_icrc": 0, "truncated": 0, "unknown_qp": 0, "nak_sent": 0, "ce_marked": 0,
                         "duplicates": 0, "trimmed": 0}
        self.sample_every = 10 * PS_PER_US  # receive-side throughput samples every 10 us of fabric time
        self.next_sample = 0
        self.plane_trace: list[tuple[float, list[int]]] = []  # (fabric s, bytes sent per plane), sampled
        io.start()
        self.rx_fds = [p.rx.fileno() for p in self.planes if p.rx is not None]
        self.rx_buf = bytearray(65536)  # every packet is received into this one buffer
        self.rx_view = memoryview(self.rx_buf)
        self.src_cache: dict[str, bytes] = {}  # sender address text -> its 16 bytes
        # Fidelity: sends against their paced slot, receives against the kernel's arrival stamp (wall s in
        # a process of its own; inside the engine, fabric seconds).
        self.send_late = Lateness()
        self.recv_late = Lateness()

    # -- resources --------------------------------------------------------------

    def reg_mr(self, size: int) -> MemoryRegion:
        mr = MemoryRegion(va=self.rng.randrange(1 << 20, 1 << 40) << 12, rkey=self.rng.randrange(1, 1 << 32),
                          buf=zeroed(size))
        self.mrs[mr.rkey] = mr
        return mr

    def create_qp(self) -> QueuePair:
        qpn = self.rng.randrange(0x100, 0xFFFFFF)
        while qpn in self.qps:  # a number taken would take the other's frames
            qpn = self.rng.randrange(0x100, 0xFFFFFF)
        qp = QueuePair(self, qpn, make(self.cc_name, self.plane_rate * len(self.planes)))
        self.qps[qpn] = qp
        return qp

    def close(self) -> None:
        for p in self.planes:
            for s in (p.rx, p.ctl, p.cnp, *p.tx):
                if s is not None:
                    s.close()

    # -- the crank ------------------------------------------------------------------

    def progress(self, max_wait: float = 0.001) -> None:
        """In a process of its own: take what arrived, do what is due, sleep until the next thing is (at most
        `max_wait` wall seconds). The one place its fabric time meets the wall's: the sleep."""
        clock = self.process
        if clock is None:
            raise RoceError("progress() drives a device in a process of its own; the engine's loop drives this one")
        now = clock.clock()
        self._receive(now)
        now = clock.clock()
        due = self.step(now)
        wait = min(max_wait, max(0.0, clock.wall_s_of_fabric(due - now)))
        # select() sleeps with microsecond resolution (poll and epoll round up to whole ms, a
        # packet time at D = 10 000): no busy loop, so the engine's workers keep the cores.
        # Wake BURST_S before the next send is due: a wake-up a little late still sends on time.
        select.select(self.rx_fds, (), (), wait - BURST_S if wait > 2 * BURST_S else 0.0)

    def alarm(self, at: int) -> None:
        """Be woken at `at` (this device's clock) even if nothing of its own is due then: a user's timer."""
        self.alarm_at = min(self.alarm_at, at)

    def step(self, now: int) -> int:
        """Everything due at `now` (ACKs, congestion control, recovery, sends, probes); returns when the
        device next has something to do of its own (NEVER: only an arrival can wake it)."""
        if now >= self.alarm_at:
            self.alarm_at = NEVER
        if now >= self.next_sample:
            self.next_sample = now + self.sample_every
            for qp in self.qps.values():
                if qp.rx_bytes and (not qp.rx_trace or qp.rx_trace[-1][1] != qp.rx_bytes):
                    qp.rx_trace.append((to_s(now), qp.rx_bytes))
                if qp.busy() and (not qp.rate_trace or qp.rate_trace[-1][1] != qp.cc.rate):
                    qp.rate_trace.append((to_s(now), qp.cc.rate))
            sent = [p.stats["tx_bytes"] for p in self.planes]
            if any(sent) and (not self.plane_trace or self.plane_trace[-1][1] != sent):
                self.plane_trace.append((to_s(now), sent))
        for qp in self.qps.values():
            if qp.ack_due and now >= qp.ack_deadline:
                self._send_ack(qp)
            qp.cc.tick(now)
            if qp.resend:
                self._resend(qp, now)
            self._recover(qp, now)
            self._send_data(qp, now)
        self._probe_planes(now)
        due = NEVER
        for qp in self.qps.values():
            if (qp.pending and len(qp.inflight) - qp.sacked < self.window) or qp.resend:
                free = min((p.next_free for p in self.planes if p.healthy and p.weight), default=now)
                due = min(due, max(qp.next_send, free))
            if qp.ack_due:
                due = min(due, qp.ack_deadline)
            if qp.inflight:
                due = min(due, qp.rto_check)
        for p in self.planes:
            if not (p.healthy and p.weight):
                due = min(due, p.probe_due)
        return min(due, self.alarm_at)

    def run_until_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while any(qp.busy() for qp in self.qps.values()):
            if time.monotonic() > deadline:
                raise RoceError(f"transfer did not complete in {timeout:g} s: {self.describe()}")
            self.progress()

    def describe(self) -> str:
        """Where every busy queue pair stands, and the planes: what a stalled transfer reports."""
        now = self.clock.clock()
        qps = []
        for qp in self.qps.values():
            if not qp.busy():
                continue
            text = f"QP {qp.qpn:#x}: {len(qp.pending)} pending, {len(qp.inflight)} in flight"
            if qp.inflight:
                old = qp.inflight[min(qp.inflight)]
                text += (f" (oldest PSN {old.psn}, sent {old.sends} times, last on plane {old.plane} "
                         f"{to_s(now - old.sent_at):.2f} s ago{', SACKed' if old.acked else ''})")
            text += (f", acked to {qp.cum_acked}, highest SACKed {qp.highest_sacked}, srtt {_ms(qp.srtt)} ms, "
                     f"RTO {_ms(max(self.rto, 4 * (qp.srtt or self.rtt_hint) + self.ack_delay))} ms, "
                     f"next send in {_ms(qp.next_send - now)} ms, {qp.retransmits} retransmits")
            qps.append(text)
        planes = ", ".join(f"plane {p.index} {'up' if p.healthy else 'down'} (losses {p.losses}, "
                           f"free in {_ms(p.next_free - now)} ms)" for p in self.planes)
        return f"{'; '.join(qps)}; {planes}"

    def has_recv(self) -> bool:
        """A receive completion is waiting: what an operation waits on (see QueuePair.idle)."""
        return bool(self.recv_cq)

    def idle(self) -> bool:
        """None of its queue pairs is busy: what an operation waits on (see QueuePair.idle)."""
        return not any(qp.busy() for qp in self.qps.values())

    def poll_cq(self) -> list[Completion]:
        out = list(self.cq)
        self.cq.clear()
        return out

    def poll_recv(self) -> list[Completion]:
        """Receive completions: one per write with immediate, in the order the peer posted them."""
        out = list(self.recv_cq)
        self.recv_cq.clear()
        return out

    # -- sending ----------------------------------------------------------------------

    def _pick_plane(self, qp: QueuePair, now: int, avoid: int = -1) -> Plane | None:
        """The healthy plane whose wire frees first: spraying that keeps every plane as busy as its
        weight says (a plane of weight 0 carries only probes)."""
        best = None
        for p in self.planes:
            if p.healthy and p.weight and p.index != avoid and (best is None or p.next_free < best.next_free):
                best = p
        return best if best is not None and best.next_free <= now + self.burst else None

    def _usable_besides(self, index: int) -> bool:
        """Whether a plane other than `index` carries data (healthy, weight above 0): a resend avoids the plane
        that lost or trimmed it only then. Counting planes excluded for their lateness (weight 0) left a resend
        waiting for a plane it could never take, and the device woke at the same instant for ever (a Tahan
        alltoall stuck at 1.000000911 s)."""
        return any(p.healthy and p.weight and p.index != index for p in self.planes)

    def _transmit(self, qp: QueuePair, seg: Segment, plane: Plane, now: int) -> bool:
        """Send seg on plane; False if the socket would block (nothing changed: try again later).
        A new segment takes its PSN only once it is on the wire, so a PSN is never skipped."""
        psn = seg.psn if seg.psn >= 0 else qp.next_psn
        k = psn % ENTROPY  # the source port (flow entropy) rotates with the PSN
        frame = wire.data_frame(plane.addr_b, qp.remote_planes[plane.index], plane.tx_ports[k], qp.remote_qpn,
                                psn, seg.va, seg.rkey, seg.view, ack_req=seg.sends > 0, imm=seg.imm)
        if not self._send(plane, k, plane.tx_ports[k], self.tc_data, qp.remote_planes[plane.index],
                          qp.remote_addrs[plane.index], frame):
            return False
        if seg.psn < 0:
            seg.psn = psn
            qp.next_psn += 1
        size = len(seg.view) + HEADERS + (0 if seg.imm is None else wire.IMM_BYTES)
        # A plane of weight w is offered a packet every 1/w of its wire's time: its share of the sends.
        plane.next_free = max(plane.next_free, now) + share_ps(ser_ps(size, self.wire_rate), plane.weight)
        # The rate control's pacing keeps one packet of credit: a send that waited for a plane (their
        # sends fall out of step once weights differ) does not also lose its slot at the rate.
        gap = ser_ps(size, rate_of(qp.cc.rate))
        qp.next_send = max(qp.next_send, now - gap) + gap
        plane.stats["tx_packets"] += 1
        plane.stats["tx_bytes"] += len(seg.view)
        if not plane.healthy:
            plane.stats["tx_after_down"] += 1
        seg.plane = plane.index
        seg.sent_at = now
        seg.sends += 1
        qp.inflight[seg.psn] = seg
        return True

    def _send_data(self, qp: QueuePair, now: int) -> None:
        if qp.window_full:
            if len(qp.inflight) - qp.sacked >= self.window:
                return
            # The fabric held this sender (its window was full, waiting for ACKs): it was not late,
            # and its schedule starts again from the ACK that opened the window.
            qp.window_full = False
            qp.ready_at = max(qp.ready_at, now)
        horizon = now + self.burst
        if qp.pending and len(qp.inflight) - qp.sacked >= self.window:
            qp.window_full = True
            return
        while qp.pending and len(qp.inflight) - qp.sacked < self.window and qp.next_send <= horizon:
            plane = self._pick_plane(qp, now)
            if plane is None:
                return
            due = max(qp.next_send, plane.next_free, qp.ready_at)
            if not self._transmit(qp, qp.pending[0], plane, now):
                return
            qp.pending.popleft()
            late = now - due if now > due else 0
            self.send_late.add(self.process.wall_s_of_fabric(late) if self.process else to_s(late))

    def _recover(self, qp: QueuePair, now: int) -> None:
        """Retransmit what SACKs or the timer say is lost, on another plane."""
        if not qp.inflight or (not qp.sacked_since and now < qp.rto_check):
            return
        qp.sacked_since = False
        rto = max(self.rto, 4 * (qp.srtt or self.rtt_hint) + self.ack_delay)
        qp.rto_check = now + rto // 4
        highest = qp.highest_sacked
        # Spraying reorders by design: a PSN counts as lost only when packets sent after it on
        # every plane have overtaken it (or, with nothing left to send, any later one has: the tail of a
        # transfer has no more packets to overtake it), and it is older than two round trips of the
        # plane it went by (a slow or long plane's packets are late, not lost) and an ACK's delay. One
        # that is overtaken but not yet old enough sets the check for when it will be (RACK's reorder
        # timer): no later ACK may come to wake the sender, and the retransmission timer is far off.
        reorder = DUP_THRESH * len(self.planes) if qp.pending else 1
        for seg in qp.inflight.values():  # insertion order is PSN order; a resend only rebinds its key
            # A first copy nothing later has overtaken runs its timer from the last cumulative ACK if that
            # came after it was sent: a queue that delays it but delivers what went before it is not its
            # loss (RFC 6298 5.3). One overtaken (a hole), resent, or in flight when a timer last fired
            # runs from its own send: holes are not made to wait for each other's repair.
            since = (qp.cum_at if seg.sends == 1 and seg.psn > highest and qp.cum_at > seg.sent_at
                     and seg.psn > qp.recover_psn else seg.sent_at)
            if seg.psn > highest and now - since < rto:
                break  # later packets were sent later still
            if seg.acked:
                continue
            overtaken = False
            if highest - seg.psn >= reorder and qp.srtt > 0 and seg.sends == 1:
                lost_at = seg.sent_at + 2 * (self.planes[seg.plane].srtt or qp.srtt) + self.ack_delay + qp.reo_wnd
                overtaken = now >= lost_at
                if not overtaken and lost_at < qp.rto_check:
                    qp.rto_check = lost_at
            backoff = rto * (1 << min(seg.sends - 1, 6))  # each timeout of the same packet doubles its timer
            timer = now - since >= backoff
            if timer and self.retry_limit is not None and seg.sends > self.retry_limit:
                qp.fail("retry exceeded")
                return
            if (overtaken and seg.sends == 1) or timer:
                lost_on = self.planes[seg.plane]
                # Never back onto the plane that lost it while another one carries data: wait for a free one.
                usable = self._usable_besides(seg.plane)
                plane = self._pick_plane(qp, now, avoid=seg.plane if usable else -1)
                first_sent = seg.sent_at if seg.sends == 1 else -1
                if plane is None or not self._transmit(qp, seg, plane, now):
                    # Come back when a plane frees, before new data takes it: without this the
                    # retransmission waits for an ACK that lands while a plane is free, and at line
                    # rate that is rare (the window fills behind the hole).
                    free = [p.next_free for p in self.planes
                            if p.healthy and p.weight and (p.index != seg.plane or not usable)]
                    qp.rto_check = max(min(free, default=now) if plane is None else now, now + self.burst)
                    return
                if timer and not (overtaken and seg.sends == 1):
                    qp.timeouts += 1
                    qp.recover_psn = max(qp.recover_psn, qp.next_psn - 1)
                qp.charged[seg.psn] = (lost_on.index, first_sent)
                if len(qp.charged) > CHARGED_KEPT:
                    del qp.charged[next(iter(qp.charged))]
                lost_on.losses += 1
                lost_on.loss_rate += (1.0 - lost_on.loss_rate) * LOSS_GAIN
                lost_on.stats["retransmits"] += 1
                # Never the last plane in use (`usable`, not just healthy: tests/test_cores.py's fpf-8x8-alltoall).
                if lost_on.healthy and lost_on.losses >= LOSS_TO_DOWN and usable:
                    lost_on.healthy = False
                    lost_on.stats["downs"] += 1
                    lost_on.probe_due = now + self._probe_interval()
                qp.retransmits += 1

    def _resend(self, qp: QueuePair, now: int) -> None:
        """What NACKs asked for, before any new data, each on another plane than the one that trimmed it
        (that plane's queue was full a moment ago). A trim is congestion, not a failure: no plane is
        charged with a loss. Paced by the rate control as new data is: unpaced resends kept a queue
        deep enough that every resend of one PSN was cut again (BMv2 cuts by the depth a packet finds)."""
        while qp.resend:
            seg = qp.inflight.get(qp.resend[0])
            if seg is None or seg.acked:
                qp.resend.popleft()
                continue
            if qp.next_send > now + self.burst:
                return
            usable = self._usable_besides(seg.plane)
            plane = self._pick_plane(qp, now, avoid=seg.plane if usable else -1)
            if plane is None or not self._transmit(qp, seg, plane, now):
                return
            qp.resend.popleft()
            qp.retransmits += 1

    def _on_nack(self, qp: QueuePair, echo: int, now: int) -> None:
        """A trimmed packet's NACK: resend that PSN at once (no timer), and take the trim as congestion.
        DCQCN's only way down is a CNP, so a trim enters as one, at most one per CNP interval (as the
        receiver paces its CNPs): a trim says a queue overflowed, at least what a mark says."""
        psn = self._unwrap(echo, max(qp.cum_acked, 0))
        seg = qp.inflight.get(psn)
        if seg is None or seg.acked or psn in qp.resend:
            return
        qp.trim_nacks += 1
        self.planes[seg.plane].stats["trims"] += 1
        qp.resend.append(psn)
        if self.cc_name != "none" and (qp.last_trim_cut < 0 or now - qp.last_trim_cut >= qp.cc.cnp_interval):
            qp.last_trim_cut = now
            qp.cc.tick(now)
            qp.cc.on_cnp(now)
            qp.rate_trace.append((to_s(now), qp.cc.rate))

    def _probe_interval(self) -> int:
        """How often a plane marked down is probed: a retransmission timeout from the measured
        round trip, not the RTO's floor (200 us of fabric is seconds of wall time at a large D, and a
        plane wrongly down that long skews the spraying), and never more often than every 10 ms."""
        srtt = max((qp.srtt for qp in self.qps.values()), default=0)
        return max(4 * srtt + self.ack_delay if srtt else self.rto, self.min_probe)

    def _probe_planes(self, now: int) -> None:
        for plane in self.planes:
            if (plane.healthy and plane.weight) or now < plane.probe_due:
                continue
            plane.probe_due = now + self._probe_interval()
            for qp in self.qps.values():
                if qp.remote_qpn < 0 or qp.cum_acked < 0:
                    continue
                psn = qp.cum_acked
                qp.charged.pop(psn, None)  # its answer is a duplicate's, and not a refund
                frame = wire.data_frame(plane.addr_b, qp.remote_planes[plane.index], plane.tx_ports[0],
                                        qp.remote_qpn, psn & wire.PSN_MASK, 0, 0, memoryview(b""), ack_req=True)
                if not self._send(plane, 0, plane.tx_ports[0], TC_DATA, qp.remote_planes[plane.index],
                                  qp.remote_addrs[plane.index], frame):
                    break
                plane.probe_psn = psn
                plane.probe_at = now
                plane.stats["probes"] += 1
                break

    def _send(self, plane: Plane, k: int, sport: int, tclass: int, dst: bytes, dst_text: str, payload: Any) -> bool:
        """One RoCEv2 packet (BTH onward) out of `plane`: through the kernel socket that has source port
        `sport` (k: which data socket; -1 ctl, -2 cnp), or built whole and handed to the switch port.
        False if the kernel would block (nothing changed: try again later)."""
        return self.io.send_packet(plane, k, sport, tclass, dst, dst_text, payload)

    # -- receiving ----------------------------------------------------------------------

    def on_frame(self, plane_index: int, frame: Any, now: int) -> None:
        """Fabric clock: a whole frame (Ethernet, IPv6, UDP, RoCEv2) the switch delivered to this port."""
        plane = self.planes[plane_index]
        plane.stats["rx_packets"] += 1
        mv = memoryview(frame)
        if len(mv) < 62 or mv[12] != 0x86 or mv[13] != 0xDD:
            self.counters["truncated"] += 1
            return
        tclass = (mv[14] & 0x0F) << 4 | mv[15] >> 4
        self._packet(plane, mv[62:], bytes(mv[22:38]), mv[54] << 8 | mv[55], tclass, now)

    def _receive(self, now: int) -> None:
        wall = time.time()  # the kernel stamps arrivals on the realtime clock
        for plane in self.planes:
            for _ in range(256):
                try:
                    n, anc, _, addr = plane.rx.recvmsg_into((self.rx_buf,), _CMSG_SPACE)
                except BlockingIOError:
                    break
                data = self.rx_view[:n]
                plane.stats["rx_packets"] += 1
                tclass = 0
                for level, kind, val in anc:
                    if level == socket.IPPROTO_IPV6 and kind == socket.IPV6_TCLASS and len(val) >= 4:
                        tclass = struct.unpack("i", val[:4])[0]
                    elif level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(val) >= 16:
                        sec, ns = _TIMESPEC.unpack_from(val)
                        self.recv_late.add(wall - sec - ns * 1e-9)
                src = self.src_cache.get(addr[0])
                if src is None:
                    src = self.src_cache[addr[0]] = wire.ip6(addr[0].split("%")[0])
                self._packet(plane, data, src, addr[1], tclass, now)

    def _packet(self, plane: Plane, data: memoryview, src: bytes, sport: int, tclass: int, now: int) -> None:
        """`data` is a view of the receive buffer, valid until the next receive: nothing keeps it."""
        if tclass >> 2 == self.trim_dscp:  # cut by a switch: its ICRC no longer matches, by design
            self._on_trimmed(plane, data)
            return
        if len(data) < 16:
            self.counters["truncated"] += 1
            return
        if not wire.check(src, plane.addr_b, sport, data):
            self.counters["bad_icrc"] += 1
            return
        op, qpn, psn, ack_req = wire.parse_bth(data)
        qp = self.qps.get(qpn)
        if qp is None:
            self.counters["unknown_qp"] += 1
            return
        if op == wire.OP_WRITE_ONLY:
            self._on_data(qp, plane, data, psn, ack_req, tclass, now, None)
        elif op == wire.OP_WRITE_ONLY_IMM:
            self._on_data(qp, plane, data, psn, ack_req, tclass, now,
                          wire.parse_imm(data) if len(data) >= wire.DATA_HEADER + wire.IMM_BYTES else -1)
        elif op == wire.OP_ACK:
            self._on_ack(qp, plane, data, psn, now)
        elif op == wire.OP_CNP:
            qp.cc.tick(now)  # its timers up to now first: the cut is of the rate at now
            qp.cc.on_cnp(now)
            qp.rate_trace.append((to_s(now), qp.cc.rate))
        else:
            self.counters["truncated"] += 1

    def _on_trimmed(self, plane: Plane, data: memoryview) -> None:
        """A data packet a switch trimmed: NACK its PSN at once, over the plane it came by (its header
        survives the cut; its payload and ICRC do not). A cut that kept less than the BTH says nothing."""
        if len(data) < wire.BTH_BYTES:
            self.counters["truncated"] += 1
            return
        op, qpn, wpsn, _ = wire.parse_bth(data)
        qp = self.qps.get(qpn)
        if qp is None or op not in (wire.OP_WRITE_ONLY, wire.OP_WRITE_ONLY_IMM):
            self.counters["unknown_qp" if qp is None else "truncated"] += 1
            return
        psn = self._unwrap(wpsn, qp.expected)
        if psn < qp.expected or psn in qp.beyond:
            return  # a copy already arrived whole
        self.counters["trimmed"] += 1
        self._send_ack(qp, syndrome=wire.SYNDROME_NAK_PSN, plane=plane.index, echo=psn)

    @staticmethod
    def _unwrap(wire_psn: int, near: int) -> int:
        delta = (wire_psn - near) & wire.PSN_MASK
        if delta >= 1 << 23:
            delta -= 1 << 24
        return near + delta

    def _on_data(self, qp: QueuePair, plane: Plane, data: memoryview, wpsn: int, ack_req: bool, tclass: int,
                 now: int, imm: int | None) -> None:
        head = wire.DATA_HEADER if imm is None else wire.DATA_HEADER + wire.IMM_BYTES
        if len(data) < head + wire.ICRC_BYTES or imm == -1:
            self.counters["truncated"] += 1
            return
        psn = self._unwrap(wpsn, qp.expected)
        va, rkey, length = wire.parse_reth(data)
        payload = memoryview(data)[head: len(data) - wire.ICRC_BYTES]
        mr = self.mrs.get(rkey)
        if length != len(payload) or (length and (mr is None or va < mr.va or va + length > mr.va + mr.size)):
            qp.bad += 1
            self.counters["nak_sent"] += 1
            self._send_ack(qp, syndrome=wire.SYNDROME_NAK_ACCESS, plane=plane.index)
            return
        duplicate = psn < qp.expected or psn in qp.beyond
        if not duplicate:
            if length:
                if self.payload:
                    mr.buf[va - mr.va: va - mr.va + length] = payload
                qp.rx_bytes += length
            if imm is not None:
                qp.imm_wait[psn] = imm
            if psn == qp.expected:
                qp.expected += 1
                while qp.expected in qp.beyond:
                    qp.beyond.discard(qp.expected)
                    qp.expected += 1
                if qp.imm_wait:
                    for p in sorted(k for k in qp.imm_wait if k < qp.expected):
                        self.recv_cq.append(Completion(qp.imm_wait.pop(p), "ok", 0, qp.qpn))
            else:
                qp.beyond.add(psn)
        qp.ack_plane = plane.index
        qp.newest = psn
        if duplicate:
            # Both copies came, or a probe: say so at once (D-SACK) over the plane it came by, so the
            # requester refunds the plane it blamed, or sees a probe answered by the plane it tested.
            self.counters["duplicates"] += 1
            self._send_ack(qp, duplicate=True)
        elif ack_req or imm is not None:
            # At once, over the plane it came by; an immediate's
            # ACK completes the requester's write, which a coalescing delay would only make late.
            self._send_ack(qp)
        else:
            if not qp.ack_due:
                qp.ack_due = True
                qp.ack_deadline = now + self.ack_delay
            qp.ack_unsent += 1
            if qp.ack_unsent >= ACK_EVERY:
                self._send_ack(qp)
        if tclass & 3 == 3:
            self.counters["ce_marked"] += 1
            if qp.last_cnp < 0 or now - qp.last_cnp >= qp.cc.cnp_interval:
                qp.last_cnp = now
                qp.cnps_sent += 1
                self._send_ctl(qp, plane.index, wire.cnp_packet(qp.remote_qpn), cnp=True)

    def _send_ack(self, qp: QueuePair, syndrome: int = wire.SYNDROME_ACK, plane: int | None = None,
                  duplicate: bool = False, echo: int | None = None) -> None:
        qp.ack_due = False
        qp.ack_unsent = 0
        bits = bytearray(32)
        base = qp.expected
        for psn in qp.beyond:
            i = psn - base
            if 0 <= i < wire.SACK_BITS:
                bits[i >> 3] |= 0x80 >> (i & 7)
        pkt = wire.ack_packet(qp.remote_qpn, (qp.expected - 1) & wire.PSN_MASK, qp.newest if echo is None else echo,
                              base, bytes(bits), syndrome, duplicate)
        self._send_ctl(qp, qp.ack_plane if plane is None else plane, pkt)

    def _send_ctl(self, qp: QueuePair, plane_index: int, body: bytes, cnp: bool = False) -> None:
        if plane_index >= len(qp.remote_planes):
            return
        plane = self.planes[plane_index]
        port = plane.cnp_port if cnp else plane.ctl_port
        self._send(plane, -2 if cnp else -1, port, TC_CNP if cnp else TC_ACK, qp.remote_planes[plane_index],
                   qp.remote_addrs[plane_index], wire.seal(plane.addr_b, qp.remote_planes[plane_index], port, body))

    def _on_ack(self, qp: QueuePair, plane: Plane, data: memoryview, wpsn: int, now: int) -> None:
        syndrome, echo, base, bitmap, duplicate = wire.parse_ack(data)
        if syndrome == wire.SYNDROME_NAK_PSN:  # "send this PSN again": a switch trimmed it
            self._on_nack(qp, echo, now)
            return
        if syndrome != wire.SYNDROME_ACK:
            qp.fail(f"remote access error (NAK 0x{syndrome:02x})")
            return
        cum = self._unwrap(wpsn, max(qp.cum_acked, 0))
        base = self._unwrap(base, cum + 1)
        # The RTT is sampled from the packet whose arrival this ACK answers, and only from it (TCP's
        # timestamp echo): a packet acknowledged later, when a hole below it fills or past the reach
        # of the SACK bitmap, would count the recovery's wait as a round trip and inflate the RTO.
        echoed = self._unwrap(echo, cum)
        if duplicate:
            if echoed == plane.probe_psn and plane.probe_at >= 0:
                # The probe went and its answer came back by the plane: it delivers, and how fast. Its
                # round trip replaces the smoothed one: the plane carried nothing else of ours, so
                # there is no queue of ours to smooth over, and a healed plane is seen so at once.
                plane.srtt = 0
                self._rtt_sample(plane, now - plane.probe_at)
                plane.probe_at = -1
                plane.healthy, plane.losses = True, 0
            else:
                self._innocent(qp, echoed, now)
        newest = qp.inflight.get(echoed)
        if newest is not None and newest.sends == 1 and not newest.acked:
            qp.srtt = smoothed(qp.srtt, now - newest.sent_at)
        done = []
        for psn in qp.inflight:
            if psn > cum:
                break
            done.append(psn)
        # A packet the last ACK's bitmap could have reported, and did not, arrived since: its round
        # trip is a sample. One beyond the bitmap's reach may have waited there for a hole to fill.
        fresh = qp.cum_acked + wire.SACK_BITS
        bits = int.from_bytes(bitmap, "big")
        while bits:
            top = bits.bit_length() - 1
            bits &= ~(1 << top)
            seg = qp.inflight.get(base + wire.SACK_BITS - 1 - top)
            if seg is not None and not seg.acked:
                self._acked(seg, now, sample=seg.psn <= fresh)
                qp.sacked += 1
                if seg.psn > qp.highest_sacked:
                    qp.highest_sacked = seg.psn
        qp.sacked_since = True
        for psn in done:
            seg = qp.inflight.pop(psn)
            if seg.acked:
                qp.sacked -= 1
            else:
                self._acked(seg, now, sample=psn <= fresh)
        if cum > qp.cum_acked:
            qp.cum_acked = cum
            qp.cum_at = now
        self._reweigh()
        while qp.wrs and 0 <= qp.wrs[0][1].psn <= qp.cum_acked:
            wr_id, _, nbytes, signaled = qp.wrs.popleft()
            if signaled:
                self.cq.append(Completion(wr_id, "ok", nbytes))

    def _acked(self, seg: Segment, now: int, sample: bool = True) -> None:
        """First acknowledgement of a segment (SACK or cumulative): a packet sent once proves that its
        plane delivers, and its earlier "losses" were late. Its round trip is a sample of its plane's:
        the way there by that plane, an ACK's coalescing, the way back by whichever plane the ACK took
        (the echo the connection's RTT uses names one packet an ACK, always of the same plane when
        the spraying is regular). A packet above a hole is SACKed when it arrives, so the wait for the
        hole is not in it (nor is the wait of one beyond the bitmap's reach: `sample` False)."""
        seg.acked = True
        if seg.sends == 1:
            carrier = self.planes[seg.plane]
            if sample:
                self._rtt_sample(carrier, now - seg.sent_at)
            carrier.healthy, carrier.losses = True, 0
            carrier.loss_rate -= carrier.loss_rate * LOSS_GAIN

    @staticmethod
    def _rtt_sample(plane: Plane, sample: int) -> None:
        plane.srtt = smoothed(plane.srtt, sample)
        plane.base_rtt = min(plane.base_rtt, sample)

    def _reweigh(self) -> None:
        """Each plane's share of the sends, from its health (weighted spraying; equal spraying keeps
        every weight 1). The rule, for planes that carry data:

        - Later than the rest: a plane whose smoothed round trip exceeds the fastest plane's by more
          than the reorder budget gets weight 0 (excluded, probed like a down plane, back once its
          probes' round trips fall within the budget). Each packet on it would hold the cumulative
          ACK past what the SACK bitmap can report, and stall the whole connection (a longer cable,
          or a queue no share can drain).
        - Queueing: a plane that holds its packets longer than the typical plane (its round trip over
          its own least, against the median plane's, plus a slack of an eighth of the budget) is
          offered less in proportion, typical / queueing. A plane slowed to a quarter settles where it
          is offered what it carries, its standing queue about four times the typical one, within
          the budget. A hot receiver, which delays every plane alike, moves no weight.
        - Loss: none while the plane loses under half its packets. Each packet it delivers is a slot
          gained; each it loses costs one slot elsewhere for the retransmission, so its net worth,
          1 - 2 x loss, stays positive (measured: taking share off a plane losing 2 %, or 36 %, only
          lowers the goodput). Over half, W_MIN; a plane that loses every packet is marked down.

        The least weight of a plane in use is W_MIN, so its health keeps being measured."""
        if self.spray != "weighted":
            return
        live = [p for p in self.planes if p.srtt and p.healthy]
        if not live:
            return
        budget = self.reorder_budget
        fastest = min(p.srtt for p in live)
        queued = sorted(p.srtt - p.base_rtt for p in live)
        typical = queued[(len(queued) - 1) // 2] + budget // 8
        for p in live:
            if p.srtt - fastest > budget:
                if p.weight:
                    p.weight = 0.0
                    p.stats["excluded"] += 1
                    p.probe_due = 0
                continue
            q = p.srtt - p.base_rtt
            w = W_MIN if p.loss_rate >= 0.5 else max(W_MIN, 1.0 if q <= typical else typical / q)
            p.weight = w if w <= p.weight else min(w, max(W_MIN, p.weight + W_STEP))  # back from 0 at W_MIN

    def _innocent(self, qp: QueuePair, psn: int, now: int) -> None:
        """PSN arrived twice: the plane charged with losing it delivered it late. Refund the loss; a
        plane marked down on such evidence is used again (a delivered packet is proof enough). The
        late copy's round trip (its D-SACK comes back at once, by the same plane) is a sample of that
        plane's: a plane far longer than the rest gets its first samples so, since every packet it
        carries is taken for lost, and resent, before the plane's own round trip is known."""
        index, first_sent = qp.charged.pop(psn, (-1, -1))
        if index < 0:
            return
        qp.reo_wnd = min(qp.reo_wnd + qp.srtt // 4, 2 * qp.srtt)
        plane = self.planes[index]
        if first_sent >= 0:
            self._rtt_sample(plane, now - first_sent)
        plane.stats["spurious_retransmits"] += 1
        plane.losses = max(0, plane.losses - 1)
        plane.loss_rate = max(0.0, plane.loss_rate - LOSS_GAIN)
        if not plane.healthy:
            plane.healthy, plane.losses = True, 0

    def plane_stats(self) -> list[dict[str, Any]]:
        return [{"plane": p.index, "addr": p.addr, "healthy": p.healthy, "weight": round(p.weight, 4),
                 "srtt_fabric_s": to_s(p.srtt), "loss_rate": round(p.loss_rate, 5), **p.stats}
                for p in self.planes]

    def reset_fidelity(self) -> None:
        self.send_late.reset()
        self.recv_late.reset()

    def fidelity(self, name: str) -> list[dict[str, Any]]:
        """This endpoint's parts (fidelity.Part fields), to be carried to the harness as JSON."""
        return [asdict(Part.from_summary(f"endpoint {name} send", "endpoint", self.send_late.summary(), paced=True)),
                asdict(Part.from_summary(f"endpoint {name} receive", "endpoint", self.recv_late.summary()))]


def smoothed(srtt: int, sample: int) -> int:
    """A round trip smoothed over samples (RFC 6298's 1/8 gain), in whole picoseconds: the first sample
    as it is, then seven eighths of the old plus an eighth of the new, rounded down (both are >= 0)."""
    return sample if srtt == 0 else (7 * srtt + sample) // 8


def share_ps(wire_ps: int, weight: float) -> int:
    """A packet's time on a plane offered it at `weight` of its rate (1/weight of its wire time), nearest."""
    return wire_ps if weight == 1.0 else round(wire_ps / weight)


def _ms(ps: int) -> str:
    return f"{to_s(ps) * 1e3:.3f}"


def host_plane_addresses(prefix: str = "") -> list[str]:
    """This namespace's global IPv6 addresses, in plane order (interface suffix). A fabric host has
    only fabric ports, so whatever the topology's address plan, these are its planes."""
    out = os.popen("ip -6 -o addr show scope global").read().splitlines()
    found = []
    for line in out:
        parts = line.split()
        ifname, addr = parts[1], parts[3].split("/")[0]
        if addr.startswith(prefix):
            found.append((int(ifname.rsplit("eth", 1)[-1]) if "eth" in ifname else 0, addr))
    return [a for _, a in sorted(found)]
