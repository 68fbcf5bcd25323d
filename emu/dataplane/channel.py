"""Engine to engine: the links cut between workers, and the windows that keep one fabric time across them.

On the fabric clock a fabric split over several workers (processes, on one machine or several: issue
24) keeps one schedule per worker. A link whose ends are in two workers is a channel: the sending
worker serialises each frame onto the link as on any other (its queue, rate, ECN and PFC), and
when the frame's last bit leaves it sends the frame to the peer with the fabric time it arrives,
one propagation delay later (`Switch.cut`). PFC pauses travel the same way.

While a job runs, the workers advance in windows (emu.dataplane.windows, the one algorithm, which
emu.dataplane.partition runs in one process against one schedule): these channels are its transport,
each window's frames sent in one batch before its barrier.

Between jobs, fabric time follows each worker's wall clock (EngineLoop, unpaced, between jobs); frames cross
at once and land at their time, or now if that has passed (as the kernel's frames do).

On the wall clock (`paced`: every worker's loop paced at D, workers on one machine or several) the
frames and windows are the same: a frame carries the fabric instant it arrives at, and a job runs in
windows as on the fabric clock, each worker's events waiting for the wall as well. The workers' pacers
agree as far as their clocks do: fabric time 0 is one instant of their common clock (on one machine
the monotonic clock they share; across machines CLOCK_REALTIME, each machine's monotonic clock being
its own), and so is a job's start. Across machines that holds only as far as the machines' clocks
agree (PTP), so each worker measures its peers' clocks,
a round of `CLOCK` messages every second from connect on (NTP's way: offset = peer - midpoint of
the round trip, to within half the round trip), and reports the widest bound, |offset| + round
trip / 2, of the rounds since the measurement began; the fidelity verdict counts it as one more
part's lateness (emu.fidelity.engine_parts).

The stream between two workers is TCP: ordered and lossless, so a frame is never lost by the
emulator (a loss must be a modelled one). The messages are fixed binary headers (`HEADER`), defined here once for both ends.
A frame or a note carries the tie key its sender took for it, so that it runs among the receiver's
events where it would have run on one worker (emu.dataplane.schedule).
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from emu.dataplane.windows import Windows

# kind, window, time (fabric ps; a clock reply's: the wall's ns), a (port id, job id, busy or worker index),
# payload length, and a frame's or note's tie key (emu.dataplane.schedule: its scheduler, which child)
HEADER = struct.Struct("<BxxxIqIIQI")
FRAME, NOTE, BARRIER, HELLO, CLOCK, CLOCK_REPLY = 1, 2, 3, 4, 5, 6
CLOCK_SAMPLES = 16  # round trips to each peer in a round of clock probes; the shortest one counts
CLOCK_EVERY_S = 1.0  # wall seconds between rounds: a clock that drifts during a run is seen
IDLE = 0xFFFFFFFF  # the window of a message sent between jobs


def _bound(c: tuple[float, float] | None) -> float:
    return -1.0 if c is None else abs(c[0]) + c[1] / 2


class ChannelError(RuntimeError):
    """A peer worker's channel closed, or a window's rule was broken; the message names the worker."""


def port_id(switch_index: int, port: int) -> int:
    """A switch port as the channel names it: the switch's place in the spec, and its port index."""
    return switch_index << 12 | port


# Machines made of namespaces on one kernel (the cluster's tests) share one CLOCK_REALTIME, so the offset
# path would only ever see zero: this reads the machine's clock that much ahead, as a machine whose PTP
# failed would (a test hook, set through ssh; never set in a real run).
CLOCK_OFFSET_ENV = "EMU_TEST_CLOCK_OFFSET_S"
CLOCK_OFFSET_S = float(os.environ.get(CLOCK_OFFSET_ENV) or 0.0)


def realtime() -> float:
    """The machines' common clock as this machine reads it (CLOCK_REALTIME, plus the test hook's offset)."""
    return time.time() + CLOCK_OFFSET_S


def common_offset(across_machines: bool) -> float:
    """What to add to this machine's monotonic time for the workers' common clock: across machines
    CLOCK_REALTIME's (`realtime`); on one machine nothing, as its workers share the monotonic clock
    (converting there would move each frame by the jitter between two clock reads, and a tie between
    two frames, which the fabric breaks by order, would fall by that instead)."""
    return realtime() - time.monotonic() if across_machines else 0.0


@dataclass
class _Peer:
    index: int
    sock: socket.socket
    rx: bytearray
    tx: bytearray


class Channels:
    """This worker's channels to its peers. `deliver(kind, t, a, payload, key)` takes what a peer sent, at
    the time it is due, with the tie key its sender took for it: FRAME (a: port id, payload: the frame) and NOTE (a: job id, payload: JSON). On the
    fabric clock `sync` (Windows) holds what arrives during a job until its window's barriers are in."""

    def __init__(self, index: int, workers: int, lookahead: int, loop: Any,
                 deliver: Callable[[int, int, int, bytes, tuple[int, int]], None], machine: Callable[[int], str],
                 paced: bool = False, across_machines: bool = False) -> None:
        self.index, self.workers, self.lookahead = index, workers, lookahead
        self.paced = paced  # the wall clock: the peers' clocks are measured, and a dead peer's links go down
        self.across = across_machines
        self.clock_sent: dict[tuple[int, int], float] = {}  # (peer, probe) -> when the probe left (realtime)
        self.clock_round = -1
        self.clocks: dict[int, tuple[float, float]] = {}  # peer -> (offset s, round trip s): this round's best
        self.worst: dict[int, tuple[float, float]] = {}  # peer -> the finished round of the widest bound since reset
        self.loop = loop
        self.deliver = deliver
        self.machine = machine  # a worker's name for errors: "worker 1 (on m2)"
        self.peers: dict[int, _Peer] = {}
        self.by_fd: dict[int, _Peer] = {}
        self.listener: socket.socket | None = None
        # The fabric clock's windows (emu.dataplane.windows), over these channels.
        self.sync = Windows(lookahead, lambda: len(self.peers), self._send_barrier, deliver,
                            lambda t: loop.windows_over(t), lambda j: f"engine worker {machine(j)}")
        self.idle_handed = 0  # messages received between jobs (no windows)
        self.dead: dict[int, int] = {}  # paced: a peer whose channel closed -> messages for it dropped since

    @property
    def windows(self) -> int:
        return self.sync.windows

    @property
    def handed(self) -> int:
        """Messages received, in windows and between jobs."""
        return self.sync.handed + self.idle_handed

    # -- set-up ------------------------------------------------------------------------

    def listen(self, host: str) -> tuple[str, int]:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, 0))
        s.listen(16)
        s.setblocking(False)
        self.listener = s
        self.loop.add_reader(s.fileno(), self._accept)
        return s.getsockname()[:2]

    def connect(self, peers: list[tuple[str, int]]) -> None:
        """Connect to every higher-numbered worker (the lower ones connect to us), saying who we are."""
        for j in range(self.index + 1, self.workers):
            host, port = peers[j]
            s = socket.create_connection((host, port), timeout=10)
            s.sendall(HEADER.pack(HELLO, IDLE, 0, self.index, 0, 0, 0))
            self._add(j, s)
        if self.paced:
            self.loop.at(self.loop.clock(), self._clock_round, 0)

    def _clock_round(self, t: int, r: int) -> None:
        """A round of CLOCK probes to every peer (the wall clock's agreement, measured NTP's way), one
        every CLOCK_EVERY_S; the round before is finished: its best sample is kept if its bound is the
        widest since the last reset. Over a job's jump to its start (EngineLoop.jump_to) the rounds resume
        after it: a wall second of rounds per fabric microsecond skipped (D = 1e6) would otherwise all run."""
        wall = self.loop.fabric_ps_of_wall  # the rounds keep wall time: the loop's time is the fabric's
        jump = self.loop.jump_to
        if jump is not None:
            self.loop.at(jump + wall(CLOCK_EVERY_S), self._clock_round, r)
            return
        for j, (off, rtt) in self.clocks.items():
            if abs(off) + rtt / 2 >= _bound(self.worst.get(j)):
                self.worst[j] = (off, rtt)
        self.clocks = {}
        self.clock_sent.clear()
        self.clock_round = r
        for k in range(CLOCK_SAMPLES):
            self.loop.at(t + wall(0.005 * k), self._probe_clocks, r * CLOCK_SAMPLES + k)
        self.loop.at(t + wall(CLOCK_EVERY_S), self._clock_round, r + 1)

    def _probe_clocks(self, t: int, probe: int) -> None:
        if self.loop.jump_to is not None:
            return  # skipped fabric time: no wall passes in it
        for j in list(self.peers):
            self.clock_sent[(j, probe)] = realtime()
            self._put(j, CLOCK, 0, probe, b"")

    def clock_bounds(self) -> dict[str, dict[str, float]]:
        """Per peer: how far its clock may have been from ours since the last reset (|offset| + round
        trip / 2, the widest of the rounds; the round under way only while none has finished)."""
        out = {}
        for j in sorted(set(self.clocks) | set(self.worst)):
            off, rtt = self.worst[j] if j in self.worst else self.clocks[j]
            out[str(j)] = {"offset_s": off, "rtt_s": rtt, "bound_s": abs(off) + rtt / 2,
                           "rounds": max(1, self.clock_round), "samples": CLOCK_SAMPLES}
        return out

    def reset_clocks(self) -> None:
        """A new measurement window (ResetFidelity): the bound starts again from the next round."""
        self.worst.clear()

    def _accept(self) -> None:
        assert self.listener is not None
        try:
            s, _ = self.listener.accept()
        except BlockingIOError:
            return
        s.settimeout(10)
        head = b""
        while len(head) < HEADER.size:
            chunk = s.recv(HEADER.size - len(head))
            if not chunk:
                s.close()
                return
            head += chunk
        kind, _, _, j, _, _, _ = HEADER.unpack(head)
        if kind != HELLO or not 0 <= j < self.workers or j in self.peers:
            s.close()
            return
        self._add(j, s)

    def _add(self, j: int, s: socket.socket) -> None:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        peer = _Peer(j, s, bytearray(), bytearray())
        self.peers[j] = peer
        self.by_fd[s.fileno()] = peer
        self.loop.add_reader(s.fileno(), lambda p=peer: self._readable(p))

    @property
    def connected(self) -> int:
        return len(self.peers)

    def close(self) -> None:
        for p in self.peers.values():
            self.loop.remove_reader(p.sock.fileno())
            p.sock.close()
        self.peers.clear()
        if self.listener is not None:
            self.loop.remove_reader(self.listener.fileno())
            self.listener.close()
            self.listener = None

    # -- sending ----------------------------------------------------------------------

    def send_frame(self, peer: int, pid: int, t_arrive: int, frame: Any, key: tuple[int, int]) -> None:
        self._put(peer, FRAME, t_arrive, pid, bytes(frame), key)

    def send_note(self, job: int, t: int, payload: Any, key: tuple[int, int]) -> None:
        """A job's message to its parts on every other worker, due at `t` (at least one lookahead on)."""
        data = json.dumps(payload).encode()
        for j in list(self.peers):
            self._put(j, NOTE, t, job, data, key)

    def _put(self, j: int, kind: int, t: int, a: int, data: bytes, key: tuple[int, int] = (0, 0)) -> None:
        peer = self.peers.get(j)
        if peer is None and j in self.dead:
            self.dead[j] += 1
            return
        if peer is None:
            raise ChannelError(f"no channel to engine worker {self.machine(j)}")
        sync = self.sync
        if kind in (CLOCK, CLOCK_REPLY):  # no fabric event: outside the windows, sent now if the socket takes it
            peer.tx += HEADER.pack(kind, IDLE, t, a, len(data), 0, 0)
            self._send_now(peer)
            return
        peer.tx += HEADER.pack(kind, sync.sending() if sync.active else IDLE, t, a, len(data), *key)
        peer.tx += data
        if sync.active:
            sync.sent(t)
        else:
            self.flush()

    def _send_now(self, p: _Peer) -> None:
        """What is queued for `p`, as far as its socket takes it without waiting (the rest goes with the
        next flush): never reading meanwhile, so a clock probe answered inside a read cannot recurse."""
        try:
            n = p.sock.send(p.tx)
        except BlockingIOError:
            return
        except OSError as exc:
            self._broken(p, exc)
            return
        del p.tx[:n]

    def _send_barrier(self, window: int, t: int, busy: bool) -> None:
        for p in self.peers.values():
            p.tx += HEADER.pack(BARRIER, window, t, int(busy), 0, 0, 0)
        self.flush()

    def flush(self) -> None:
        """Send everything queued, reading what peers send meanwhile (two workers flushing to each other
        at once would otherwise both block on full buffers)."""
        while True:
            out = [p for p in self.peers.values() if p.tx]
            if not out:
                return
            for p in out:
                try:
                    n = p.sock.send(p.tx)
                except BlockingIOError:
                    n = 0
                except OSError as exc:
                    self._broken(p, exc)
                    continue
                del p.tx[:n]
            out = [p for p in out if p.index in self.peers]
            if any(p.tx for p in out):
                r, _, _ = select.select([p.sock for p in self.peers.values()], [p.sock for p in out if p.tx], [], 1.0)
                for s in r:
                    p = self.by_fd.get(s.fileno())
                    if p is not None:
                        self._readable(p)

    # -- receiving --------------------------------------------------------------------

    def _lost(self, p: _Peer, exc: BaseException | None = None) -> ChannelError:
        why = f": {exc}" if exc else ""
        return ChannelError(f"engine worker {self.machine(p.index)} closed its channel to worker "
                            f"{self.machine(self.index)}{why} (it died, or its machine did)")

    def _broken(self, p: _Peer, exc: BaseException | None = None) -> None:
        """A peer's channel closed. On the fabric clock no window can end without it: this worker ends too
        (ChannelError, which names the peer). On the wall clock its links are down from here, as a veth
        to a dead process is: what this worker sends it is dropped and counted (`dead`), and the rest of
        the fabric goes on (a control plane can route around what died)."""
        err = self._lost(p, exc)
        if not self.paced:
            raise err
        print(f"worker {self.index}: {err}; the links to it are down from here", flush=True)
        self.by_fd.pop(p.sock.fileno(), None)
        self.loop.remove_reader(p.sock.fileno())
        p.sock.close()
        del self.peers[p.index]
        self.dead[p.index] = 0
        self.sync.forget(p.index)  # a window waiting for its barrier goes on without it

    def _readable(self, p: _Peer) -> None:
        if p.index not in self.peers:
            return
        try:
            data = p.sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError as exc:
            self._broken(p, exc)
            return
        if not data:
            self._broken(p)
            return
        rx = p.rx
        rx += data
        at, size = 0, HEADER.size
        while len(rx) - at >= size:
            kind, window, t, a, n, h, c = HEADER.unpack_from(rx, at)
            if len(rx) - at - size < n:
                break
            payload = bytes(rx[at + size:at + size + n])
            at += size + n
            self._message(p, kind, window, t, a, payload, (h, c))
        del rx[:at]

    def _message(self, p: _Peer, kind: int, window: int, t: int, a: int, payload: bytes, key: tuple[int, int]
                 ) -> None:
        if kind == BARRIER:
            self.sync.barrier(p.index, window, t, bool(a))
        elif kind == CLOCK:
            self._put(p.index, CLOCK_REPLY, round(realtime() * 1e9), a, b"")  # the wall in ns
        elif kind == CLOCK_REPLY:
            back = realtime()
            sent = self.clock_sent.pop((p.index, a), None)
            if sent is not None:
                rtt = back - sent
                best = self.clocks.get(p.index)
                if best is None or rtt < best[1]:
                    self.clocks[p.index] = (t / 1e9 - (sent + back) / 2, rtt)
        elif window == IDLE or not self.sync.active:  # between jobs (or after this part's windows ended): due
            # now if its time has passed
            self.idle_handed += 1
            now = self.loop.clock()
            self.deliver(kind, t if t > now else now, a, payload, key)
        else:
            self.sync.arrive(p.index, window, t, kind, a, payload, key)
