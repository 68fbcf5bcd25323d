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
import gc
import math
import os
import select
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from emu.dataplane.core import make_schedule
from emu.dataplane.schedule import Callback
from emu.fidelity import Lateness, tight_timers

if TYPE_CHECKING:
    from emu.dataplane.windows import Windows


class Loop:
    """A virtual-time schedule: `run()` jumps from event to event. `sched`: the schedule it runs (the
    Python reference's or the compiled core's, emu.dataplane.core), made for it if not given."""

    MODE = "virtual"

    def __init__(self, sched: Any = None, *, core: str = "python", idle_dilation: float = 1.0) -> None:
        self.sched = sched if sched is not None else make_schedule(core, self.MODE, idle_dilation)
        self.at: Callable[[float, Callback, Any], None] = self.sched.at
        self.clock: Callable[[], float] = self.sched.clock

    @property
    def now(self) -> float:
        return self.sched.now

    @now.setter
    def now(self, t: float) -> None:
        self.sched.now = t

    def next_time(self) -> float:
        """When the next event is due (inf: none is)."""
        return self.sched.next_time()

    def run(self, until: float = float("inf"), max_events: int = 50_000_000) -> int:
        return self.sched.run_until(until, max_events)


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


# Wall seconds a wall loop waits, after a reader took a burst and emptied its socket, before it looks at
# its sockets again (`WallLoop.gather`): what interrupt coalescing is to a NIC. Under load each frame
# from a host otherwise woke the worker on its own (a wake-up, and in a VM an exit, a frame), and the
# worker's turns took the cores the hosts' senders and receivers needed: with it, `emu bench engine`'s
# sender held 195k pps (150-170k without) and the receiver lost little at its socket. Never longer than
# the time to the next event, so no event is late for it; a frame from a kernel may be taken up to this
# much after it came, only while the worker is behind by a burst already. The fabric clock's loop, which
# runs its jobs' turns its own way, does not wait.
GATHER_S = 30e-6
GATHER_AFTER = 16  # frames a reader's turn must take, emptying its ring, for the loop to wait GATHER_S


class WallLoop(Loop):
    """The same schedule on the wall clock, multiplexed with file descriptors."""

    MODE = "wall"

    def __init__(self, sched: Any = None, *, core: str = "python", idle_dilation: float = 1.0,
                 to_common: Callable[[], float] = lambda: 0.0) -> None:
        super().__init__(sched, core=core, idle_dilation=idle_dilation)
        # What to add to this loop's time for the workers' common clock (emu.dataplane.channel.common_offset):
        # a split job's start instant (start_at) is given on it.
        self.to_common = to_common
        tight_timers()
        self.epoll = select.epoll()
        self.timer = TimerFd()
        self.epoll.register(self.timer.fd, select.EPOLLIN)
        self.handlers: dict[int, Callable[[], None]] = {}
        self.lateness = Lateness()
        self.running = True
        self._origin = self.clock()
        self.sync: Windows | None = None  # the windows of a split fabric (over its channels to the other workers)
        # Jobs running on this loop. While one does, Python's cyclic garbage collector waits: a full collection
        # took 28-39 ms in a worker of a split fabric (gc.callbacks, FPF 4 x 2 1 MiB allreduce), and any event
        # due meanwhile would run that late (1.9 us of fabric time at D = 20 000). What a job frees is freed
        # by reference counting as before; its few cycles wait for its end (a 4 MiB allreduce's peak memory
        # did not grow). The fabric clock's loop is never late.
        self.running_jobs = 0
        # A reader emptied its socket after a burst: wait GATHER_S before the next look (took_from_kernel).
        self.gather = False

    def begin(self, at: float | None = None) -> float:
        """A job starts (emu.dataplane.job): on the wall clock, now, or a split job's part at `at`, the
        instant all parts agreed on, a moment ahead (Engine.WALL_START_S), so that every worker is asked
        before it. The loop's `now` moves there too (it was the last event's time, which may be long past
        when a request starts a job): what the job's endpoints send as they start is stamped then, and
        leaves then."""
        t = self.clock() if at is None else at
        if t > self.now:
            self.now = t
        if not self.running_jobs:
            gc.disable()
        self.running_jobs += 1
        return t

    def end(self) -> None:
        """A job ended: once none runs, Python collects cycles again (see `running_jobs`)."""
        self.running_jobs -= 1
        if not self.running_jobs:
            gc.enable()

    def start_at(self, at: float, start: Callable[[float], None]) -> None:
        """A split job's part starts at `at`, the instant every part agreed on, on the workers' common clock:
        start(t) by an event at that instant on this loop (t), so that what it sends as it starts leaves
        then (its begin(t))."""
        t = at - self.to_common()
        self.at(t, lambda t, _: start(t), None)

    @property
    def origin(self) -> float:
        """Where the fabric time of samples and captures counts from: on the wall clock the worker's start."""
        return self._origin

    @property
    def measuring(self) -> bool:
        """Whether what happens now is the fabric's measured time (queue samples are taken): always here."""
        return True

    def took_from_kernel(self, frames: int, emptied: bool) -> None:
        """A reader's turn took `frames` from a kernel's ring (`emptied`: fewer than a burst, none left).
        After GATHER_AFTER or more that emptied it, the loop waits a moment before it looks again
        (`gather`): the hosts run meanwhile and the next frames gather, where each would have woken the
        worker on its own. A whole burst (more waiting) goes on at once: the switch keeps up first.
        Measured under `emu bench engine`'s load (2026-12-05): waiting after whole bursts too lost frames
        at the worker's own ring whenever the hosts held both cores, and yielding after them held the
        sender back; going on, the engine delivered all the sender sent, up to 200k pps, and what was lost
        was lost at the receiver's socket, which a slow host loses on a real switch too."""
        if emptied and frames >= GATHER_AFTER:
            self.gather = True

    def split_over(self, windows: Windows) -> None:
        """This worker runs one part of a fabric split over several: on the fabric clock its jobs advance
        in these windows (over the worker's channels); the wall clock's loop keeps them and never opens one."""
        self.sync = windows

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
        sched = self.sched
        late = self.lateness
        timer = self.timer
        while self.running:
            sched.run_wall(late)
            nxt = sched.next_time()
            if self.gather:  # under load: let frames gather and the hosts run, never past an event
                self.gather = False
                now = time.monotonic()
                nap = min(nxt, now + GATHER_S) - now
                if nap > 0:
                    time.sleep(nap)
                events = self.epoll.poll(0)
            elif nxt < math.inf:
                if nxt <= time.monotonic():
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

    Split over several workers (`sync`: emu.dataplane.windows.Windows), a job's events run in windows
    all workers agree on: only those before the window's end, then the loop waits, serving its
    sockets, until every peer's barrier is in. The windows last until no worker has a job left.

    `pace` (wall seconds per fabric second, 0 by default) holds a job's fabric time back to what a
    person can watch (the live view): the loop waits, its sockets still served, until the wall
    catches up with the next event. Only the wall time a job takes changes, never its events.

    The state clock() reads (jobs running, windows open, the drain, the wall's anchor) lives in the
    schedule, so the compiled core reads it where it decides.
    """

    MODE = "fabric"
    # Events between two looks at the sockets while a job runs: a look costs some microseconds, and the
    # compiled core runs a batch of 2048 in about a millisecond, the longest a request then waits.
    BATCH = 2048
    # Fabric seconds after a job ended during which what it left (frames in flight, queues draining,
    # timers) still runs on the schedule, as fast as the CPU allows, and not on the wall: an event
    # that reads the clock gets its own time, not the wall's, and (split) the windows go on, so that
    # frames cross to the peers at their fabric time. The next job then finds the same fabric on any
    # machine, after any pause, on one worker or several.
    DRAIN_S = 0.01

    def __init__(self, idle_dilation: float, sched: Any = None, *, core: str = "python") -> None:
        super().__init__(sched, core=core, idle_dilation=idle_dilation)
        self.idle_dilation = idle_dilation
        self.kernel_frames = 0  # frames the kernel sent while a job ran
        self.events = 0  # callbacks run while a job ran
        self.pace = 0.0
        self._pace_f, self._pace_w = 0.0, self.sched.anchor_w  # where the paced job's fabric time meets the wall

    @property
    def busy(self) -> int:
        return self.sched.busy

    def _anchor(self) -> None:
        """Fabric time follows the wall again from here."""
        self.sched.anchor_f, self.sched.anchor_w = self.now, time.monotonic()

    def _draining(self) -> bool:
        return self.sched.next_time() < self.sched.drain_until

    def begin(self, at: float | None = None) -> float:
        """A job starts: fabric time stops following the wall. Returns the job's start time: with no
        other job running, the next whole second of fabric time (what was due before it runs first),
        so that the same job starts at the same time in every run: the same floating-point sums,
        the same ties, the same result bit for bit. `at`: the instant every worker of a split fabric
        agreed on (not in this worker's past); its windows start there."""
        sched = self.sched
        if self.sync is not None and self.sync.active:
            raise RuntimeError("a job is running on this split fabric: one job at a time")
        if not sched.busy:
            start = math.floor(self.clock()) + 1.0 if at is None else at
            if start < self.clock():
                raise RuntimeError(f"the job's start {start!r} is in this worker's past ({self.clock()!r})")
            sched.run_due(start)
            sched.now = start
            self._pace_f, self._pace_w = start, time.monotonic()
            if self.sync is not None:
                self.sync.start(start)
                sched.windowed = True
        sched.busy += 1
        return sched.now

    def start_at(self, at: float, start: Callable[[float], None]) -> None:
        """On the fabric clock `at` is fabric seconds, and the start is at once: the job's begin(at) moves
        fabric time there (not in this worker's past) and opens the windows."""
        start(at)

    @property
    def origin(self) -> float:
        """Fabric time's own zero: a sample's fabric time is then the same in every run."""
        return 0.0

    @property
    def measuring(self) -> bool:
        """While a job runs: between jobs fabric time only follows the wall."""
        return self.sched.busy > 0

    def took_from_kernel(self, frames: int, emptied: bool) -> None:
        """Counted while a job runs (`kernel_frames`): their timing is not the fabric's. This loop runs
        its jobs' turns its own way and never waits to gather."""
        if self.sched.busy:
            self.kernel_frames += frames

    def windows_over(self, t: float) -> None:
        """Split fabric: no worker has a job left; fabric time follows the wall from `t`, the same
        instant on every worker."""
        sched = self.sched
        sched.windowed = False
        if t > sched.now:
            sched.now = t
        if not sched.busy:
            self._anchor()

    def set_pace(self, wall_s: float) -> None:
        """A fabric second of a job takes at least `wall_s` wall seconds from now on (0: no limit)."""
        if not 0.0 <= wall_s <= 1e6:
            raise ValueError(f"pace: wall seconds per fabric second in [0, 1e6], got {wall_s}")
        self.pace = float(wall_s)
        self._pace_f, self._pace_w = self.now, time.monotonic()

    def end(self) -> None:
        """A job ended: once none runs, fabric time follows the wall again, from where it is."""
        sched = self.sched
        sched.busy -= 1
        if not sched.busy:
            self._anchor()
            sched.drain_until = sched.now + self.DRAIN_S

    def _paced_wait(self) -> float:
        """Wall seconds until a paced job's next event may run (<= 0: now)."""
        return self._pace_w + (self.sched.next_time() - self._pace_f) * self.pace - time.monotonic()

    def run_forever(self) -> None:
        """Until stopped, in one of three ways, chosen afresh each turn: a split fabric's job in windows
        (`_window`), a job or what one left on this schedule alone (`_job`), or between jobs, fabric time
        following the wall (`_idle`). Each serves the sockets when it is done."""
        while self.running:
            sync = self.sync
            if sync is not None and sync.active:
                self._window(sync)
            elif self.sched.busy or self._draining():
                self._job()
            else:
                self._idle()

    def _window(self, sync: Windows) -> None:
        """Everything before the window's horizon, then this worker's barrier (paced if asked)."""
        sched, epoll = self.sched, self.epoll
        if sync.waiting:  # for the peers' barriers
            self._dispatch(epoll.poll(1.0))
            return
        limit = sync.horizon
        if self.pace and sched.next_time() < limit:
            ahead = self._paced_wait()
            if ahead > 0:
                self._dispatch(epoll.poll(min(ahead, 0.05)))
                return
        self.events += sched.run_window(limit, self.BATCH)
        nxt = sched.next_time()
        if nxt >= limit:
            sync.end_window(nxt, sched.busy > 0 or nxt < sched.drain_until)
        self._dispatch(epoll.poll(0))

    def _job(self) -> None:
        """A batch of the job's events (or the drain's), as fast as the CPU allows unless paced."""
        sched, epoll = self.sched, self.epoll
        if sched.busy and self.pace and len(sched):
            ahead = self._paced_wait()
            if ahead > 0:  # paced: serve the sockets while the wall catches up
                self._dispatch(epoll.poll(min(ahead, 0.05)))
                return
        self.events += sched.run_job(self.BATCH)
        if not sched.busy and not self._draining() and sched.drain_until > -math.inf:
            sched.drain_until = -math.inf  # drained: fabric time follows the wall from here
            self._anchor()
        self._dispatch(epoll.poll(0 if len(sched) else 1.0))

    def _idle(self) -> None:
        """No job: what is due by the wall (at the idle D), then sleep until the next event or a socket."""
        sched = self.sched
        sched.run_due(self.clock())
        if sched.busy:
            return
        if len(sched):
            self.timer.arm(sched.anchor_w + (sched.next_time() - sched.anchor_f) * self.idle_dilation)
        self._dispatch(self.epoll.poll(1.0))
