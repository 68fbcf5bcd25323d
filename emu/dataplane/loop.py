"""Event loops: one schedule of timed callbacks (emu.clock.Clock), run in virtual, wall or fabric time.

The data plane is written against `Loop.at(t, fn, arg)` only, so the same
switch, link and buffer code runs in unit tests on a virtual clock (exact,
instant, no root), in worker processes on the wall clock, where epoll
waits on the sockets and a timerfd wakes the loop with microsecond
precision (epoll's own timeout is whole milliseconds, too coarse for a
dilated 1 us cable), and on the fabric clock (`FabricLoop`), where the
schedule itself is the time.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import heapq
import itertools
import math
import os
import select
import time
from collections.abc import Callable
from typing import Any

from emu.fidelity import Lateness, tight_timers

Callback = Callable[[float, Any], None]


class Loop:
    """A virtual-time schedule: `run()` jumps from event to event."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, Callback, Any]] = []
        self._seq = itertools.count()
        self.now = 0.0

    def at(self, t: float, fn: Callback, arg: Any = None) -> None:
        heapq.heappush(self.heap, (t, next(self._seq), fn, arg))

    def clock(self) -> float:
        return self.now

    def run(self, until: float = float("inf"), max_events: int = 50_000_000) -> int:
        heap = self.heap
        pop = heapq.heappop
        n = 0
        while heap and heap[0][0] <= until and n < max_events:
            t, _, fn, arg = pop(heap)
            if t > self.now:
                self.now = t
            fn(t, arg)
            n += 1
        if until != float("inf") and until > self.now:
            self.now = until
        return n


_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class TimerFd:
    """A CLOCK_MONOTONIC timerfd armed at absolute deadlines (time.monotonic's clock)."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self._settime = libc.timerfd_settime
        self.fd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self._spec = _Itimerspec()
        self._ref = ctypes.byref(self._spec)
        self.armed = -1.0

    def arm(self, deadline: float) -> None:
        if deadline == self.armed:
            return
        self.armed = deadline
        sec = int(deadline)
        nsec = int((deadline - sec) * 1e9)
        if sec == 0 and nsec == 0:
            nsec = 1  # zero would disarm
        self._spec.it_value.tv_sec = sec
        self._spec.it_value.tv_nsec = nsec
        self._settime(self.fd, _TFD_TIMER_ABSTIME, self._ref, None)

    def clear(self) -> None:
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass

    def close(self) -> None:
        os.close(self.fd)


class WallLoop(Loop):
    """The same schedule on the wall clock, multiplexed with file descriptors."""

    def __init__(self) -> None:
        super().__init__()
        tight_timers()
        self.epoll = select.epoll()
        self.timer = TimerFd()
        self.epoll.register(self.timer.fd, select.EPOLLIN)
        self.handlers: dict[int, Callable[[], None]] = {}
        self.lateness = Lateness()
        self.running = True

    def clock(self) -> float:
        return time.monotonic()

    def add_reader(self, fd: int, handler: Callable[[], None]) -> None:
        self.handlers[fd] = handler
        self.epoll.register(fd, select.EPOLLIN)

    def remove_reader(self, fd: int) -> None:
        if self.handlers.pop(fd, None) is not None:
            self.epoll.unregister(fd)

    def _dispatch(self, events: list[tuple[int, int]]) -> None:
        """What epoll said is ready: the timer (re-armed by the caller) or a socket's handler."""
        timer = self.timer
        for fd, _ in events:
            if fd == timer.fd:
                timer.clear()
                timer.armed = -1.0
            else:
                self.handlers[fd]()

    def run_forever(self) -> None:
        heap = self.heap
        pop = heapq.heappop
        monotonic = time.monotonic
        late = self.lateness
        timer = self.timer
        while self.running:
            now = monotonic()
            n = 0
            while heap and heap[0][0] <= now:
                t, _, fn, arg = pop(heap)
                self.now = t
                late.add(now - t)
                fn(t, arg)
                n += 1
                if n & 63 == 0:
                    now = monotonic()
            if heap:
                nxt = heap[0][0]
                if nxt <= monotonic():
                    events = self.epoll.poll(0)
                else:
                    timer.arm(nxt)
                    events = self.epoll.poll(1.0)
            else:
                events = self.epoll.poll(1.0)
            self._dispatch(events)



class FabricLoop(WallLoop):
    """Fabric time as a clock of its own, in fabric seconds.

    While a job of the project's own runs (`busy` > 0: endpoints, ranks, generators, all inside
    this process), the loop jumps from event to event as fast as the CPU allows, and looks at its
    sockets (the kernel's frames) between batches without waiting: nothing is ever late, and the
    result does not depend on the machine's speed or load. With no job, nothing but the kernel can
    make work, so fabric time follows the wall clock at 1/`idle_dilation` (as a wall-clock run at
    that D does) and the loop sleeps until the next event or a frame: ping, ARP and TCP behave
    as on the wall clock. Frames from the kernel are stamped with the fabric time at which the
    engine takes them (`clock()`), and counted while a job runs (`kernel_frames`): their timing is
    not the fabric's, and a job they cross is not reproducible bit for bit.

    Ties (equal times) run in the order they were scheduled, so the same inputs give the same run.

    Split over several workers (`sync`: emu.dataplane.channel.Channels), a job's events run in windows
    all workers agree on: only those before the window's end, then the loop waits, serving its
    sockets, until every peer's barrier is in. The windows last until no worker has a job left.

    `pace` (wall seconds per fabric second, 0 by default) holds a job's fabric time back to what a
    person can watch (the live view): the loop waits, its sockets still served, until the wall
    catches up with the next event. Only the wall time a job takes changes, never its events.
    """

    BATCH = 256  # events between two looks at the sockets while a job runs
    # Fabric seconds after a job ended during which what it left (frames in flight, queues draining,
    # timers) still runs on the schedule, as fast as the CPU allows, and not on the wall: an event
    # that reads the clock gets its own time, not the wall's, and (split) the windows go on, so that
    # frames cross to the peers at their fabric time. The next job then finds the same fabric on any
    # machine, after any pause, on one worker or several.
    DRAIN_S = 0.01

    def __init__(self, idle_dilation: float) -> None:
        super().__init__()
        self.idle_dilation = idle_dilation
        self.busy = 0
        self.kernel_frames = 0  # frames the kernel sent while a job ran
        self.events = 0  # callbacks run while a job ran
        self._anchor_f = 0.0
        self._anchor_w = time.monotonic()
        self.pace = 0.0
        self._pace_f, self._pace_w = 0.0, self._anchor_w  # where the paced job's fabric time meets the wall
        self.sync: Any = None  # emu.dataplane.channel.Channels when the fabric is split over workers
        self.drain_until = -math.inf  # after a job: events due before this run on the schedule (DRAIN_S)

    def _mapped(self, wall: float) -> float:
        return self._anchor_f + (wall - self._anchor_w) / self.idle_dilation

    @property
    def in_job(self) -> bool:
        """A job runs here, or (split) on some worker: fabric time is the schedule's, not the wall's."""
        return bool(self.busy) or (self.sync is not None and self.sync.active)

    def _draining(self) -> bool:
        heap = self.heap
        return bool(heap) and heap[0][0] < self.drain_until

    def clock(self) -> float:
        if self.busy or (self.sync is not None and self.sync.active) or self._draining():
            return self.now
        f = self._mapped(time.monotonic())
        return f if f > self.now else self.now

    def begin(self, at: float | None = None) -> float:
        """A job starts: fabric time stops following the wall. Returns the job's start time: with no
        other job running, the next whole second of fabric time (what was due before it runs first),
        so that the same job starts at the same time in every run: the same floating-point sums,
        the same ties, the same result bit for bit. `at`: the instant every worker of a split fabric
        agreed on (not in this worker's past); its windows start there."""
        if self.sync is not None and self.sync.active:
            raise RuntimeError("a job is running on this split fabric: one job at a time")
        if not self.busy:
            start = math.floor(self.clock()) + 1.0 if at is None else at
            if start < self.clock():
                raise RuntimeError(f"the job's start {start!r} is in this worker's past ({self.clock()!r})")
            heap = self.heap
            while heap and heap[0][0] <= start:
                t, _, fn, arg = heapq.heappop(heap)
                if t > self.now:
                    self.now = t
                fn(t, arg)
            self.now = start
            self._pace_f, self._pace_w = start, time.monotonic()
            if self.sync is not None:
                self.sync.start(start)
        self.busy += 1
        return self.now

    def windows_over(self, t: float) -> None:
        """Split fabric: no worker has a job left; fabric time follows the wall from `t`, the same
        instant on every worker."""
        if t > self.now:
            self.now = t
        if not self.busy:
            self._anchor_f, self._anchor_w = self.now, time.monotonic()

    def set_pace(self, wall_s: float) -> None:
        """A fabric second of a job takes at least `wall_s` wall seconds from now on (0: no limit)."""
        if not 0.0 <= wall_s <= 1e6:
            raise ValueError(f"pace: wall seconds per fabric second in [0, 1e6], got {wall_s}")
        self.pace = float(wall_s)
        self._pace_f, self._pace_w = self.now, time.monotonic()

    def end(self) -> None:
        """A job ended: once none runs, fabric time follows the wall again, from where it is."""
        self.busy -= 1
        if not self.busy:
            self._anchor_f, self._anchor_w = self.now, time.monotonic()
            self.drain_until = self.now + self.DRAIN_S

    def run_forever(self) -> None:
        heap = self.heap
        pop = heapq.heappop
        timer = self.timer
        epoll = self.epoll
        batch = self.BATCH
        while self.running:
            sync = self.sync
            if sync is not None and sync.active:
                if sync.waiting:  # for the peers' barriers
                    self._dispatch(epoll.poll(1.0))
                    continue
                limit = sync.horizon
                if self.pace and heap and heap[0][0] < limit:
                    ahead = self._pace_w + (heap[0][0] - self._pace_f) * self.pace - time.monotonic()
                    if ahead > 0:
                        self._dispatch(epoll.poll(min(ahead, 0.05)))
                        continue
                n = 0
                while heap and n < batch and heap[0][0] < limit:
                    t, _, fn, arg = pop(heap)
                    self.now = t
                    fn(t, arg)
                    n += 1
                self.events += n
                if not heap or heap[0][0] >= limit:
                    nxt = heap[0][0] if heap else math.inf
                    sync.end_window(nxt, self.busy > 0 or nxt < self.drain_until)
                self._dispatch(epoll.poll(0))
            elif self.busy or (heap and heap[0][0] < self.drain_until):
                if self.busy and self.pace and heap:
                    ahead = self._pace_w + (heap[0][0] - self._pace_f) * self.pace - time.monotonic()
                    if ahead > 0:  # paced: serve the sockets while the wall catches up
                        self._dispatch(epoll.poll(min(ahead, 0.05)))
                        continue
                n = 0
                # A job that ends hands what it left to the drain, then the rest to the wall.
                while heap and n < batch and (self.busy or heap[0][0] < self.drain_until):
                    t, _, fn, arg = pop(heap)
                    self.now = t
                    fn(t, arg)
                    n += 1
                self.events += n
                if not self.busy and not self._draining() and self.drain_until > -math.inf:
                    self.drain_until = -math.inf  # drained: fabric time follows the wall from here
                    self._anchor_f, self._anchor_w = self.now, time.monotonic()
                events = epoll.poll(0 if heap else 1.0)
            else:
                f = self.clock()
                while heap and heap[0][0] <= f and not self.busy:
                    t, _, fn, arg = pop(heap)
                    if t > self.now:
                        self.now = t
                    fn(t, arg)
                if self.busy:
                    continue
                if heap:
                    timer.arm(self._anchor_w + (heap[0][0] - self._anchor_f) * self.idle_dilation)
                events = epoll.poll(1.0)
            self._dispatch(events)
