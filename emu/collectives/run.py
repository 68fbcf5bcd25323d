"""Run a collective over a running fabric, one rank per host in its namespace, and report it as
nccl-tests does, in fabric units.

Time is the slowest rank's, from a common barrier to its own completion. As in nccl-tests:
algbw = S / t with S = count x 4 bytes (x nranks for allgather; for alltoall the size is each
rank's whole buffer, n chunks, one per peer), busbw = algbw x 2(n-1)/n for allreduce, (n-1)/n for
allgather and reducescatter, 1 for sendrecv; #wrong counts elements that differ from the expected
result on any rank. Used by `emu bench collective` (which builds the fabric) and by
`net.collective(...)` (on yours).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from emu.fidelity import Part, engine_parts, packet_time_s, verdict
from emu.launch import python_module, scratch_dir
from emu.roce.transport import HEADERS

FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
          "reducescatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n, "sendrecv": lambda n: 1.0}
STEPS = {"allreduce": lambda n: 2 * (n - 1), "allgather": lambda n: n - 1, "reducescatter": lambda n: n - 1,
         "alltoall": lambda n: 1, "sendrecv": lambda n: 1}
MTU = 1024  # RoCE payload per packet


@dataclass(frozen=True)
class RankHost:
    """Where one rank runs: `popen(cmd)` starts a process in the host (stdout/stderr piped, text),
    `ports` its fabric ports as (IPv6 address, rate b/s), in port order: the rank's planes."""

    name: str
    popen: Callable[[list[str]], subprocess.Popen]
    ports: list[tuple[str, float]]


@dataclass(frozen=True)
class CollectiveRow:
    """One size of a collective, as nccl-tests prints it (fabric units)."""

    size: int  # bytes
    time_us: float  # the slowest rank's, barrier to completion
    algbw_GBps: float
    busbw_GBps: float
    busbw_of_bound: float  # of line rate less headers
    wrong: int  # elements not as expected, over all ranks


@dataclass(frozen=True)
class CollectiveResult:
    """`net.collective(...)`: the rows, the bound, and whether the figures are the fabric's."""

    op: str
    nranks: int
    dilation: float
    rows: tuple[CollectiveRow, ...]
    bound_busbw_GBps: float
    wrong: int
    fidelity: dict[str, Any]  # emu.fidelity's verdict: `fidelity["ok"]`
    report: dict[str, Any]  # everything summarise() measured (attribution, retransmits, ...)

    @classmethod
    def from_report(cls, r: dict[str, Any]) -> CollectiveResult:
        rows = tuple(CollectiveRow(x["size"], x["time_us"], x["algbw_GBps"], x["busbw_GBps"], x["busbw_of_bound"],
                                   x["wrong"]) for x in r["rows"])
        return cls(r["op"], r["nranks"], r["dilation"], rows, r["bound_busbw_GBps"], r["wrong"], r["fidelity"], r)


def whole_chunks(sizes: list[int], n: int) -> list[int]:
    """Sizes rounded down to whole int32 chunks per rank (at least one element each)."""
    return [max(4 * n, s // (4 * n) * 4 * n) for s in sizes]


def run_ranks(hosts: list[RankHost], op: str, sizes: list[int], *, dilation: float, cc: str = "none") -> list[dict]:
    """Every rank's own report (rows of fabric times, #wrong, fidelity parts); RuntimeError naming
    the rank if one fails."""
    if op not in FACTOR:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(FACTOR)}")
    n = len(hosts)
    if n < 2:
        raise ValueError("a collective needs at least 2 hosts")
    # Wall time the ranks may take: the collective's bytes at line rate, stretched by D, with room
    # (5x) for a slow run, plus start-up; a fixed limit cut a 16 MiB run at D = 3e6 (17 min) short.
    gpu_bps = min(sum(rate for _, rate in h.ports) for h in hosts)
    fabric_s = sum(FACTOR[op](n) * s * (n if op == "allgather" else 1) * 8 / gpu_bps + 2 * n * 20e-6 for s in sizes)
    timeout = 300.0 + 5 * fabric_s * dilation
    tmp = scratch_dir("collective")
    procs: list[subprocess.Popen] = []
    try:
        cmd = python_module("emu.collectives.rank", tmp, "--nranks", str(n), "--op", op,
                            "--sizes", ",".join(map(str, sizes)), "--dilation", str(dilation), "--cc", cc,
                            "--mtu", str(MTU), "--timeout", f"{timeout:.0f}")
        procs = [h.popen(cmd + ["--rank", str(r), "--name", h.name, "--addrs", ",".join(a for a, _ in h.ports),
                                "--plane-rate", str(min(rate for _, rate in h.ports))])
                 for r, h in enumerate(hosts)]
        results = []
        for r, p in enumerate(procs):
            out, err = p.communicate(timeout=timeout + 60)
            if p.returncode != 0:
                raise RuntimeError(f"rank {r} ({hosts[r].name}) failed: {err.strip()[-600:]}")
            results.append(json.loads(out))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def summarise(op: str, hosts: list[RankHost], sizes: list[int], results: list[dict], stats: dict[str, Any],
              dilation: float) -> dict[str, Any]:
    """nccl-tests rows, the bandwidth bound and the gap per step, where a shortfall comes from, and the
    fidelity verdict of everything that kept fabric time (engine workers and every rank)."""
    n = len(hosts)
    plane_rate = min(rate for h in hosts for _, rate in h.ports)
    gpu_rate = min(sum(rate for _, rate in h.ports) for h in hosts)
    parts = engine_parts(stats) + [Part(**f) for res in results for f in res["fidelity"]]
    fidelity = verdict(parts, dilation=dilation, packet_s=packet_time_s(plane_rate, MTU + HEADERS))
    # The bandwidth bound: every GPU's ports busy all the time, less RoCE/UDP/IPv6/Ethernet headers.
    bound = gpu_rate / 8 * MTU / (MTU + HEADERS) / 1e9
    steps = STEPS[op](n)
    rows = []
    for k, size in enumerate(sizes):
        t = max(res["rows"][k]["time_fabric_s"] for res in results)
        total = size * (n if op == "allgather" else 1)
        algbw = total / t / 1e9
        busbw = algbw * FACTOR[op](n)
        # What the bound leaves out: each step's fixed cost (a write's completion, then its signal,
        # one round trip and a half at least), which small sizes are made of.
        wire_us = busbw / bound * t * 1e6
        rows.append({"size": total, "count": size // 4, "type": "int32", "redop": "sum", "root": -1,
                     "time_us": t * 1e6, "algbw_GBps": algbw, "busbw_GBps": busbw,
                     "wrong": sum(res["rows"][k]["wrong"] for res in results), "busbw_of_bound": busbw / bound,
                     "gap_per_step_us": (t * 1e6 - wire_us) / steps})
    retransmits = sum(res.get("retransmits", 0) for res in results)
    return {"op": op, "nranks": n, "dilation": dilation, "mtu": MTU, "rows": rows,
            "avg_busbw_GBps": sum(r["busbw_GBps"] for r in rows) / len(rows),
            "wrong": sum(r["wrong"] for r in rows), "bound_busbw_GBps": bound, "steps": steps,
            "retransmits": retransmits, "attribution": attribution(stats, retransmits, fidelity),
            "fidelity": fidelity}


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
