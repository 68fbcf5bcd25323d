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
from emu.simtime import to_ps, to_s


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
                                       spray=params.get("spray", "weighted"),
                                       payload=params.get("payload", "real") != "none",
                                       **params.get("transport", {}))
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
        self.started = 0

    def kick(self) -> None:
        self.started = self.t0
        self._next_size(self.t0)

    def _next_size(self, t: int) -> None:
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
                with self.as_origin("host", self.params["ranks"][r]["name"], self.op, size):
                    ep.start(ring.run_op(size), t, lambda wrong, tt, r=r: self._rank_done(r, wrong, tt))

    def _rank_done(self, rank: int, wrong: int, t: int) -> None:
        if self.finished:
            return
        self.rows[rank].append({"size": self.sizes[self.k], "time_fabric_s": self.since(self.rings[rank].done_at, self.started),
                                "wrong": wrong})
        self.tell(self.k)  # every part counts it, after every callback of this instant (a lookahead on, split)

    def heard(self, t: int, size_index: Any) -> None:
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
        self.parts: list[CollectiveJob] = []
        for i, p in enumerate(params["jobs"]):
            job = CollectiveJob(_Part(host, self, i), {**p, "joined_at": None})  # type: ignore[arg-type]
            job.on_finish.append(self._part_done)
            self.parts.append(job)
        self.participants = [x for job in self.parts for x in job.participants]

    def kick(self) -> None:
        for i, job in enumerate(self.parts):  # each starts at the whole's instant
            job.params["joined_at"] = self.t0
            job.go("part", i)
        self._part_done()

    def _part_done(self) -> None:
        if self.finished or len(self.parts) < len(self.params["jobs"]) or not all(j.finished for j in self.parts):
            return
        errors = [f"job {i}: {j.error}" for i, j in enumerate(self.parts) if j.error]
        self.fail("; ".join(errors)) if errors else self.finish()

    def heard(self, t: int, payload: Any) -> None:
        index, inner = payload
        self.parts[index].heard(t, inner)

    def what(self) -> str:
        return " and ".join(j.what() for j in self.parts if not j.finished) or "collectives"

    def result(self) -> dict[str, Any]:
        if self.error:
            return {"error": self.error}
        return {"jobs": [j.result() for j in self.parts], "fabric_s": self.since(self.loop.now)}


class ReplayJob(Job):
    """An execution trace replayed inside the engine (emu.collectives.trace): each rank runs its nodes
    once their dependencies are done, compute one at a time for its duration in fabric time, and its
    communication on one stream in the trace's order: a collective starts when its last rank has
    issued it (every rank's fill at that instant, then the same ring or plan as `net.collective`); a
    send is a write with immediate into the receiver's memory, done once acknowledged; a receive is
    done once that write is whole there (it may have arrived before the receive was reached).
    params: nodes (per rank: [id, kind, deps, duration_s, index: a collective's or a message's]),
    collectives ([op, bytes] each), messages ([source, destination, bytes] each), algo, and a collective
    job's cc, mtu, slice, seed, spray, trim_dscp, ranks, groups, budget_s."""

    def __init__(self, host: Attach, params: dict[str, Any]) -> None:
        super().__init__(host, params)
        n = self.n = len(params["ranks"])
        _attach_ranks(self, params)
        self.colls: list[tuple[str, int, tuple[int, ...]]] = [(op, int(size), tuple(members))
                                                              for op, size, members in params["collectives"]]
        hostgroups = params.get("groups") or None
        # One ring a kind of collective and its ranks (every rank, or a process group), sized for its
        # largest, the same on every rank and worker; each kind's immediates in a range of their own,
        # every ring of a rank reading one inbox.
        inboxes: list[set[int]] = [set() for _ in range(n)]
        self.rings: dict[tuple[str, tuple[int, ...]], list[Ring]] = {}
        for i, key in enumerate(dict.fromkeys((op, members) for op, _, members in self.colls)):
            op, members = key
            algo = params.get("algo") if params.get("algo") in algorithms.FOR_OP[op] else None
            biggest = max(size for o, size, m in self.colls if (o, m) == key)
            sub = tuple(hostgroups[r] for r in members) if hostgroups else None
            rings = [Ring(self.endpoints[r].dev, j, len(members), op, biggest, params["slice"], timed=False,
                          algo=algo, groups=sub) for j, r in enumerate(members)]
            everyone = {j: ring.info() for j, ring in enumerate(rings)}
            for j, ring in enumerate(rings):
                ring.connect(everyone)
                ring.msg, ring.got = i << 24, inboxes[members[j]]
            self.rings[key] = rings
        self.inboxes = inboxes
        self._connect_messages([tuple(m) for m in params.get("messages", [])])
        self.nodes = [{row[0]: row for row in rows} for rows in params["nodes"]]
        self.children: list[dict[int, list[int]]] = [{} for _ in range(n)]
        self.waiting = [{} for _ in range(n)]
        self.coll_node: list[dict[int, int]] = [{} for _ in range(n)]
        for r, rows in enumerate(params["nodes"]):
            for nid, kind, deps, _dur, k in rows:
                self.waiting[r][nid] = len(deps)
                for d in deps:
                    self.children[r].setdefault(d, []).append(nid)
                if kind == "coll":
                    self.coll_node[r][k] = nid
        self.computing = [False] * n
        self.compute_queue: list[list[int]] = [[] for _ in range(n)]
        self.talking = [False] * n
        # Each rank's communication, one stream in the trace's issue order: collectives, sends, receives.
        self.comm_seq = [[row[0] for row in rows if row[1] in ("coll", "send", "recv")] for rows in params["nodes"]]
        self.next_comm = [0] * n
        self.comm_ready: list[set[int]] = [set() for _ in range(n)]
        self.p2p_rows: list[list[list[Any]]] = [[] for _ in range(n)]  # [message, kind, start, end]
        self.issued = [0] * len(self.colls)  # ranks that have issued collective k (heard)
        self.ended = 0
        self.left = [len(rows) for rows in params["nodes"]]
        self.timeline: list[list[list[Any]]] = [[] for _ in range(n)]  # [id, kind, start, end] per node
        self.coll_rows: list[list[list[Any]]] = [[] for _ in range(n)]  # [k, issued, start, end, wrong]
        self.issued_at: list[dict[int, int]] = [{} for _ in range(n)]
        self.coll_start = [0] * len(self.colls)
        self.busy = [0] * n  # picoseconds each rank computed
        self.started = 0

    def kick(self) -> None:
        self.started = self.t0
        for r in range(len(self.nodes)):
            if self.local[r]:
                with self.as_origin("host", self.params["ranks"][r]["name"], "replay"):
                    for nid, count in sorted(self.waiting[r].items()):
                        if count == 0:
                            self._ready(r, nid, self.t0)

    def _ready(self, r: int, nid: int, t: int) -> None:
        kind = self.nodes[r][nid][1]
        if kind == "comp":
            heapq.heappush(self.compute_queue[r], nid)
            self._compute(r, t)
        elif kind in ("coll", "send", "recv"):
            self.comm_ready[r].add(nid)
            self._issue(r, t)
        else:
            self.timeline[r].append([nid, kind, self.since(t), self.since(t)])
            self._done(r, nid, t)

    def _compute(self, r: int, t: int) -> None:
        if self.computing[r] or not self.compute_queue[r]:
            return
        nid = heapq.heappop(self.compute_queue[r])
        self.computing[r] = True
        self.loop.at(t + to_ps(float(self.nodes[r][nid][3])), self._computed, (r, nid, t))

    def _computed(self, t: int, arg: tuple[int, int, int]) -> None:
        r, nid, began = arg
        if self.finished:
            return
        self.computing[r] = False
        self.busy[r] += t - began
        self.timeline[r].append([nid, "comp", self.since(began), self.since(t)])
        self._done(r, nid, t)
        self._compute(r, t)

    def _issue(self, r: int, t: int) -> None:
        """The rank's next communication, if it is ready and the stream is free."""
        if self.talking[r] or self.next_comm[r] == len(self.comm_seq[r]):
            return
        nid = self.comm_seq[r][self.next_comm[r]]
        if nid not in self.comm_ready[r]:
            return
        self.talking[r] = True
        kind, index = self.nodes[r][nid][1], self.nodes[r][nid][4]
        if kind == "coll":
            self.issued_at[r][index] = t
            self.tell(["issued", index])
            return
        op = self._send(r, index) if kind == "send" else self._recv(r, index)
        self.endpoints[r].start(op, t, lambda _v, tt, r=r, nid=nid, began=t: self._messaged(r, nid, began, tt))

    def _connect_messages(self, messages: list[tuple[int, int, int]]) -> None:
        """Point to point: a queue pair between every two ranks that message each other, a region to
        send from and one to receive into (each the rank's largest message). Built after the rings, the
        same on every worker, so a trace without messages gets the figures it got before they existed."""
        n = len(self.endpoints)
        self.messages = messages
        self.p2p_base = len(self.rings) << 24  # its immediates in a range of their own (the rings': i << 24)
        self.p2p_qp: list[dict[int, Any]] = [{} for _ in range(n)]
        self.p2p_out: list[Any] = [None] * n
        self.p2p_in: list[Any] = [None] * n
        if not messages:
            return
        peers: list[set[int]] = [set() for _ in range(n)]
        out, into = [0] * n, [0] * n
        for src, dst, size in messages:
            peers[src].add(dst)
            peers[dst].add(src)
            out[src], into[dst] = max(out[src], size), max(into[dst], size)
        for r, ep in enumerate(self.endpoints):
            self.p2p_qp[r] = {p: ep.dev.create_qp() for p in sorted(peers[r])}
            self.p2p_out[r] = ep.dev.reg_mr(out[r]) if out[r] else None
            self.p2p_in[r] = ep.dev.reg_mr(into[r]) if into[r] else None
        for r in range(n):
            for p, qp in self.p2p_qp[r].items():
                qp.connect(self.p2p_qp[p][r].qpn, [pl.addr for pl in self.endpoints[p].dev.planes])

    def _send(self, r: int, m: int) -> Any:
        _, dst, size = self.messages[m]
        qp, into = self.p2p_qp[r][dst], self.p2p_in[dst].info()
        qp.post_write(self.p2p_base + m, self.p2p_out[r], 0, size, into["va"], into["rkey"], imm=self.p2p_base + m)
        yield None
        while qp.busy():
            yield qp.idle
        self.endpoints[r].dev.poll_cq()
        return 0

    def _recv(self, r: int, m: int) -> Any:
        dev, got, want = self.endpoints[r].dev, self.inboxes[r], self.p2p_base + m
        while True:
            got.update(c.wr_id for c in dev.poll_recv())
            if want in got:
                break
            yield dev.has_recv
        got.discard(want)
        return 0

    def _messaged(self, r: int, nid: int, began: int, t: int) -> None:
        if self.finished:
            return
        kind, m = self.nodes[r][nid][1], self.nodes[r][nid][4]
        self.p2p_rows[r].append([m, kind, self.since(began), self.since(t)])
        self.timeline[r].append([nid, kind, self.since(began), self.since(t)])
        self.talking[r] = False
        self.next_comm[r] += 1
        self._done(r, nid, t)
        self._issue(r, t)

    def heard(self, t: int, payload: Any) -> None:
        if self.finished:
            return
        what, arg = payload
        if what == "ended":
            self.ended += 1
            if self.ended == self.n:
                self.finish()
            return
        self.issued[arg] += 1
        op, size, members = self.colls[arg]
        if self.issued[arg] < len(members):
            return
        self.coll_start[arg] = t
        for r, ring in zip(members, self.rings[(op, members)], strict=True):
            if self.local[r]:
                ring.fill(size)
                with self.as_origin("host", self.params["ranks"][r]["name"], op, size):
                    self.endpoints[r].start(ring.run_op(size), t,
                                            lambda wrong, tt, r=r, k=arg: self._talked(r, k, wrong))

    def _talked(self, r: int, k: int, wrong: int) -> None:
        if self.finished:
            return
        op, _, members = self.colls[k]
        t = self.rings[(op, members)][members.index(r)].done_at  # its communication's end (the check takes none)
        self.coll_rows[r].append([k, self.since(self.issued_at[r][k]), self.since(self.coll_start[k]), self.since(t), wrong])
        self.timeline[r].append([self.coll_node[r][k], "coll", self.since(self.coll_start[k]), self.since(t)])
        self.talking[r] = False
        self.next_comm[r] += 1
        self._done(r, self.coll_node[r][k], t)
        self._issue(r, t)

    def _done(self, r: int, nid: int, t: int) -> None:
        self.left[r] -= 1
        for c in self.children[r].get(nid, ()):
            self.waiting[r][c] -= 1
            if self.waiting[r][c] == 0:
                self._ready(r, c, t)
        if self.left[r] == 0:
            self.tell(["ended", r])

    def what(self) -> str:
        stuck = [f"rank {r} at its communication {self.next_comm[r]}" for r in range(self.n)
                 if self.local[r] and self.left[r]]
        return "the trace's replay (" + ", ".join(stuck[:3]) + ")"

    def result(self) -> dict[str, Any]:
        if self.error:
            return {"error": self.error}
        return {"ranks": [{"rank": r, "timeline": self.timeline[r], "collectives": self.coll_rows[r],
                           "messages": self.p2p_rows[r],
                           "compute_s": to_s(self.busy[r]),
                           "end_s": max((row[3] for row in self.timeline[r]), default=0.0),
                           "retransmits": sum(qp.retransmits for qp in self.endpoints[r].dev.qps.values())}
                          for r in range(self.n) if self.local[r]],
                "fabric_s": self.since(self.loop.now)}
