"""Data-parallel replicas that exclude a dead one and go on (fabric clock, inside the engine).

Each replica is one rank here: its part in the cross-replica allreduce (with
hybrid sharding, GPU k of every replica allreduces with GPU k of the others:
the same exchange, repeated per k). Every step the live replicas allreduce
`size` bytes in a ring over MetaRoCE. One replica's host dies mid-step (its
ports go down and its endpoint falls silent, at a fabric time).

Detection is the transport's own, as a RoCE NIC's: a write its peer never
acknowledges is resent on a doubling timer, and after `retry_limit` timer
retransmissions the queue pair fails ("retry exceeded", IBV_WC_RETRY_EXC_ERR
on a real NIC). So that a death is seen even when no data is on its way to
the dead rank (it may die after its left neighbour's last write of a step
was acknowledged), every member keeps a heartbeat going to its ring's right
neighbour: a zero-length write every `heartbeat_s`. The member to the dead
one's left is the one that detects it; nobody else needs to (they wait).

Agreement is a view change with a coordinator, the lowest-ranked member it
does not suspect, in two phases. The detector tells the coordinator
(SUSPECT); the coordinator sends PROPOSE(epoch, excluded) to every member of
the new view; each aborts its step, drops what it has not sent, waits until
what it sent is acknowledged, and answers ACCEPT; with every ACCEPT in, the
coordinator sends COMMIT, and each member restarts the step in the new ring.
Why two phases: a member may restart (and write into its neighbours'
buffers) only when no write of the aborted step can still land in them.
Why a fixed coordinator: members agree on who decides without a vote, and
one failure at a time is what this tolerates (the coordinator dying during
a view change, or two deaths at once, are not handled, and the job would
say it is stuck). Messages are zero-length writes with immediate on a queue
pair of their own per pair of members, so they never mix with the data.
"""

from __future__ import annotations

import random
from collections.abc import Generator
from typing import Any

from emu.clock import ClockKind
from emu.collectives.rank import SLICE, Ring, put_pattern, wrong
from emu.dataplane.job import Attach, Job
from emu.roce.endpoint import Endpoint, Wait
from emu.roce.transport import Device, QueuePair
from emu.simtime import to_ps, to_s

SUSPECT, PROPOSE, ACCEPT, COMMIT = 1, 2, 3, 4
HEARTBEAT_S = 20e-6  # fabric s between heartbeats to the right neighbour
RETRY_LIMIT = 7  # timer retransmissions before a queue pair fails (RoCE's retry_cnt, at most 7)


def message(kind: int, epoch: int, rank: int) -> int:
    """A membership message in a 32-bit immediate: kind (4 bits), epoch (12), rank (16)."""
    return kind << 28 | (epoch & 0xFFF) << 16 | rank & 0xFFFF


class Abort(Exception):  # noqa: N818 - a signal inside the member's own generator, not an error
    """The membership changes under a step: leave it (raised where a member waits)."""


class Member(Ring):
    """One replica's rank: steps of an allreduce over the live view, and its part in a view change."""

    def __init__(self, dev: Device, rank: int, ranks: list[int], size: int, steps: int, *,
                 slice_bytes: int = SLICE, heartbeat_s: float = HEARTBEAT_S) -> None:
        super().__init__(dev, rank, len(ranks), "allreduce", size, slice_bytes, timed=False)
        self.me = rank
        self.size, self.steps = size, steps
        self.heartbeat = to_ps(heartbeat_s)
        self.view = list(ranks)
        self.epoch = 0
        others = [p for p in ranks if p != rank]
        self.ctl: dict[int, QueuePair] = {p: dev.create_qp() for p in others}
        self.link: dict[int, QueuePair] = {p: dev.create_qp() for p in others}
        self.ctl_from = {qp.qpn: p for p, qp in self.ctl.items()}
        self.inbox: list[tuple[int, int, int, int]] = []  # (kind, epoch, rank, from whom)
        self.suspects: set[int] = set()
        self.next_beat = 0
        self.step = 0  # the step this member is in
        self.steps_done: dict[int, dict[str, Any]] = {}  # by step: a step redone after a view change replaces it
        self.events: dict[str, float] = {}
        self.infos: dict[int, dict[str, Any]] = {}

    def info(self) -> dict[str, Any]:
        return {**super().info(), "ctl": {str(p): qp.qpn for p, qp in self.ctl.items()},
                "link": {str(p): qp.qpn for p, qp in self.link.items()}}

    def connect(self, everyone: dict[int, dict[str, Any]]) -> None:
        self.infos = everyone
        for p in self.ctl:
            self.ctl[p].connect(everyone[p]["ctl"][str(self.me)], everyone[p]["addrs"])
            self.link[p].connect(everyone[p]["link"][str(self.me)], everyone[p]["addrs"])
        self._set_view()

    def _set_view(self) -> None:
        """The ring of the current view: our place in it, our right neighbour, fresh immediates."""
        self.n = len(self.view)
        self.r = self.view.index(self.me)
        right = self.view[(self.r + 1) % self.n]
        self.right, self.peer = self.link[right], self.infos[right]
        self.msg = self.epoch << 20  # no immediate of an aborted step can be taken for one of this view
        # Forget the aborted step's immediates, not this view's: a neighbour that had our COMMIT first
        # may already have written to us.
        self.got = {i for i in self.got if i >= self.msg}

    def fill(self, size: int) -> None:
        put_pattern(self.ints(self.data, 0, size), self.me)

    # -- waiting, with an ear for the membership -------------------------------------------------

    def _now(self) -> int:
        return self.dev.clock.clock()

    def _poll(self) -> None:
        for c in self.dev.poll_recv():
            sender = self.ctl_from.get(c.qpn)
            if sender is None:
                self.got.add(c.wr_id)
            else:
                self.inbox.append((c.wr_id >> 28, c.wr_id >> 16 & 0xFFF, c.wr_id & 0xFFFF, sender))

    def _failed(self) -> list[int]:
        """Peers in the view whose queue pairs failed (retry exceeded): dead, to the transport."""
        return [p for p in self.view if p != self.me and (self.ctl[p].error or self.link[p].error)]

    def _beat(self) -> bool:
        """A heartbeat to the right neighbour if one is due; True if it posted one."""
        now = self._now()
        if now < self.next_beat or self.n < 2:
            return False
        right = self.view[(self.r + 1) % self.n]
        if not self.ctl[right].error:
            self.ctl[right].post_write(0, self.data, 0, 0, 0, 0)
        self.next_beat = now + self.heartbeat
        self.dev.alarm(self.next_beat)
        return True

    def _woken(self) -> bool:
        """Something for this member: a message or a receive, a heartbeat due, a peer newly dead."""
        return (bool(self.dev.recv_cq) or self._now() >= self.next_beat
                or any(p not in self.suspects for p in self._failed()))

    def _check(self) -> None:
        self._poll()
        if self.inbox or self._failed():
            raise Abort

    def wait_imm(self, want: int) -> Generator[Wait, None, None]:
        while True:
            self._check()
            if want in self.got:
                break
            yield None if self._beat() else self._woken
        self.got.discard(want)

    def _links_idle(self) -> bool:
        return not any(qp.busy() for p, qp in self.link.items() if not qp.error)

    def finish(self) -> Generator[Wait, None, None]:
        while not self._links_idle():
            self._check()
            yield None if self._beat() else (lambda: self._links_idle() or self._woken())
        self.dev.poll_cq()
        self.done_at = self._now()

    # -- the steps and the view change --------------------------------------------------------

    def run(self) -> Generator[Wait, None, dict[str, Any]]:
        """Every step over the live view; a step the membership changed under is done again."""
        self.next_beat = self._now()
        while self.step < self.steps:
            self.fill(self.size)
            start = self._now()
            chunk = self.size // (4 * self.n) * 4  # whole int32 per member: the rest is not reduced
            used = chunk * self.n
            try:
                yield from self.ring(self.reduce_scatter_steps() + self.all_gather_steps(1), chunk)
            except Abort:
                self.events.setdefault("aborted_start_s", to_s(start))
                if not (yield from self.change_view()):
                    break  # the others excluded us (taken for dead): this replica stops here
                continue
            bad = wrong(self.ints(self.data, 0, used), sum(p + 1 for p in self.view) - 1)
            self.steps_done[self.step] = {"step": self.step, "epoch": self.epoch, "view": list(self.view),
                                          "start_s": to_s(start), "end_s": to_s(self.done_at), "bytes": used, "wrong": bad}
            self.step += 1
        return {"rank": self.me, "steps": [self.steps_done[s] for s in sorted(self.steps_done)],
                "events": self.events, "view": self.view,
                "epoch": self.epoch, "retransmits": sum(qp.retransmits for qp in self.dev.qps.values()),
                "timeouts": sum(qp.timeouts for qp in self.dev.qps.values())}

    def _send(self, to: int, kind: int, epoch: int, rank: int) -> None:
        self.ctl[to].post_write(message(kind, epoch, rank), self.data, 0, 0, 0, 0, imm=message(kind, epoch, rank))

    def change_view(self) -> Generator[Wait, None, bool]:
        """From an abort to the new view's commit (module docstring: SUSPECT, PROPOSE, ACCEPT, COMMIT);
        False if the new view leaves this member out."""
        proposal: tuple[int, int, int] | None = None  # (epoch, excluded, coordinator)
        accepts: dict[int, int] = {}  # member -> the step it was in
        told = accepted = False
        while True:
            self._poll()
            now = self._now()
            for p in self._failed():
                if p not in self.suspects:
                    self.suspects.add(p)
                    self.events.setdefault("detected_s", to_s(now))
            msgs, self.inbox = self.inbox, []
            for i, (kind, epoch, rank, sender) in enumerate(msgs):
                if kind == SUSPECT and rank in self.view:
                    self.suspects.add(rank)
                elif kind == PROPOSE and epoch > self.epoch:
                    if rank == self.me:
                        self.events.setdefault("excluded_s", to_s(now))
                        return False
                    proposal = (epoch, rank, sender)
                    self.suspects.add(rank)  # told, not detected: its queue pairs fail below by our hand
                    self.events.setdefault("proposed_s", to_s(now))
                elif kind == ACCEPT and proposal is not None and epoch == proposal[0]:
                    accepts[sender] = rank  # an ACCEPT's rank field carries the sender's step
                elif kind == COMMIT and proposal is not None and epoch == proposal[0]:
                    proposal = (epoch, rank & 0xFF, proposal[2])
                    self._commit(proposal, rank >> 8, now)  # a COMMIT's: the excluded | the step << 8
                    self.inbox = msgs[i + 1:] + self.inbox  # a later view's messages, if any
                    return True
            if not self.suspects and proposal is None:
                return True  # nothing changes (a stale message woke us): back to the step
            live = [p for p in self.view if p not in self.suspects]
            coordinator = min(live)
            if coordinator == self.me and self.suspects and proposal is None:
                excluded = min(self.suspects)
                proposal = (self.epoch + 1, excluded, self.me)
                self.events.setdefault("proposed_s", to_s(now))
                for p in live:
                    if p != self.me:
                        self._send(p, PROPOSE, proposal[0], excluded)
            elif self.suspects and coordinator != self.me and not told and proposal is None:
                for d in self.suspects:
                    self._send(coordinator, SUSPECT, self.epoch, d)
                told = True
            if proposal is not None and not accepted:
                for qp in (self.link[proposal[1]], self.ctl[proposal[1]]):
                    if not qp.error:
                        qp.fail("excluded")  # what we sent the excluded one will never be acknowledged
                for qp in self.link.values():
                    if not qp.error:
                        qp.cancel()
                if self._links_idle():  # nothing of the aborted step can land anywhere any more
                    accepted = True
                    self.events.setdefault("accepted_s", to_s(now))
                    if proposal[2] == self.me:
                        accepts[self.me] = self.step
                    else:
                        self._send(proposal[2], ACCEPT, proposal[0], self.step)
            if proposal is not None and proposal[2] == self.me and accepted:
                new = [p for p in self.view if p != proposal[1]]
                if set(accepts) >= set(new):
                    # Every member resumes at the least step any was in: one that had finished it
                    # (its last writes were in flight when the others aborted) does it again.
                    resume = min(accepts[p] for p in new)
                    for p in new:
                        if p != self.me:
                            self._send(p, COMMIT, proposal[0], proposal[1] | resume << 8)
                    self._commit(proposal, resume, now)
                    return True
            draining = proposal is not None and not accepted
            yield None if self._beat() else (lambda d=draining: (d and self._links_idle()) or self._woken())

    def _commit(self, proposal: tuple[int, int, int], step: int, now: float) -> None:
        epoch, excluded, _ = proposal
        self.step = step
        self.view = [p for p in self.view if p != excluded]
        self.suspects.discard(excluded)
        self.epoch = epoch
        self.events.setdefault("committed_s", to_s(now))
        self._set_view()


class ReplicasJob(Job):
    """params: size, steps, slice, mtu, seed, heartbeat_s, retry_limit (None: never), ranks (each: name, planes), fail
    ({"rank", "after_s", "ports": [[switch, port], ...]} or None: that rank's host dies then), budget_s."""

    clocks = (ClockKind.FABRIC,)  # its heartbeats are written for the fabric clock's loop

    def __init__(self, host: Attach, params: dict[str, Any]) -> None:
        super().__init__(host, params)
        ranks = list(range(len(params["ranks"])))
        rng = random.Random(params.get("seed", 0))
        # Split over workers, each part runs its own hosts' replicas (the others are stand-ins, see Job).
        self.local = [self.here(rank["planes"]) for rank in params["ranks"]]
        self.endpoints = [Endpoint.attached(self.attach_for(rank["planes"]), rank["planes"], self.fail,
                                            f"replica {r} ({rank['name']})", mtu=params["mtu"],
                                            seed=rng.getrandbits(32), retry_limit=params.get("retry_limit"),
                                            **params.get("transport", {}))
                          for r, rank in enumerate(params["ranks"])]
        self.participants = [ep for ep, mine in zip(self.endpoints, self.local, strict=True) if mine]
        self.members = [Member(ep.dev, r, ranks, int(params["size"]), int(params["steps"]),
                               slice_bytes=int(params["slice"]), heartbeat_s=float(params["heartbeat_s"]))
                        for r, ep in enumerate(self.endpoints)]
        everyone = {r: m.info() for r, m in enumerate(self.members)}
        for m in self.members:
            m.connect(everyone)
        self.fail_spec = params.get("fail")
        self.dead = -1 if not self.fail_spec else int(self.fail_spec["rank"])
        self.reports: dict[int, dict[str, Any]] = {}
        self.failed_at = -1

    def kick(self) -> None:
        if self.fail_spec:
            self.loop.at(self.t0 + to_ps(float(self.fail_spec["after_s"])), self._kill, None)
        for r, (ep, m) in enumerate(zip(self.endpoints, self.members, strict=True)):
            if self.local[r]:
                with self.as_origin("host", self.params["ranks"][r]["name"], "replicas"):
                    ep.start(m.run(), self.t0, lambda out, t, r=r: self.tell([r, out]))

    def _kill(self, t: int, _: Any) -> None:
        """The replica's host dies: its ports go down, its NIC falls silent (each part, its own)."""
        self.failed_at = t
        for switch, port in self.fail_spec["ports"]:
            if self.host.carries(switch, port):
                self.host.set_port(switch, port, False)
        if self.local[self.dead]:
            self.endpoints[self.dead].stop()

    def heard(self, t: int, payload: Any) -> None:
        """A replica's report, told by the part that runs it."""
        rank, out = payload
        if self.finished:
            return
        self.reports[int(rank)] = out
        if len(self.reports) == len(self.members) - (1 if self.dead >= 0 else 0):
            self.finish()

    def what(self) -> str:
        state = "; ".join(f"replica {m.me}: epoch {m.epoch}, view {m.view}, suspects {sorted(m.suspects)}, "
                          f"{len(m.steps_done)} steps done, events {sorted(m.events)}"
                          for m in self.members if m.me != self.dead and self.local[m.me])
        return f"{len(self.members)} replicas, {self.params['steps']} steps of {self.params['size']} B ({state})"

    def result(self) -> dict[str, Any]:
        if self.error:
            return {"error": self.error}
        return {"members": [self.reports[r] for r in sorted(self.reports)], "t0_s": to_s(self.t0),
                "failed_at_s": to_s(self.failed_at) if self.failed_at >= 0 else -1.0, "dead": self.dead,
                "fabric_s": self.since(self.loop.now)}
