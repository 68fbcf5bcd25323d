"""The schedule: timed callbacks run in (time, tie key) order. The Python reference core.

Every part that keeps fabric time (links, switches, endpoints, jobs) schedules
through one `Schedule` (`at(t, fn, arg)`) and reads the time from it
(`clock()`), in whole picoseconds of fabric time (emu.simtime says why
integers); the loops of emu.dataplane.loop decide when
its events run (on a virtual clock, paced against the wall, or as fast as the
CPU allows) by calling one of its `run_*` methods, each the inner loop of one
pacing. This file is the reference: emu.dataplane._core's Schedule (the
compiled core) runs the same events in the same order, and tests hold the
two to the same figures bit for bit (tests/test_cores.py).

Ties. Events due at the same picosecond run in the order of a key that
every part of a split fabric computes alike, whatever else it runs and
whenever it hears of the event: an event's key is (its scheduler's
identity, which child of that scheduler it is). The scheduler is the event
running when `at` was called; an event's identity is a 64-bit hash of its
key (`identity`: the c-th output of splitmix64 seeded with its scheduler's
identity), so the key follows the chain of causes back to an origin, not
the order in which one process happened to schedule things: a frame carried
to another worker takes its key along (`at_key`) and runs there where it
would have run on one worker. Two events of one scheduler keep the order it
made them in (ties by insertion, as before); events of different schedulers
at one instant are ordered by their hashes, which is fair between symmetric
senders (no port or rank always wins a tie) and the same on every run.
Neither the instant nor a job's number enters a key, so a job's figures do
not depend on when it starts or what ran before it. Outside any event (a
job's start, a kernel's frame) the scheduler is an origin: `enter(origin(...))`
names it by what it is (a host and the operation it starts, a port),
counting its children from 0 each time, so the same operation on the same
hosts breaks its ties alike whenever it runs; unnamed, it is the outside,
one counter for the process. Two schedulers' hashes could collide
(2**-64 a pair at one instant): their events then run in the order
scheduled here, and in the heap's order in the compiled core. A
scheduler's children are counted in 32 bits, as the compiled core counts
them.

`clock()` is the time a part takes as "now" when it decides something (a
link delivers a frame in line rather than through the schedule if its
arrival has already passed by this clock): the virtual time; in a worker the
schedule's own time while a job runs, its windows are open or what a job left
drains, and otherwise the wall mapped to fabric time at 1/idle_dilation.
`stamp()` is the instant at which input from outside (a kernel's frame)
enters: the wall mapped, on the paced (wall) clock even while a job runs.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any

from emu.simtime import NEVER, to_ps, to_s

Callback = Callable[[int, Any], None]

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
OUTSIDE = 0x5A17E0F7C3D2B1A9  # the scheduler of what is scheduled outside any event and any origin
ORIGIN = 0x0F1C2B3A49586776  # the root every named origin is hashed from


def mix64(x: int) -> int:
    """splitmix64's finaliser: 64 bits in, 64 well-mixed bits out (the compiled core's c_mix64)."""
    x ^= x >> 30
    x = x * 0xBF58476D1CE4E5B9 & MASK
    x ^= x >> 27
    x = x * 0x94D049BB133111EB & MASK
    return x ^ x >> 31


def identity(h: int, c: int) -> int:
    """The identity of the event with key (h, c), which its own children share as their scheduler:
    mix64(h + (c + 1) x GOLDEN), written out (the reference's hot path)."""
    x = (h + (c + 1) * GOLDEN) & MASK
    x ^= x >> 30
    x = x * 0xBF58476D1CE4E5B9 & MASK
    x ^= x >> 27
    x = x * 0x94D049BB133111EB & MASK
    return x ^ x >> 31


def origin(*tags: int | str) -> int:
    """A named scheduler for what is started outside any event: the same tags give the same identity in
    every process (strings hashed with BLAKE2b, not Python's per-process hash)."""
    h = ORIGIN
    for tag in tags:
        if isinstance(tag, str):
            tag = int.from_bytes(hashlib.blake2b(tag.encode(), digest_size=8).digest(), "little")
        h = mix64(h ^ (tag & MASK))
    return h

VIRTUAL, ENGINE = 0, 2  # what clock() reads: a unit test's virtual time, or an engine worker's
MODES = {"virtual": VIRTUAL, "engine": ENGINE}


class Schedule:
    """A heap of (time, scheduler, child, sequence, fn, arg), times in whole picoseconds: pure Python, the
    reference for the compiled core (the sequence orders only a collision of two schedulers' hashes). The wall meets fabric time in `mapped`, `stamp` and `run_paced` alone, where wall seconds
    and D become picoseconds (the anchor: fabric instant `anchor_f` was monotonic instant `anchor_w`)."""

    def __init__(self, mode: str = "virtual", idle_dilation: float = 1.0) -> None:
        self.heap: list[tuple[int, int, int, int, Callback, Any]] = []
        self._seq = itertools.count()
        self.now = 0
        # The scheduler that at() makes children of, and how many it has made: the running event's
        # identity (-1 until at() first needs it), or an origin (enter), or the outside. `running`: the
        # running event's heap entry.
        self.cur_h = OUTSIDE
        self.cur_n = 0
        self.running: tuple[int, int, int, int, Callback, Any] = (0, OUTSIDE, 0, 0, _nothing, None)
        self.mode = MODES[mode]
        # The fabric clock's state, which clock() and run_job() read: jobs running here, windows open
        # (a split fabric runs a job somewhere), the end of what the last job left to drain, and the
        # anchor that maps the wall to fabric time between jobs.
        self.busy = 0
        self.windowed = False
        self.drain_until = 0  # no event is before it (times are never negative)
        self.idle_dilation = idle_dilation
        self.anchor_f = 0
        self.anchor_w = time.monotonic()
        # Paced (the wall clock): fabric time follows the wall at 1/idle_dilation through the anchor, jobs
        # or not; events run when the wall reaches them (run_paced), and outside input is stamped there.
        self.paced = False

    def at(self, t: int, fn: Callback, arg: Any = None) -> None:
        if type(t) is not int:  # the check inline: this is the reference's hot path
            ps_of(t)
        h, c = self.cur_h, self.cur_n
        if h < 0:  # the running event's identity, made when it first schedules something
            e = self.running
            h = self.cur_h = identity(e[1], e[2])
        self.cur_n = c + 1 & 0xFFFFFFFF  # the compiled core's uint32
        heapq.heappush(self.heap, (t, h, c, next(self._seq), fn, arg))

    def reserve(self) -> tuple[int, int]:
        """The key the next at() would take, taken: for an event scheduled elsewhere (another worker)."""
        h, c = self.cur
        self.cur_n = c + 1 & 0xFFFFFFFF
        return h, c

    def at_key(self, t: int, h: int, c: int, fn: Callback, arg: Any = None) -> None:
        """An event whose key was taken elsewhere (reserve, or a peer's running event: `key`)."""
        ps_of(t)
        heapq.heappush(self.heap, (t, h & MASK, c & 0xFFFFFFFF, next(self._seq), fn, arg))

    def enter(self, h: int) -> tuple[int, int]:
        """Schedule as scheduler `h` (an `origin`) from here, its children counted from 0; returns what
        to hand `leave` to go back."""
        was = (self.cur_h, self.cur_n)
        self.cur_h, self.cur_n = h & MASK, 0
        return was

    def leave(self, was: tuple[int, int]) -> None:
        self.cur_h, self.cur_n = was

    @property
    def key(self) -> tuple[int, int]:
        """The running event's own tie key (h, c): what a frame it hands to another worker takes along."""
        e = self.running
        return e[1], e[2]

    @property
    def cur(self) -> tuple[int, int]:
        """The scheduler at() makes children of now, and how many it has made."""
        if self.cur_h < 0:
            e = self.running
            self.cur_h = identity(e[1], e[2])
        return self.cur_h, self.cur_n

    def next_time(self) -> int:
        """When the next event is due (NEVER: none is)."""
        heap = self.heap
        return heap[0][0] if heap else NEVER

    def __len__(self) -> int:
        return len(self.heap)

    def mapped(self, wall: float) -> int:
        """Fabric time at monotonic time `wall` where fabric time follows the wall: the anchor plus the wall
        seconds since it over D, in whole picoseconds (nearest, halves to even, as emu.simtime.to_ps)."""
        return self.anchor_f + to_ps((wall - self.anchor_w) / self.idle_dilation)

    def deadline(self, t: int) -> float:
        """The monotonic instant at which fabric instant `t` is due where fabric time follows the wall."""
        return self.anchor_w + to_s(t - self.anchor_f) * self.idle_dilation

    def clock(self) -> int:
        mode = self.mode
        if mode == VIRTUAL:
            return self.now
        heap = self.heap
        if self.busy or self.windowed or (heap and heap[0][0] < self.drain_until):
            return self.now
        f = self.mapped(time.monotonic())
        return f if f > self.now else self.now

    def stamp(self) -> int:
        """The fabric instant at which input from outside the schedule (a kernel's frame) enters it: the
        wall mapped to fabric time where fabric time follows the wall (paced, or between jobs), never
        before the last event; `now` while an unpaced job runs (nothing outside can keep its time)."""
        if self.mode != ENGINE:
            return self.clock()
        heap = self.heap
        if not self.paced and (self.busy or self.windowed or (heap and heap[0][0] < self.drain_until)):
            return self.now
        f = self.mapped(time.monotonic())
        return f if f > self.now else self.now

    # -- the inner loops, one per kind of loop -------------------------------------------------

    def _fire(self, e: tuple[int, int, int, int, Callback, Any], keep: bool) -> None:
        """Run the popped event `e` as the scheduler of what it schedules (its identity made when at()
        first needs it), then give the caller's scheduler back; `keep`: the clock never goes back."""
        t = e[0]
        if not keep or t > self.now:
            self.now = t
        was_h, was_n = self.cur_h, self.cur_n
        self.running, self.cur_h, self.cur_n = e, -1, 0
        e[4](t, e[5])  # an event that raises ends the run loop with its error, the context as it left it
        self.cur_h, self.cur_n = was_h, was_n

    def run_until(self, until: int, max_events: int) -> int:
        """Virtual time: every event due by `until` (inclusive; NEVER: all), at most `max_events`; the clock
        never goes back (an event scheduled in the past runs at its own time, `now` stays)."""
        ps_of(until)
        heap, pop, n = self.heap, heapq.heappop, 0
        while heap and heap[0][0] <= until and n < max_events:
            self._fire(pop(heap), True)
            n += 1
        if until != NEVER and until > self.now:
            self.now = until
        return n

    def run_due(self, f: int) -> int:
        """Between jobs on the fabric clock: every event due by fabric time `f` (inclusive), until a
        job begins; the clock never goes back."""
        ps_of(f)
        heap, pop, n = self.heap, heapq.heappop, 0
        while heap and heap[0][0] <= f and not self.busy:
            self._fire(pop(heap), True)
            n += 1
        return n

    def run_window(self, limit: int, max_events: int) -> int:
        """A split fabric's window: events before `limit` (exclusive), at most `max_events`."""
        ps_of(limit)
        heap, pop, n = self.heap, heapq.heappop, 0
        while heap and n < max_events and heap[0][0] < limit:
            self._fire(pop(heap), False)
            n += 1
        return n

    def run_job(self, max_events: int) -> int:
        """While a job runs here, or what one left is due before `drain_until`: at most `max_events`.
        A job that ends mid-batch hands what it left to the drain, then the rest to the wall."""
        heap, pop, n = self.heap, heapq.heappop, 0
        while heap and n < max_events and (self.busy or heap[0][0] < self.drain_until):
            self._fire(pop(heap), False)
            n += 1
        return n

    def run_paced(self, late: Any, limit: int) -> int:
        """Paced at D (idle_dilation): every event before `limit` (exclusive: a split fabric's window; NEVER:
        none) that the wall has reached through the anchor (`mapped`), in (time, order) as unpaced, each
        one's lateness (wall s past its `deadline`) added to `late`; the clock never goes back. The wall is
        read before each event, so an event behind a slow one is judged by when it ran."""
        ps_of(limit)
        heap = self.heap
        pop = heapq.heappop
        monotonic = time.monotonic
        mapped, deadline = self.mapped, self.deadline
        n = 0
        while heap:
            t = heap[0][0]
            wall = monotonic()
            if t >= limit or t > mapped(wall):
                break
            e = pop(heap)
            late.add(wall - deadline(t))
            self._fire(e, True)
            n += 1
        return n


def _nothing(t: int, arg: Any) -> None:
    """What `running` holds before any event has run."""


def ps_of(t: Any) -> int:
    """A time handed in: whole picoseconds (int), as the compiled core's int64; a float (seconds, or a rounded
    sum) is a TypeError at its caller on both cores, never truncated nor carried on."""
    if type(t) is not int:
        raise TypeError(f"a schedule's time is whole picoseconds (int), got {t!r}")
    return t
