"""Time behind one interface, in whole picoseconds of fabric time (emu.simtime).

Everything that keeps fabric time (the engine's switches and links, MetaRoCE
endpoints, collective ranks) reads the time and schedules work through a
`Clock`: `clock()` is now, and `at(t, fn, arg)` runs `fn(t, arg)` at t, both
in picoseconds. Two implement it (emu.dataplane.loop): `Loop`, a
virtual schedule for unit tests, and `EngineLoop`, an engine worker's, under
one of two pacings: unpaced (the fabric clock: a job's
events as fast as the CPU allows, so nothing can be late and a result cannot
depend on the machine's speed or load) or paced at D (the wall clock).
`ProcessClock` is fabric time for a part that drives itself in its own process (an
endpoint on BMv2, which sleeps in select() rather than on a schedule): the
machine's monotonic seconds since an epoch / D in picoseconds (the epoch shared by the processes whose
instants are compared), converted back to wall seconds only where the
process waits (its select()) and where it reports how late it was.

`ClockKind` is which of the two a run keeps: a type, decided once where the
user names it (the command line, `FabricNet(clock=...)`, a record read back),
so that code past that point asks `kind.paced` or `kind is ClockKind.FABRIC`
and never compares names. It is a `str` enum: results and records still say
"fabric" or "wall".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any, Protocol

from emu.simtime import to_ps, to_s


class ClockKind(StrEnum):
    """The clock a run keeps. FABRIC: fabric time of its own, a job's events as fast as the CPU allows;
    WALL: the same schedule paced at D (an event runs when the wall reaches origin + t x D)."""

    FABRIC = "fabric"
    WALL = "wall"

    @property
    def paced(self) -> bool:
        """Whether the engine's loop waits for the wall before each event (emu.dataplane.loop)."""
        return self is ClockKind.WALL


CLOCKS = tuple(kind.value for kind in ClockKind)  # the names argument parsers offer


class Clock(Protocol):
    def clock(self) -> int:
        """Now, in whole picoseconds of fabric time (emu.simtime)."""
        ...

    def at(self, t: int, fn: Callable[[int, Any], None], arg: Any = None) -> None:
        """Run fn(t, arg) at time t."""
        ...


class ProcessClock:
    """Fabric time in a process of its own on the wall clock: (monotonic() - epoch) / D, in whole picoseconds, the
    clock the harness (emu.net.timebase) reads the endpoints' traces on. The part keeps fabric time like any
    other; D is here, where it sleeps and where its lateness is reported (the wall's seconds), and nowhere
    in it."""

    def __init__(self, dilation: float, epoch_s: float | None = None) -> None:
        """`epoch_s`: the monotonic instant fabric time 0 is at. Processes whose instants are compared (a
        harness and its endpoints' traces) are given the same one; by default a clock counts from when it
        was made, so its picoseconds stay small: absolute monotonic() / D overflowed an int64 on a machine up
        more than 106 days at D = 1."""
        if not dilation >= 1.0:
            raise ValueError(f"dilation must be a number >= 1, got {dilation!r}")
        self.d = float(dilation)
        self.epoch = time.monotonic() if epoch_s is None else float(epoch_s)

    def clock(self) -> int:
        """(monotonic() - epoch) / D: an int64 holds 106 days of it at D = 1, 290 years at D = 1000."""
        return self.at_wall(time.monotonic())

    def at_wall(self, monotonic_s: float) -> int:
        """The fabric instant of monotonic instant `monotonic_s` (a start agreed between processes)."""
        return to_ps((monotonic_s - self.epoch) / self.d)

    def fabric_ps_of_wall(self, wall_s: float) -> int:
        """The fabric picoseconds during which `wall_s` wall seconds pass."""
        return to_ps(wall_s / self.d)

    def wall_s_of_fabric(self, fabric_ps: int) -> float:
        """The wall seconds `fabric_ps` of fabric time take (a sleep, a lateness)."""
        return self.wall_s(to_s(fabric_ps))

    def wall_s(self, fabric_s: float) -> float:
        """The wall seconds `fabric_s` fabric seconds take, for what waits on such processes from outside
        (a harness's time limit, the control plane's timers): the seconds a person gives, no schedule's."""
        return fabric_s * self.d

    def fabric_s(self, wall_s: float) -> float:
        """The fabric seconds of `wall_s` wall seconds: what such a process reports in wall seconds (a
        duration, or two instants compared with each other alone), read as fabric time. Not from the epoch:
        an instant on the endpoints' time line is `at_wall`."""
        return wall_s / self.d

    def wall_bps(self, fabric_bps: float) -> float:
        """The wall rate of a fabric rate: what a process in a host paces itself at."""
        return fabric_bps / self.d

    def at(self, t: int, fn: Callable[[int, Any], None], arg: Any = None) -> None:
        raise NotImplementedError("a process's clock runs no schedule: drive the part with progress()")


def check_clock(name: str | ClockKind) -> ClockKind:
    """The kind a name given by a user or a record means, or one ValueError saying what the two are."""
    try:
        return ClockKind(name)
    except ValueError:
        raise ValueError(f"unknown clock {name!r}: fabric (fabric time of its own, exact and as fast as the "
                         "CPU allows) or wall (fabric time = wall time / D, for kernel traffic and BMv2)") from None
