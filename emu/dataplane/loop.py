"""Event loops: one schedule of timed callbacks (emu.clock.Clock), in whole picoseconds of fabric time.

The data plane is written against `Loop.at(t, fn, arg)` and `clock()` only, so
the same switch, link and buffer code runs in unit tests on a virtual clock
(`Loop`: exact, instant, no root) and in the engine's workers (`EngineLoop`),
where epoll waits on the sockets and a timerfd wakes the loop with
microsecond precision (epoll's own timeout is whole milliseconds). A worker's
loop has one of two pacings, chosen once for the run (ns-3's real-time
simulator is its default one plus a wait for the wall before each event):
unpaced (the fabric clock: a job's events as fast as the CPU allows) or paced
at D (the wall clock: an event runs no earlier than origin + t x D). The
schedule and its events are the same under both; D appears in the pacer alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import math
import os
import select
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from emu.dataplane.core import make_schedule
from emu.dataplane.schedule import Callback
from emu.dataplane.schedule import origin as origin_of
from emu.fidelity import Lateness, tight_timers
from emu.simtime import NEVER, PS_PER_S, to_ps, to_s

if TYPE_CHECKING:
    from emu.dataplane.windows import Windows


class Loop:
    """A virtual-time schedule: `run()` jumps from event to event. `sched`: the schedule it runs (the
    Python reference's or the compiled core's, emu.dataplane.core), made for it if not given."""

    MODE = "virtual"

    def __init__(self, sched: Any = None, *, core: str = "python", idle_dilation: float = 1.0) -> None:
        self.sched = sched if sched is not None else make_schedule(core, self.MODE, idle_dilation)
        self.at: Callable[[int, Callback, Any], None] = self.sched.at
        self.clock: Callable[[], int] = self.sched.clock
        # Ties (emu.dataplane.schedule): an event scheduled with a key taken elsewhere, a key taken for one.
        self.at_key: Callable[[int, int, int, Callback, Any], None] = self.sched.at_key
        self.reserve: Callable[[], tuple[int, int]] = self.sched.reserve

    @property
    def key(self) -> tuple[int, int]:
        """The running event's tie key: what a frame it hands to another worker takes along."""
        return self.sched.key

    @contextmanager
    def origin(self, *tags: int | str) -> Iterator[None]:
        """Schedule as the origin named by `tags` (a job, a rank, a port): what starts outside any event
        takes the same tie keys on every part of a split fabric."""
        was = self.sched.enter(origin_of(*tags))
        try:
            yield
        finally:
            self.sched.leave(was)

    @property
    def now(self) -> int:
        return self.sched.now

    @now.setter
    def now(self, t: int) -> None:
        self.sched.now = t

    def next_time(self) -> int:
        """When the next event is due (NEVER: none is)."""
        return self.sched.next_time()

    def run(self, until: int = NEVER, max_events: int = 50_000_000) -> int:
        """Every event due by `until` (picoseconds, inclusive), at most `max_events`."""
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
# its sockets again (`EngineLoop.gather`): what interrupt coalescing is to a NIC. Under load each frame
# from a host otherwise woke the worker on its own (a wake-up, and in a VM an exit, a frame), and the
# worker's turns took the cores the hosts' senders and receivers needed: with it, `emu bench engine`'s
# sender held 195k pps (150-170k without) and the receiver lost little at its socket. Never longer than
# the time to the next event, so no event is late for it; a frame from a kernel may be taken up to this
# much after it came, only while the worker is behind by a burst already. Unpaced, the loop runs its jobs'
# turns its own way and does not wait.
GATHER_S = 30e-6
GATHER_AFTER = 16  # frames a reader's turn must take, emptying its ring, for the loop to wait GATHER_S


class EngineLoop(Loop):
    """An engine worker's loop: its schedule in fabric picoseconds, multiplexed with its sockets, under one
    pacing chosen once (`paced`).

    Unpaced (the fabric clock). While a job of the project's own runs (`busy` > 0: endpoints, ranks,
    generators, all inside this process), the loop jumps from event to event as fast as the CPU allows,
    and looks at its sockets (the kernel's frames) between batches without waiting: nothing is ever
    late, and the result does not depend on the machine's speed or load. With no job, nothing but the
    kernel can make work, so fabric time follows the wall at 1/`dilation` and the loop sleeps until the
    next event or a frame: ping, ARP and TCP behave as on the wall clock. Frames from the kernel enter
    at the fabric time the engine takes them (Schedule.stamp), and are counted while a job runs
    (`kernel_frames`): their timing is not the fabric's, and a job they cross is not reproducible bit
    for bit. `pace` (wall seconds per fabric second, 0 by default) holds a job's fabric time back to
    what a person can watch (the live view); only the wall time a job takes changes, never its events.

    Paced at D (the wall clock, `paced`). Fabric time follows the wall at 1/`dilation` always, jobs or
    not: every event runs when the wall reaches origin + t x D (Schedule.run_paced), and how late it
    ran, in wall seconds, is the worker's lateness in the fidelity verdict. A kernel's frame enters at
    the fabric instant its arrival maps to. Events run in the same order as unpaced, so a job on time
    gives the fabric clock's figures bit for bit; D is applied here, in the wait and the stamp.

    Either way a job starts at the next whole fabric second (what was due before it runs first, at
    once), so that the same job starts at the same time in every run. Paced, the wall meets fabric time
    again at that start.

    Split over several workers (`sync`: emu.dataplane.windows.Windows), a job's events run in windows
    all workers agree on: only those before the window's end (paced: and due by the wall), then the loop
    waits, serving its sockets, until every peer's barrier is in. The windows last until no worker has
    a job left.

    The state clock() and stamp() read (jobs running, windows open, the drain, the wall's anchor) lives
    in the schedule, so the compiled core reads it where it decides.
    """

    MODE = "engine"
    # Events between two looks at the sockets while an unpaced job runs: a look costs some microseconds,
    # and the compiled core runs a batch of 2048 in about a millisecond, the longest a request then waits.
    BATCH = 2048
    # Unpaced: fabric seconds after a job ended during which what it left (frames in flight, queues
    # draining, timers) still runs on the schedule, as fast as the CPU allows, and not on the wall: an
    # event that reads the clock gets its own time, not the wall's, and (split) the windows go on, so
    # that frames cross to the peers at their fabric time. The next job then finds the same fabric on
    # any machine, after any pause, on one worker or several.
    DRAIN_PS = 10 * PS_PER_S // 1000  # 10 ms

    def __init__(self, dilation: float, sched: Any = None, *, core: str = "python", paced: bool = False,
                 origin: float | None = None) -> None:
        """`dilation`: wall seconds a fabric second where fabric time follows the wall (between jobs;
        always, paced). `origin`: the monotonic instant at which fabric time is 0 (a split fabric's
        workers share one), else now."""
        super().__init__(sched, core=core, idle_dilation=dilation)
        self.dilation = dilation
        self.paced = paced
        sched = self.sched
        sched.paced = paced
        if origin is not None:
            sched.anchor_f, sched.anchor_w = 0, origin
        tight_timers()
        self.epoll = select.epoll()
        self.timer = TimerFd()
        self.epoll.register(self.timer.fd, select.EPOLLIN)
        self.handlers: dict[int, Callable[[], None]] = {}
        self.lateness = Lateness()  # paced: how late events ran (wall s)
        self.running = True
        self.sync: Windows | None = None  # the windows of a split fabric (over its channels to the other workers)
        # Paced, while a job runs Python's cyclic garbage collector waits: a full collection took 28-39 ms in
        # a worker of a split fabric (gc.callbacks, FPF 4 x 2 1 MiB allreduce), and any event due meanwhile
        # would run that late (1.9 us of fabric time at D = 20 000). What a job frees is freed by reference
        # counting as before; its few cycles wait for its end (a 4 MiB allreduce's peak memory did not grow).
        self.running_jobs = 0
        self.gather = False  # paced: a reader emptied its socket after a burst; wait GATHER_S (took_from_kernel)
        self.kernel_frames = 0  # unpaced: frames the kernel sent while a job ran
        self.events = 0  # unpaced: callbacks run while a job ran
        self.pace = 0.0
        self._pace_f, self._pace_w = 0, sched.anchor_w  # where a watched job's fabric time meets the wall
        # While a job's begin runs what was due before its start, the start it jumps to: what keeps wall time
        # on this schedule (the channels' clock probes) is not replayed over the skipped fabric time.
        self.jump_to: int | None = None

    @property
    def busy(self) -> int:
        return self.sched.busy

    @property
    def measuring(self) -> bool:
        """Whether what happens now is the fabric's measured time (queue samples are taken): while a job
        runs; paced, always (the wall clock measures what the kernels do too), but for a job's jump to its
        start."""
        return self.sched.busy > 0 or (self.paced and self.jump_to is None)

    def fabric_ps_of_wall(self, wall_s: float) -> int:
        """The fabric picoseconds during which `wall_s` of wall time passes where fabric time follows the
        wall (paced; unpaced, between jobs): for what keeps wall time on this loop (the channels' clock
        probes)."""
        return to_ps(wall_s / self.dilation)

    def _anchor(self) -> None:
        """Unpaced: fabric time follows the wall again from here."""
        self.sched.anchor_f, self.sched.anchor_w = self.now, time.monotonic()

    def _draining(self) -> bool:
        return self.sched.next_time() < self.sched.drain_until

    def _deadline(self, t: int) -> float:
        """The monotonic instant at which fabric time `t` is due where fabric time follows the wall."""
        return self.sched.deadline(t)

    # -- jobs ------------------------------------------------------------------------------------

    def begin(self, at: int | None = None, wall_at: float | None = None) -> int:
        """A job starts. Returns its start time: with no other job running, the next whole second of fabric
        time (what was due before it runs first, at once). `at`: the instant every worker of a split fabric
        agreed on (not in this worker's past); its windows start there. Paced, the wall meets the start at
        `wall_at` (monotonic; a split fabric's common instant) or now: the job's events are paced from there."""
        sched = self.sched
        if self.sync is not None and self.sync.active:
            raise RuntimeError("a job is running on this split fabric: one job at a time")
        if not sched.busy:
            start = (self.clock() // PS_PER_S + 1) * PS_PER_S if at is None else at
            if start < self.clock():
                raise RuntimeError(f"the job's start {start!r} is in this worker's past ({self.clock()!r})")
            self.jump_to = start
            try:
                sched.run_due(start)
            finally:
                self.jump_to = None
            sched.now = start
            self._pace_f, self._pace_w = start, time.monotonic()
            if self.paced:
                sched.anchor_f, sched.anchor_w = start, self._pace_w if wall_at is None else wall_at
                if not self.running_jobs:
                    gc.disable()
            if self.sync is not None:
                self.sync.start(start)
                sched.windowed = True
        elif self.paced:  # another job runs: this one starts at the instant the wall maps to, not the last event's
            f = sched.stamp()
            if f > sched.now:
                sched.now = f
        sched.busy += 1
        self.running_jobs += self.paced
        return sched.now

    def end(self) -> None:
        """A job ended. Unpaced, once none runs, what it left drains, then fabric time follows the wall
        again from where it is; paced, fabric time follows the wall from the job's start as it did."""
        sched = self.sched
        sched.busy -= 1
        if self.paced:
            self.running_jobs -= 1
            if not self.running_jobs:
                gc.enable()
        elif not sched.busy:
            self._anchor()
            sched.drain_until = sched.now + self.DRAIN_PS

    def took_from_kernel(self, frames: int, emptied: bool) -> None:
        """A reader's turn took `frames` from a kernel's ring (`emptied`: fewer than a burst, none left).
        Unpaced, counted while a job runs (`kernel_frames`). Paced, after GATHER_AFTER or more that emptied
        it, the loop waits a moment before it looks again (`gather`): the hosts run meanwhile and the next
        frames gather, where each would have woken the worker on its own. A whole burst (more waiting) goes
        on at once: the switch keeps up first. Measured under `emu bench engine`'s load (2026-12-05):
        waiting after whole bursts too lost frames at the worker's own ring whenever the hosts held both
        cores, and yielding after them held the sender back; going on, the engine delivered all the sender
        sent, up to 200k pps, and what was lost was lost at the receiver's socket."""
        if self.paced:
            if emptied and frames >= GATHER_AFTER:
                self.gather = True
        elif self.sched.busy:
            self.kernel_frames += frames

    def split_over(self, windows: Windows) -> None:
        """This worker runs one part of a fabric split over several: its jobs advance in these windows."""
        self.sync = windows

    def windows_over(self, t: int) -> None:
        """Split fabric: no worker has a job left; fabric time follows the wall from `t`, the same instant on
        every worker (paced, it has followed it all along)."""
        sched = self.sched
        sched.windowed = False
        if t > sched.now:
            sched.now = t
        if not sched.busy and not self.paced:
            self._anchor()

    def set_pace(self, wall_s: float) -> None:
        """Unpaced: a fabric second of a job takes at least `wall_s` wall seconds from now on (0: no limit)."""
        if self.paced:
            raise ValueError("pace is the fabric clock's: on the wall clock, D sets it")
        if not 0.0 <= wall_s <= 1e6:
            raise ValueError(f"pace: wall seconds per fabric second in [0, 1e6], got {wall_s}")
        self.pace = float(wall_s)
        self._pace_f, self._pace_w = self.now, time.monotonic()

    # -- sockets ---------------------------------------------------------------------------------

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

    def _wait_for(self, deadline: float) -> None:
        """Serve the sockets until the wall reaches `deadline` (monotonic; inf: until one is ready)."""
        if self.gather:  # under load: let frames gather and the hosts run, never past an event
            self.gather = False
            now = time.monotonic()
            nap = min(deadline, now + GATHER_S) - now
            if nap > 0:
                time.sleep(nap)
            events = self.epoll.poll(0)
        elif deadline == math.inf:
            events = self.epoll.poll(1.0)
        elif deadline <= time.monotonic():
            events = self.epoll.poll(0)
        else:
            self.timer.arm(deadline)
            events = self.epoll.poll(1.0)
        self._dispatch(events)

    # -- running ---------------------------------------------------------------------------------

    def run_forever(self) -> None:
        """Until stopped, a turn at a time: a split fabric's job in windows (`_window`); paced, what the wall
        has reached (`_paced`); unpaced, a job or what one left (`_job`), or between jobs fabric time
        following the wall (`_idle`). Each serves the sockets when it is done."""
        while self.running:
            sync = self.sync
            if sync is not None and sync.active:
                self._window(sync)
            elif self.paced:
                self._paced()
            elif self.sched.busy or self._draining():
                self._job()
            else:
                self._idle()

    def _paced(self) -> None:
        """What the wall has reached (each event's lateness judged), then wait for the next one's deadline
        or a socket."""
        sched = self.sched
        sched.run_paced(self.lateness, NEVER)
        nxt = sched.next_time()
        self._wait_for(self._deadline(nxt) if nxt != NEVER else math.inf)

    def _window(self, sync: Windows) -> None:
        """Everything before the window's horizon (paced: as the wall reaches it), then this worker's
        barrier.

        Paced, a window ends when the wall reaches its horizon, not before, and the barrier promises
        nothing earlier than the wall's fabric instant then: a kernel's frame (a host's, BMv2's) may
        come in at any moment, stamped at the wall's instant, and what it sends across is then due at
        or after the next window's horizon. A window that ended as soon as its events had run let such
        a frame be due inside a window its peer had closed (a LookaheadError). The barrier is what keeps
        causality; waiting for the wall first is what keeps the windows from spinning, barrier after
        barrier, until the wall passes their end. An idle split exchanges barriers once a lookahead of
        fabric time (L x D of wall: 10 ms for FPF's 100 m cables at D = 20 000)."""
        sched, epoll = self.sched, self.epoll
        if sync.waiting:  # for the peers' barriers
            self._dispatch(epoll.poll(1.0))
            return
        limit = sync.horizon
        if self.paced:
            sched.run_paced(self.lateness, limit)
            nxt = sched.next_time()
            if nxt < limit:  # not due yet: wait for the wall (or a socket)
                self._wait_for(self._deadline(nxt))
                return
            if limit != NEVER and sched.mapped(time.monotonic()) < limit:  # the wall has not reached the end
                self._wait_for(self._deadline(limit))
                return
            sync.end_window(min(nxt, sched.stamp()), sched.busy > 0 or nxt < sched.drain_until)
            self._dispatch(epoll.poll(0))
            return
        else:
            if self.pace and sched.next_time() < limit:
                ahead = self._watch_wait()
                if ahead > 0:
                    self._dispatch(epoll.poll(min(ahead, 0.05)))
                    return
            self.events += sched.run_window(limit, self.BATCH)
            nxt = sched.next_time()
        if nxt >= limit:
            sync.end_window(nxt, sched.busy > 0 or nxt < sched.drain_until)
        self._dispatch(epoll.poll(0))

    def _watch_wait(self) -> float:
        """Unpaced, watched (`pace`): wall seconds until the job's next event may run (<= 0: now)."""
        return self._pace_w + to_s(self.sched.next_time() - self._pace_f) * self.pace - time.monotonic()

    def _job(self) -> None:
        """Unpaced: a batch of the job's events (or the drain's), as fast as the CPU allows unless watched."""
        sched, epoll = self.sched, self.epoll
        if sched.busy and self.pace and len(sched):
            ahead = self._watch_wait()
            if ahead > 0:  # watched: serve the sockets while the wall catches up
                self._dispatch(epoll.poll(min(ahead, 0.05)))
                return
        self.events += sched.run_job(self.BATCH)
        if not sched.busy and not self._draining() and sched.drain_until > 0:
            sched.drain_until = 0  # drained: fabric time follows the wall from here
            self._anchor()
        self._dispatch(epoll.poll(0 if len(sched) else 1.0))

    def _idle(self) -> None:
        """Unpaced, no job: what is due by the wall (at D), then sleep until the next event or a socket."""
        sched = self.sched
        sched.run_due(self.clock())
        if sched.busy:
            return
        if len(sched):
            self.timer.arm(self._deadline(sched.next_time()))
        self._dispatch(self.epoll.poll(1.0))
