"""The schedule: timed callbacks run in (time, order scheduled) order. The Python reference core.

Every part that keeps fabric time (links, switches, endpoints, jobs) schedules
through one `Schedule` (`at(t, fn, arg)`) and reads the time from it
(`clock()`), in fabric seconds; the loops of emu.dataplane.loop decide when
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
import math
import time
from collections.abc import Callable
from typing import Any

Callback = Callable[[float, Any], None]

VIRTUAL, ENGINE = 0, 2  # what clock() reads: a unit test's virtual time, or an engine worker's
MODES = {"virtual": VIRTUAL, "engine": ENGINE}


class Schedule:
    """A heap of (time, sequence, fn, arg): pure Python, the reference for the compiled core."""

    def __init__(self, mode: str = "virtual", idle_dilation: float = 1.0) -> None:
        self.heap: list[tuple[float, int, Callback, Any]] = []
        self._seq = itertools.count()
        self.now = 0.0
        self.mode = MODES[mode]
        # The fabric clock's state, which clock() and run_job() read: jobs running here, windows open
        # (a split fabric runs a job somewhere), the end of what the last job left to drain, and the
        # anchor that maps the wall to fabric time between jobs.
        self.busy = 0
        self.windowed = False
        self.drain_until = -math.inf
        self.idle_dilation = idle_dilation
        self.anchor_f = 0.0
        self.anchor_w = time.monotonic()
        # Paced (the wall clock): fabric time follows the wall at 1/idle_dilation through the anchor, jobs
        # or not; events run when the wall reaches them (run_paced), and outside input is stamped there.
        self.paced = False

    def at(self, t: float, fn: Callback, arg: Any = None) -> None:
        heapq.heappush(self.heap, (t, next(self._seq), fn, arg))

    def next_time(self) -> float:
        heap = self.heap
        return heap[0][0] if heap else math.inf

    def __len__(self) -> int:
        return len(self.heap)

    def mapped(self, wall: float) -> float:
        """Fabric time at monotonic time `wall`, between jobs."""
        return self.anchor_f + (wall - self.anchor_w) / self.idle_dilation

    def clock(self) -> float:
        mode = self.mode
        if mode == VIRTUAL:
            return self.now
        heap = self.heap
        if self.busy or self.windowed or (heap and heap[0][0] < self.drain_until):
            return self.now
        f = self.mapped(time.monotonic())
        return f if f > self.now else self.now

    def stamp(self) -> float:
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

    def run_until(self, until: float, max_events: int) -> int:
        """Virtual time: every event due by `until` (inclusive), at most `max_events`; the clock never
        goes back (an event scheduled in the past runs at its own time, `now` stays)."""
        heap = self.heap
        pop = heapq.heappop
        n = 0
        while heap and heap[0][0] <= until and n < max_events:
            t, _, fn, arg = pop(heap)
            if t > self.now:
                self.now = t
            fn(t, arg)
            n += 1
        if until != math.inf and until > self.now:
            self.now = until
        return n

    def run_due(self, f: float) -> int:
        """Between jobs on the fabric clock: every event due by fabric time `f` (inclusive), until a
        job begins; the clock never goes back."""
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

    def run_window(self, limit: float, max_events: int) -> int:
        """A split fabric's window: events before `limit` (exclusive), at most `max_events`."""
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

    def run_paced(self, late: Any, limit: float) -> int:
        """Paced at D (idle_dilation): every event before `limit` (exclusive: a split fabric's window) that
        the wall has reached through the anchor, in (time, order) as unpaced, each one's lateness (wall s
        past its deadline anchor_w + (t - anchor_f) x D) added to `late`; the clock never goes back. The
        wall is read before each event, so an event behind a slow one is judged by when it ran."""
        heap = self.heap
        pop = heapq.heappop
        monotonic = time.monotonic
        anchor_f, anchor_w, d = self.anchor_f, self.anchor_w, self.idle_dilation
        n = 0
        while heap:
            t = heap[0][0]
            wall = monotonic()
            if t >= limit or t > anchor_f + (wall - anchor_w) / d:
                break
            _, _, fn, arg = pop(heap)
            if t > self.now:
                self.now = t
            late.add(wall - (anchor_w + (t - anchor_f) * d))
            fn(t, arg)
            n += 1
        return n
