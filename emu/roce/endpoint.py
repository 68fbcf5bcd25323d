"""A MetaRoCE device's operations, driven on either clock.

An operation (a rank's collective, a perf client's writes) is a generator
that yields what it waits for: a condition, checked whenever its device
has done something, or None ("let the device send what was just posted,
then go on"). An `Endpoint` lives inside the engine, on either clock,
woken by the frames its switch ports deliver and by its own timers
(`Device.step` says when), and resumes the operation when what it waits
for holds; where frames must cross a kernel (BMv2, machines) `drive_wall`
turns the device's crank in the endpoint's own process in its host. The
logic is written once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import Any

from emu.dataplane.job import Attach
from emu.roce.transport import Device, FabricIO
from emu.simtime import NEVER, to_s

Wait = Callable[[], bool] | None
Op = Generator[Wait, None, Any]

# Consecutive wake-ups at one instant after which a device is said to be stuck (a bug, not a fabric).
STUCK_WAKES = 100_000


def drive_wall(gen: Generator[Wait, None, Any], dev: Device, timeout: float, what: str) -> Any:
    """Run an operation on the wall clock in this process: turn the device's crank until each wait
    holds; its value. TimeoutError naming `what` past `timeout` wall seconds."""
    deadline = time.monotonic() + timeout
    try:
        wait = next(gen)
        while True:
            if wait is None:
                dev.progress(0.0)
            else:
                while not wait():
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{what}: not done in {timeout:g} s: {dev.describe()}")
                    dev.progress(0.0005)
            wait = gen.send(None)
    except StopIteration as stop:
        return stop.value


class Endpoint:
    """A device inside the engine on the fabric clock, and the operation it runs (if any): woken by
    arrivals and by its own timers. `fail(why)` is told of an exception or a stuck device."""

    def __init__(self, loop: Any, dev: Device, fail: Callable[[str], None], name: str) -> None:
        self.loop = loop
        self.dev = dev
        self.fail = fail
        self.name = name
        self.op: Op | None = None
        self.done: Callable[[Any, int], None] | None = None
        self.wait: Wait = None
        self.wake_at = NEVER
        self.same = 0  # wake-ups in a row at one instant
        self.stopped = False  # its job has ended: it sends, answers and wakes no more

    @classmethod
    def attached(cls, host: Attach, planes: list[list[Any]], fail: Callable[[str], None], name: str,
                 **device: Any) -> Endpoint:
        """A device on the host's ports `planes` ([switch, port, IPv6 address, rate b/s] each, in plane
        order), on the engine's loop (fabric picoseconds, on either clock);
        `device`: Device's other settings. On the
        compiled core, its compiled twin (emu.roce._device: the same events, the same figures)."""
        if host.core == "native":
            from emu.roce._device import Endpoint as Compiled

            return Compiled.attached(host, planes, fail, name, **device)
        box: list[Endpoint] = []
        sends, host_macs, switch_macs = [], [], []
        for i, (switch, port, _addr, _rate) in enumerate(planes):
            send, host_mac, switch_mac = host.attach(switch, port, lambda t, frame, i=i: box[0].arrive(i, t, frame))
            sends.append(send)
            host_macs.append(host_mac)
            switch_macs.append(switch_mac)
        dev = Device([p[2] for p in planes], plane_rate_bps=min(p[3] for p in planes),
                     clock=host.loop, io=FabricIO(sends, host_macs, switch_macs), **device)
        box.append(cls(host.loop, dev, fail, name))
        return box[0]

    def arrive(self, plane: int, t: int, frame: Any) -> None:
        if self.stopped:
            return
        self.dev.on_frame(plane, frame, t)
        self.kick(t)

    def _wake(self, t: int, _: Any) -> None:
        if t == self.wake_at:
            self.wake_at = NEVER
            self.kick(t)

    def start(self, op: Op, t: int, done: Callable[[Any, int], None]) -> None:
        """Run `op` from time t; done(its value, the time it ended) once it has."""
        self.op, self.wait, self.done = op, None, done
        self.kick(t)

    def stop(self) -> None:
        """Its job has ended: no more operation, and the device falls silent (a device left running
        would go on probing a failed plane, and answer for its host in the next job)."""
        self.op = None
        self.stopped = True

    def busy(self) -> bool:
        return self.op is not None

    def describe(self) -> str:
        return self.dev.describe()

    def kick(self, t: int) -> None:
        """Do what is due, let the operation go on as far as it can, and sleep until the next due time."""
        if self.stopped:
            return
        try:
            while True:
                due = self.dev.step(t)
                if not self._advance(t):
                    break
        except Exception as exc:  # a bug must end the job with its reason, not the engine's worker
            self.op = None
            self.fail(f"{self.name}: {type(exc).__name__}: {exc}")
            return
        if due <= t:
            self.same += 1
            if self.same > STUCK_WAKES:
                self.op = None
                self.fail(f"{self.name}: its device makes no progress at {to_s(t):.9f} s: {self.dev.describe()}")
                return
            due = t
        else:
            self.same = 0
        if due != NEVER and (due < self.wake_at or self.wake_at < t):
            self.wake_at = due
            self.loop.at(due, self._wake, None)

    def _advance(self, t: int) -> bool:
        """Resume the operation while what it waits for holds; True if it did anything."""
        moved = False
        while self.op is not None and (self.wait is None or self.wait()):
            moved = True
            try:
                self.wait = self.op.send(None)
            except StopIteration as stop:
                self.op, self.wait = None, None
                if self.done is not None:
                    self.done(stop.value, t)
                return True
            if self.wait is None:
                return True  # it posted something: the device sends it before the operation goes on
        return moved
