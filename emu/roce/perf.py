"""perftest-like MetaRoCE write bandwidth and latency between hosts of a running fabric.

On the wall clock each side runs in its host's namespace (`python -m
emu.roce.perf server|client DIR ...`); they meet through files in DIR (the
out-of-band rendezvous: namespaces share the filesystem, so no extra network
is needed). On the fabric clock the engine runs them inside itself (`start`,
a job). Either way the client's writes are the same operation (`writes`), it
fills its buffer with a seeded pattern and writes it, and the server checks,
byte for byte, that its memory holds exactly that, and says so in its result.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import zlib
from typing import Any

from emu.dataplane.job import Attach, Job
from emu.roce.endpoint import Endpoint, Op, drive_wall
from emu.roce.transport import SPRAYS, Device, MemoryRegion, QueuePair, host_plane_addresses
from emu.simtime import to_s


def publish(directory: str, name: str, info: dict[str, Any]) -> None:
    tmp = os.path.join(directory, f".{name}.tmp")
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.rename(tmp, os.path.join(directory, f"{name}.json"))


def wait_for(directory: str, name: str, timeout: float, dev: Device | None = None) -> dict[str, Any]:
    path = os.path.join(directory, f"{name}.json")
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the peer never published {name} in {directory}")
        if dev is not None:
            dev.progress(0.005)
        else:
            time.sleep(0.005)
    with open(path) as f:
        return json.load(f)


def pattern(size: int, seed: int) -> bytearray:
    return bytearray(random.Random(seed).randbytes(size))


def writes(dev: Device, qp: QueuePair, mr: MemoryRegion, remote: dict[str, int], *, message: int, lat_iters: int,
           name: str) -> Op:
    """The client's operation, on either clock: `lat_iters` 8-byte writes one at a time (post to
    completion, one round trip each), then the whole region in messages of `message` bytes, all
    posted at once. Its value is the client's result, in fabric units."""
    now = dev.clock.clock  # fabric picoseconds on either clock (a ProcessClock in a process of its own)

    lats = []
    for i in range(lat_iters):
        t = now()
        qp.post_write(10_000 + i, mr, 0, 8, remote["va"], remote["rkey"])
        yield qp.idle
        dev.poll_cq()
        lats.append(to_s(now() - t))
    dev.reset_fidelity()
    t0 = now()
    for wr, off in enumerate(range(0, mr.size, message)):
        qp.post_write(wr, mr, off, min(message, mr.size - off), remote["va"] + off, remote["rkey"])
    yield qp.idle
    elapsed = to_s(now() - t0)
    comps = dev.poll_cq()
    lats.sort()
    return {
        "role": "client", "qpn": qp.qpn, "bytes": mr.size, "message": message,
        "elapsed_s": elapsed,  # the device's clock's: fabric seconds on either clock
        "fabric_s": elapsed, "bw_fabric_bps": mr.size * 8 / elapsed if elapsed else 0.0,
        "completions_ok": sum(c.status == "ok" for c in comps), "completions": len(comps),
        "retransmits": qp.retransmits, "timeouts": qp.timeouts, "trim_nacks": qp.trim_nacks,
        "cnps": qp.cc.cnps, "final_rate_bps": qp.cc.rate,
        "rate_trace": qp.rate_trace,
        "plane_trace": list(dev.plane_trace),
        "lat_fabric_s": {"min": lats[0], "typical": lats[len(lats) // 2], "max": lats[-1]} if lats else {},
        "planes": dev.plane_stats(), "fidelity": dev.fidelity(name),
    }


def server_result(dev: Device, ends: list[tuple[MemoryRegion, QueuePair]], nbytes: int, seed: int) -> dict[str, Any]:
    """What the server saw: whether every client's region holds exactly its pattern, and its traces."""
    ok = [mr.buf == pattern(nbytes, seed + i) for i, (mr, _) in enumerate(ends)]
    return {"role": "server", "qpn": ends[0][1].qpn, "qpns": [qp.qpn for _, qp in ends], "data_ok": all(ok),
            "bad_requests": sum(qp.bad for _, qp in ends), "counters": dev.counters,
            "cnps_sent": sum(qp.cnps_sent for _, qp in ends), "planes": dev.plane_stats(),
            "rx_traces": [list(qp.rx_trace) for _, qp in ends],
            "fidelity": dev.fidelity("server")}


def server(args: argparse.Namespace) -> dict[str, Any]:
    """One queue pair and one region per client; client i writes pattern(seed + i)."""
    dev = Device(host_plane_addresses(), dilation=args.dilation, cc=args.cc, mtu=args.mtu,
                 plane_rate_bps=args.plane_rate, trim_dscp=args.trim_dscp, spray=args.spray, epoch_s=args.epoch)
    ends = []
    for i in range(args.clients):
        mr, qp = dev.reg_mr(args.bytes), dev.create_qp()
        publish(args.dir, f"server-{i}", {"qpn": qp.qpn, "addrs": [p.addr for p in dev.planes], "mr": mr.info()})
        ends.append((mr, qp))
    for i, (_, qp) in enumerate(ends):
        peer = wait_for(args.dir, f"client-{i}", args.timeout, dev)
        qp.connect(peer["qpn"], peer["addrs"])
    for i in range(args.clients):
        wait_for(args.dir, f"done-{i}", args.timeout, dev)
    return server_result(dev, ends, args.bytes, args.seed)


def client(args: argparse.Namespace) -> dict[str, Any]:
    dev = Device(host_plane_addresses(), dilation=args.dilation, cc=args.cc, mtu=args.mtu,
                 plane_rate_bps=args.plane_rate, trim_dscp=args.trim_dscp, spray=args.spray, epoch_s=args.epoch)
    mr = dev.reg_mr(args.bytes)
    mr.buf[:] = pattern(args.bytes, args.seed + args.index)
    qp = dev.create_qp()
    publish(args.dir, f"client-{args.index}", {"qpn": qp.qpn, "addrs": [p.addr for p in dev.planes],
                                                "mr": mr.info()})
    peer = wait_for(args.dir, f"server-{args.index}", args.timeout)
    qp.connect(peer["qpn"], peer["addrs"])
    out = drive_wall(writes(dev, qp, mr, peer["mr"], message=args.message, lat_iters=args.lat_iters,
                            name=f"client {args.index}"), dev, args.timeout, f"client {args.index}")
    publish(args.dir, f"done-{args.index}", {"crc32": zlib.crc32(mr.buf)})
    return out


class WritersJob(Job):
    """A job of writers, each of which ends with its result (`results[i]`): done once every part has
    heard every one. On a fabric split over workers each part runs the hosts of its own switches
    (Job.here) and tells every part when one of its writers is done; the other hosts are stand-ins."""

    results: list[dict[str, Any] | None]

    def endpoint(self, planes: list[list[Any]], name: str, seed: int, **device: Any) -> Endpoint:
        ep = Endpoint.attached(self.attach_for(planes), planes, self.fail, name, seed=seed, **device)
        if self.here(planes):
            self.participants.append(ep)
        return ep

    def _done(self, i: int, out: dict[str, Any]) -> None:
        self.tell([i, out])

    def heard(self, t: float, payload: Any) -> None:
        i, out = payload
        self.results[i] = out
        if all(r is not None for r in self.results) and not self.finished:
            self.finish()


class PerfJob(WritersJob):
    """The same exchange on the fabric clock, inside the engine: params nbytes, message, cc, mtu, seed,
    lat_iters, budget_s (fabric seconds), server (planes) and clients (a list of planes), planes as
    [switch, port, IPv6 address, rate b/s]. Every client starts at one fabric instant. Split over
    workers, the server's part says what the server saw (`merge` joins the parts)."""

    def __init__(self, host: Attach, params: dict[str, Any]) -> None:
        super().__init__(host, params)
        nbytes, seed = int(params["nbytes"]), int(params["seed"])
        rng = random.Random(seed)
        kw = {"mtu": params["mtu"], "cc": params["cc"], "trim_dscp": params.get("trim_dscp"),
              "spray": params.get("spray", "weighted")}
        self.server = self.endpoint(params["server"], "server", rng.getrandbits(32), **kw)
        self.clients = [self.endpoint(planes, f"client {i}", rng.getrandbits(32), **kw)
                        for i, planes in enumerate(params["clients"])]
        self.ends: list[tuple[MemoryRegion, QueuePair]] = []
        ops = []
        for i, ep in enumerate(self.clients):
            mr, qp = ep.dev.reg_mr(nbytes), ep.dev.create_qp()
            mr.buf[:] = pattern(nbytes, seed + i)
            smr, sqp = self.server.dev.reg_mr(nbytes), self.server.dev.create_qp()
            qp.connect(sqp.qpn, [p.addr for p in self.server.dev.planes])
            sqp.connect(qp.qpn, [p.addr for p in ep.dev.planes])
            self.ends.append((smr, sqp))
            ops.append(writes(ep.dev, qp, mr, smr.info(), message=int(params["message"]),
                              lat_iters=int(params["lat_iters"]), name=f"client {i}"))
        self.results: list[dict[str, Any] | None] = [None] * len(self.clients)
        self.ops = ops

    def kick(self) -> None:
        for i, (ep, op) in enumerate(zip(self.clients, self.ops, strict=True)):
            if self.here(self.params["clients"][i]):
                with self.as_origin("client", i):
                    ep.start(op, self.t0, lambda out, t, i=i: self._done(i, out))

    def what(self) -> str:
        return f"{len(self.clients)} client(s) writing {self.params['nbytes']} B each"

    def result(self) -> dict[str, Any]:
        mine = self.here(self.params["server"])
        return {"clients": self.results,
                "server": server_result(self.server.dev, self.ends, int(self.params["nbytes"]),
                                        int(self.params["seed"])) if mine else None,
                "fabric_s": self.since(self.loop.now), "t0_fabric_s": to_s(self.t0)}  # the traces' clock

    @staticmethod
    def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
        """One result from the parts of a split job (every part heard every client; one ran the server)."""
        return {**Job.merge(parts), "server": next(p["server"] for p in parts if p["server"] is not None)}


class WritesJob(WritersJob):
    """Writes between pairs of hosts at once, on the fabric clock (a traffic pattern: an incast with
    victim flows beside it, a permutation): params hosts ({name: planes}), pairs ([[src, dst], ...];
    a host is the source of one pair at most), nbytes, message, cc, mtu, seed, trim_dscp, budget_s.
    One device per host, a queue pair per pair at each end; every writer starts at one fabric instant.
    Result: per pair, its source, destination, the writer's result and whether the data arrived exact
    (split over workers, the destination's part knows that: `merge` joins the parts)."""

    def __init__(self, host: Attach, params: dict[str, Any]) -> None:
        super().__init__(host, params)
        nbytes, seed = int(params["nbytes"]), int(params["seed"])
        pairs = [(str(a), str(b)) for a, b in params["pairs"]]
        sources = [a for a, _ in pairs]
        if len(set(sources)) != len(sources) or any(a == b for a, b in pairs):
            raise ValueError("writes: each host writes to one other host at most")
        rng = random.Random(seed)
        kw = {"mtu": params["mtu"], "cc": params["cc"], "trim_dscp": params.get("trim_dscp"),
              "spray": params.get("spray", "weighted")}
        self.eps = {name: self.endpoint(planes, name, rng.getrandbits(32), **kw)
                    for name, planes in sorted(params["hosts"].items())}
        self.pairs = pairs
        self.ends: list[tuple[MemoryRegion, int]] = []  # at each destination: the region, its pattern's seed
        ops = []
        for i, (a, b) in enumerate(pairs):
            src, dst = self.eps[a].dev, self.eps[b].dev
            mr, qp = src.reg_mr(nbytes), src.create_qp()
            mr.buf[:] = pattern(nbytes, seed + i)
            dmr, dqp = dst.reg_mr(nbytes), dst.create_qp()
            qp.connect(dqp.qpn, [p.addr for p in dst.planes])
            dqp.connect(qp.qpn, [p.addr for p in src.planes])
            self.ends.append((dmr, seed + i))
            ops.append(writes(src, qp, mr, dmr.info(), message=int(params["message"]), lat_iters=0, name=f"{a}->{b}"))
        self.results: list[dict[str, Any] | None] = [None] * len(pairs)
        self.ops = ops

    def kick(self) -> None:
        for i, ((a, _), op) in enumerate(zip(self.pairs, self.ops, strict=True)):
            if self.here(self.params["hosts"][a]):
                with self.as_origin("pair", i):
                    self.eps[a].start(op, self.t0, lambda out, t, i=i: self._done(i, out))

    def what(self) -> str:
        return f"{len(self.pairs)} writes of {self.params['nbytes']} B"

    def result(self) -> dict[str, Any]:
        n, hosts = int(self.params["nbytes"]), self.params["hosts"]
        return {"pairs": [{"src": a, "dst": b, "client": r,
                           "data_ok": mr.buf == pattern(n, s) if self.here(hosts[b]) else None}
                          for (a, b), r, (mr, s) in zip(self.pairs, self.results, self.ends, strict=True)],
                "fabric_s": self.since(self.loop.now), "t0_fabric_s": to_s(self.t0)}  # the traces' clock

    @staticmethod
    def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
        """One result from the parts of a split job: each pair as its destination's part saw it."""
        pairs = [next(p["pairs"][i] for p in parts if p["pairs"][i]["data_ok"] is not None)
                 for i in range(len(parts[0]["pairs"]))]
        return {**Job.merge(parts), "pairs": pairs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m emu.roce.perf")
    ap.add_argument("role", choices=("server", "client"))
    ap.add_argument("dir")
    ap.add_argument("--bytes", type=int, default=1 << 20)
    ap.add_argument("--message", type=int, default=1 << 20)
    ap.add_argument("--dilation", type=float, default=1000.0)
    ap.add_argument("--epoch", type=float, default=None,
                    help="the monotonic instant fabric time 0 is at, shared with the harness (default: start-up)")
    ap.add_argument("--cc", default="none")
    ap.add_argument("--trim-dscp", type=int, default=None, help="the fabric trims: trimmed packets carry this DSCP")
    ap.add_argument("--spray", choices=SPRAYS, default="weighted", help="how packets spread over the planes")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lat-iters", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--clients", type=int, default=1, help="server: how many clients write to it")
    ap.add_argument("--mtu", type=int, default=1024, help="RoCE path MTU: payload bytes per packet")
    ap.add_argument("--plane-rate", type=float, default=100e9, help="each plane's line rate, b/s (fabric)")
    ap.add_argument("--index", type=int, default=0, help="client: which of the server's clients this is")
    args = ap.parse_args(argv)
    out = server(args) if args.role == "server" else client(args)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
