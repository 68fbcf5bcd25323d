"""`emu bench collective OP --topo T`: nccl-tests-style tables over MetaRoCE, in fabric units.

One rank per host of the topology, in its namespace; ring algorithm. Time is
the slowest rank's, from a common barrier to its own completion. As in
nccl-tests: algbw = S / t with S = count x 4 bytes (x nranks for allgather;
for alltoall the size is each rank's whole buffer, n chunks, one per peer),
busbw = algbw x 2(n-1)/n for allreduce, (n-1)/n for allgather and
reducescatter, 1 for sendrecv; #wrong counts elements that differ from the
expected result on any rank.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from typing import Any

from emu.bench.dilation import run_auto
from emu.fidelity import Part, engine_parts, line, packet_time_s, verdict
from emu.launch import child_env, python_module, scratch_dir
from emu.net.switch import RunSettings
from emu.roce.transport import HEADERS
from emu.scenarios.common import fabric
from emu.topo import make_topo
from emu.topo.common import host_ports
from emu.units import format_size, parse_size

FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
          "reducescatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n, "sendrecv": lambda n: 1.0}
MTU = 1024  # RoCE payload per packet


def run(op: str, params: dict[str, str], *, dilation: float | str | None = None,
        settings: RunSettings | None = None) -> dict[str, Any]:
    """`settings` carries the backend and switch options; its dilation is replaced by `dilation`
    (a number, or "auto" / None: the smallest D this machine keeps on time, see bench.dilation)."""
    if op not in FACTOR:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(FACTOR)}")
    params = dict(params)
    topo_name = params.pop("topo", "fpf")
    sizes = [parse_size(s) for s in params.pop("sizes", "64KiB,256KiB,1MiB").split(",")]
    cc = params.pop("cc", "none")
    topo = make_topo(topo_name, params)
    n = len(topo.hosts())
    if n < 2:
        raise ValueError("a collective needs at least 2 hosts")
    sizes = [max(4 * n, s // (4 * n) * 4 * n) for s in sizes]  # whole int32 chunks per rank
    ports = {h: host_ports(topo, h) for h in topo.hosts()}

    def at(d: float) -> dict[str, Any]:
        return _measure(op, topo, topo_name, params, ports, sizes, cc, d, settings)

    if dilation is None or dilation == "auto":
        # Every host sends at line rate through the whole collective (ring and direct alike).
        load = sum(rate for p in ports.values() for _, rate in p) / ((MTU + HEADERS) * 8)
        shape = f"{topo_name}-{n}x{max(len(p) for p in ports.values())}"
        return run_auto(at, load, f"collective-{(settings or RunSettings()).backend}-{shape}",
                        say=lambda m: print(m, file=sys.stderr, flush=True))
    return at(float(dilation))


def _measure(op: str, topo: Any, topo_name: str, params: dict[str, str], ports: dict[str, list[tuple[str, float]]],
             sizes: list[int], cc: str, d: float, settings: RunSettings | None) -> dict[str, Any]:
    n = len(ports)
    # Wall time the ranks may take: the collective's bytes at line rate, stretched by D, with room
    # (5x) for a slow run, plus start-up; a fixed limit cut a 16 MiB run at D = 3e6 (17 min) short.
    gpu_bps = min(sum(rate for _, rate in p) for p in ports.values())
    fabric_s = sum(FACTOR[op](n) * s * (n if op == "allgather" else 1) * 8 / gpu_bps + 2 * n * 20e-6 for s in sizes)
    timeout = 300.0 + 5 * fabric_s * d
    tmp = scratch_dir("collective")
    try:
        with fabric(topo, replace(settings or RunSettings(), dilation=d)) as net:
            hosts = sorted(net.hosts, key=lambda h: (len(h.name), h.name))
            cmd = python_module("emu.collectives.rank", tmp, "--nranks", str(n), "--op", op,
                                "--sizes", ",".join(map(str, sizes)), "--dilation", str(d), "--cc", cc,
                                "--mtu", str(MTU), "--timeout", f"{timeout:.0f}")
            procs = [h.popen(cmd + ["--rank", str(r), "--name", h.name,
                                    "--addrs", ",".join(a for a, _ in ports[h.name]),
                                    "--plane-rate", str(min(rate for _, rate in ports[h.name]))],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env(), text=True)
                     for r, h in enumerate(hosts)]
            results = []
            for r, p in enumerate(procs):
                out, err = p.communicate(timeout=timeout + 60)
                if p.returncode != 0:
                    raise RuntimeError(f"rank {r} failed: {err.strip()[-600:]}")
                results.append(json.loads(out))
            stats = net.engine.stats()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    plane_rate = min(rate for p in ports.values() for _, rate in p)
    gpu_rate = min(sum(rate for _, rate in p) for p in ports.values())
    parts = engine_parts(stats) + [Part(**f) for res in results for f in res["fidelity"]]
    fidelity = verdict(parts, dilation=d, packet_s=packet_time_s(plane_rate, MTU + HEADERS))
    # The bandwidth bound: every GPU's ports busy all the time, less RoCE/UDP/IPv6/Ethernet headers.
    bound = gpu_rate / 8 * MTU / (MTU + HEADERS) / 1e9
    rows = []
    for k, size in enumerate(sizes):
        t = max(res["rows"][k]["time_fabric_s"] for res in results)
        total = size * (n if op == "allgather" else 1)
        algbw = total / t / 1e9
        rows.append({"size": total, "count": size // 4, "type": "int32", "redop": "sum", "root": -1,
                     "time_us": t * 1e6, "algbw_GBps": algbw, "busbw_GBps": algbw * FACTOR[op](n),
                     "wrong": sum(res["rows"][k]["wrong"] for res in results)})
    steps = STEPS[op](n)
    for r in rows:
        r["busbw_of_bound"] = r["busbw_GBps"] / bound
        # What the bound leaves out: each step's fixed cost (a write's completion, then its signal,
        # one round trip and a half at least), which small sizes are made of.
        wire_us = r["busbw_GBps"] / bound * r["time_us"]
        r["gap_per_step_us"] = (r["time_us"] - wire_us) / steps
    retransmits = sum(res.get("retransmits", 0) for res in results)
    return {"bench": "collective", "op": op, "topo": topo_name, "params": params, "nranks": n, "dilation": d,
            "backend": (settings or RunSettings()).backend, "mtu": MTU,
            "rows": rows, "avg_busbw_GBps": sum(r["busbw_GBps"] for r in rows) / len(rows),
            "wrong": sum(r["wrong"] for r in rows), "bound_busbw_GBps": bound, "steps": steps,
            "retransmits": retransmits, "attribution": attribution(stats, retransmits, fidelity),
            "fidelity": fidelity}


STEPS = {"allreduce": lambda n: 2 * (n - 1), "allgather": lambda n: n - 1, "reducescatter": lambda n: n - 1,
         "alltoall": lambda n: 1, "sendrecv": lambda n: 1}


def attribution(stats: dict[str, Any], retransmits: int, fidelity: dict[str, Any]) -> dict[str, Any]:
    """Where a shortfall from the bound can come from, as measured in this run: the most queued
    switch ports (ECMP collisions and incast show here), drops, ECN and PFC, retransmissions, and
    the endpoints' own lateness (the emulator's share, if any)."""
    queues = sorted(((max(p.get("queue_hwm", [0])), f"{sw}/{name}") for sw, s in stats["switches"].items()
                     for name, p in s["ports"].items()), reverse=True)[:3]
    ports = [p for s in stats["switches"].values() for p in s["ports"].values()]
    paced = [p for p in fidelity["parts"] if p["paced"]]
    # .get: BMv2 counts fewer things than the engine (no drops by reason, no PFC sent).
    return {"most_queued": [{"port": port, "queue_hwm_bytes": q} for q, port in queues if q > 0],
            "drops": sum(sum(p.get("drops", {}).values()) for p in ports),
            "drops_by_reason": {r: sum(p.get("drops", {}).get(r, 0) for p in ports)
                                for r in sorted({r for p in ports for r in p.get("drops", {})})},
            "ecn_marked": sum(p.get("ecn_marked", 0) for p in ports),
            "pfc_frames": sum(p.get("pfc_tx", 0) for p in ports),
            "retransmits": retransmits,
            "endpoint_send_mean_packet_times": max((p["mean_packet_times"] for p in paced), default=0.0)}


def table(result: dict[str, Any]) -> str:
    algo = "direct (one QP per peer)" if result["op"] == "alltoall" else "ring"
    lines = [f"# {result['op']} on {result['topo']}, {result['nranks']} ranks, MetaRoCE, {algo}; "
             f"fabric units at D={result['dilation']:g}",
             f"#{'size':>12} {'count':>10} {'type':>6} {'redop':>6} {'root':>5} {'time(us)':>10} "
             f"{'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'of bound':>9} {'#wrong':>7}"]
    for r in result["rows"]:
        lines.append(f" {r['size']:>12} {r['count']:>10} {r['type']:>6} {r['redop']:>6} {r['root']:>5} "
                     f"{r['time_us']:>10.2f} {r['algbw_GBps']:>12.2f} {r['busbw_GBps']:>12.2f} "
                     f"{r['busbw_of_bound']:>8.0%} {r['wrong']:>7}")
    lines.append(f"# Avg bus bandwidth    : {result['avg_busbw_GBps']:.3f}")
    a = result["attribution"]
    queued = ", ".join(f"{q['port']} {format_size(q['queue_hwm_bytes'])}" for q in a["most_queued"]) or "none"
    lines.append(f"# Bound (line rate less headers, MTU {result['mtu']}): {result['bound_busbw_GBps']:.2f} GB/s; "
                 f"the rest is {result['steps']} steps x the gap per step (last size: "
                 f"{result['rows'][-1]['gap_per_step_us']:.2f} us)")
    reasons = ", ".join(f"{r} {n}" for r, n in a["drops_by_reason"].items() if n)
    drops = f"{a['drops']} ({reasons})" if reasons else str(a["drops"])
    lines.append(f"# Gap, measured: most queued {queued}; drops {drops}, ECN {a['ecn_marked']}, PFC "
                 f"{a['pfc_frames']}, retransmits {a['retransmits']}; endpoints' mean send lateness "
                 f"{a['endpoint_send_mean_packet_times']:.3f} packet times")
    lines.append(f"# {line(result['fidelity'])}")
    return "\n".join(lines)
