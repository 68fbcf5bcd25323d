"""A collective on the fabric clock: every rank inside the engine, on the engine's own schedule.

The engine's worker runs this (by name, from a RunJob message) in the process
that holds every switch: one MetaRoCE `Device` per host, attached to the
host's switch ports (frames go to the port's NIC model whole, and come back
from the port before the kernel would see them), and the same `Ring` the
wall-clock ranks run, resumed whenever its device has done something. All
ranks start each size at the same fabric instant; a size ends when the last
rank's writes are acknowledged, and the next starts then. Nothing here reads
the wall clock, so the figures are the fabric's on any machine, and the same
parameters and seed give the same figures.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator
from typing import Any

from emu.collectives.rank import Ring, Wait
from emu.roce.transport import Device, FabricIO

# Consecutive wake-ups at one instant after which a device is said to be stuck (a bug, not a fabric).
STUCK_WAKES = 100_000


class Attach:
    """What the engine gives a job (emu.dataplane.worker.JobHost): the clock and a host's ports."""

    loop: Any

    def attach(self, switch: str, port: str, on_frame: Callable[[float, Any], None]
               ) -> tuple[Callable[[Any], None], bytes, bytes]:
        """Frames for UDP 4791 arriving at the host behind (switch, port) go to on_frame(t, frame);
        returns send(frame) into that port's NIC model, the host's MAC and the switch port's."""
        raise NotImplementedError


class Endpoint:
    """One rank's device and the operation it runs, woken by arrivals and by its own timers."""

    def __init__(self, job: CollectiveJob, rank: int, dev: Device) -> None:
        self.job = job
        self.rank = rank
        self.dev = dev
        self.ring: Ring | None = None
        self.op: Generator[Wait, None, int] | None = None
        self.wait: Wait = None
        self.wake_at = float("inf")
        self.same = 0  # wake-ups in a row at one instant
        self.wrong = 0

    def arrive(self, plane: int, t: float, frame: Any) -> None:
        self.dev.on_frame(plane, frame, t)
        self.kick(t)

    def _wake(self, t: float, _: Any) -> None:
        if t == self.wake_at:
            self.wake_at = float("inf")
            self.kick(t)

    def start(self, op: Generator[Wait, None, int], t: float) -> None:
        self.op, self.wait = op, None
        self.kick(t)

    def kick(self, t: float) -> None:
        """Do what is due, let the operation go on as far as it can, and sleep until the next due time."""
        try:
            while True:
                due = self.dev.step(t)
                if not self._advance(t):
                    break
        except Exception as exc:  # a bug must end the job with its reason, not the engine's worker
            self.job.fail(f"rank {self.rank}: {type(exc).__name__}: {exc}")
            return
        if due <= t:
            self.same += 1
            if self.same > STUCK_WAKES:
                self.job.fail(f"rank {self.rank}: its device makes no progress at {t:.9f} s: {self.dev.describe()}")
                return
            due = t
        else:
            self.same = 0
        if due < self.wake_at or self.wake_at < t:
            self.wake_at = due
            self.job.loop.at(due, self._wake, None)

    def _advance(self, t: float) -> bool:
        """Resume the operation while what it waits for holds; True if it did anything."""
        moved = False
        while self.op is not None and (self.wait is None or self.wait()):
            moved = True
            try:
                self.wait = self.op.send(None)
            except StopIteration as stop:
                self.op, self.wait = None, None
                self.wrong = stop.value
                self.job.rank_done(self.rank, t)
            if self.wait is None and self.op is not None:
                return True  # it posted something: the device sends it before the operation goes on
        return moved


class CollectiveJob:
    """params: op, sizes, cc, mtu, slice, seed, ranks (each: name, planes as [switch, port, address,
    rate b/s]), budget_s (fabric seconds after which the job is said not to complete)."""

    def __init__(self, host: Attach, params: dict[str, Any]) -> None:
        self.loop = host.loop
        self.params = params
        self.op = params["op"]
        self.sizes: list[int] = list(params["sizes"])
        self.error = ""
        self.finished = False
        self.rows: list[list[dict[str, Any]]] = []
        n = len(params["ranks"])
        rng = random.Random(params.get("seed", 0))
        self.endpoints: list[Endpoint] = []
        for r, rank in enumerate(params["ranks"]):
            sends, host_macs, switch_macs, addrs = [], [], [], []
            ep_box: list[Endpoint] = []
            for i, (switch, port, addr, _rate) in enumerate(rank["planes"]):
                send, host_mac, switch_mac = host.attach(
                    switch, port, lambda t, frame, i=i, box=ep_box: box[0].arrive(i, t, frame))
                sends.append(send)
                host_macs.append(host_mac)
                switch_macs.append(switch_mac)
                addrs.append(addr)
            rate = min(p[3] for p in rank["planes"])
            dev = Device(addrs, dilation=1.0, plane_rate_bps=rate, mtu=params["mtu"], cc=params["cc"],
                         seed=rng.getrandbits(32), clock=self.loop, io=FabricIO(sends, host_macs, switch_macs))
            ep = Endpoint(self, r, dev)
            ep_box.append(ep)
            ep.ring = Ring(dev, r, n, self.op, max(self.sizes), params["slice"], timed=False)
            self.endpoints.append(ep)
        everyone = {r: ep.ring.info() for r, ep in enumerate(self.endpoints) if ep.ring is not None}
        for ep in self.endpoints:
            assert ep.ring is not None
            ep.ring.connect(everyone)
        self.t0 = self.loop.begin()
        self.started = self.t0
        self.k = -1
        self.left = 0
        self.loop.at(self.t0 + float(params["budget_s"]), self._budget, None)
        self._next_size(self.t0)

    def _next_size(self, t: float) -> None:
        self.k += 1
        if self.k == len(self.sizes):
            self._end()
            return
        size = self.sizes[self.k]
        self.left = len(self.endpoints)
        self.started = t
        for ep in self.endpoints:
            assert ep.ring is not None
            ep.ring.fill(size)
        for ep in self.endpoints:
            assert ep.ring is not None
            ep.start(ep.ring.run_op(size), t)

    def rank_done(self, rank: int, t: float) -> None:
        if self.finished:
            return
        ep = self.endpoints[rank]
        assert ep.ring is not None
        while len(self.rows) <= rank:
            self.rows.append([])
        self.rows[rank].append({"size": self.sizes[self.k], "time_fabric_s": ep.ring.done_at - self.started,
                                "wrong": ep.wrong})
        self.left -= 1
        if self.left == 0:
            self.loop.at(t, lambda tt, _: self._next_size(tt), None)  # after every callback of this instant

    def _budget(self, t: float, _: Any) -> None:
        if not self.finished:
            busy = [f"rank {ep.rank}: {ep.dev.describe()}" for ep in self.endpoints if ep.op is not None]
            self.fail(f"{self.op} of {self.sizes[self.k]} B did not complete in {self.params['budget_s']:g} s of "
                      f"fabric time; {'; '.join(busy[:3])}")

    def fail(self, why: str) -> None:
        if not self.finished:
            self.error = why
            self._end()

    def _end(self) -> None:
        self.finished = True
        for ep in self.endpoints:
            ep.op = None
        self.loop.end()

    def result(self) -> dict[str, Any]:
        """As the wall-clock ranks report themselves (emu.collectives.run reads both alike)."""
        if self.error:
            return {"error": self.error}
        return {"ranks": [{"rank": ep.rank, "rows": self.rows[ep.rank], "planes": ep.dev.plane_stats(),
                           "fidelity": [], "retransmits": sum(qp.retransmits for qp in ep.dev.qps.values())}
                          for ep in self.endpoints],
                "fabric_s": self.loop.now - self.t0}


def start(host: Attach, params: dict[str, Any]) -> CollectiveJob:
    return CollectiveJob(host, params)
