"""Time behind one interface, in fabric seconds.

Everything that keeps fabric time (the engine's switches and links, MetaRoCE
endpoints, collective ranks) reads the time and schedules work through a
`Clock`: `clock()` is now, in that clock's seconds, and `at(t, fn, arg)`
runs `fn(t, arg)` at t. Two implement it (emu.dataplane.loop): `Loop`, a
virtual schedule for unit tests, and `EngineLoop`, an engine worker's, in
fabric seconds under one of two pacings: unpaced (the fabric clock: a job's
events as fast as the CPU allows, so nothing can be late and a result cannot
depend on the machine's speed or load) or paced at D (the wall clock).
`WALL` is the plain wall clock for a part that drives itself (an endpoint in
its own process on BMv2, which sleeps in select() rather than on a schedule).

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
    def clock(self) -> float:
        """Now, in this clock's seconds."""
        ...

    def at(self, t: float, fn: Callable[[float, Any], None], arg: Any = None) -> None:
        """Run fn(t, arg) at time t."""
        ...


class _Wall:
    """The machine's monotonic clock, for a part that sleeps on its own (no schedule to run)."""

    @staticmethod
    def clock() -> float:
        return time.monotonic()

    def at(self, t: float, fn: Callable[[float, Any], None], arg: Any = None) -> None:
        raise NotImplementedError("the plain wall clock runs no schedule: drive the part with progress()")


WALL = _Wall()


def check_clock(name: str | ClockKind) -> ClockKind:
    """The kind a name given by a user or a record means, or one ValueError saying what the two are."""
    try:
        return ClockKind(name)
    except ValueError:
        raise ValueError(f"unknown clock {name!r}: fabric (fabric time of its own, exact and as fast as the "
                         "CPU allows) or wall (fabric time = wall time / D, for kernel traffic and BMv2)") from None
