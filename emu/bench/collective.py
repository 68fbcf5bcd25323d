"""`emu bench collective OP --topo T`: nccl-tests-style tables over MetaRoCE, in fabric units.

One rank per host of the topology, in its namespace; `--algo` picks the algorithm (ring by default,
direct for alltoall; emu.collectives.algorithms lists them). The
fabric is built for the run, at a D chosen for it (auto: the smallest this machine keeps on time);
the ranks and the figures are emu.collectives.run's, which `net.collective(...)` uses on yours.
"""

from __future__ import annotations

import resource
import sys
import time
from dataclasses import replace
from typing import Any

from emu.collectives import algorithms
from emu.collectives.algorithms import DESCRIBED
from emu.collectives.run import FACTOR, MTU, payload_for, whole_chunks
from emu.fidelity import line
from emu.net.dilation import run_auto
from emu.net.fabric import FabricNet
from emu.net.switch import RunSettings
from emu.net.timebase import KERNEL_PACE_D, Timebase, clock_label
from emu.roce.transport import HEADERS
from emu.topo import make_topo
from emu.topo.common import host_ports
from emu.units import format_size, parse_size

__all__ = ["run", "table"]


def run(op: str, params: dict[str, str], *, dilation: float | str | None = None,
        settings: RunSettings | None = None) -> dict[str, Any]:
    """`settings` carries the backend and switch options; its dilation is replaced by `dilation`
    (a number, or "auto" / None: the smallest D this machine keeps on time, see emu.net.dilation)."""
    if op not in FACTOR:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(FACTOR)}")
    params = dict(params)
    topo_name = params.pop("topo", "fpf")
    sizes = [parse_size(s) for s in params.pop("sizes", "64KiB,256KiB,1MiB").split(",")]
    cc = params.pop("cc", "none")
    seed = int(params.pop("seed", "0"))
    algo = params.pop("algo", None)
    payload = params.pop("payload", "auto")
    payload_for(payload, op, 2, [0])  # an unknown name is refused before anything is built
    topo = make_topo(topo_name, params)
    n = len(topo.hosts())
    if n < 2:
        raise ValueError("a collective needs at least 2 hosts")
    algorithms.check(algo or algorithms.default(op), op, n)  # before anything is built
    sizes = whole_chunks(sizes, n)
    ports = host_ports(topo)

    def at(d: float) -> dict[str, Any]:
        return _measure(op, topo, topo_name, params, sizes, cc, d, settings, seed, algo, payload)

    def auto() -> dict[str, Any]:
        # Every host sends at line rate through the whole collective (ring and direct alike).
        load = sum(rate for p in ports.values() for _, rate in p) / ((MTU + HEADERS) * 8)
        shape = f"{topo_name}-{n}x{max((len(p) for p in ports.values()), default=0)}"
        return run_auto(at, load, f"collective-{(settings or RunSettings()).backend}-{shape}",
                        say=lambda m: print(m, file=sys.stderr, flush=True))

    return Timebase.of(settings or RunSettings()).run_at(dilation, at, auto, default=KERNEL_PACE_D)


def _measure(op: str, topo: Any, topo_name: str, params: dict[str, str], sizes: list[int], cc: str, d: float,
             settings: RunSettings | None, seed: int, algo: str | None, payload: str = "auto") -> dict[str, Any]:
    settings = replace(settings or RunSettings(), dilation=d)
    t0 = time.monotonic()
    with FabricNet(topo, settings=settings) as net:
        bringup = time.monotonic() - t0
        cpu0, t1, jobs = net.engine.cpu_seconds(), time.monotonic(), len(net.engine.speeds)
        report = net.timebase.collective(op, sizes, cc=cc, seed=seed, algo=algo, payload=payload)
        # The measurement alone (not bring-up): the engine's CPU, which on the fabric clock is all of it.
        run_s, cpu_s = time.monotonic() - t1, net.engine.cpu_seconds() - cpu0
        net.timebase.with_speed(report["fidelity"], [net.engine.speed(jobs)])
        # Memory at its peak: the engine's workers' and this process's (Mininet's nodes are their own).
        rss = net.engine.peak_rss_bytes() + resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        # A split fabric: windows (barriers each worker sent every other) and frames that crossed between workers.
        # Asked of a split fabric only: the reply is every port's counters again (40 MB at FPF 4096 x 8).
        machines = net.settings.machines
        split = max(len(machines), net.settings.workers) > 1 or (  # asked for, or the fabric clock's own
            net.settings.backend == "native" and net.engine.spec.workers > 1)
        stats = net.engine.stats() if split else {}
        workers, lookahead = max(len(stats.get("workers", [])), 1), stats.get("lookahead_s")
        chans = [w["channel"] for w in stats.get("workers", []) if "channel" in w]
    fabric_ms = sum(r["time_us"] for r in report["rows"]) / 1e3
    return {"bench": "collective", "topo": topo_name, "params": params, "backend": settings.backend,
            "workers": workers, "lookahead_s": lookahead,
            "machines": list(machines),
            "windows": max((c["windows"] for c in chans), default=0),
            "crossed": sum(c["received"] for c in chans),
            "core": settings.core, "kernel": settings.kernel,
            "wall_s": time.monotonic() - t0, "bringup_wall_s": bringup,
            "run_wall_s": run_s, "engine_cpu_s": cpu_s,
            "wall_s_per_fabric_ms": run_s / fabric_ms if fabric_ms else 0.0,
            "engine_cpu_s_per_packet_hop": cpu_s / report["packet_hops"] if report["packet_hops"] else 0.0,
            "hops_per_wall_s": report["packet_hops"] / run_s if run_s else 0.0,
            "cpu_ns_per_hop": cpu_s / report["packet_hops"] * 1e9 if report["packet_hops"] else 0.0,
            "peak_rss_bytes": rss,
            **report}


def table(result: dict[str, Any]) -> str:
    algo = DESCRIBED[result["algo"]].split(":")[0]
    clock = clock_label(result, long=True)
    if result.get("lookahead_s"):
        clock += f", over {result['workers']} workers in windows of {result['lookahead_s'] * 1e6:g} us"
    if result.get("machines"):
        clock += f" on {', '.join(result['machines'])}"
    lines = [f"# {result['op']} on {result['topo']}, {result['nranks']} ranks, MetaRoCE, {algo}; "
             f"fabric units on {clock}; {result.get('wall_s', 0):.1f} s of wall time",
             f"#{'size':>12} {'count':>10} {'type':>6} {'redop':>6} {'root':>5} {'algo':>8} {'time(us)':>10} "
             f"{'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'of bound':>9} {'#wrong':>7}"]
    for r in result["rows"]:
        lines.append(f" {r['size']:>12} {r['count']:>10} {r['type']:>6} {r['redop']:>6} {r['root']:>5} {r['algo']:>8} "
                     f"{r['time_us']:>10.2f} {r['algbw_GBps']:>12.2f} {r['busbw_GBps']:>12.2f} "
                     f"{r['busbw_of_bound']:>8.0%} {r['wrong']:>7}")
    lines.append(f"# Avg bus bandwidth    : {result['avg_busbw_GBps']:.3f}")
    if result.get("algo_why"):
        lines.append(f"# {result['algo_why']}")
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
