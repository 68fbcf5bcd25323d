"""The link model: one directed link's sender-side queues, serialisation and flight.

A Transmitter owns eight priority queues and a wire of a given rate and
propagation delay. It serialises one frame at a time (frame + FCS, preamble
and inter-frame gap at the wall rate), hands the frame to `deliver` one
propagation delay after the last bit left, and honours PFC pause per
priority. Switch egress ports are Transmitters; so is the model of a host
NIC, which the engine runs at the switch port's ingress so that kernel
traffic from a host is shaped, delayed and paused like any other.

Times are the schedule's, whole picoseconds of fabric time: a frame's time
on the wire is `ser_ps` of its bytes at the wire's rate in whole bit/s (exact,
no sum of floats), its propagation delay whole picoseconds. The next
transmission starts at the previous one's scheduled end, not at the moment the loop got round to it, so a late loop does not lose
rate: it only adds jitter, which the fidelity monitor reports.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable
from typing import Any

from emu.simtime import rate_of, ser_ps
from emu.units import WIRE_OVERHEAD_BYTES

NQ = 8
MIN_FRAME = 60  # without FCS

Deliver = Callable[[int, Any], None]
OnDequeue = Callable[[int, int, Any, Any], Any]
PAUSE_QUANTUM_BYTES = 64  # a PFC pause quantum: 512 bit times of the link it pauses


class Transmitter:
    __slots__ = (
        "loop", "name", "rate_bps", "delay_ps", "deliver", "on_dequeue",
        "queues", "qbytes", "qhwm", "busy", "pause_until", "pause_since", "paused_time",
        "strict", "quantum", "deficit", "rr", "visiting", "wake_at", "up",
        "tx_packets", "tx_bytes", "q_tx_packets", "limit_bytes", "drops", "mask", "dwrr_mask",
        "loss", "rng", "lost", "base",
    )

    def __init__(
        self,
        loop: Any,
        *,
        name: str,
        rate_bps: float,
        delay_ps: int,
        deliver: Deliver,
        on_dequeue: OnDequeue | None = None,
        strict: tuple[int, ...] = (7, 6),
        weights: tuple[int, ...] = (1,) * NQ,
        limit_bytes: int = 0,
    ) -> None:
        """`rate_bps`: the wire's rate (inf: no serialisation, a hand-over), kept in whole bit/s (`rate_bps`, 0
        for inf); `delay_ps`: its propagation delay, whole picoseconds."""
        if not rate_bps > 0:
            raise ValueError(f"{name}: link rate must be positive, got {rate_bps}")
        if type(delay_ps) is not int or delay_ps < 0:
            raise ValueError(f"{name}: propagation delay must be whole picoseconds >= 0, got {delay_ps!r}")
        self.loop = loop
        self.name = name
        self.rate_bps = 0 if rate_bps == math.inf else rate_of(rate_bps)
        self.delay_ps = delay_ps
        self.deliver = deliver
        self.on_dequeue = on_dequeue
        self.queues: list[deque] = [deque() for _ in range(NQ)]
        self.qbytes = [0] * NQ
        self.qhwm = [0] * NQ
        self.busy = False
        self.pause_until = [0] * NQ
        self.pause_since = [-1] * NQ
        self.paused_time = [0] * NQ
        # Strict queues are served highest first, before the DWRR queues.
        self.strict = sorted(strict, reverse=True)
        self.mask = 0  # bit q set while queue q holds frames
        self.dwrr_mask = 0xFF & ~sum(1 << q for q in strict)
        self.quantum = [max(1, w) * 1600 for w in weights]
        self.deficit = [0] * NQ
        self.rr = 0
        self.visiting = False
        self.wake_at = -1
        self.up = True
        self.tx_packets = 0
        self.tx_bytes = 0
        self.q_tx_packets = [0] * NQ
        self.limit_bytes = limit_bytes  # 0: no limit of its own (the switch MMU decides)
        self.drops = 0
        self.loss = 0.0  # a degraded wire: the chance a frame is lost on it (degrade())
        self.rng: random.Random | None = None
        self.lost = 0
        self.base = (self.rate_bps, delay_ps)  # the wire as built, what restore goes back to

    # -- queueing -----------------------------------------------------------

    def enqueue(self, t: int, prio: int, frame: Any, meta: Any = None) -> bool:
        n = len(frame)
        if self.limit_bytes and self.qbytes[prio] + n > self.limit_bytes:
            self.drops += 1
            return False
        if not self.busy and not self.mask and self.pause_until[prio] <= t:
            end = self._send(t, prio, frame, meta)  # idle wire: no queueing at all
            if end >= 0:  # delivered at once, and something was queued meanwhile
                self._start(end)
            return True
        self.queues[prio].append((frame, meta))
        self.mask |= 1 << prio
        b = self.qbytes[prio] + n
        self.qbytes[prio] = b
        if b > self.qhwm[prio]:
            self.qhwm[prio] = b
        if not self.busy:
            self._start(t)
        return True

    def _pick(self, t: int) -> int:
        mask = self.mask
        pause = self.pause_until
        for q in self.strict:
            if mask >> q & 1 and pause[q] <= t:
                return q
        m = mask & self.dwrr_mask
        if not m:
            return -1
        if not m & (m - 1):  # one backlogged queue: no round to run
            q = m.bit_length() - 1
            return q if pause[q] <= t else -1
        # Deficit-weighted round robin over the backlogged queues.
        queues = self.queues
        for _ in range(2 * NQ):
            q = self.rr
            if m >> q & 1 and pause[q] <= t:
                if not self.visiting:
                    self.deficit[q] += self.quantum[q]
                    self.visiting = True
                size = len(queues[q][0][0])
                if self.deficit[q] >= size:
                    self.deficit[q] -= size
                    return q
            elif not m >> q & 1:
                self.deficit[q] = 0
            self.rr = (q + 1) % NQ
            self.visiting = False
        return -1

    def _start(self, t: int) -> None:
        while self.mask:
            q = self._pick(t)
            if q < 0:
                self.busy = False
                self._arm_wake(t)
                return
            dq = self.queues[q]
            frame, meta = dq.popleft()
            if not dq:
                self.mask &= ~(1 << q)
            self.qbytes[q] -= len(frame)
            t = self._send(t, q, frame, meta)
            if t < 0:
                return
        self.busy = False

    def _send(self, t: int, q: int, frame: Any, meta: Any) -> int:
        """Put one frame on the wire at t. A frame already due by the clock is delivered
        at once, off the schedule, and the end of its serialisation is returned so the
        caller can go on; otherwise the wire's end is scheduled and -1 returned."""
        if self.on_dequeue is not None:
            frame = self.on_dequeue(t, q, frame, meta)
        n = len(frame)
        self.busy = True
        rate = self.rate_bps
        end = t + ser_ps((n if n > MIN_FRAME else MIN_FRAME) + WIRE_OVERHEAD_BYTES, rate) if rate else t
        self.tx_packets += 1
        self.tx_bytes += n
        self.q_tx_packets[q] += 1
        arrive = end + self.delay_ps
        loop = self.loop
        # Off the schedule only if nothing else was due first: a PFC pause in the heap for an
        # earlier time must stop this wire before its next frame, however late the loop runs.
        up = self.up
        if up and self.loss and self.rng is not None and self.rng.random() < self.loss:
            self.lost += 1  # a degraded wire: the frame took its time on it and never arrived
            up = False
        if arrive <= loop.clock() and loop.next_time() >= arrive:
            if up:
                self.deliver(arrive, frame)
            if not self.mask:
                self.busy = False
                return -1
            return end
        loop.at(end, self._done, None)
        if up:
            loop.at(arrive, self.deliver, frame)
        return -1

    def degrade(self, *, loss: float, rate_bps: float, extra_delay_ps: int, seed: int | str) -> None:
        """A degraded wire, not a dead one: each frame lost with probability `loss` (seeded), the wire at
        `rate_bps` (0: as built), `extra_delay_ps` more propagation. All zero: as built."""
        rng = random.Random(seed) if loss else None  # what can fail (the seed, the rate) before anything changes
        self.rate_bps = rate_of(rate_bps) if rate_bps else self.base[0]
        self.delay_ps = self.base[1] + extra_delay_ps
        self.loss = loss
        self.rng = rng

    def _done(self, t: int, _: Any) -> None:
        self.busy = False
        self._start(t)

    def _arm_wake(self, t: int) -> None:
        """Queues held by a pause need a wake-up when the pause runs out."""
        wake = min(
            (self.pause_until[q] for q in range(NQ) if self.mask >> q & 1 and self.pause_until[q] > t),
            default=-1,
        )
        if wake > 0 and (self.wake_at <= t or wake < self.wake_at):
            self.wake_at = wake
            self.loop.at(wake, self._wake, None)

    def _wake(self, t: int, _: Any) -> None:
        if t >= self.wake_at:
            self.wake_at = -1
        if not self.busy:
            self._start(t)

    # -- PFC on receipt -----------------------------------------------------

    def pause(self, t: int, times: dict[int, int]) -> None:
        """Apply a received PFC frame: quanta of 512 bit times at this link's rate."""
        for prio, quanta in times.items():
            since = self.pause_since[prio]
            if since >= 0 and self.pause_until[prio] <= t:  # ran out on its own
                self.paused_time[prio] += self.pause_until[prio] - since
                since = -1
            if quanta:
                if since < 0:
                    since = t
                self.pause_until[prio] = t + pause_ps(quanta, self.rate_bps)
            else:
                if since >= 0:
                    self.paused_time[prio] += t - since
                    since = -1
                self.pause_until[prio] = 0
            self.pause_since[prio] = since
        if not self.busy:
            self._start(t)

    def paused_ps(self, t: int) -> list[int]:
        """Each priority's time paused by t, whole picoseconds."""
        out = list(self.paused_time)
        for q in range(NQ):
            if self.pause_since[q] >= 0:
                out[q] += min(t, self.pause_until[q]) - self.pause_since[q]
        return out

    def set_up(self, up: bool) -> None:
        """A down link still drains its queues (as a laser does) but delivers nothing."""
        self.up = up

    def queued(self) -> int:
        return sum(self.qbytes)


def pause_ps(quanta: int, rate_bps: int) -> int:
    """A PFC pause of `quanta` quanta on a wire of `rate_bps` (whole bit/s; 0: a hand-over, no time)."""
    return ser_ps(quanta * PAUSE_QUANTUM_BYTES, rate_bps) if rate_bps else 0
