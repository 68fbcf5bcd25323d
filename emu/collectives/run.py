"""Run a collective over a running fabric, one rank per host in its namespace, and report it as
nccl-tests does, in fabric units.

Time is the slowest rank's, from a common barrier to its own completion. As in nccl-tests:
algbw = S / t with S = count x 4 bytes (x nranks for allgather; for alltoall the size is each
rank's whole buffer, n chunks, one per peer; for alltoallv the same buffer split as an MoE dispatch routes
its tokens, emu.collectives.algorithms.moe_matrix), busbw = algbw x 2(n-1)/n for allreduce, (n-1)/n for
allgather and reducescatter, 1 for sendrecv; #wrong counts elements that differ from the expected
result on any rank. Used by `emu bench collective` (which builds the fabric) and by
`net.collective(...)` (on yours).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from emu.clock import ProcessClock
from emu.collectives import algorithms
from emu.collectives.job import CollectiveJob, Together
from emu.collectives.rank import SLICE
from emu.launch import python_module, scratch_dir
from emu.roce.transport import HEADERS, WINDOW

FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
          "reducescatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
          "alltoallv": lambda n: (n - 1) / n, "sendrecv": lambda n: 1.0}
STEPS = {"allreduce": lambda n: 2 * (n - 1), "allgather": lambda n: n - 1, "reducescatter": lambda n: n - 1,
         "alltoall": lambda n: 1, "alltoallv": lambda n: 1, "sendrecv": lambda n: 1}
MTU = 1024  # RoCE payload per packet


@dataclass(frozen=True)
class RankHost:
    """Where one rank runs: `popen(cmd)` starts a process in the host (stdout/stderr piped, text),
    `ports` its fabric ports as (IPv6 address, rate b/s), in port order: the rank's planes."""

    name: str
    popen: Callable[[list[str]], subprocess.Popen]
    ports: list[tuple[str, float]]
    switch_ports: list[tuple[str, str]] = field(default_factory=list)  # (switch, its port) facing each plane
    group: int = 0  # its group of near hosts (the topology's host_group: a BAG region)
    # What its paths may cost, for telling a stuck collective from a slow one: the narrowest link it may
    # cross (b/s) and a round trip no path of its fabric exceeds (fabric seconds).
    narrowest_bps: float = math.inf
    rtt_bound_s: float = 0.0


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


@dataclass(frozen=True)
class Tenant:
    """One of several collectives run at once (`net.collectives(...)`): its op, its hosts (names, in rank
    order), sizes (bytes or with units), the planes its ranks use (indices into each host's planes;
    None: all), and the rest as for `net.collective`."""

    op: str
    hosts: tuple[str, ...]
    sizes: tuple[int | str, ...] = ("1MiB",)
    planes: tuple[int, ...] | None = None
    algo: str | None = None
    cc: str = "none"
    seed: int = 0
    spray: str = "weighted"


def pick(hosts: list[RankHost], names: Sequence[str] | None, planes: Sequence[int] | None) -> list[RankHost]:
    """The ranks of a job on some of the fabric's hosts (in the order named) and some of their planes."""
    if names is None and planes is None:
        return hosts
    by_name = {h.name: h for h in hosts}
    unknown = [n for n in names or () if n not in by_name]
    if unknown:
        raise ValueError(f"no host {', '.join(unknown)} in this fabric (hosts: {', '.join(by_name)})")
    if names is not None and len(set(names)) != len(names):
        raise ValueError(f"a host named twice in {list(names)}: one rank a host")
    chosen = [by_name[n] for n in names] if names is not None else hosts
    if planes is None:
        return chosen
    out = []
    for h in chosen:
        if not planes or any(not 0 <= p < len(h.ports) for p in planes) or len(set(planes)) != len(planes):
            raise ValueError(f"planes {list(planes)}: {h.name} has planes 0..{len(h.ports) - 1}, each named once")
        out.append(replace(h, ports=[h.ports[p] for p in planes],
                           switch_ports=[h.switch_ports[p] for p in planes] if h.switch_ports else []))
    return out


def whole_chunks(sizes: list[int], n: int) -> list[int]:
    """Sizes rounded down to whole int32 chunks per rank (at least one element each)."""
    return [max(4 * n, s // (4 * n) * 4 * n) for s in sizes]


def ideal_fabric_s(hosts: list[RankHost], op: str, sizes: list[int]) -> float:
    """The collective's bytes at line rate (the GPU's, or the narrowest link's where that is slower: a
    BAG narrower than its regions) plus a cost per step (a round trip of the longest path): what its
    fabric time is near on an idle fabric, or below."""
    n = len(hosts)
    bps = min(min(sum(rate for _, rate in h.ports), h.narrowest_bps) for h in hosts)
    step = 20e-6 + max(h.rtt_bound_s for h in hosts)
    return sum(FACTOR[op](n) * s * (n if op == "allgather" else 1) * 8 / bps + 2 * n * step for s in sizes)


def transport_for(hosts: list[RankHost]) -> dict[str, Any]:
    """The ranks' MetaRoCE settings that depend on their fabric's paths, for Device: where the longest
    round trip is short (any one fabric of a building), the transport's defaults; over long links
    (BAG at 50 km: about 0.5 ms), a window that keeps the rank's planes busy for that round trip, and,
    until a queue pair has measured a round trip of its own, that one and the time its window takes
    through the fabric's narrowest link (its first timer is 4 of them: a first ACK may wait behind as
    much). A window short of the bandwidth-delay product caps a lone queue pair at window / round trip,
    and a first timer shorter than the round trip resends every first packet before its ACK can be
    back: the endpoint's limits, not the fabric's."""
    rtt = max(h.rtt_bound_s for h in hosts)
    need = math.ceil(max(sum(rate for _, rate in h.ports) for h in hosts) * rtt / 8 / (MTU + HEADERS))
    if need <= WINDOW:
        return {}
    narrowest = min(h.narrowest_bps for h in hosts)
    return {"window": need, "rtt_hint_fabric_s": rtt + need * (MTU + HEADERS) * 8 / narrowest}


def _check(hosts: list[RankHost], op: str, algo: str | None) -> None:
    if op not in FACTOR:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(FACTOR)}")
    if len(hosts) < 2:
        raise ValueError("a collective needs at least 2 hosts")
    algorithms.check(algo or algorithms.default(op), op, len(hosts), groups(hosts))


def groups(hosts: list[RankHost]) -> tuple[int, ...]:
    return tuple(h.group for h in hosts)


PAYLOADS = ("auto", "real", "none")
# "auto": every byte moved and checked while the ranks' memory (their data and staging regions) would be
# at most this; above it headers only, as htsim (FPF 64 x 8 at 16 MiB is 3 GiB: real; 512 x 8 is 24 GiB: none).
AUTO_REAL_BYTES = 4 << 30
CHECKED = {"real": "data: every element of every rank's result", "none": "delivery: every byte each rank must "
           "receive accepted exactly once, and every step's messages waited for (not the values)"}


def payload_for(payload: str, op: str, n: int, sizes: list[int]) -> str:
    """"real" or "none" for what was asked ("auto": real while the ranks' regions fit AUTO_REAL_BYTES)."""
    if payload not in PAYLOADS:
        raise ValueError(f"payload is one of {', '.join(PAYLOADS)}, not {payload!r}")
    if payload != "auto":
        return payload
    regions = n * max(sizes) * (n if op == "allgather" else 1) * 3  # data, and staging up to twice it
    return "real" if regions <= AUTO_REAL_BYTES else "none"


def run_in_engine(engine: Any, hosts: list[RankHost], op: str, sizes: list[int], *, cc: str = "none",
                  seed: int = 0, trim_dscp: int | None = None, spray: str = "weighted",
                  algo: str | None = None, payload: str = "real") -> tuple[list[dict], int]:
    """Fabric clock: every rank inside the engine (emu.collectives.job), all starting each size at one
    fabric instant. Every rank's report, as run_ranks gives them, and how many frames the kernel sent
    into the fabric while the job ran. EngineError with the job's reason if it fails."""
    params = job_params(hosts, op, sizes, cc=cc, seed=seed, trim_dscp=trim_dscp, spray=spray, algo=algo,
                        payload=payload)
    state = engine.wait_job(engine.start_job(CollectiveJob, params))
    # A fabric split over workers: each ran the ranks of its own hosts.
    ranks = [r for part in state.get("parts", [state.get("result")]) for r in part["ranks"]]
    return sorted(ranks, key=lambda r: r["rank"]), int(state["kernel_frames"])


def job_params(hosts: list[RankHost], op: str, sizes: list[int], *, cc: str = "none", seed: int = 0,
               trim_dscp: int | None = None, spray: str = "weighted", algo: str | None = None,
               payload: str = "real") -> dict[str, Any]:
    """What the engine's collective job (emu.collectives.job) is given (`payload`: "real" or "none")."""
    _check(hosts, op, algo)
    missing = [h.name for h in hosts if len(h.switch_ports) != len(h.ports)]
    if missing:
        raise ValueError(f"hosts {', '.join(missing)} have no switch port known for every plane")
    return {"op": op, "algo": algo, "groups": list(groups(hosts)), "sizes": sizes, "cc": cc, "mtu": MTU, "slice": SLICE, "seed": seed,
            "trim_dscp": trim_dscp, "spray": spray, "transport": transport_for(hosts), "payload": payload,
            # A job that has not completed in 100 times its ideal fabric time is stuck, not slow.
            "budget_s": 100 * ideal_fabric_s(hosts, op, sizes) + 0.01,
            "ranks": [{"name": h.name, "planes": [[sw, port, addr, rate] for (sw, port), (addr, rate)
                                                  in zip(h.switch_ports, h.ports, strict=True)]}
                      for h in hosts]}


def run_together_in_engine(engine: Any, jobs: list[dict[str, Any]]) -> tuple[list[list[dict]], int]:
    """Fabric clock: several collectives (job_params each) started at one fabric instant; each one's
    ranks' reports, and the kernel's frames the engine took meanwhile."""
    hosts = [r["name"] for job in jobs for r in job["ranks"]]
    shared = sorted({h for h in hosts if hosts.count(h) > 1})
    if shared:
        raise ValueError(f"collectives run together need hosts of their own: {', '.join(shared)} in more than one")
    state = engine.wait_job(engine.start_job(Together, {"jobs": jobs,
                                                             "budget_s": max(j["budget_s"] for j in jobs)}))
    parts = state.get("parts", [state.get("result")])
    out = [sorted((r for part in parts for r in part["jobs"][i]["ranks"]), key=lambda r: r["rank"])
           for i in range(len(jobs))]
    return out, int(state["kernel_frames"])


def run_ranks(hosts: list[RankHost], op: str, sizes: list[int], *, dilation: float, cc: str = "none",
              spray: str = "weighted", algo: str | None = None) -> list[dict]:
    """Wall clock: every rank's own report (rows of fabric times, #wrong, fidelity parts), each rank a
    process in its host; RuntimeError naming the rank if one fails."""
    _check(hosts, op, algo)
    n = len(hosts)
    # Wall time the ranks may take: the collective's bytes at line rate, stretched by D, with room
    # (5x) for a slow run, plus start-up; a fixed limit cut a 16 MiB run at D = 3e6 (17 min) short.
    timeout = 300.0 + ProcessClock(dilation).wall_s(5 * ideal_fabric_s(hosts, op, sizes))
    tmp = scratch_dir("collective")
    procs: list[subprocess.Popen] = []
    try:
        cmd = python_module("emu.collectives.rank", tmp, "--nranks", str(n), "--op", op,
                            "--sizes", ",".join(map(str, sizes)), "--dilation", str(dilation), "--cc", cc,
                            "--mtu", str(MTU), "--timeout", f"{timeout:.0f}", "--spray", spray,
                            *(a for k, v in transport_for(hosts).items() for a in (f"--{k.replace('_', '-')}", str(v))),
                            "--groups", ",".join(str(h.group) for h in hosts), *(("--algo", algo) if algo else ()))
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
              fidelity: dict[str, Any], *, clock: str, dilation: float, seed: int = 0,
              algo: str | None = None, payload: str = "real") -> dict[str, Any]:
    """nccl-tests rows, the bandwidth bound and the gap per step, where a shortfall comes from, and the
    run's `fidelity` verdict (the timebase's: emu.net.timebase), from the ranks' `results` and the
    engine's counters."""
    n = len(hosts)
    gpu_rate = min(sum(rate for _, rate in h.ports) for h in hosts)
    # The bandwidth bound: every GPU's ports busy all the time, less RoCE/UDP/IPv6/Ethernet headers.
    bound = gpu_rate / 8 * MTU / (MTU + HEADERS) / 1e9
    algo = algo or algorithms.default(op)
    steps = STEPS[op](n) if algo in ("ring", "direct") else algorithms.plan(algo, op, n, 4 * n, SLICE,
                                                                             groups(hosts)).depth
    rows = []
    for k, size in enumerate(sizes):
        t = max(res["rows"][k]["time_fabric_s"] for res in results)
        total = size * (n if op == "allgather" else 1)
        algbw = total / t / 1e9
        busbw = algbw * FACTOR[op](n)
        # What the bound leaves out: each step's fixed cost (a write's completion, then its signal,
        # one round trip and a half at least), which small sizes are made of.
        wire_us = busbw / bound * t * 1e6
        rows.append({"size": total, "count": size // 4, "type": "int32", "redop": "sum", "root": -1, "algo": algo,
                     "time_us": t * 1e6, "algbw_GBps": algbw, "busbw_GBps": busbw,
                     "wrong": sum(res["rows"][k]["wrong"] for res in results), "busbw_of_bound": busbw / bound,
                     "gap_per_step_us": (t * 1e6 - wire_us) / steps})
    retransmits = sum(res.get("retransmits", 0) for res in results)
    # Retransmissions of packets that arrived after all (the copy came twice): reordering taken for loss.
    spurious = sum(p.get("spurious_retransmits", 0) for res in results for p in res.get("planes", []))
    # Every frame a wire carried: each switch port's, and each host NIC model's (the first hop).
    hops = sum(p.get("tx_packets", 0) + p.get("host_nic", {}).get("tx_packets", 0)
               for s in stats["switches"].values() for p in s["ports"].values())
    return {"op": op, "algo": algo, "nranks": n, "clock": clock, "dilation": dilation, "seed": seed, "mtu": MTU, "rows": rows,
            "avg_busbw_GBps": sum(r["busbw_GBps"] for r in rows) / len(rows),
            "wrong": sum(r["wrong"] for r in rows), "bound_busbw_GBps": bound, "steps": steps,
            "retransmits": retransmits, "packet_hops": hops, "payload": payload, "checked": CHECKED[payload],
            "attribution": attribution(stats, retransmits, fidelity) | {"spurious_retransmits": spurious},
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
