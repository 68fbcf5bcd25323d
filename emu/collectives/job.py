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

import heapq
import random
from typing import Any

from emu.collectives import algorithms
from emu.collectives.rank import Ring
from emu.dataplane.job import Attach, Job
from emu.roce.endpoint import Endpoint


def _attach_ranks(job: Any, params: dict[str, Any]) -> None:
    """A rank's MetaRoCE endpoint on its host's planes, for every rank of a collective job (`local`,
    `endpoints`, `participants`). On a fabric split over workers each runs the ranks of its own hosts;
    the others' are built detached, the same on every worker (same seeds), so that every ring connects
    to its peers."""
    rng = random.Random(params.get("seed", 0))
    job.local = [job.here(rank["planes"]) for rank in params["ranks"]]
    job.endpoints = [Endpoint.attached(job.attach_for(rank["planes"]), rank["planes"], job.fail,
                                       f"rank {r} ({rank['name']})", mtu=params["mtu"], cc=params["cc"],
                                       seed=rng.getrandbits(32), trim_dscp=params.get("trim_dscp"),
                                       spray=params.get("spray", "weighted"))
                     for r, rank in enumerate(params["ranks"])]
    job.participants = [ep for ep, mine in zip(job.endpoints, job.local, strict=True) if mine]


class CollectiveJob(Job):
    """params: op, algo, sizes, cc, mtu, slice, seed, ranks (each: name, planes as [switch, port, address,
    rate b/s]), budget_s (fabric seconds after which the job is said not to complete)."""

    def __init__(self, host: Attach, params: dict[str, Any]) -> None:
        super().__init__(host, params)
        self.op = params["op"]
        self.sizes: list[int] = list(params["sizes"])
        n = len(params["ranks"])
        self.rows: list[list[dict[str, Any]]] = [[] for _ in range(n)]
        _attach_ranks(self, params)
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
        self.rows[rank].append({"size": self.sizes[self.k], "time_fabric_s": self.since(self.rings[rank].done_at, self.started),
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

    def progress(self) -> str:
        left = f", {self.left} of {len(self.endpoints)} ranks still at it" if self.left < len(self.endpoints) else ""
        return f"{self.what()} (size {self.k + 1} of {len(self.sizes)}{left})"

    def result(self) -> dict[str, Any]:
        """As the wall-clock ranks report themselves (emu.collectives.run reads both alike)."""
        if self.error:
            return {"error": self.error}
        return {"ranks": [{"rank": r, "rows": self.rows[r], "planes": ep.dev.plane_stats(), "fidelity": [],
                           "retransmits": sum(qp.retransmits for qp in ep.dev.qps.values())}
                          for r, ep in enumerate(self.endpoints) if self.local[r]],
                "fabric_s": self.since(self.loop.now)}


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
        return {"jobs": [j.result() for j in self.parts], "fabric_s": self.since(self.loop.now)}


def start_together(host: Attach, params: dict[str, Any]) -> Together:
    return Together(host, params)


class ReplayJob(Job):
    """An execution trace replayed inside the engine (emu.collectives.trace): each rank runs its nodes
    once their dependencies are done, compute one at a time for its duration in fabric time,
    collectives one at a time in the trace's order, each starting when its last rank has issued it
    (every rank's fill at that instant, then the same ring or plan as `net.collective`).
    params: nodes (per rank: [id, kind, deps, duration_s, collective index]), collectives ([op, bytes]
    each), algo, and a collective job's cc, mtu, slice, seed, spray, trim_dscp, ranks, groups, budget_s."""

    def __init__(self, host: Attach, params: dict[str, Any]) -> None:
        super().__init__(host, params)
        n = self.n = len(params["ranks"])
        _attach_ranks(self, params)
        self.colls: list[tuple[str, int]] = [(op, int(size)) for op, size in params["collectives"]]
        group = tuple(params["groups"]) if params.get("groups") else None
        # One ring a kind of collective, sized for its largest, the same on every rank and worker; each
        # kind's immediates in a range of their own, every ring of a rank reading one inbox.
        inboxes: list[set[int]] = [set() for _ in range(n)]
        self.rings: dict[str, list[Ring]] = {}
        for i, op in enumerate(dict.fromkeys(op for op, _ in self.colls)):
            algo = params.get("algo") if params.get("algo") in algorithms.FOR_OP[op] else None
            biggest = max(size for o, size in self.colls if o == op)
            rings = [Ring(ep.dev, r, n, op, biggest, params["slice"], timed=False, algo=algo, groups=group)
                     for r, ep in enumerate(self.endpoints)]
            everyone = {r: ring.info() for r, ring in enumerate(rings)}
            for r, ring in enumerate(rings):
                ring.connect(everyone)
                ring.msg, ring.got = i << 24, inboxes[r]
            self.rings[op] = rings
        self.nodes = [{row[0]: row for row in rows} for rows in params["nodes"]]
        self.children: list[dict[int, list[int]]] = [{} for _ in range(n)]
        self.waiting = [{} for _ in range(n)]
        self.coll_node: list[dict[int, int]] = [{} for _ in range(n)]
        for r, rows in enumerate(params["nodes"]):
            for nid, _kind, deps, _dur, k in rows:
                self.waiting[r][nid] = len(deps)
                for d in deps:
                    self.children[r].setdefault(d, []).append(nid)
                if k >= 0:
                    self.coll_node[r][k] = nid
        self.computing = [False] * n
        self.compute_queue: list[list[int]] = [[] for _ in range(n)]
        self.talking = [False] * n
        self.next_coll = [0] * n
        self.coll_ready: list[set[int]] = [set() for _ in range(n)]
        self.issued = [0] * len(self.colls)  # ranks that have issued collective k (heard)
        self.ended = 0
        self.left = [len(rows) for rows in params["nodes"]]
        self.timeline: list[list[list[Any]]] = [[] for _ in range(n)]  # [id, kind, start, end] per node
        self.coll_rows: list[list[list[Any]]] = [[] for _ in range(n)]  # [k, issued, start, end, wrong]
        self.issued_at: list[dict[int, float]] = [{} for _ in range(n)]
        self.coll_start = [0.0] * len(self.colls)
        self.busy_s = [0.0] * n
        self.started = self.begin()
        for r in range(n):
            if self.local[r]:
                for nid, count in sorted(self.waiting[r].items()):
                    if count == 0:
                        self._ready(r, nid, self.t0)

    def _ready(self, r: int, nid: int, t: float) -> None:
        kind, k = self.nodes[r][nid][1], self.nodes[r][nid][4]
        if kind == "comp":
            heapq.heappush(self.compute_queue[r], nid)
            self._compute(r, t)
        elif kind == "coll":
            self.coll_ready[r].add(k)
            self._issue(r, t)
        else:
            self.timeline[r].append([nid, kind, self.since(t), self.since(t)])
            self._done(r, nid, t)

    def _compute(self, r: int, t: float) -> None:
        if self.computing[r] or not self.compute_queue[r]:
            return
        nid = heapq.heappop(self.compute_queue[r])
        self.computing[r] = True
        self.loop.at(t + self.loop_s(float(self.nodes[r][nid][3])), self._computed, (r, nid, t))

    def _computed(self, t: float, arg: tuple[int, int, float]) -> None:
        r, nid, began = arg
        if self.finished:
            return
        self.computing[r] = False
        self.busy_s[r] += self.since(t, began)
        self.timeline[r].append([nid, "comp", self.since(began), self.since(t)])
        self._done(r, nid, t)
        self._compute(r, t)

    def _issue(self, r: int, t: float) -> None:
        if not self.talking[r] and self.next_coll[r] in self.coll_ready[r]:
            self.talking[r] = True
            self.issued_at[r][self.next_coll[r]] = t
            self.tell(["issued", self.next_coll[r]])

    def heard(self, t: float, payload: Any) -> None:
        if self.finished:
            return
        what, arg = payload
        if what == "ended":
            self.ended += 1
            if self.ended == self.n:
                self.finish()
            return
        self.issued[arg] += 1
        if self.issued[arg] < self.n:
            return
        op, size = self.colls[arg]
        self.coll_start[arg] = t
        for r, ring in enumerate(self.rings[op]):
            if self.local[r]:
                ring.fill(size)
                self.endpoints[r].start(ring.run_op(size), t, lambda wrong, tt, r=r, k=arg: self._talked(r, k, wrong))

    def _talked(self, r: int, k: int, wrong: int) -> None:
        if self.finished:
            return
        op, _ = self.colls[k]
        t = self.rings[op][r].done_at  # its communication's end (the check of the data takes no time)
        self.coll_rows[r].append([k, self.since(self.issued_at[r][k]), self.since(self.coll_start[k]), self.since(t), wrong])
        self.timeline[r].append([self.coll_node[r][k], "coll", self.since(self.coll_start[k]), self.since(t)])
        self.talking[r] = False
        self.next_coll[r] += 1
        self._done(r, self.coll_node[r][k], t)
        self._issue(r, t)

    def _done(self, r: int, nid: int, t: float) -> None:
        self.left[r] -= 1
        for c in self.children[r].get(nid, ()):
            self.waiting[r][c] -= 1
            if self.waiting[r][c] == 0:
                self._ready(r, c, t)
        if self.left[r] == 0:
            self.tell(["ended", r])

    def what(self) -> str:
        stuck = [f"rank {r} at collective {self.next_coll[r]}" for r in range(self.n) if self.local[r] and self.left[r]]
        return "the trace's replay (" + ", ".join(stuck[:3]) + ")"

    def result(self) -> dict[str, Any]:
        if self.error:
            return {"error": self.error}
        return {"ranks": [{"rank": r, "timeline": self.timeline[r], "collectives": self.coll_rows[r],
                           "compute_s": self.busy_s[r],
                           "end_s": max((row[3] for row in self.timeline[r]), default=0.0),
                           "retransmits": sum(qp.retransmits for qp in self.endpoints[r].dev.qps.values())}
                          for r in range(self.n) if self.local[r]],
                "fabric_s": self.since(self.loop.now)}


def start_replay(host: Attach, params: dict[str, Any]) -> ReplayJob:
    return ReplayJob(host, params)
