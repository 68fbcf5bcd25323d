"""One rank of a ring collective over MetaRoCE: inside the engine on either clock (emu.collectives.job),
or, where frames must cross a kernel (BMv2), in a host's namespace on the wall clock; the same ring
either way.

    python -m emu.collectives.rank DIR --rank R --nranks N --op allreduce --sizes 65536,1048576

Each rank has one queue pair to its right neighbour and one from its left.
A ring step writes a chunk into the right neighbour's memory, as a write with
immediate: the neighbour's receive completion says the chunk is whole. The
chunk goes in slices, and a rank forwards slice j of the next step as soon as
slice j of this one has arrived (and, in reduce-scatter, been reduced), so
the ring is a pipeline, as NCCL's is: the link never waits a whole chunk for a
hop's latency. Elements are int32, reduced by sum. Every rank starts from a
pattern that depends on its rank, so the result is checked element by element
(#wrong, as nccl-tests counts it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Generator, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from emu.collectives import OPS, algorithms
from emu.collectives.ringsteps import RingSteps
from emu.fidelity import Lateness, Part
from emu.roce.endpoint import Wait, drive_wall
from emu.roce.perf import publish, wait_for
from emu.roce.transport import (
    SPRAYS,
    WINDOW,
    Device,
    MemoryRegion,
    QueuePair,
    host_plane_addresses,
    release,
)
from emu.simtime import to_s

SLICE = 256 << 10  # bytes a ring step sends per message (the pipeline's grain)
START_MARGIN_S = 0.05  # wall time between the last rank's arrival and the common start


PERIOD = 1000  # the pattern repeats every PERIOD elements
BLOCK = 64 * PERIOD  # elements written or checked at once: no temporary the size of a region


def pattern(rank: int, size: int) -> np.ndarray:
    """Rank r's starting data: (r + 1) * (i % 1000 + 1); sums of these are easy to predict."""
    return np.resize((rank + 1) * np.arange(1, PERIOD + 1, dtype=np.int32), size // 4)


def _tile(rank: int, first: int, n: int) -> np.ndarray:
    """pattern(rank)[first:first + n] for n <= BLOCK + PERIOD, from one period."""
    base = (rank + 1) * np.arange(1, PERIOD + 1, dtype=np.int32)
    return np.resize(np.roll(base, -(first % PERIOD)), n)


def put_pattern(out: np.ndarray, rank: int, first: int = 0) -> None:
    """out[:] = pattern(rank)[first:first + len(out)], a block at a time (fresh memory is what costs here:
    a 16 MiB temporary per rank doubled the pages an allreduce touched)."""
    tile = _tile(rank, first, min(BLOCK, len(out)))
    for lo in range(0, len(out), BLOCK):
        hi = min(lo + BLOCK, len(out))
        out[lo:hi] = tile[:hi - lo]  # each block starts at a whole number of periods from `first`


def wrong(got: np.ndarray, rank: int, first: int = 0) -> int:
    """How many elements of `got` differ from pattern(rank)[first:first + len(got)] (#wrong)."""
    tile = _tile(rank, first, min(BLOCK, len(got)))
    n = 0
    for lo in range(0, len(got), BLOCK):
        hi = min(lo + BLOCK, len(got))
        n += int(np.count_nonzero(got[lo:hi] != tile[:hi - lo]))
    return n


class Ring:
    """One rank's ring collective, written once for both clocks: its operations are generators that
    yield what they wait for (`Wait`); `drive_wall` turns the device's crank in this process until
    each holds, the engine's fabric-clock job resumes them when their device has done something."""

    def __init__(self, dev: Device, rank: int, nranks: int, op: str, biggest: int, slice_bytes: int = SLICE,
                 *, timed: bool = True, algo: str | None = None, groups: tuple[int, ...] | None = None) -> None:
        """`biggest`: the largest size it will run; `timed`: measure the reduction's own wall time as
        harness lateness (the wall clock; on the fabric clock it costs no fabric time); `algo`: one of
        emu.collectives.algorithms.ALGOS for `op` (its default: the ring, direct for alltoall); `groups`:
        each rank's group of near hosts (what "hier" keeps its first and last phases inside)."""
        self.dev = dev
        # Headers only (the device's payload off): no pattern is written, nothing reduced, and what is
        # checked is that every byte this rank must receive was accepted exactly once (`delivered`).
        self.payload = bool(getattr(dev, "payload", True))
        self.r, self.n, self.op = rank, nranks, op
        self.algo = algo or algorithms.default(op)
        self.groups = groups
        algorithms.check(self.algo, op, nranks, groups)
        self.slice = slice_bytes
        self.timed = timed
        biggest *= nranks if op == "allgather" else 1
        nominal = None if self.algo == "ring" else algorithms.plan(self.algo, op, nranks, 4 * nranks, slice_bytes,
                                                                   groups)
        self.data = self.dev.reg_mr(biggest)
        # Reduced chunks land here (the tree's children each have their own area: twice the size).
        staged = biggest * (2 if self.algo in ("tree", "hier") else 1)
        if op == "alltoallv":  # the busiest expert receives more than a rank sends
            staged = max(staged, algorithms.plan(self.algo, op, nranks, biggest, slice_bytes, groups).stage_bytes)
        self.stage = self.dev.reg_mr(staged)
        self.right: QueuePair = self.dev.create_qp()
        self.left: QueuePair = self.dev.create_qp()
        # Every peer a plan writes to or hears from has a QP of its own (alltoall: every rank).
        self.mesh: dict[int, QueuePair] = (
            {p: self.dev.create_qp() for p in sorted(nominal.peers(rank))} if nominal is not None else {})
        self.msg = 0  # messages posted so far, counted alike on every rank: the immediates
        self.got: set[int] = set()  # immediates received and not yet waited for
        # Wall time this rank spends on itself while it should be moving data (the reduction,
        # a late start): what a GPU would not spend, so it counts against fidelity.
        self.harness = Lateness()
        self.done_at = 0  # when the last operation's communication finished (its clock, picoseconds)

    def info(self) -> dict[str, Any]:
        """What the peers need to reach this rank: its QPs, plane addresses and memory regions."""
        return {"right": self.right.qpn, "left": self.left.qpn, "addrs": [p.addr for p in self.dev.planes],
                "data": self.data.info(), "stage": self.stage.info(),
                "mesh": {str(p): qp.qpn for p, qp in self.mesh.items()}}

    def connect(self, everyone: dict[int, dict[str, Any]]) -> None:
        """Connect to the neighbours (and to every peer of the algorithm's plan) from their info()."""
        rn, ln = everyone[(self.r + 1) % self.n], everyone[(self.r - 1) % self.n]
        self.right.connect(rn["left"], rn["addrs"])
        self.left.connect(ln["right"], ln["addrs"])
        self.peer = rn
        self.peers = {p: everyone[p] for p in self.mesh}
        for p, qp in self.mesh.items():
            qp.connect(everyone[p]["mesh"][str(self.r)], everyone[p]["addrs"])

    def wait_imm(self, want: int) -> Generator[Wait, None, None]:
        """Until the write with immediate `want` is whole in our memory."""
        while True:
            self.got.update(c.wr_id for c in self.dev.poll_recv())
            if want in self.got:
                break
            yield self.dev.has_recv
        self.got.discard(want)

    def finish(self) -> Generator[Wait, None, None]:
        """Our own writes acknowledged: the buffers are ours again."""
        if not self.dev.idle():
            yield self.dev.idle
        self.dev.poll_cq()  # the writes were unsignaled: only a failure's completion could be here
        self.done_at = self.dev.clock.clock()

    # -- the ring -------------------------------------------------------------------------------

    def ints(self, mr: MemoryRegion, start: int = 0, nbytes: int | None = None) -> np.ndarray:
        return np.frombuffer(mr.buf, dtype=np.int32, count=(nbytes if nbytes is not None else mr.size) // 4,
                             offset=start)

    def fill(self, size: int) -> None:
        if self.payload:
            put_pattern(self.ints(self.data, 0, size), self.r)

    def received(self) -> int:
        """Bytes accepted into this rank's memory so far, each once (duplicates are not counted)."""
        return sum(qp.rx_bytes for qp in (self.left, self.right, *self.mesh.values()))

    def delivered(self, expected: int, before: int) -> int:
        """Headers only: #wrong is the elements (int32) not accepted exactly once since `before`, against
        the `expected` bytes the operation sends this rank."""
        return abs(self.received() - before - expected) // 4

    def ring(self, steps: Sequence[tuple[int, str, bool]], chunk: int) -> Generator[Wait, None, None]:
        """Run ring steps as one pipeline. Step s sends chunk c (byte offset c * chunk) of our data into
        the right neighbour's `dst` region ("stage" or "data") at the same offset; what we receive at
        step s is the chunk we send at step s + 1 (the left neighbour runs one chunk behind us), and
        when the step reduces, it lands in stage and is added into data before it goes on."""
        compiled = getattr(self.dev, "ring_op", None)
        if compiled is not None and type(self).wait_imm is Ring.wait_imm and type(self).finish is Ring.finish:
            # The compiled device's (emu.roce._device.RingOp): these same steps, in C. (A ring that waits
            # its own way, a replica with heartbeats, runs the loop below.)
            op = compiled(self, RingSteps.of(steps, self.n).runs, chunk)
            yield op  # its endpoint runs it to its end, then this goes on
            self.msg, self.done_at = op.msg, op.done_at
            return
        grain = max(4, min(self.slice, chunk) // 4 * 4)
        cuts = [(lo, min(chunk, lo + grain)) for lo in range(0, chunk, grain)]
        k, base = len(cuts), self.msg
        for s in range(len(steps) + 1):
            for j, (lo, hi) in enumerate(cuts):
                if s > 0:  # slice j of the step before: ours once it has arrived (and been reduced)
                    yield from self.wait_imm(base + (s - 1) * k + j)
                    c, _, reduce = steps[s - 1]
                    c = (c - 1) % self.n
                    if reduce and self.payload:
                        t = time.monotonic()
                        off = c * chunk + lo
                        self.ints(self.data, off, hi - lo)[:] += self.ints(self.stage, off, hi - lo)
                        release(self.stage.buf, off, hi - lo)  # used: its pages go back
                        if self.timed:
                            self.harness.add(time.monotonic() - t)
                if s < len(steps):
                    c, dst, _ = steps[s]
                    off = c * chunk + lo
                    region = self.peer[dst]
                    self.right.post_write(base + s * k + j, self.data, off, hi - lo, region["va"] + off,
                                          region["rkey"], imm=base + s * k + j, signaled=False)
                    yield None  # start it now, not after the next wait
        self.msg = base + len(steps) * k
        yield from self.finish()

    def reduce_scatter_steps(self) -> RingSteps:
        return RingSteps(self.n, [(self.r, self.n - 1, "stage", True)])

    def all_gather_steps(self, first: int) -> RingSteps:
        """Circulate chunk `first + r` (already final on rank r) until every rank has all n."""
        return RingSteps(self.n, [(self.r + first, self.n - 1, "data", False)])

    def run_plan(self, size: int) -> Generator[Wait, None, None]:
        """Run this rank's lanes of the algorithm's plan (emu.collectives.algorithms) side by side: a
        lane's next step runs once its messages are whole here (it adds what they staged, then posts its
        writes); the immediates are the plan's message ids after the ones already used."""
        p = algorithms.plan(self.algo, self.op, self.n, size, self.slice, self.groups)
        regions = {"data": self.data, "stage": self.stage}
        base = self.msg
        if p.local and self.payload:  # all-to-all: my own part is already where it belongs
            src, dst, nbytes = p.local[self.r]
            self.stage.buf[dst:dst + nbytes] = self.data.buf[src:src + nbytes]
        lanes = p.lanes[self.r]
        at = [0] * len(lanes)
        # How many of each lane's next step's waits are here, in order: a message is waited for by one step
        # alone, so one found stays till its step runs, and a wake-up reads on from there (an all-to-all's
        # last step waits for every other rank: read whole at each message, that grew with the square).
        here = [0] * len(lanes)
        left = sum(1 for lane in lanes if lane)
        while left:
            self.got.update(c.wr_id for c in self.dev.poll_recv())
            moved = posted = False
            for i, lane in enumerate(lanes):
                while at[i] < len(lane):
                    step = lane[at[i]]
                    k = here[i]
                    while k < len(step.waits) and base + step.waits[k] in self.got:
                        k += 1
                    here[i] = k
                    if k < len(step.waits):
                        break
                    here[i] = 0
                    self.got.difference_update(base + m for m in step.waits)
                    for red in step.reduces if self.payload else ():
                        t = time.monotonic()
                        self.ints(self.data, red.data_off, red.nbytes)[:] += self.ints(self.stage, red.stage_off,
                                                                                      red.nbytes)
                        release(self.stage.buf, red.stage_off, red.nbytes)
                        if self.timed:
                            self.harness.add(time.monotonic() - t)
                    for w in step.sends:
                        region = self.peers[w.peer][w.dst]
                        self.mesh[w.peer].post_write(base + w.msg, regions[w.src], w.src_off, w.nbytes,
                                                     region["va"] + w.dst_off, region["rkey"], imm=base + w.msg,
                                                     signaled=False)
                    posted = posted or bool(step.sends)
                    at[i] += 1
                    left -= at[i] == len(lane)
                    moved = True
            if posted:
                yield None  # start the writes now, not after the next wait
            elif not moved:
                yield self.dev.has_recv
        self.msg = base + p.messages
        yield from self.finish()

    def run_op(self, size: int) -> Generator[Wait, None, int]:
        """Run once (a generator of waits); its value is the number of wrong elements."""
        op, n, r = self.op, self.n, self.r
        total = n * (n + 1) // 2  # the sum of the rank factors 1..n
        chunk = size // n
        before = self.received()
        if not self.payload:
            if self.algo != "ring":
                p = algorithms.plan(self.algo, op, n, size, self.slice, self.groups)
                yield from self.run_plan(size)
                return self.delivered(p.received(r), before)
            steps = {"allreduce": 2 * (n - 1), "reducescatter": n - 1, "allgather": n - 1, "sendrecv": 1}[op]
            unit = size if op in ("allgather", "sendrecv") else chunk
            if op == "allreduce":
                yield from self.ring(self.reduce_scatter_steps() + self.all_gather_steps(1), chunk)
            elif op == "reducescatter":
                yield from self.ring(self.reduce_scatter_steps(), chunk)
            elif op == "allgather":
                yield from self.ring(self.all_gather_steps(0), size)
            else:
                yield from self.ring(RingSteps(self.n, [(0, 1, "stage", False)]), size)
            return self.delivered(steps * unit, before)
        if self.algo != "ring":
            if op == "allgather":
                self.ints(self.data, 0, size * n)[:] = 0
                put_pattern(self.ints(self.data, r * size, size), r)
            yield from self.run_plan(size)
            return self.check(size)
        if op == "allreduce":
            yield from self.ring(self.reduce_scatter_steps() + self.all_gather_steps(1), chunk)
            return wrong(self.ints(self.data, 0, size), total - 1)
        if op == "reducescatter":
            yield from self.ring(self.reduce_scatter_steps(), chunk)
            c = (r + 1) % n
            return wrong(self.ints(self.data, c * chunk, chunk), total - 1, c * chunk // 4)
        if op == "allgather":
            # Each rank contributes `size` bytes at its own offset (what fill() put first); everyone ends
            # with all n.
            self.ints(self.data, 0, size * n)[:] = 0
            put_pattern(self.ints(self.data, r * size, size), r)
            yield from self.ring(self.all_gather_steps(0), size)
            return sum(wrong(self.ints(self.data, k * size, size), k) for k in range(n))
        if op == "sendrecv":
            yield from self.ring(RingSteps(self.n, [(0, 1, "stage", False)]), size)
            return wrong(self.ints(self.stage, 0, size), (r - 1) % n)
        raise ValueError(f"unknown op {op!r}")

    def check(self, size: int) -> int:
        """#wrong after a plan: elements of this rank's result that differ from what they must be."""
        op, n, r = self.op, self.n, self.r
        total = n * (n + 1) // 2
        chunk = size // n
        if op == "allreduce":
            return wrong(self.ints(self.data, 0, size), total - 1)
        if op == "reducescatter":
            c = algorithms.plan(self.algo, op, n, size, self.slice, self.groups).owner[r]
            return wrong(self.ints(self.data, c * chunk, chunk), total - 1, c * chunk // 4)
        if op == "allgather":
            return sum(wrong(self.ints(self.data, k * size, size), k) for k in range(n))
        if op in ("alltoall", "alltoallv"):  # rank q's part for me, from q's offset for me, at q's slot here
            m = algorithms.plan(self.algo, op, n, size, self.slice, self.groups).matrix
            at, bad = 0, 0
            for q in range(n):
                bad += wrong(self.ints(self.stage, at, m[q][r]), q, sum(m[q][:r]) // 4)
                at += m[q][r]
            return bad
        raise ValueError(f"{op} has no plan to check")


class WallRank:
    """A rank in its own process on the wall clock (BMv2): rendezvous and barriers through files."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        addrs = args.addrs.split(",") if args.addrs else host_plane_addresses()
        dev = Device(addrs, dilation=args.dilation, cc=args.cc, plane_rate_bps=args.plane_rate, mtu=args.mtu,
                     spray=args.spray, window=args.window, rtt_hint_fabric_s=args.rtt_hint_fabric_s)
        self.ring = Ring(dev, args.rank, args.nranks, args.op, max(args.sizes), args.slice, algo=args.algo,
                         groups=tuple(args.groups) if args.groups else None)
        self.dev = dev

    def connect(self) -> None:
        r, n = self.a.rank, self.a.nranks
        publish(self.a.dir, f"rank{r}", self.ring.info())
        wanted = {(r + 1) % n, (r - 1) % n} | set(self.ring.mesh)
        self.ring.connect({p: wait_for(self.a.dir, f"rank{p}", self.a.timeout) for p in wanted})

    def barrier(self, tag: str) -> None:
        publish(self.a.dir, f"{tag}-{self.a.rank}", {"t": time.monotonic()})
        for i in range(self.a.nranks):
            wait_for(self.a.dir, f"{tag}-{i}", self.a.timeout, self.dev)

    def start_together(self, tag: str) -> float:
        """A barrier that also agrees on a start instant (the monotonic clock is the machine's, shared by
        every namespace): each rank's time runs from the same moment, so the file-polling skew of the
        barrier, which would scale with 1/D in fabric time, is not in the result."""
        publish(self.a.dir, f"{tag}-{self.a.rank}", {"t": time.monotonic()})
        start = max(wait_for(self.a.dir, f"{tag}-{i}", self.a.timeout, self.dev)["t"] for i in range(self.a.nranks))
        start += START_MARGIN_S
        while (now := time.monotonic()) < start:
            self.dev.progress(min(0.001, start - now))
        self.ring.harness.add(now - start)
        return start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m emu.collectives.rank")
    ap.add_argument("dir")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--nranks", type=int, required=True)
    ap.add_argument("--op", choices=OPS, default="allreduce")
    ap.add_argument("--groups", type=lambda s: [int(x) for x in s.split(",")], default=None,
                    help="each rank's group of near hosts, comma-separated (for --algo hier)")
    ap.add_argument("--algo", choices=algorithms.ALGOS, default=None, help="the op's default: ring (direct for alltoall)")
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1 << 20])
    ap.add_argument("--dilation", type=float, default=1000.0)
    ap.add_argument("--cc", default="none")
    ap.add_argument("--spray", choices=SPRAYS, default="weighted", help="how packets spread over the planes")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--name", default="", help="the host's name, for fidelity reports")
    ap.add_argument("--addrs", default="", help="this host's plane addresses, comma-separated (default: read)")
    ap.add_argument("--plane-rate", type=float, default=100e9, help="each plane's line rate, b/s (fabric)")
    ap.add_argument("--mtu", type=int, default=1024, help="RoCE path MTU: payload bytes per packet")
    ap.add_argument("--window", type=int, default=WINDOW, help="packets a queue pair may have in flight")
    ap.add_argument("--rtt-hint-fabric-s", type=float, default=0.0,
                    help="a round trip to assume until one is measured, fabric seconds (emu.collectives.run)")
    ap.add_argument("--slice", type=int, default=SLICE, help="bytes per ring message (the pipeline's grain)")
    a = ap.parse_args(argv)
    me = WallRank(a)
    me.connect()
    ring = me.ring
    rows: list[dict[str, Any]] = []
    ring.dev.reset_fidelity()  # set-up and rendezvous are not timed, so not judged either
    for k, size in enumerate(a.sizes):
        ring.fill(size)
        t0 = me.start_together(f"start{k}")
        wrong = drive_wall(ring.run_op(size), ring.dev, a.timeout, f"rank {a.rank}, {a.op} of {size} B")
        # The device's clock is fabric time ((monotonic() - its epoch) / D, picoseconds); the agreed start, on the wall, is
        # mapped to it. The check of the result is not the collective's time.
        rows.append({"size": size, "time_fabric_s": to_s(ring.done_at - ring.dev.clock.at_wall(t0)), "wrong": wrong})
        me.barrier(f"end{k}")
    name = a.name or f"rank{a.rank}"
    fidelity = [*ring.dev.fidelity(name), asdict(Part.from_summary(f"rank {a.rank} harness", "rank",
                                                                   ring.harness.summary()))]
    print(json.dumps({"rank": a.rank, "rows": rows, "planes": ring.dev.plane_stats(), "pid": os.getpid(),
                      "fidelity": fidelity, "retransmits": sum(qp.retransmits for qp in ring.dev.qps.values())}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
