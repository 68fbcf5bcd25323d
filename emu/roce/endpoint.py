"""A MetaRoCE device's operations, driven on either clock.

An operation (a rank's collective, a perf client's writes) is a generator
that yields what it waits for: a condition, checked whenever its device
has done something, or None ("let the device send what was just posted,
then go on"). On the wall clock `drive_wall` turns the device's crank in
the endpoint's own process; on the fabric clock an `Endpoint` lives inside
the engine, woken by the frames its switch ports deliver and by its own
timers (`Device.step` says when), and resumes the operation when what it
waits for holds. The logic is written once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import Any, Protocol

from emu.roce.transport import Device, FabricIO

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


class Attach(Protocol):
    """What the engine gives a fabric-clock job (emu.dataplane.worker.Worker): its loop, and a host's ports."""

    loop: Any

    def attach(self, switch: str, port: str, on_frame: Callable[[float, Any], None]
               ) -> tuple[Callable[[Any], None], bytes, bytes]:
        """Frames for UDP 4791 arriving at the host behind (switch, port) go to on_frame(t, frame);
        returns send(frame) into that port's NIC model, the host's MAC and the switch port's."""
        ...

    def attach_udp4(self, switch: str, port: str, udp_port: int,
                    on_frame: Callable[[float, Any], None] | None) -> None:
        """IPv4 UDP frames to `udp_port` arriving at the host behind (switch, port) go to on_frame(t, frame);
        None gives them back to the host's kernel."""
        ...

    def set_port(self, switch: str, port: str, up: bool) -> None:
        """A switch port down or up now, as a failure the job schedules in fabric time."""
        ...


class Endpoint:
    """A device inside the engine on the fabric clock, and the operation it runs (if any): woken by
    arrivals and by its own timers. `fail(why)` is told of an exception or a stuck device."""

    def __init__(self, loop: Any, dev: Device, fail: Callable[[str], None], name: str) -> None:
        self.loop = loop
        self.dev = dev
        self.fail = fail
        self.name = name
        self.op: Op | None = None
        self.done: Callable[[Any, float], None] | None = None
        self.wait: Wait = None
        self.wake_at = float("inf")
        self.same = 0  # wake-ups in a row at one instant

    @classmethod
    def attached(cls, host: Attach, planes: list[list[Any]], fail: Callable[[str], None], name: str,
                 **device: Any) -> Endpoint:
        """A device on the host's ports `planes` ([switch, port, IPv6 address, rate b/s] each, in plane
        order), on the engine's fabric clock (dilation 1); `device`: Device's other settings."""
        box: list[Endpoint] = []
        sends, host_macs, switch_macs = [], [], []
        for i, (switch, port, _addr, _rate) in enumerate(planes):
            send, host_mac, switch_mac = host.attach(switch, port, lambda t, frame, i=i: box[0].arrive(i, t, frame))
            sends.append(send)
            host_macs.append(host_mac)
            switch_macs.append(switch_mac)
        dev = Device([p[2] for p in planes], dilation=1.0, plane_rate_bps=min(p[3] for p in planes),
                     clock=host.loop, io=FabricIO(sends, host_macs, switch_macs), **device)
        box.append(cls(host.loop, dev, fail, name))
        return box[0]

    def arrive(self, plane: int, t: float, frame: Any) -> None:
        self.dev.on_frame(plane, frame, t)
        self.kick(t)

    def _wake(self, t: float, _: Any) -> None:
        if t == self.wake_at:
            self.wake_at = float("inf")
            self.kick(t)

    def start(self, op: Op, t: float, done: Callable[[Any, float], None]) -> None:
        """Run `op` from time t; done(its value, the time it ended) once it has."""
        self.op, self.wait, self.done = op, None, done
        self.kick(t)

    def stop(self) -> None:
        self.op = None

    def kick(self, t: float) -> None:
        """Do what is due, let the operation go on as far as it can, and sleep until the next due time."""
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
                self.fail(f"{self.name}: its device makes no progress at {t:.9f} s: {self.dev.describe()}")
                return
            due = t
        else:
            self.same = 0
        if due < self.wake_at or self.wake_at < t:
            self.wake_at = due
            self.loop.at(due, self._wake, None)

    def _advance(self, t: float) -> bool:
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


class Job:
    """A fabric-clock job's life inside the engine: it begins at one fabric instant (FabricLoop.begin),
    fails with its reason if it has not finished within `params["budget_s"]` of fabric time (stuck, not
    slow: nothing here can be slow), and once finished hands fabric time back to the wall. Subclasses
    fill `endpoints`, say what they do (`what()`) and call finish() when done."""

    def __init__(self, host: Attach, params: dict[str, Any]) -> None:
        self.host = host
        self.loop = host.loop
        self.params = params
        self.error = ""
        self.finished = False
        self.endpoints: list[Endpoint] = []
        self.t0 = 0.0

    def begin(self) -> float:
        """Start at one fabric instant; schedule the budget's end and the job's port events
        (`params["port_events"]`: [after (fabric s from the start), up, [[switch, port], ...]] each):
        a failure on the fabric clock must come at a fabric time, as nothing outside the engine can
        act while a job runs."""
        self.t0 = self.loop.begin()
        self.loop.at(self.t0 + float(self.params["budget_s"]), self._budget, None)
        for after, up, ports in self.params.get("port_events", []):
            self.loop.at(self.t0 + float(after), self._set_ports, (bool(up), ports))
        return self.t0

    def _set_ports(self, t: float, arg: tuple[bool, list[list[str]]]) -> None:
        up, ports = arg
        for switch, port in ports:
            self.host.set_port(switch, port, up)

    def what(self) -> str:
        raise NotImplementedError

    def _budget(self, t: float, _: Any) -> None:
        if not self.finished:
            busy = [f"{ep.name}: {ep.dev.describe()}" for ep in self.endpoints if ep.op is not None]
            self.fail(f"{self.what()} did not complete in {self.params['budget_s']:g} s of fabric time; "
                      f"{'; '.join(busy[:3])}")

    def fail(self, why: str) -> None:
        if not self.finished:
            self.error = why
            self.finish()

    def finish(self) -> None:
        self.finished = True
        for ep in self.endpoints:
            ep.stop()
        self.loop.end()
