"""The schedule: timed callbacks run in (time, order scheduled) order. The Python reference core.

Every part that keeps fabric time (links, switches, endpoints, jobs) schedules
through one `Schedule` (`at(t, fn, arg)`) and reads the time from it
(`clock()`), in whole picoseconds of fabric time (emu.simtime says why
integers); the loops of emu.dataplane.loop decide when
its events run (on a virtual clock, paced against the wall, or as fast as the
CPU allows) by calling one of its `run_*` methods, each the inner loop of one
pacing. This file is the reference: emu.dataplane._core's Schedule (the
compiled core) runs the same events in the same order, ties broken by the
order they were scheduled, and tests hold the two to the same figures bit
for bit (tests/test_cores.py).

`clock()` is the time a part takes as "now" when it decides something (a
link delivers a frame in line rather than through the schedule if its
arrival has already passed by this clock): the virtual time; in a worker the
schedule's own time while a job runs, its windows are open or what a job left
drains, and otherwise the wall mapped to fabric time at 1/idle_dilation.
`stamp()` is the instant at which input from outside (a kernel's frame)
enters: the wall mapped, on the paced (wall) clock even while a job runs.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any

from emu.simtime import NEVER, to_ps, to_s

Callback = Callable[[int, Any], None]

VIRTUAL, ENGINE = 0, 2  # what clock() reads: a unit test's virtual time, or an engine worker's
MODES = {"virtual": VIRTUAL, "engine": ENGINE}


class Schedule:
    """A heap of (time, sequence, fn, arg), times in whole picoseconds: pure Python, the reference for the
    compiled core. The wall meets fabric time in `mapped`, `stamp` and `run_paced` alone, where wall seconds
    and D become picoseconds (the anchor: fabric instant `anchor_f` was monotonic instant `anchor_w`)."""

    def __init__(self, mode: str = "virtual", idle_dilation: float = 1.0) -> None:
        self.heap: list[tuple[int, int, Callback, Any]] = []
        self._seq = itertools.count()
        self.now = 0
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
        heapq.heappush(self.heap, (t, next(self._seq), fn, arg))

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

    def run_until(self, until: int, max_events: int) -> int:
        """Virtual time: every event due by `until` (inclusive; NEVER: all), at most `max_events`; the clock
        never goes back (an event scheduled in the past runs at its own time, `now` stays)."""
        ps_of(until)
        heap = self.heap
        pop = heapq.heappop
        n = 0
        while heap and heap[0][0] <= until and n < max_events:
            t, _, fn, arg = pop(heap)
            if t > self.now:
                self.now = t
            fn(t, arg)
            n += 1
        if until != NEVER and until > self.now:
            self.now = until
        return n

    def run_due(self, f: int) -> int:
        """Between jobs on the fabric clock: every event due by fabric time `f` (inclusive), until a
        job begins; the clock never goes back."""
        ps_of(f)
        heap = self.heap
        pop = heapq.heappop
        n = 0
        while heap and heap[0][0] <= f and not self.busy:
            t, _, fn, arg = pop(heap)
            if t > self.now:
                self.now = t
            fn(t, arg)
            n += 1
        return n

    def run_window(self, limit: int, max_events: int) -> int:
        """A split fabric's window: events before `limit` (exclusive), at most `max_events`."""
        ps_of(limit)
        heap = self.heap
        pop = heapq.heappop
        n = 0
        while heap and n < max_events and heap[0][0] < limit:
            t, _, fn, arg = pop(heap)
            self.now = t
            fn(t, arg)
            n += 1
        return n

    def run_job(self, max_events: int) -> int:
        """While a job runs here, or what one left is due before `drain_until`: at most `max_events`.
        A job that ends mid-batch hands what it left to the drain, then the rest to the wall."""
        heap = self.heap
        pop = heapq.heappop
        n = 0
        while heap and n < max_events and (self.busy or heap[0][0] < self.drain_until):
            t, _, fn, arg = pop(heap)
            self.now = t
            fn(t, arg)
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
            _, _, fn, arg = pop(heap)
            if t > self.now:
                self.now = t
            late.add(wall - deadline(t))
            fn(t, arg)
            n += 1
        return n


def ps_of(t: Any) -> int:
    """A time handed in: whole picoseconds (int), as the compiled core's int64; a float (seconds, or a rounded
    sum) is a TypeError at its caller on both cores, never truncated nor carried on."""
    if type(t) is not int:
        raise TypeError(f"a schedule's time is whole picoseconds (int), got {t!r}")
    return t
