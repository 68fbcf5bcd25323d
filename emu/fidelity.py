"""Did everything that keeps fabric time keep it? One verdict per result.

A figure the emulator prints is the fabric's only if every part that runs on a
fabric-time schedule ran on time: the engine's workers (each timer callback
against its due time), MetaRoCE endpoints (each paced send against the moment
its wire was free, each received packet against the kernel's arrival stamp),
collective ranks (wall time spent outside the transport between steps) and
traffic generators (each datagram against its paced slot). Each part records
its lateness in wall seconds; the verdict converts to fabric time (divide by
the dilation D) and to packet times (one MTU frame on the fastest link), and
compares each part's p99 with a threshold stated in the result.

Why packet times: a part late by less than one frame's serialisation can only
shift packets within the granularity the fabric itself has; late by several,
it changes queueing, pacing and round trips, and the figure measures the
machine running the emulator. This module is a leaf (standard library only),
so the engine, the endpoints and the harnesses all use the same recorder.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import math
import os
import sys
from array import array
from dataclasses import asdict, dataclass
from typing import Any

from emu.clock import ClockKind, check_clock

# p99 lateness allowed, in packet times (one MTU frame on the fastest link of the run).
THRESHOLD_PACKET_TIMES = 2.0
# A paced sender that is late starts its next slot late: its mean lateness, in packet times, is
# the share of line rate it lost, and a ring, where each rank waits on the one before, loses it
# several times over. Allowed: 1.5 %. Measured, FPF 8x8 1 MiB allreduce (pipelined ring): mean
# 0.043 at D = 5e5 took 35.7 us, 0.013 at 1e6 31.6 us, 0.002 at 2e6 31.0 us; so 0.05 passed a
# result 15 % off, 0.015 keeps it within about 2 %.
PACED_MEAN_PACKET_TIMES = 0.015
STATISTIC = "p99"


_PR_SET_TIMERSLACK = 29


def tight_timers(slack_ns: int = 1000) -> bool:
    """Ask the kernel to wake this process within `slack_ns` of its timers (default slack: 50 us,
    which at D = 10 000 is already 5 ns of fabric time on every wake-up). True if it took."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        return libc.prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(slack_ns), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


# Lateness histogram: bin 0 holds "on time" (0 s); above it, BINS_PER_OCTAVE bins per doubling from
# 2^MIN_EXP s (about a picosecond) up, so a quantile is known to within 2^(1/16) - 1 = 4.4 %.
BINS_PER_OCTAVE = 16
MIN_EXP = -40
NBINS = 1 + 52 * BINS_PER_OCTAVE  # up to 2^12 s
_BIN_OFFSET = -(1 + MIN_EXP) * BINS_PER_OCTAVE - BINS_PER_OCTAVE + 1
_frexp = math.frexp


class Lateness:
    """Lateness (wall seconds) over a whole measurement window, in a fixed log-spaced histogram: every
    event counts, however many (a ring of the last few thousand let a part late for most of a run
    read on time), and adding one allocates nothing. Quantiles are the upper edge of their bin: at
    most 4.4 % above the true value, never below it."""

    def __init__(self) -> None:
        self.bins = array("q", [0]) * NBINS
        self.count = 0
        self.max = 0.0
        self.total = 0.0

    def add(self, late: float) -> None:
        self.count += 1
        if late > 0.0:
            m, e = _frexp(late)  # late = m * 2^e, m in [0.5, 1): bin (e - 1 - MIN_EXP) * 16 + (m - 0.5) * 32 + 1
            i = e * BINS_PER_OCTAVE + int(m * 2 * BINS_PER_OCTAVE) + _BIN_OFFSET
            if i < 1 or i >= NBINS:
                i = 1 if i < 1 else NBINS - 1
            self.bins[i] += 1
            self.total += late
            if late > self.max:
                self.max = late
        else:
            self.bins[0] += 1

    def reset(self) -> None:
        """Start a new measurement window (e.g. after set-up, before the timed part)."""
        for i in range(NBINS):
            self.bins[i] = 0
        self.count = 0
        self.max = 0.0
        self.total = 0.0

    def quantile(self, q: float) -> float:
        """The smallest bin edge with at least q of the events at or below it (0.0: on time)."""
        if not self.count:
            return 0.0
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for i, n in enumerate(self.bins):
            seen += n
            if seen >= rank:
                if i == 0:
                    return 0.0
                octave, step = divmod(i - 1, BINS_PER_OCTAVE)
                edge = 2.0 ** (octave + MIN_EXP) * (1 + (step + 1) / BINS_PER_OCTAVE)
                return min(edge, self.max)
        return self.max

    def summary(self) -> dict[str, float]:
        if not self.count:
            return {"events": 0, "p50_s": 0.0, "p99_s": 0.0, "max_s": 0.0, "mean_s": 0.0}
        return {"events": self.count, "p50_s": self.quantile(0.5), "p99_s": self.quantile(0.99),
                "max_s": self.max, "mean_s": self.total / self.count}


@dataclass(frozen=True)
class Part:
    """One clock-keeping part's lateness over a run, in wall seconds."""

    name: str  # "engine worker 0", "endpoint gpu3 send", "rank 2 harness"
    kind: str  # engine | endpoint | rank | traffic | clock
    events: int
    p99_s: float
    max_s: float
    mean_s: float = 0.0
    paced: bool = False  # a sender that restarts its schedule when late: lateness is lost rate

    @classmethod
    def from_summary(cls, name: str, kind: str, s: dict[str, float], paced: bool = False) -> Part:
        return cls(name, kind, int(s["events"]), float(s["p99_s"]), float(s["max_s"]), float(s.get("mean_s", 0.0)),
                   paced)


def packet_time_s(rate_bps: float, frame_bytes: int = 1500) -> float:
    """Fabric seconds one frame takes on a link of `rate_bps` (the verdict's unit)."""
    return frame_bytes * 8 / rate_bps


def verdict(parts: list[Part], *, dilation: float, packet_s: float,
            threshold_packets: float = THRESHOLD_PACKET_TIMES, missing: list[str] | None = None,
            drops: dict[str, int] | None = None) -> dict[str, Any]:
    """The `fidelity` object of a result. `packet_s` is one packet time in fabric seconds;
    `missing` names parts that keep fabric time but could not report (then `ok` is null); `drops`
    are the emulator's own losses (emulator_drops): any makes the run not ok, as a late part does.
    Measured before deciding so (docs/testing.md): in a whole suite's on-time runs they were zero."""
    rows = []
    for p in parts:
        late_ns = p.p99_s / dilation * 1e9
        mean_pt = p.mean_s / dilation / packet_s
        rows.append({**asdict(p), "p99_fabric_ns": late_ns, "max_fabric_ns": p.max_s / dilation * 1e9,
                     "p99_packet_times": late_ns / (packet_s * 1e9), "mean_packet_times": mean_pt,
                     "ok": late_ns <= threshold_packets * packet_s * 1e9
                     and (not p.paced or mean_pt <= PACED_MEAN_PACKET_TIMES)})
    # The worst part: one that failed, the furthest past its limit; else the latest at p99.
    worst = max(rows, key=lambda r: (not r["ok"], max(r["p99_packet_times"] / threshold_packets,
                                                      r["mean_packet_times"] / PACED_MEAN_PACKET_TIMES
                                                      if r["paced"] else 0.0)), default=None)
    bad = [r for r in rows if not r["ok"]]
    drops = {k: n for k, n in (drops or {}).items() if n}
    io = ([f"the emulator's own I/O ({', '.join(f'{r} {n}' for r, n in sorted(drops.items()))})"] if drops else [])
    ok: bool | None = (not bad and not io) if not missing else (False if bad or io else None)
    return {
        "ok": ok, "dilation": dilation, "statistic": STATISTIC,
        "threshold": {"packet_times": threshold_packets, "fabric_ns": threshold_packets * packet_s * 1e9,
                      "packet_fabric_ns": packet_s * 1e9, "paced_mean_packet_times": PACED_MEAN_PACKET_TIMES},
        "worst": None if worst is None else {k: worst[k] for k in ("name", "kind", "p99_fabric_ns",
                                                                   "p99_packet_times", "p99_s", "paced",
                                                                   "mean_packet_times")},
        "behind": [r["name"] for r in bad] + io, "missing": list(missing or []), "parts": rows,
        "emulator_drops": drops,
    }


# Drops in the emulator's own I/O, in no switch of the fabric: an engine port's receive ring full (its
# worker lagged), a send the kernel refused, a frame too big for a ring slot, and on BMv2 what the port's
# MAC handed simple_switch that its ingress never saw, or its egress sent that the MAC never read.
EMULATOR_IO = ("rx_socket_overflow", "tx_error", "rx_truncated", "p4_input", "p4_output")


def emulator_drops(stats: dict[str, Any]) -> dict[str, int]:
    """Packets the emulator itself lost, by reason, from a fabric's stats (only reasons that happened)."""
    out: dict[str, int] = {}
    for sw in stats["switches"].values():
        for port in sw["ports"].values():
            for reason, n in port.get("drops", {}).items():
                if reason in EMULATOR_IO and n:
                    out[reason] = out.get(reason, 0) + n
    return out


def log_for_study(fid: dict[str, Any]) -> None:
    """With EMU_FIDELITY_LOG set, one JSON line per wall-clock verdict (its ok, D and the emulator's own
    drops) appended there: how item 10 of issue 27 measured how often on-time runs lose packets in
    the emulator's I/O before letting those losses decide `ok` (docs/testing.md)."""
    path = os.environ.get("EMU_FIDELITY_LOG")
    if not path:
        return
    row = {"ok": fid.get("ok"), "dilation": fid.get("dilation"), "drops": fid.get("emulator_drops", {}),
           "behind": fid.get("behind", []), "argv": " ".join(sys.argv[1:6]),
           "test": os.environ.get("PYTEST_CURRENT_TEST", "")}
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


# What a result says of the run rather than of the fabric: wall and CPU time, the core that ran it and its
# speed, whether the hosts' kernels were built, and how many windows a split fabric's workers synchronized
# in (the compiled core's heap lacks the idle ends of transmission the reference's holds, so its workers
# may see their next events later and agree on fewer windows). Two runs of the same fabric-clock job differ
# only in these (tests/test_cores.py).
RUN_FIELDS = frozenset({"wall_s", "run_wall_s", "engine_cpu_s", "wall_s_per_fabric_ms", "engine_cpu_s_per_packet_hop",
                        "hops_per_wall_s", "cpu_ns_per_hop", "speed", "core", "peak_rss_bytes", "bringup_wall_s",
                        "kernel", "windows"})


def add_speeds(speeds: list[dict[str, Any]], *, parallel: bool = False) -> dict[str, Any]:
    """Fabric-clock jobs' costs (emu.dataplane.worker's meter: the core, packet-hops, wall and CPU seconds)
    summed, one after another, or a split job's parts (`parallel`: its wall time is the longest part's),
    with the rates a reader compares against other simulators."""
    hops = sum(int(s["packet_hops"]) for s in speeds)
    events = sum(int(s.get("events", 0)) for s in speeds)  # the schedule's, counted where it runs them
    cpu = sum(float(s["cpu_s"]) for s in speeds)
    user = sum(float(s.get("user_s", 0.0)) for s in speeds)
    walls = [float(s["wall_s"]) for s in speeds]
    wall = max(walls, default=0.0) if parallel else sum(walls)
    cores = sorted({str(s["core"]) for s in speeds})
    return {"core": ",".join(cores) or None, "jobs": sum(int(s.get("jobs", 1)) for s in speeds),
            "packet_hops": hops, "wall_s": wall, "cpu_s": cpu, "user_s": user, "system_s": cpu - user,
            "hops_per_wall_s": hops / wall if wall else 0.0, "cpu_ns_per_hop": cpu / hops * 1e9 if hops else 0.0,
            "user_ns_per_hop": user / hops * 1e9 if hops else 0.0,
            "events": events, "events_per_hop": events / hops if hops else 0.0}


def speed_line(speed: dict[str, Any] | None) -> str:
    """What the fabric clock's run cost, for the terminal: the core, packet-hops, their rate, CPU a hop."""
    if not speed or not speed.get("packet_hops"):
        return ""
    return (f"; {speed['core']} core: {speed['packet_hops']:,} packet-hops, {speed['hops_per_wall_s'] / 1e3:,.0f}k a "
            f"wall second, {speed['cpu_ns_per_hop']:,.0f} ns of CPU a hop ({speed.get('user_ns_per_hop', 0):,.0f} "
            "its own, the rest the kernel's mapping its memory)")


def fabric_fidelity(stats: dict[str, Any], *, rate_bps: float = 100e9, frame_bytes: int = 1500,
                    parts: list[Part] | None = None, senders: list[dict[str, Any]] | None = None,
                    endpoints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """`stats` from the fabric (its workers' lateness), plus paced UDP senders' results (`senders`)
    and MetaRoCE endpoints' results (`endpoints`, each with its `fidelity` parts). The packet time is
    one `frame_bytes` frame at `rate_bps`, the fastest link the run's traffic uses."""
    all_parts = engine_parts(stats) + list(parts or [])
    all_parts += [Part.from_summary(f"traffic sender {i}", "traffic", s["lateness"], paced=True)
                  for i, s in enumerate(senders or []) if "lateness" in s]
    all_parts += [Part(**f) for e in endpoints or [] for f in e.get("fidelity", [])]
    # BMv2's simple_switch keeps no schedule it could report against: its runs are never judged ok.
    missing = ["BMv2 simple_switch"] if stats.get("backend") == "bmv2" else []
    fid = verdict(all_parts, dilation=stats["dilation"], packet_s=packet_time_s(rate_bps, frame_bytes),
                  missing=missing, drops=emulator_drops(stats))
    log_for_study(fid)
    return fid



def fabric_clock_verdict(*, packet_s: float, kernel_frames: int = 0) -> dict[str, Any]:
    """The `fidelity` object of a run on the fabric clock: every part that keeps fabric time ran on the
    engine's own schedule, so none could be late and `ok` is true on any machine, idle or loaded.
    What it cannot vouch for is said: frames the hosts' kernels sent into the fabric while the run
    went on (ping, ARP/ND, TCP) were stamped when the engine took them, so their timing is not the
    fabric's, and a run they crossed is not reproducible bit for bit."""
    return {"ok": True, "clock": ClockKind.FABRIC, "dilation": 1.0, "statistic": STATISTIC,
            "threshold": {"packet_times": THRESHOLD_PACKET_TIMES, "fabric_ns": THRESHOLD_PACKET_TIMES * packet_s * 1e9,
                          "packet_fabric_ns": packet_s * 1e9, "paced_mean_packet_times": PACED_MEAN_PACKET_TIMES},
            "worst": None, "behind": [], "missing": [], "parts": [], "kernel_frames": kernel_frames}


def on_fabric_clock(fid: dict[str, Any]) -> bool:
    """Whether a verdict (made here, or read back from a result's JSON, where the kind is its name) is the
    fabric clock's; a wall-clock verdict names no clock."""
    return check_clock(fid.get("clock", ClockKind.WALL)) is ClockKind.FABRIC


def combine(fids: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One verdict for a result made of several runs (e.g. with and without DCQCN), by run name:
    ok only if every run was, the worst part of all, every part named with its run."""
    runs = list(fids.items())
    if all(on_fabric_clock(f) for _, f in runs):
        first = runs[0][1]
        speeds = [f["speed"] for _, f in runs if f.get("speed")]
        return first | {"kernel_frames": sum(f.get("kernel_frames", 0) for _, f in runs)} \
            | ({"speed": add_speeds(speeds)} if speeds else {})
    oks = [f["ok"] for _, f in runs]
    worst = max((f["worst"] | {"name": f"{k}: {f['worst']['name']}"} for k, f in runs if f["worst"]),
                key=lambda w: w["p99_fabric_ns"], default=None)
    first = runs[0][1]
    return {"ok": None if None in oks else all(oks), "dilation": first["dilation"], "statistic": STATISTIC,
            "threshold": first["threshold"], "worst": worst,
            "behind": [f"{k}: {b}" for k, f in runs for b in f["behind"]],
            "missing": sorted({m for _, f in runs for m in f["missing"]}),
            "parts": [p | {"name": f"{k}: {p['name']}"} for k, f in runs for p in f["parts"]],
            "emulator_drops": _sum_drops(f.get("emulator_drops", {}) for _, f in runs)}


def _sum_drops(drops: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in drops:
        for reason, n in d.items():
            out[reason] = out.get(reason, 0) + n
    return out


def engine_parts(stats: dict[str, Any]) -> list[Part]:
    """The engine workers' parts, from `Engine.stats()` (BMv2 runs report the wire boxes' workers). On
    the wall clock across machines, each pair of workers' clock agreement is a part too: a frame
    crossing between them lands as late, or as early, as their clocks disagree, and only the bound
    measured at connect (|offset| + round trip / 2, emu.dataplane.channel) can say by how much."""
    parts = [Part.from_summary(f"engine worker {w['worker']}", "engine", w["fidelity"]) for w in stats["workers"]]
    for w in stats["workers"]:
        for peer, c in w.get("channel", {}).get("clocks", {}).items():
            if int(peer) > w["worker"]:  # each pair once (both ends measured it)
                parts.append(Part(f"clocks of engine workers {w['worker']} and {peer}", "clock", int(c["samples"]),
                                  float(c["bound_s"]), float(c["bound_s"])))
    return parts


def line(fid: dict[str, Any] | None) -> str:
    """The verdict in one line, as the CLI prints it."""
    if not fid:
        return "fidelity: not measured for this result"
    if on_fabric_clock(fid):
        kernel = fid.get("kernel_frames", 0)
        return ("fidelity: exact (fabric clock: every part kept the engine's schedule, nothing can be late)"
                + speed_line(fid.get("speed"))
                + (f"; {kernel} frames from the hosts' kernels crossed the run: their timing is not the fabric's, "
                   "and the run is not reproducible bit for bit" if kernel else ""))
    t = fid["threshold"]
    w = fid["worst"]
    worst = (f"worst {w['name']} {STATISTIC} {w['p99_fabric_ns']:.0f} ns late "
             f"({w['p99_packet_times']:.2f} packet times"
             + (f", mean {w['mean_packet_times']:.3f}" if w.get("paced") else "") + ")") if w else "no part reported"
    limit = (f"limits p99 {t['packet_times']:g} packet times = {t['fabric_ns']:.0f} ns, paced senders' mean "
             f"{t.get('paced_mean_packet_times', PACED_MEAN_PACKET_TIMES):g}; D={fid['dilation']:g}")
    drops = fid.get("emulator_drops") or {}
    if drops:  # said whatever the timing verdict: a packet lost there is a loss the fabric did not make
        limit += (f"; the emulator's own I/O lost {sum(drops.values())} packets "
                  f"({', '.join(f'{r} {n}' for r, n in sorted(drops.items()))}): those losses are not the fabric's")
    if fid["ok"] is None:
        return f"fidelity: UNKNOWN ({', '.join(fid['missing'])} cannot report); {worst}; {limit}"
    if fid["ok"]:
        return f"fidelity: ok; {worst}; {limit}"
    late = [b for b in fid["behind"] if not b.startswith("the emulator's own I/O")]
    why = (f"{', '.join(late[:4])}{' ...' if len(late) > 4 else ''} fell behind" if late
           else "the emulator's own I/O lost packets")
    return f"fidelity: NOT OK, {why}; {worst}; {limit}: these figures are partly the emulator's; raise --dilation"


__all__ = ["EMULATOR_IO", "Lateness", "Part", "THRESHOLD_PACKET_TIMES", "combine", "emulator_drops", "engine_parts",
           "RUN_FIELDS", "add_speeds", "fabric_clock_verdict", "fabric_fidelity", "line", "log_for_study", "speed_line",
           "packet_time_s",
           "tight_timers", "verdict"]
