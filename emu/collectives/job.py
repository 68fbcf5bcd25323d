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
from typing import Any

from emu.collectives.rank import Ring
from emu.dataplane.job import Attach, Job
from emu.roce.endpoint import Endpoint


class CollectiveJob(Job):
    """params: op, algo, sizes, cc, mtu, slice, seed, ranks (each: name, planes as [switch, port, address,
    rate b/s]), budget_s (fabric seconds after which the job is said not to complete)."""

    def __init__(self, host: Attach, params: dict[str, Any]) -> None:
        super().__init__(host, params)
        self.op = params["op"]
        self.sizes: list[int] = list(params["sizes"])
        n = len(params["ranks"])
        self.rows: list[list[dict[str, Any]]] = [[] for _ in range(n)]
        rng = random.Random(params.get("seed", 0))
        # On a fabric split over workers each runs the ranks of its own hosts; the others' are built
        # detached, the same on every worker (same seeds), so that every ring connects to its peers.
        self.local = [self.here(rank["planes"]) for rank in params["ranks"]]
        self.endpoints = [Endpoint.attached(self.attach_for(rank["planes"]), rank["planes"], self.fail,
                                            f"rank {r} ({rank['name']})", mtu=params["mtu"], cc=params["cc"],
                                            seed=rng.getrandbits(32), trim_dscp=params.get("trim_dscp"),
                                            spray=params.get("spray", "weighted"))
                          for r, rank in enumerate(params["ranks"])]
        self.participants = [ep for ep, mine in zip(self.endpoints, self.local, strict=True) if mine]
        group = tuple(params["groups"]) if params.get("groups") else None
        self.rings = [Ring(ep.dev, r, n, self.op, max(self.sizes), params["slice"], timed=False,
                           algo=params.get("algo"), groups=group)
                      for r, ep in enumerate(self.endpoints)]
        everyone = {r: ring.info() for r, ring in enumerate(self.rings)}
        for ring in self.rings:
            ring.connect(everyone)
        self.k = -1
        self.left = 0
        self.started = self.begin()
        self._next_size(self.t0)

    def _next_size(self, t: float) -> None:
        self.k += 1
        if self.k == len(self.sizes):
            self.finish()
            return
        size = self.sizes[self.k]
        self.left = len(self.endpoints)
        self.started = t
        for ring in self.rings:
            ring.fill(size)
        for r, (ep, ring) in enumerate(zip(self.endpoints, self.rings, strict=True)):
            if self.local[r]:
                ep.start(ring.run_op(size), t, lambda wrong, tt, r=r: self._rank_done(r, wrong, tt))

    def _rank_done(self, rank: int, wrong: int, t: float) -> None:
        if self.finished:
            return
        self.rows[rank].append({"size": self.sizes[self.k], "time_fabric_s": self.rings[rank].done_at - self.started,
                                "wrong": wrong})
        self.tell(self.k)  # every part counts it, after every callback of this instant (a lookahead on, split)

    def heard(self, t: float, size_index: Any) -> None:
        if self.finished or size_index != self.k:
            return
        self.left -= 1
        if self.left == 0:
            self._next_size(t)

    def what(self) -> str:
        return f"{self.op} of {self.sizes[self.k]} B"

    def result(self) -> dict[str, Any]:
        """As the wall-clock ranks report themselves (emu.collectives.run reads both alike)."""
        if self.error:
            return {"error": self.error}
        return {"ranks": [{"rank": r, "rows": self.rows[r], "planes": ep.dev.plane_stats(), "fidelity": [],
                           "retransmits": sum(qp.retransmits for qp in ep.dev.qps.values())}
                          for r, ep in enumerate(self.endpoints) if self.local[r]],
                "fabric_s": self.loop.now - self.t0}


def start(host: Attach, params: dict[str, Any]) -> CollectiveJob:
    return CollectiveJob(host, params)


class _Part:
    """What one collective of a Together attaches to: the worker itself, except that what it tells its
    other parts (on other workers) goes through the Together, which the worker knows by id."""

    def __init__(self, host: Attach, whole: Together, index: int) -> None:
        self._host, self._whole, self._index = host, whole, index

    def __getattr__(self, name: str) -> Any:
        return getattr(self._host, name)

    def tell(self, job: Any, payload: Any) -> None:
        self._host.tell(self._whole, [self._index, payload])


class Together(Job):
    """Several collectives started at one fabric instant, each on its own hosts (and planes), each with
    its own result: tenants sharing a fabric. params: jobs (each a CollectiveJob's params), budget_s.
    Alone, a collective starts at that instant too, so one whose links no other job touches gives the
    figures it gives with the fabric to itself."""

    def __init__(self, host: Attach, params: dict[str, Any]) -> None:
        super().__init__(host, params)
        self.begin()
        self.parts: list[CollectiveJob] = []
        for i, p in enumerate(params["jobs"]):
            job = CollectiveJob(_Part(host, self, i), {**p, "joined_at": self.t0})  # type: ignore[arg-type]
            job.on_finish.append(self._part_done)
            self.parts.append(job)
        self.participants = [x for job in self.parts for x in job.participants]
        self._part_done()

    def _part_done(self) -> None:
        if self.finished or len(self.parts) < len(self.params["jobs"]) or not all(j.finished for j in self.parts):
            return
        errors = [f"job {i}: {j.error}" for i, j in enumerate(self.parts) if j.error]
        self.fail("; ".join(errors)) if errors else self.finish()

    def heard(self, t: float, payload: Any) -> None:
        index, inner = payload
        self.parts[index].heard(t, inner)

    def what(self) -> str:
        return " and ".join(j.what() for j in self.parts if not j.finished) or "collectives"

    def result(self) -> dict[str, Any]:
        if self.error:
            return {"error": self.error}
        return {"jobs": [j.result() for j in self.parts], "fabric_s": self.loop.now - self.t0}


def start_together(host: Attach, params: dict[str, Any]) -> Together:
    return Together(host, params)
