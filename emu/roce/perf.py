"""perftest-like MetaRoCE write bandwidth and latency between two hosts of a running fabric.

Each side runs in its host's namespace (`python -m emu.roce.perf server|client DIR ...`);
they meet through files in DIR (the out-of-band rendezvous: namespaces share
the filesystem, so no extra network is needed). The client fills its buffer
with a seeded pattern and writes it; the server checks, byte for byte, that
its memory holds exactly that, and says so in its result.
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

from emu.roce.transport import Device, host_plane_addresses


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


def server(args: argparse.Namespace) -> dict[str, Any]:
    """One queue pair and one region per client; client i writes pattern(seed + i)."""
    dev = Device(host_plane_addresses(), dilation=args.dilation, cc=args.cc, mtu=args.mtu,
                 plane_rate_bps=args.plane_rate)
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
    ok = [mr.buf == pattern(args.bytes, args.seed + i) for i, (mr, _) in enumerate(ends)]
    return {"role": "server", "qpn": ends[0][1].qpn, "qpns": [qp.qpn for _, qp in ends], "data_ok": all(ok),
            "bad_requests": sum(qp.bad for _, qp in ends), "counters": dev.counters,
            "cnps_sent": sum(qp.cnps_sent for _, qp in ends), "planes": dev.plane_stats(),
            "rx_traces": [[(t / args.dilation, b) for t, b in qp.rx_trace] for _, qp in ends],
            "fidelity": dev.fidelity("server")}


def client(args: argparse.Namespace) -> dict[str, Any]:
    dev = Device(host_plane_addresses(), dilation=args.dilation, cc=args.cc, mtu=args.mtu,
                 plane_rate_bps=args.plane_rate)
    mr = dev.reg_mr(args.bytes)
    mr.buf[:] = pattern(args.bytes, args.seed + args.index)
    qp = dev.create_qp()
    publish(args.dir, f"client-{args.index}", {"qpn": qp.qpn, "addrs": [p.addr for p in dev.planes],
                                                "mr": mr.info()})
    peer = wait_for(args.dir, f"server-{args.index}", args.timeout)
    qp.connect(peer["qpn"], peer["addrs"])
    remote = peer["mr"]
    # Latency first: small writes one at a time, post to completion (one round trip).
    lats = []
    for i in range(args.lat_iters):
        t = time.monotonic()
        qp.post_write(10_000 + i, mr, 0, 8, remote["va"], remote["rkey"])
        dev.run_until_idle(args.timeout)
        dev.poll_cq()
        lats.append((time.monotonic() - t) / args.dilation)
    # Bandwidth: the whole buffer in messages of `message` bytes, all posted at once.
    dev.reset_fidelity()
    t0 = time.monotonic()
    wr = 0
    for off in range(0, args.bytes, args.message):
        n = min(args.message, args.bytes - off)
        qp.post_write(wr, mr, off, n, remote["va"] + off, remote["rkey"])
        wr += 1
    dev.run_until_idle(args.timeout)
    wall = time.monotonic() - t0
    comps = dev.poll_cq()
    publish(args.dir, f"done-{args.index}", {"crc32": zlib.crc32(mr.buf)})
    lats.sort()
    return {
        "role": "client", "qpn": qp.qpn, "bytes": args.bytes, "message": args.message, "wall_s": wall,
        "fabric_s": wall / args.dilation,
        "bw_fabric_bps": args.bytes * 8 / (wall / args.dilation) if wall else 0.0,
        "completions_ok": sum(c.status == "ok" for c in comps), "completions": len(comps),
        "retransmits": qp.retransmits, "cnps": qp.cc.cnps, "final_rate_bps": qp.cc.rate,
        "rate_trace": qp.rate_trace,
        "plane_trace": [(t / args.dilation, b) for t, b in dev.plane_trace],
        "lat_fabric_s": {"min": lats[0], "typical": lats[len(lats) // 2], "max": lats[-1]} if lats else {},
        "planes": dev.plane_stats(), "fidelity": dev.fidelity(f"client {args.index}"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m emu.roce.perf")
    ap.add_argument("role", choices=("server", "client"))
    ap.add_argument("dir")
    ap.add_argument("--bytes", type=int, default=1 << 20)
    ap.add_argument("--message", type=int, default=1 << 20)
    ap.add_argument("--dilation", type=float, default=1000.0)
    ap.add_argument("--cc", default="none")
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
