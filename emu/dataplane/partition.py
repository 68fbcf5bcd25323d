"""A fabric's switches in partitions, each on a schedule of its own, as machines would run them
(issue 24): the fabric clock across machines, in virtual time.

A link between two partitions is a channel: the sender hands each frame over when its last bit
leaves (its queue, rate, ECN and PFC are the sender's, as on any link), stamped with the time it
arrives at the other end, one propagation delay later. The partitions run in windows: the workers'
algorithm (emu.dataplane.windows), here with each partition's barrier and frames handed to its peers'
Windows by a call, so a test of this one process is a test of what the workers run.

Ties: a frame handed over takes along the tie key its link took for it when it left (the running
event's key: emu.dataplane.schedule), so it runs among the receiver's events where one schedule for
all would have run it: the partitions give one schedule's figures, bit for bit. What a test sends in
from outside is scheduled as the origin of its switch port, alike on one schedule and on several.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import partial
from typing import Any

from emu.dataplane.loop import Loop
from emu.dataplane.pipeline import Switch
from emu.dataplane.spec import EngineSpec, PortSpec, SpecError
from emu.dataplane.windows import Windows
from emu.dataplane.wiring import build_switches, port_key
from emu.simtime import NEVER, to_ps


class PartitionedFabric:
    """`part`: switch name -> partition (0, 1, ...); every switch placed, two partitions at least, and a
    cut link of a delay > 0. `lookahead`: the windows' length, by default the shortest cut link's delay
    (a longer one breaks causality, which Windows checks: LookaheadError)."""

    def __init__(self, spec: EngineSpec, part: dict[str, int], lookahead: int | None = None) -> None:
        names = {s.name for s in spec.switches}
        if set(part) != names:
            raise SpecError(f"partition: place every switch, only those: missing {sorted(names - set(part))[:5]}, "
                            f"unknown {sorted(set(part) - names)[:5]}")
        n = max(part.values()) + 1
        if n < 2 or set(part.values()) != set(range(n)):
            raise SpecError(f"partition: partitions are numbered 0..N-1, N >= 2; got {sorted(set(part.values()))}")
        cut = [(s.name, p) for s in spec.switches for p in s.ports
               if p.peer_kind == "switch" and part[p.peer_switch] != part[s.name]]
        if not cut or min(to_ps(p.delay_s) for _, p in cut) <= 0:  # as the windows keep it
            raise SpecError("partition: the partitions must be joined by links with a propagation delay > 0")
        self.lookahead = min(to_ps(p.delay_s) for _, p in cut) if lookahead is None else lookahead
        self.part = part
        self.loops = [Loop() for _ in range(n)]
        self.sync = [Windows(self.lookahead, lambda: n - 1, partial(self._barrier, i), partial(self._deliver, i),
                             lambda t: None, lambda j: f"partition {j}") for i in range(n)]
        self.received: dict[tuple[str, str], list[tuple[int, bytes]]] = {}
        self.sent: dict[tuple[str, str], int] = {}
        placed = replace(spec, switches=tuple(replace(s, worker=part[s.name]) for s in spec.switches), workers=n)
        self.switches: dict[str, Switch] = {}
        for i, loop in enumerate(self.loops):
            self.switches.update(build_switches(placed, loop, i, self._external))
        for name, ps in cut:  # the channel, not the sender's link, adds the cable's delay
            delay = self.switches[name].cut(ps.index)
            dst = self.switches[ps.peer_switch]
            self.switches[name].ports[ps.index].tx.deliver = partial(
                self._hand_over, part[name], part[ps.peer_switch], delay, partial(dst.ingress, ps.peer_port))

    @property
    def windows(self) -> int:
        return self.sync[0].windows

    @property
    def handed(self) -> int:
        """Frames that crossed a channel."""
        return sum(w.handed for w in self.sync)

    def _external(self, sw: Switch, ps: PortSpec) -> Callable[[int, Any], None]:
        if ps.peer_kind == "switch":
            return lambda t, frame: None  # wired to its channel once every switch exists
        box = self.received.setdefault((sw.name, ps.ifname), [])
        return lambda t, frame: box.append((t, bytes(frame)))

    def _hand_over(self, src: int, dst: int, delay: int, ingress: Callable[[int, Any], None], t: int,
                   frame: Any) -> None:
        mine = self.sync[src]
        mine.sent(t + delay)
        self.sync[dst].arrive(src, mine.window, t + delay, 0, 0, (ingress, bytes(frame)), self.loops[src].key)

    def _barrier(self, src: int, window: int, t: int, busy: bool) -> None:
        for j, w in enumerate(self.sync):
            if j != src:
                w.barrier(src, window, t, busy)

    def _deliver(self, i: int, kind: int, t: int, a: int, payload: tuple[Callable[[int, Any], None], bytes],
                 key: tuple[int, int]) -> None:
        ingress, frame = payload
        self.loops[i].at_key(t, *key, ingress, frame)

    def send(self, switch: str, ifname: str, frame: bytes, t: int) -> None:
        """A host sends `frame` at `t` into the given switch port (through its NIC model)."""
        sw = self.switches[switch]
        idx = next(p.index for p in sw.ports if p.name == ifname)
        loop = self.loops[self.part[switch]]
        loop.at_key(t, *port_key(self.sent, switch, ifname), lambda tt, f: sw.from_host(idx, tt, f), frame)

    def run(self, until: int = NEVER) -> None:
        """Windows until nothing is left to do (or `until`): each partition runs what is before its
        horizon, then ends its window; a partition is busy while it has anything left at or before `until`."""
        start = min(loop.next_time() for loop in self.loops)
        if start == NEVER or start > until:
            return
        for w in self.sync:
            w.start(start)
        while self.sync[0].active:
            for loop, w in zip(self.loops, self.sync, strict=True):
                _run_before(loop, w.horizon)
            for loop, w in zip(self.loops, self.sync, strict=True):
                nxt = loop.next_time()
                left = min(nxt, w.sent_min)
                w.end_window(nxt, left != NEVER and left <= until)


def components(nodes: Iterable[str], links: Iterable[tuple[str, str, float]]) -> list[list[str]]:
    """The pieces `links` (a, b, delay) join `nodes` into: largest first, each sorted."""
    parent = {n: n for n in nodes}

    def root(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for a, b, _ in links:
        parent[root(a)] = root(b)
    groups: dict[str, list[str]] = {}
    for n in parent:
        groups.setdefault(root(n), []).append(n)
    return sorted((sorted(g) for g in groups.values()), key=lambda g: (-len(g), g[0]))


def split_at_longest(ports: dict[str, list[PortSpec]], workers: int) -> dict[str, int]:
    """Switch -> worker for a fabric split over `workers` processes: cut at the longest
    switch links that part it into that many pieces at least (the lookahead is the shortest cut link's
    delay, so the longer the better: BAG parts at its long-haul links), then pieces to workers largest
    first, each to the one with the fewest ports so far. SpecError if no length parts it."""
    links = {(min(a, p.peer_switch), max(a, p.peer_switch), p.delay_s)
             for a, ps in ports.items() for p in ps if p.peer_kind == "switch" and p.peer_switch != a}
    for length in sorted({d for _, _, d in links if d > 0}, reverse=True):
        pieces = components(ports, [lk for lk in links if lk[2] < length])
        if len(pieces) < workers:
            continue
        load, place = [0] * workers, {}
        for piece in sorted(pieces, key=lambda p: (-sum(len(ports[n]) for n in p), p)):
            w = load.index(min(load))
            load[w] += sum(len(ports[n]) for n in piece)
            place.update(dict.fromkeys(piece, w))
        return place
    raise SpecError(f"cannot split this fabric over {workers} workers: no link length parts its "
                    f"switches into {workers} pieces (a split needs links with a propagation delay between them)")


def split_by_shards(shard: dict[str, int], workers: int) -> dict[str, int]:
    """Switch -> worker where no link length parts the switches (an FPF of one leaf a plane, whose
    planes meet only in the hosts): whole shards (the groups a topology names: an FPF plane) in
    contiguous blocks, planes 0-3 on one worker and 4-7 on the next. The hosts' cables are then cut
    (see hosts_to_workers): a lookahead of a host cable's delay. SpecError if too few shards."""
    order = sorted(set(shard.values()))
    if len(order) < workers:
        raise SpecError(f"cannot split this fabric over {workers} workers: no link length parts "
                        f"its switches, and it has {len(order)} switch group(s) (shards)")
    per = len(order) / workers
    return {name: min(workers - 1, int(order.index(k) / per)) for name, k in shard.items()}


def hosts_to_workers(host_switches: dict[str, list[str]], place: dict[str, int]) -> dict[str, int]:
    """Host -> the worker it runs on: of its switches' workers, the one with the fewest hosts so far
    (hosts in name order), so that a host whose planes are on several workers runs whole on one of them
    and the hosts spread over the workers."""
    load: dict[int, int] = {}
    out = {}
    for host in sorted(host_switches, key=lambda h: (len(h), h)):
        near = sorted({place[s] for s in host_switches[host]})
        w = min(near, key=lambda i: (load.get(i, 0), i))
        load[w] = load.get(w, 0) + 1
        out[host] = w
    return out


def _run_before(loop: Loop, end: int) -> None:
    """Every event of `loop` before `end` (not at it: a frame from another partition may arrive at `end`)."""
    loop.sched.run_window(end, 1 << 62)
