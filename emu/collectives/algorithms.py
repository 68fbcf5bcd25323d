"""Collective algorithms as plans: which rank writes what where, and what it waits for first.

A plan is a program per rank: one or more lanes, each a list of steps run in order, the lanes side by
side (a tree's sums go up one lane while the results come down another); a step waits for messages
(by id) to be whole in this rank's memory, adds staged data into its own (`Reduce`), then posts RDMA
writes with immediate (`Send`). Every rank builds the same plan from (algorithm, op, ranks, size), so a message's id is
known to its sender and its receiver without asking; ids are numbered in the order the plan makes
them, and a run adds them to the rank's running message count (the immediates).

The ring is not here: it runs as its own pipeline (emu.collectives.rank.Ring.ring, compiled on the
native device). These are the algorithms that trade bandwidth for fewer steps (halving-doubling,
the double binary tree) and the all-to-all schedules; `execute` runs a plan on plain arrays, which is
how the tests prove a plan right for many rank counts before any packet moves.

Regions: "data" holds the rank's buffer (the result ends there; allgather's is n x size, each rank's
contribution at offset rank x size); "stage" is where data to be reduced lands (alltoall's result too).
Sizes are bytes, whole int32 elements.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

ALGOS = ("ring", "rhd", "tree", "hier", "direct", "pairwise")
AUTO = "auto"  # chosen by predict(): what the op runs, by a cost model that knows the fabric
RING_MARGIN = 0.1  # auto keeps the ring unless another algorithm is predicted this much faster
# What each algorithm runs; the first listed for an op is its default.
FOR_OP = {"allreduce": ("ring", "rhd", "tree", "hier"), "reducescatter": ("ring", "rhd"), "allgather": ("ring", "rhd"),
          "alltoall": ("direct", "pairwise"), "alltoallv": ("direct", "pairwise"), "sendrecv": ("ring",)}
DESCRIBED = {
    "ring": "a pipelined ring: 2(n-1) steps for allreduce, every link busy, the best at large sizes",
    "rhd": "recursive halving then doubling: 2 log2(n) steps, each moving half the data of the one before "
           "(a power-of-two number of ranks)",
    "tree": "NCCL's double binary tree: half the data up and down each of two trees in slices, 2 log2(n) "
            "steps deep, each rank a leaf in one tree",
    "hier": "hierarchical: reduce-scatter inside each group (a BAG region), allreduce of each shard across "
            "the groups, allgather inside: the long links carried twice and crossed in 2 steps",
    "direct": "every chunk to its rank at once: one step, n-1 writes in flight from each rank",
    "pairwise": "n-1 rounds, in round s rank r writes to r+s and waits for r-s: one peer at a time",
}


@dataclass(frozen=True)
class Send:
    """Write `nbytes` of this rank's `src` region at `src_off` into rank `peer`'s `dst` at `dst_off`;
    its immediate is the message's id."""

    peer: int
    src: str
    src_off: int
    nbytes: int
    dst: str
    dst_off: int
    msg: int


@dataclass(frozen=True)
class Reduce:
    """data[data_off:+nbytes] += stage[stage_off:+nbytes], as int32."""

    stage_off: int
    data_off: int
    nbytes: int


@dataclass
class Step:
    waits: list[int] = field(default_factory=list)
    reduces: list[Reduce] = field(default_factory=list)
    sends: list[Send] = field(default_factory=list)


@dataclass
class Plan:
    """Every rank's lanes of steps; `messages`: how many ids it uses; `depth`: the algorithm's steps in
    sequence (what a small size pays per step); `stage_bytes`: how much staging a rank needs;
    `owner`: for reducescatter, which chunk each rank ends with."""

    lanes: list[list[list[Step]]]
    messages: int = 0
    depth: int = 0
    stage_bytes: int = 0
    owner: list[int] = field(default_factory=list)
    # Copies each rank makes of its own data into its stage before it starts (all-to-all: its own
    # chunk): (data offset, stage offset, bytes).
    local: list[tuple[int, int, int]] = field(default_factory=list)
    # All-to-all(v): the bytes rank r sends rank p (its own included), and where each lands.
    matrix: tuple[tuple[int, ...], ...] = ()
    _peers: list[set[int]] | None = field(default=None, repr=False, compare=False)
    _received: list[int] | None = field(default=None, repr=False, compare=False)

    def steps(self, rank: int) -> list[Step]:
        return [step for lane in self.lanes[rank] for step in lane]

    def peers(self, rank: int) -> set[int]:
        """The ranks this one writes to or hears from: the queue pairs it needs. Every rank's are found in
        one pass over the plan, the first time one is asked (a pass per rank was 5.8 s of a 1024-rank job's
        set-up, and grows with the square of the ranks)."""
        if self._peers is None:
            table: list[set[int]] = [set() for _ in self.lanes]
            for r in range(len(self.lanes)):
                for step in self.steps(r):
                    for s in step.sends:
                        table[r].add(s.peer)
                        table[s.peer].add(r)
            self._peers = table
        return set(self._peers[rank])

    def received(self, rank: int) -> int:
        """The bytes the plan writes into this rank (what headers only checks was delivered once). Every
        rank's are summed in one pass, the first time one is asked: a pass over the whole plan per rank grows
        with the cube of the ranks for an all-to-all (5.6 s of a 256-rank job)."""
        if self._received is None:
            table = [0] * len(self.lanes)
            for lanes in self.lanes:
                for lane in lanes:
                    for step in lane:
                        for s in step.sends:
                            table[s.peer] += s.nbytes
            self._received = table
        return self._received[rank]


class _Builder:
    def __init__(self, n: int) -> None:
        self.programs: list[list[Step]] = [[] for _ in range(n)]  # one lane a rank
        self.next = 0

    def send(self, step: Step, peer: int, src: str, src_off: int, nbytes: int, dst: str, dst_off: int) -> int:
        msg = self.next
        self.next += 1
        step.sends.append(Send(peer, src, src_off, nbytes, dst, dst_off, msg))
        return msg

    def step(self, rank: int) -> Step:
        s = Step()
        self.programs[rank].append(s)
        return s


class AlgorithmError(ValueError):
    """An algorithm that cannot run this op or this number of ranks: one line that says why."""


def check(algo: str, op: str, n: int, groups: tuple[int, ...] | None = None) -> None:
    if algo == AUTO:
        return
    if algo not in ALGOS:
        raise AlgorithmError(f"unknown algorithm {algo!r}; known: {', '.join(ALGOS)}")
    if algo not in FOR_OP.get(op, ()):
        raise AlgorithmError(f"{op} runs {', '.join(FOR_OP[op])}, not {algo}")
    if algo == "rhd" and n & (n - 1):
        raise AlgorithmError(f"rhd (recursive halving-doubling) needs a power-of-two number of ranks, not {n}: "
                             "use ring or tree")
    if algo == "hier" and groups is not None:
        sizes = sorted({groups.count(g) for g in set(groups)})
        if len(groups) != n or len(sizes) != 1:
            raise AlgorithmError(f"hier needs groups (regions) of equal size, one entry a rank; got sizes {sizes} "
                                 f"for {n} ranks")


def default(op: str) -> str:
    return FOR_OP[op][0]


@functools.lru_cache(maxsize=16)
def plan(algo: str, op: str, n: int, size: int, slice_bytes: int = 256 << 10,
         groups: tuple[int, ...] | None = None) -> Plan:
    """The plan of `algo` for `op` on `n` ranks, `size` bytes a rank (allgather: each rank's part);
    `groups`: each rank's group (hier: a BAG region; None: one group). Made once a process for every
    rank of it (the fabric clock runs them all in one): never change one."""
    check(algo, op, n, groups)
    if algo == "ring":
        raise AlgorithmError("the ring runs as its own pipeline (Ring.ring), not from a plan")
    if algo == "hier":
        return _hier_allreduce(n, size, groups or (0,) * n)
    return _BUILDERS[(algo, op)](n, size, slice_bytes)


def runnable(op: str, n: int, groups: tuple[int, ...]) -> list[str]:
    """The algorithms `op` can run on these ranks (rhd on a power of two; hier with more than one group
    of one size)."""
    out = []
    for algo in FOR_OP[op]:
        try:
            check(algo, op, n, groups)
        except AlgorithmError:
            continue
        if algo != "hier" or len(set(groups)) > 1:
            out.append(algo)
    return out


def predict(algo: str, op: str, n: int, size: int, *, bps: float, one_way: Callable[[int, int], float],
            groups: tuple[int, ...], between_bps: Callable[[int, int], float] | None = None) -> float:
    """Seconds `algo` should take for `op` of `size` bytes a rank: the one-way times of its way
    (`one_way(a, b)`, seconds, propagation and switching of the fabric's path: a round-based algorithm
    pays its slowest pair each round, a pipelined one each edge once along a chunk's way, and each its
    last writes' ACKs) plus each step's bytes at `bps` (a rank's line rate, b/s),
    or, where more, what the step sends from one group to another through the links that join them
    (`between_bps(a, b)`: their capacity one way, b/s; a BAG narrower than its regions). An alpha-beta
    model: no queues, no collisions inside a group; what it is for is ranking the algorithms, and the
    long and narrow links are what it must not miss."""
    beta = 8 / bps

    def crossing(sends: Iterable[tuple[int, int, float]]) -> float:
        """Seconds the sends (rank, rank, bytes) of one step take between groups, at their capacity."""
        if between_bps is None:
            return 0.0
        load: dict[tuple[int, int], float] = {}
        for a, b, nbytes in sends:
            if groups[a] != groups[b]:
                load[groups[a], groups[b]] = load.get((groups[a], groups[b]), 0.0) + nbytes
        return max((8 * v / between_bps(*k) for k, v in load.items()), default=0.0)

    if algo == "ring" and op in ("allreduce", "reducescatter", "allgather"):
        # The ring pipelines: a chunk's way is `steps` edges in a row around it, each edge's one-way time
        # paid once on that way (not the slowest edge at every step), then the last write's ACK.
        edges = [one_way(r, (r + 1) % n) for r in range(n)]
        steps = 2 * (n - 1) if op == "allreduce" else n - 1
        chunk = size * (n if op == "allgather" else 1) / n
        return (_longest_run(edges, steps) + max(edges)
                + steps * max(chunk * beta, crossing((r, (r + 1) % n, chunk) for r in range(n))))
    if algo == "ring":  # sendrecv
        return (max(one_way(r, (r + 1) % n) for r in range(n))
                + max(size * beta, crossing((r, (r + 1) % n, size) for r in range(n))))
    if algo == "rhd":
        t, d, part = 0.0, n // 2, size / 2
        rounds = []
        while d >= 1:
            rounds.append((max(one_way(r, r ^ d) for r in range(n)), part, d))
            d, part = d // 2, part / 2
        if op in ("allreduce", "reducescatter"):
            t += sum(hop + max(b * beta, crossing((r, r ^ d, b) for r in range(n))) for hop, b, d in rounds)
        if op in ("allreduce", "allgather"):
            scale = n if op == "allgather" else 1
            t += sum(hop + max(b * beta * scale, crossing((r, r ^ d, b * scale) for r in range(n)))
                     for hop, b, d in rounds)
        # Then the last round's writes are acknowledged: the gather ends at distance n/2, the scatter at 1.
        return t + (rounds[0][0] if op != "reducescatter" else rounds[-1][0])
    if algo == "tree":
        t, edges = 0.0, []
        for mirror in (False, True):
            parent, _ = binary_tree(n, mirror)
            # A slice's way up from the farthest rank to the root and down again, then the last ACK.
            up = [_to_root(parent, r, one_way) for r in range(n)]
            edge = max((one_way(r, parent[r]) for r in range(n) if parent[r] >= 0), default=0.0)
            t = max(t, 2 * max(up) + edge)
            # Each tree carries half the buffer up every edge (reduce) and down it (broadcast).
            edges += [s for r in range(n) if parent[r] >= 0 for s in ((r, parent[r], size / 2), (parent[r], r, size / 2))]
        return t + max(2 * size * beta, crossing(edges))  # an inner rank sends its half to two children
    if algo == "hier":
        members: dict[int, list[int]] = {}
        for r, g in enumerate(groups):
            members.setdefault(g, []).append(r)
        ms = list(members.values())
        g, m = len(ms[0]), len(ms)
        inside = max((one_way(a, b) for grp in ms for a in grp for b in grp if a != b), default=0.0)
        across = max(one_way(ms[i][k], ms[j][k]) for i in range(m) for j in range(m) if i != j for k in range(g))
        shards = crossing((ms[i][k], ms[j][k], size / g / m) for i in range(m) for j in range(m) if i != j
                          for k in range(g))
        # Inside, across, across, inside; a rank is done when its last writes are acknowledged, the
        # second across step's among them.
        return (2 * (inside + (g - 1) / g * size * beta)
                + 2 * (across + max((m - 1) / m * size / g * beta, shards)) + max(inside, across))
    if algo in ("direct", "pairwise"):
        worst = max(one_way(a, b) for a in range(n) for b in range(n) if a != b) if n <= 64 else \
            max(one_way(r, (r + n // 2) % n) for r in range(n))
        everything = crossing((a, b, size / n) for a in range(n) for b in range(n) if a != b)
        return ((n - 1) if algo == "pairwise" else 1) * worst + max((n - 1) / n * size * beta, everything)
    raise AlgorithmError(f"no cost model for {algo} {op}")


def choose(op: str, n: int, sizes: list[int], *, bps: float, one_way: Callable[[int, int], float],
           groups: tuple[int, ...], between_bps: Callable[[int, int], float] | None = None) -> tuple[str, str]:
    """The algorithm with the least predicted time over `sizes`, and why, in one line."""
    candidates = runnable(op, n, groups)
    between = functools.cache(between_bps) if between_bps is not None else None
    cost = {a: sum(predict(a, op, n, s, bps=bps, one_way=one_way, groups=groups, between_bps=between)
                   for s in sizes) for a in candidates}
    best = min(cost, key=lambda a: cost[a])
    # The ring pipelines and meets its bound (98 % at 16 MiB on FPF 8 x 8); the others send whole rounds
    # across the fabric at once, where ECMP collisions and reordering cost what this model leaves out
    # (rhd: 61 % there). So the ring keeps the bandwidth-bound cases unless another is clearly faster.
    ring_kept = best != "ring" and "ring" in cost and cost[best] > (1 - RING_MARGIN) * cost["ring"]
    best = "ring" if ring_kept else best
    longest = max(one_way(a, b) for a, b in ((0, r) for r in range(1, n)))
    why = (f"auto: {best}, predicted {cost[best] * 1e6:.1f} us ("
           + ", ".join(f"{a} {c * 1e6:.1f}" for a, c in sorted(cost.items(), key=lambda x: x[1]) if a != best)
           + f"; longest one-way path from rank 0 {longest * 1e6:.2f} us, {bps / 1e9:g} Gb/s a rank, "
           f"{len(set(groups))} group{'s' if len(set(groups)) != 1 else ''}" + _joined(groups, between)
           + (f"; the ring kept: none is predicted {RING_MARGIN:.0%} faster" if ring_kept else "") + ")")
    return best, why


def _joined(groups: tuple[int, ...], between: Callable[[int, int], float] | None) -> str:
    """", 5 Gb/s between them": the least capacity one way between two groups, where it is known."""
    pairs = [(a, b) for a in set(groups) for b in set(groups) if a != b]
    least = min((between(a, b) for a, b in pairs), default=math.inf) if between is not None else math.inf
    return f", {least / 1e9:g} Gb/s between them" if math.isfinite(least) else ""


def _chunks(size: int, n: int) -> int:
    return size // n // 4 * 4


def _rhd_reduce_scatter(b: _Builder, n: int, chunk: int, last: list[Step]) -> None:
    """Recursive halving: in round i rank r and r ^ (n >> i+1) each keep a half of what they hold and
    send the other; the half received lands in a stage area of its own (a round's partner may write
    before the round before is whole), then is added in. Rank r ends with chunk r."""
    lo = [0] * n
    span = n
    base = 0
    d = n // 2
    while d >= 1:
        half = span // 2
        sent: dict[int, int] = {}
        steps = []
        for r in range(n):
            p = r ^ d
            keep_lo = lo[r] + (half if r & d else 0)
            give_lo = lo[r] + (0 if r & d else half)
            step = last[r] if last[r] is not None and not last[r].sends else b.step(r)
            # The partner's copy of my kept half goes to my stage area of this round.
            sent[p] = b.send(step, p, "data", give_lo * chunk, half * chunk, "stage", base)
            steps.append((step, keep_lo))
        for r in range(n):
            wait = b.step(r)
            wait.waits.append(sent[r])
            wait.reduces.append(Reduce(base, steps[r][1] * chunk, half * chunk))
            last[r] = wait
            lo[r] = steps[r][1]
        base += half * chunk
        span = half
        d //= 2


def _rhd_all_gather(b: _Builder, n: int, chunk: int, last: list[Step]) -> None:
    """Recursive doubling: rank r holds chunk r; in round d (1, 2, 4, ...) it and r ^ d swap the d chunks
    each holds, which land in place in each other's data."""
    d = 1
    while d < n:
        sent: dict[int, int] = {}
        for r in range(n):
            p = r ^ d
            lo = r - r % d  # the d chunks rank r holds
            step = last[r] if last[r] is not None and not last[r].sends else b.step(r)
            sent[p] = b.send(step, p, "data", lo * chunk, d * chunk, "data", lo * chunk)
        for r in range(n):
            wait = b.step(r)
            wait.waits.append(sent[r])
            last[r] = wait
        d *= 2


def _rhd(op: str) -> Callable[[int, int, int], Plan]:
    def build(n: int, size: int, slice_bytes: int) -> Plan:
        b = _Builder(n)
        last: list[Step] = [None] * n  # type: ignore[list-item]
        k = n.bit_length() - 1
        if op == "allgather":
            _rhd_all_gather(b, n, size, last)
            return Plan([[p] for p in b.programs], b.next, k, 0)
        chunk = _chunks(size, n)
        _rhd_reduce_scatter(b, n, chunk, last)
        if op == "reducescatter":
            return Plan([[p] for p in b.programs], b.next, k, chunk * n, owner=list(range(n)))
        _rhd_all_gather(b, n, chunk, last)
        return Plan([[p] for p in b.programs], b.next, 2 * k, chunk * n)
    return build


def binary_tree(n: int, mirror: bool) -> tuple[list[int], list[list[int]]]:
    """(parent, children) by rank of a binary tree in heap order (root 0; parent -1); `mirror` numbers
    it from the other end, so that the ranks inside one tree are leaves of the other."""
    at = (lambda pos: n - 1 - pos) if mirror else (lambda pos: pos)
    parent = [-1] * n
    children: list[list[int]] = [[] for _ in range(n)]
    for pos in range(1, n):
        parent[at(pos)] = at((pos - 1) // 2)
        children[at((pos - 1) // 2)].append(at(pos))
    return parent, children


def _tree_allreduce(n: int, size: int, slice_bytes: int) -> Plan:
    """Half the data reduced up tree 0 and broadcast down it, the other half on the mirrored tree 1, in
    slices: a rank adds its children's slice j (each child's lands in a stage area of its own) and sends
    the sum up; the root sends the final slice j down at once, and every other rank forwards it down
    once its parent has. A rank's ups and downs of each tree are four lanes side by side, so both
    directions of every link are busy together and a slice's trip to the root never holds the next."""
    b = _Builder(n)
    elems = size // 4
    halves = [(0, elems // 2 * 4), (elems // 2 * 4, size - elems // 2 * 4)]
    trees = [binary_tree(n, False), binary_tree(n, True)]
    depth = max(1, (n - 1).bit_length())
    # Slices small enough that a half is many of them (a tree only pipelines over more slices than it
    # is deep), never below a packet's payload nor above the runner's slice.
    grain = max(1024, min(slice_bytes, max(1, size // 2) // (4 * depth))) // 4 * 4
    cuts = [[(o + a, min(length - a, grain)) for a in range(0, length, grain)] for o, length in halves]
    half_max = max(length for _, length in halves)

    def stage_off(t: int, k: int, off: int) -> int:
        """Child k of a rank in tree t puts its sums at stage[(2t + k) x half + offset in the half]."""
        return (2 * t + k) * half_max + (off - halves[t][0])

    lanes: list[list[list[Step]]] = [[[], [], [], []] for _ in range(n)]  # up 0, up 1, down 0, down 1
    for t in (0, 1):
        parent, children = trees[t]
        by_depth = sorted(range(n), key=lambda r: -_depth_of(parent, r))  # children's ids before their parent's
        up: dict[tuple[int, int], int] = {}
        down: dict[tuple[int, int], int] = {}
        for j, (off, length) in enumerate(cuts[t]):
            for r in by_depth:
                step = Step(waits=[up[(c, j)] for c in children[r]],
                            reduces=[Reduce(stage_off(t, k, off), off, length) for k, _ in enumerate(children[r])])
                if parent[r] >= 0:
                    k = children[parent[r]].index(r)
                    up[(r, j)] = b.send(step, parent[r], "data", off, length, "stage", stage_off(t, k, off))
                else:  # the root: the sum is final, down it goes
                    for c in children[r]:
                        down[(c, j)] = b.send(step, c, "data", off, length, "data", off)
                lanes[r][t].append(step)
            for r in by_depth[::-1]:  # from the root down: a parent's id exists before its child waits
                if parent[r] >= 0:
                    step = Step(waits=[down[(r, j)]])
                    for c in children[r]:
                        down[(c, j)] = b.send(step, c, "data", off, length, "data", off)
                    lanes[r][2 + t].append(step)
    return Plan([[lane for lane in rl if lane] for rl in lanes], b.next, 2 * depth, 4 * half_max)


def _hier_allreduce(n: int, size: int, groups: tuple[int, ...]) -> Plan:
    """Member k of a group of g ends phase 1 with chunk k of the group's sum (each member writes chunk k
    of its data into member k's stage, at its own slot, at once); in phase 2 the members k of the m
    groups allreduce that chunk among themselves (each sends sub-chunk j to group j's member k's stage
    past the first `size` bytes, adds what it gets, and sends its reduced sub-chunk to every peer's
    data); in phase 3 each member sends its final chunk into every other member's data. Only phase 2
    crosses between groups: 2 (m-1)/m of a chunk out of each rank, in two steps whatever the distance."""
    b = _Builder(n)
    names = sorted(set(groups), key=groups.index)
    members = [[r for r in range(n) if groups[r] == gname] for gname in names]
    g, m = len(members[0]), len(members)
    chunk = _chunks(size, g)
    sub = chunk // m // 4 * 4
    slot = chunk - (m - 1) * sub  # the longest sub-chunk (the last takes what is left): a stage slot's size
    where = {r: (gi, k) for gi, ms in enumerate(members) for k, r in enumerate(ms)}
    first = [b.step(r) for r in range(n)]
    p1 = {(r, q): b.send(first[r], q, "data", where[q][1] * chunk, chunk, "stage", where[r][1] * chunk)
          for ms in members for r in ms for q in ms if q != r}
    second = [b.step(r) for r in range(n)]
    for r in range(n):
        gi, k = where[r]
        ms = members[gi]
        second[r].waits.extend(p1[(q, r)] for q in ms if q != r)
        second[r].reduces.extend(Reduce(where[q][1] * chunk, k * chunk, chunk) for q in ms if q != r)
    # Phase 2: sub-chunk j of chunk k is reduced by group j's member k; the last takes what is left.
    def piece(j: int) -> tuple[int, int]:
        return j * sub, (chunk - j * sub if j == m - 1 else sub)

    p2 = {}
    for r in range(n):
        gi, k = where[r]
        for gj in range(m):
            if gj != gi:
                q = members[gj][k]
                off, length = piece(gj)
                p2[(r, q)] = b.send(second[r], q, "data", k * chunk + off, length, "stage", size + gi * slot)
    third = [b.step(r) for r in range(n)]
    p3 = {}
    for r in range(n):
        gi, k = where[r]
        off, length = piece(gi)
        peers = [members[gj][k] for gj in range(m) if gj != gi]
        third[r].waits.extend(p2[(q, r)] for q in peers)
        third[r].reduces.extend(Reduce(size + where[q][0] * slot, k * chunk + off, length) for q in peers)
        for q in peers:
            p3[(r, q)] = b.send(third[r], q, "data", k * chunk + off, length, "data", k * chunk + off)
    fourth = [b.step(r) for r in range(n)]
    p4 = {}
    for r in range(n):
        gi, k = where[r]
        fourth[r].waits.extend(p3[(members[gj][k], r)] for gj in range(m) if gj != gi)
        for q in members[gi]:
            if q != r:
                p4[(r, q)] = b.send(fourth[r], q, "data", k * chunk, chunk, "data", k * chunk)
    for r in range(n):
        b.step(r).waits.extend(p4[(q, r)] for q in members[where[r][0]] if q != r)
    return Plan([[p] for p in b.programs], b.next, 4 if m > 1 else 2, size + m * slot)


def _depth_of(parent: list[int], r: int) -> int:
    d = 0
    while parent[r] >= 0:
        r, d = parent[r], d + 1
    return d


def _to_root(parent: list[int], r: int, one_way: Callable[[int, int], float]) -> float:
    """Seconds from rank r up its tree to the root, one edge after another."""
    t = 0.0
    while parent[r] >= 0:
        t, r = t + one_way(r, parent[r]), parent[r]
    return t


def _longest_run(edges: list[float], steps: int) -> float:
    """The most `steps` edges in a row around a ring take (they may wrap round it more than once)."""
    n = len(edges)
    whole, part = divmod(steps, n)
    sums = [0.0]
    for e in edges + edges:
        sums.append(sums[-1] + e)
    return whole * sums[n] + max(sums[r + part] - sums[r] for r in range(n))


def moe_matrix(n: int, size: int, skew: float = 1.0, token: int = 4096) -> tuple[tuple[int, ...], ...]:
    """An MoE dispatch: each rank's `size` bytes are tokens of `token` bytes (fewer for small sizes), each
    routed to one of n experts (one a rank) drawn by Zipf(`skew`) popularity, the experts' order
    shuffled; what does not make a whole token stays home. The same matrix on every rank and core
    (seeded by n and size)."""
    token = max(4, min(token, size // n // 4 * 4))
    rng = np.random.default_rng([n, size])
    weights = 1.0 / np.arange(1, n + 1) ** skew
    weights = weights[rng.permutation(n)] / weights.sum()
    rows = []
    for r in range(n):
        counts = np.random.default_rng([n, size, r]).multinomial(size // token, weights) * token
        counts[r] += size - int(counts.sum())
        rows.append(tuple(int(c) for c in counts))
    return tuple(rows)


def _alltoall(pairwise: bool, matrix: Callable[[int, int], tuple[tuple[int, ...], ...]]
              ) -> Callable[[int, int, int], Plan]:
    """Rank r's part for rank p (at its offset in r's data) to p's stage at r's slot; its own part
    copied in place before it starts (Plan.local). Direct: every write at once, then every wait;
    pairwise: round s writes to r + s after hearing from r - s + 1."""
    def build(n: int, size: int, slice_bytes: int) -> Plan:
        b = _Builder(n)
        m = matrix(n, size)
        # sum(m[r][:p]) for each p, and [p][r]: r's slot in p, sum(m[q][p] for q < r), as running sums
        send_off = [list(itertools.accumulate(m[r][:n - 1], initial=0)) for r in range(n)]
        recv_off = [list(itertools.accumulate((m[q][p] for q in range(n - 1)), initial=0)) for p in range(n)]
        steps = [[b.step(r)] * (n - 1) if not pairwise else [b.step(r) for _ in range(n - 1)] for r in range(n)]
        msg = {(r, (r + s) % n): b.send(steps[r][s - 1], (r + s) % n, "data", send_off[r][(r + s) % n],
                                        m[r][(r + s) % n], "stage", recv_off[(r + s) % n][r])
               for s in range(1, n) for r in range(n)}
        for r in range(n):
            if pairwise:  # round s (its send) first waits for round s - 1's write from r - s + 1
                for s in range(2, n):
                    steps[r][s - 1].waits.append(msg[((r - s + 1) % n, r)])
                b.step(r).waits.append(msg[((r - n + 1) % n, r)])
            else:
                b.step(r).waits.extend(msg[(p, r)] for p in range(n) if p != r)
        return Plan([[p] for p in b.programs], b.next, n - 1 if pairwise else 1,
                     max(sum(m[q][p] for q in range(n)) for p in range(n)), matrix=m,
                     local=[(send_off[r][r], recv_off[r][r], m[r][r]) for r in range(n)])
    return build


def _even(n: int, size: int) -> tuple[tuple[int, ...], ...]:
    chunk = _chunks(size, n)
    return tuple((chunk,) * n for _ in range(n))


_BUILDERS: dict[tuple[str, str], Callable[[int, int, int], Plan]] = {
    ("rhd", "allreduce"): _rhd("allreduce"), ("rhd", "reducescatter"): _rhd("reducescatter"),
    ("rhd", "allgather"): _rhd("allgather"), ("tree", "allreduce"): _tree_allreduce,
    ("direct", "alltoall"): _alltoall(False, _even), ("pairwise", "alltoall"): _alltoall(True, _even),
    ("direct", "alltoallv"): _alltoall(False, moe_matrix), ("pairwise", "alltoallv"): _alltoall(True, moe_matrix),
}


def execute(p: Plan, data: list[np.ndarray], stage: list[np.ndarray]) -> None:
    """Run plan `p` on byte arrays, each write copied at the moment it is posted and whole at once; a
    lane's next step runs when every message it waits for has arrived. Raises if the plan deadlocks.
    What proves a plan before it runs on a fabric (where writes take time, and land in any order)."""
    lanes = [(r, lane) for r, rl in enumerate(p.lanes) for lane in rl]
    at = [0] * len(lanes)
    arrived: set[int] = set()
    for r, (src, dst, nbytes) in enumerate(p.local):
        stage[r][dst:dst + nbytes] = data[r][src:src + nbytes]
    regions = {"data": data, "stage": stage}
    while any(at[i] < len(lane) for i, (_, lane) in enumerate(lanes)):
        moved = False
        for i, (r, lane) in enumerate(lanes):
            while at[i] < len(lane) and set(lane[at[i]].waits) <= arrived:
                step = lane[at[i]]
                for red in step.reduces:
                    dst = data[r][red.data_off:red.data_off + red.nbytes].view(np.int32)
                    dst += stage[r][red.stage_off:red.stage_off + red.nbytes].view(np.int32)
                for s in step.sends:
                    src = regions[s.src][r][s.src_off:s.src_off + s.nbytes]
                    regions[s.dst][s.peer][s.dst_off:s.dst_off + s.nbytes] = src
                    arrived.add(s.msg)
                at[i] += 1
                moved = True
        if not moved:
            raise RuntimeError("the plan deadlocks: " + ", ".join(
                f"rank {r} waits for {sorted(set(lane[at[i]].waits) - arrived)}"
                for i, (r, lane) in enumerate(lanes) if at[i] < len(lane)))
