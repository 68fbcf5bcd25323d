"""MetaRoCE loss recovery and plane health, packet in and packet out between two devices.

Both devices run in one process inside a private network namespace (its loopback carries every
plane), and each plane's sockets are wrapped by a Wire that can drop, delay or refuse
(EAGAIN) what is sent: a dead plane, late ACKs and a full socket buffer, each made on purpose.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import subprocess
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

import pytest

from emu.roce.transport import ACK_EVERY, Device

pytestmark = pytest.mark.root  # a private network namespace

CLONE_NEWNET = 0x40000000
D = 10_000  # 100 Gb/s planes run at 10 Mb/s of wall time
NBYTES = 384 << 10


class Wire:
    """A socket's sending side with faults: `drop(now)` true loses the frame, `delay` (wall s) holds it,
    `hold(now)` (a wall time, or 0) holds it until then, `refuse(n)` true answers the n-th send with
    EAGAIN as a full socket buffer does."""

    def __init__(self, sock: Any, drop: Callable[[float], bool] = lambda now: False, delay: float = 0.0,
                 refuse: Callable[[int], bool] = lambda n: False,
                 hold: Callable[[float], float] = lambda now: 0.0) -> None:
        self.sock, self.drop, self.delay, self.refuse, self.hold = sock, drop, delay, refuse, hold
        self.held: deque[tuple[float, bytes, Any]] = deque()
        self.sends = 0
        self.frames = 0

    def sendmsg(self, frame: Any, _anc: Any, _flags: int, addr: Any) -> int:
        return self.sendto(b"".join(bytes(p) for p in frame), addr)

    def sendto(self, data: bytes, addr: Any) -> int:
        self.sends += 1
        if self.refuse(self.sends):
            raise BlockingIOError
        self.frames += 1
        now = time.monotonic()
        if self.drop(now):
            return len(data)
        until = self.hold(now)
        if self.delay or until:
            self.held.append((max(now + self.delay, until), data, addr))
        else:
            self.sock.sendto(data, addr)
        return len(data)

    def pump(self, now: float) -> None:
        while self.held and self.held[0][0] <= now:
            _, data, addr = self.held.popleft()
            self.sock.sendto(data, addr)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


def _private_namespace(addrs: list[str]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    for a in addrs:
        subprocess.run(["ip", "-6", "addr", "add", f"{a}/128", "dev", "lo", "nodad"], check=True)


def _transfer(planes: int, faults: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Send NBYTES from a client to a server over `planes` planes with the faults asked for; what both
    saw. Faults: dead_plane (index, dead from the start), dead_all (wall s from the first send, for how
    long), ack_delay (wall s on every ACK of one plane), refuse_every (n: every n-th data send EAGAIN),
    stall (index, wall s from the first send, for how long: that plane's data is held, then delivered,
    as a stalled engine worker does)."""
    caddrs = [f"fd00::1:{i + 1}" for i in range(planes)]
    saddrs = [f"fd00::2:{i + 1}" for i in range(planes)]
    _private_namespace(caddrs + saddrs)
    client = Device(caddrs, dilation=D, rto_fabric_s=20e-6, seed=1)
    server = Device(saddrs, dilation=D, rto_fabric_s=20e-6, seed=2)
    cqp, sqp = client.create_qp(), server.create_qp()
    cqp.connect(sqp.qpn, saddrs)
    sqp.connect(cqp.qpn, caddrs)
    src = client.reg_mr(NBYTES)
    src.buf[:] = os.urandom(NBYTES)
    dst = server.reg_mr(NBYTES)
    start = time.monotonic()
    wires: list[Wire] = []
    for p in client.planes:
        dead = faults.get("dead_plane") == p.index
        window = faults.get("dead_all")

        def drop(now: float, dead: bool = dead, window: Any = window) -> bool:
            return dead or (window is not None and window[0] <= now - start < window[0] + window[1])

        every = faults.get("refuse_every", 0)
        stall = faults.get("stall")

        def hold(now: float, stall: Any = stall if stall and stall[0] == p.index else None) -> float:
            if stall is not None and stall[1] <= now - start < stall[1] + stall[2]:
                return start + stall[1] + stall[2]
            return 0.0

        p.tx = [Wire(s, drop, refuse=lambda n, every=every: bool(every) and n % every == 0, hold=hold)
                for s in p.tx]
        wires += p.tx
    acks: list[Wire] = []
    for p in server.planes:
        p.ctl = Wire(p.ctl, delay=faults.get("ack_delay", 0.0) if p.index == 0 else 0.0)
        acks.append(p.ctl)
    cqp.post_write(7, src, 0, NBYTES, dst.va, dst.rkey)
    deadline = time.monotonic() + timeout
    error = ""
    while cqp.busy():
        if time.monotonic() > deadline:
            error = f"not done in {timeout} s: {len(cqp.pending)} pending, {len(cqp.inflight)} in flight, " \
                    f"acked to {cqp.cum_acked}, server expects {sqp.expected}"
            break
        now = time.monotonic()
        for w in acks + wires:
            w.pump(now)
        client.progress(0.0002)
        server.progress(0.0002)
    healthy_at_end = [p.healthy for p in client.planes]
    # Let probes revive what a fault marked down (their timer is max(RTO, 10 ms) of wall time).
    settle = time.monotonic() + 0.5
    while time.monotonic() < settle and not all(p.healthy for p in client.planes):
        client.progress(0.0002)
        server.progress(0.0002)
    out = {"error": error, "completions": [(c.wr_id, c.status) for c in client.poll_cq()],
           "data_ok": dst.buf == src.buf, "healthy_at_end": healthy_at_end,
           "healthy_later": [p.healthy for p in client.planes], "planes": client.plane_stats(),
           "retransmits": cqp.retransmits, "data_packets": sum(p.stats["rx_packets"] for p in server.planes),
           "acks_sent": sum(w.frames for w in acks), "refused": sum(w.sends - w.frames for w in wires),
           "duplicates": server.counters["duplicates"]}
    client.close()
    server.close()
    return out


def _child(conn: Any, planes: int, faults: dict[str, Any], timeout: float) -> None:
    try:
        conn.send(_transfer(planes, faults, timeout))
    except BaseException:
        conn.send({"error": traceback.format_exc()})


def transfer(planes: int = 4, timeout: float = 20.0, **faults: Any) -> dict[str, Any]:
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, planes, faults, timeout))
    proc.start()
    try:
        if not parent.poll(timeout + 15):
            raise AssertionError("the transfer's process gave no answer")
        out = parent.recv()
    finally:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
    assert not out["error"], out["error"]
    return out


def test_a_clean_transfer_coalesces_acks_and_retransmits_nothing():
    r = transfer()
    assert r["data_ok"] and r["completions"] == [(7, "ok")]
    assert r["retransmits"] == 0 and all(r["healthy_at_end"])
    # One ACK per ACK_EVERY packets, plus those the delay bound sends early: far fewer than one per packet.
    assert r["acks_sent"] <= r["data_packets"] / 4, r
    assert r["acks_sent"] >= r["data_packets"] / (2 * ACK_EVERY), r


def test_a_dead_plane_is_marked_down_and_its_packets_resent_elsewhere():
    r = transfer(dead_plane=2)
    assert r["data_ok"] and r["completions"] == [(7, "ok")]
    assert r["healthy_at_end"] == [True, True, False, True]
    dead = r["planes"][2]
    assert dead["retransmits"] >= 8 and dead["tx_after_down"] == 0
    # Probes went on trying it, were lost, and held nothing up: they take no PSN of their own.
    assert dead["probes"] > 0 and dead["downs"] == 1, dead
    assert all(p["retransmits"] == 0 for i, p in enumerate(r["planes"]) if i != 2), r["planes"]


def test_late_acks_on_one_plane_mark_no_plane_down():
    # Every ACK over plane 0 arrives 4 ms (0.4 us of fabric time) late: retransmissions may follow,
    # but every plane still delivers, so none is marked down.
    r = transfer(ack_delay=0.004)
    assert r["data_ok"] and all(r["healthy_at_end"]), r["planes"]


def test_when_every_plane_goes_dark_the_transfer_waits_then_finishes_and_planes_come_back():
    # 150 ms of wall time (15 us of fabric) in which nothing sent arrives: every plane loses
    # everything, yet one stays in use to retransmit on, and probes bring the others back.
    r = transfer(dead_all=(0.02, 0.15))
    assert r["data_ok"] and r["completions"] == [(7, "ok")]
    assert any(r["healthy_at_end"]) and all(r["healthy_later"]), r["planes"]


def test_a_send_the_socket_refuses_is_sent_again_and_no_psn_is_skipped():
    r = transfer(refuse_every=7)
    assert r["refused"] > 10
    assert r["data_ok"] and r["completions"] == [(7, "ok")] and r["retransmits"] == 0


def test_a_stalled_plane_is_not_a_dead_one():
    # Plane 1's data is held for 60 ms of wall time (6 us of fabric, many round trips), then delivered:
    # a stalled engine worker. Its packets are overtaken and resent elsewhere, and the plane may be
    # marked down, but the duplicates prove it delivered: the losses are refunded and it is used again
    # as soon as they arrive, not a retransmission timeout (seconds at a large D) later.
    r = transfer(stall=(1, 0.01, 0.06))
    assert r["data_ok"] and r["completions"] == [(7, "ok")]
    stalled = r["planes"][1]
    assert stalled["retransmits"] > 0 and r["duplicates"] > 0, r
    assert stalled["spurious_retransmits"] == stalled["retransmits"], stalled
    assert all(r["healthy_at_end"]), r["planes"]
    assert all(p["retransmits"] == 0 for i, p in enumerate(r["planes"]) if i != 1), r["planes"]
